"""The host side: starts the child that runs the script, collects what it left, compares runs, renders reports.

No torch here: the host imports the child's modules only for their paths and shared vocabulary (``config``,
``trace.observe``), never the emulation (import-linter's runner contract in pyproject.toml keeps it so).
"""
