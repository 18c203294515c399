"""The child process: its ``sitecustomize`` bootstrap and the start that installs the emulation before the script runs.

Nothing here imports the host side (``ampfix.runner.host``).
"""
