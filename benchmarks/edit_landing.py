"""Where do edits land? Over every .py file of a tree (default: the installed torch's own source),
plan a rename on every dotted name and every plain string literal, apply the plan as `rewrite` does,
and require each edit to land exactly where planned (`tests/edit_probe.py`).

    .venv/bin/python benchmarks/edit_landing.py [TREE] [--limit N]

Prints files probed, edits planned, files whose output differs or raise, and the first few of those.
Exit status 1 if any file fails. Files Python itself cannot parse, or not UTF-8, are skipped and counted.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the probe is a test tool

from edit_probe import probe  # noqa: E402


def _default_tree() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        raise SystemExit("torch is not installed here; give a TREE")
    return Path(spec.origin).parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", nargs="?", type=Path)
    parser.add_argument("--limit", type=int, default=0, help="probe only the first N files (sorted)")
    options = parser.parse_args()
    tree = options.tree or _default_tree()
    files = sorted(tree.rglob("*.py"))
    if options.limit:
        files = files[: options.limit]
    edits = skipped = 0
    failures: list[str] = []
    started = time.perf_counter()
    for n, path in enumerate(files, 1):
        if n % 250 == 0:
            print(f"  {n} files, {edits:,} edits, {len(failures)} failed", file=sys.stderr, flush=True)
        try:
            source = path.read_text(encoding="utf-8")
            compile(source, str(path), "exec", dont_inherit=True, flags=0x400)  # ast.PyCF_ONLY_AST
        except (SyntaxError, UnicodeDecodeError, ValueError):
            skipped += 1
            continue
        try:
            expected, actual, planned = probe(source)
        except Exception as error:  # noqa: BLE001 - every failure is counted and shown
            failures.append(f"{path}: {type(error).__name__}: {error}")
            continue
        edits += planned
        if actual != expected:
            line = next((i for i, (a, b) in enumerate(zip(actual.splitlines(), expected.splitlines()), 1) if a != b), 0)
            failures.append(f"{path}: output differs from the planned edits (first at line {line})")
    elapsed = time.perf_counter() - started
    print(f"tree: {tree}")
    print(f"files probed: {len(files) - skipped} (skipped {skipped}); edits planned: {edits:,}; "
          f"failed files: {len(failures)}; {elapsed:.1f} s")
    for failure in failures[:20]:
        print("  " + failure)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
