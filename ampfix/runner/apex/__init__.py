"""NVIDIA apex, emulated in the child (``apex.amp``'s O1 and ``apex.parallel``), for scripts written against it."""
