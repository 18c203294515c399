"""The CPU runner: run a CUDA-written script on CPU with AMP really exercised, and verify a migration.

Its sides, each a folder (import-linter's runner contract in pyproject.toml orders them; nothing imports upward):

* ``host/``: the parent process (commands, launch, report, compare); torch-free, so that ``ampfix rewrite`` /
  ``check`` start fast and install without torch;
* ``child/``: the child process's bootstrap and start;
* ``apex/``: NVIDIA apex emulated;
* ``gpu/``: the emulated GPU (devices, memory, autocast policy and numerics), installed into torch;
* ``trace/``: what the child records, and the shapes every patch shares;
* ``config``: the settings the host hands the child.
"""
