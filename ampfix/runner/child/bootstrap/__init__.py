"""Put on a child's PYTHONPATH so that its ``sitecustomize`` sets the runner up (see child.py)."""
