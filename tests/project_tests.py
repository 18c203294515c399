"""Run a fixture project's own tests (plain `test_*` functions, no fixtures) in this one process, for several
copies of it: torch is imported once. Each copy's modules are imported afresh from its own folder.

Usage: python tests/project_tests.py ROOT [ROOT ...]; prints JSON: {root: {test: null (passed) or the error}}.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import traceback
from pathlib import Path


def _forget(root: Path) -> None:
    """Drop the modules an earlier copy imported from its own folder, so this copy's are imported."""
    packages = {p.name for p in root.iterdir() if p.is_dir() or p.suffix == ".py"}
    for name in [n for n in sys.modules if n.split(".")[0] in packages]:
        del sys.modules[name]


def run_copy(root: Path) -> dict[str, str | None]:
    results: dict[str, str | None] = {}
    _forget(root)
    sys.path.insert(0, str(root))
    try:
        for path in sorted((root / "tests").glob("test_*.py")):
            spec = importlib.util.spec_from_file_location(f"_copy_{abs(hash(str(path)))}", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            for name in sorted(n for n in vars(module) if n.startswith("test_")):
                try:
                    getattr(module, name)()
                    results[f"{path.name}::{name}"] = None
                except Exception:  # a failing test is a result to report, whatever it raised
                    results[f"{path.name}::{name}"] = traceback.format_exc(limit=-1)
    finally:
        sys.path.remove(str(root))
    return results


if __name__ == "__main__":
    print(json.dumps({root: run_copy(Path(root)) for root in sys.argv[1:]}))
