"""Sets up the ampfix CPU runner in every Python process started below ``ampfix run``.

This folder is first on the child's PYTHONPATH, so this file shadows any other sitecustomize;
that one is run afterwards so the environment behaves as it did before.
"""

import importlib.util
import os
import sys


def _start_runner() -> None:
    if not os.environ.get("AMPFIX_RUNNER_CONFIG"):
        return
    try:
        from ampfix.runner.child.process import start
    except ImportError as error:
        print(f"ampfix run: the runner is not importable in this process: {error}", file=sys.stderr)
        return
    start()


def _run_shadowed_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        folder = os.path.abspath(entry or os.curdir)
        candidate = os.path.join(folder, "sitecustomize.py")
        if folder == here or not os.path.isfile(candidate):
            continue
        spec = importlib.util.spec_from_file_location("_shadowed_sitecustomize", candidate)
        if spec is not None and spec.loader is not None:
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
        return


_start_runner()
_run_shadowed_sitecustomize()
