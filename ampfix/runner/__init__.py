"""The CPU runner: run a CUDA-written script on CPU with AMP really exercised, and verify a migration.

Nothing in this package imports torch at module level except the modules that only ever run
inside the child process (``harness`` and the patch modules it loads). The parent side
(``commands``, ``api``, ``launch``, ``model``, ``compare``, ``render``) stays torch-free so that
``ampfix rewrite`` / ``check`` start fast and install without torch.
"""
