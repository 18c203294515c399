"""ampfix's reading of IPython syntax against IPython's own, over every code cell of real notebooks.

    python benchmarks/notebook_oracle.py DIR [DIR ...] [--show N]

For each code cell that is not Python as it stands (those are never masked), the lines
`ampfix.io.ipython_syntax.masked_cell` masks must be the lines IPython turns into calls, and the
masked cell must parse exactly when IPython's Python does (tests/ipython_oracle.py). Cells that
IPython's clean-up changes (pasted prompts, a cell indented as a whole) are counted apart: ampfix
reports them as cells it cannot parse. Needs IPython (the test extra).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from ipython_oracle import ipython_changed  # noqa: E402

from ampfix.io.ipython_syntax import masked_cell  # noqa: E402


def code_cells(path: Path) -> list[str]:
    try:
        notebook = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return []
    if not isinstance(notebook, dict):
        return []
    language = notebook.get("metadata", {}).get("kernelspec", {}).get("language", "python")
    if language != "python":
        return []
    cells = []
    for cell in notebook.get("cells", []):
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            source = cell.get("source", "")
            cells.append("".join(source) if isinstance(source, list) else str(source))
    return cells


def judge(cell: str) -> str:
    try:
        ast.parse(cell)
        return "python"
    except (SyntaxError, ValueError):
        pass
    oracle = ipython_changed(cell)
    if oracle is None:
        return "clean-up (reported, not masked)"
    changed, parses = oracle
    result = masked_cell(cell)
    if isinstance(result, SyntaxError):
        return "agree: not Python for either" if not parses else "DISAGREE: IPython runs it, ampfix cannot parse it"
    if not parses:
        return "DISAGREE: ampfix parses what IPython cannot run"
    text, masked = result
    lines = cell.splitlines(keepends=True)
    mine = {i for i in masked if i < len(lines) and lines[i].strip()}
    return "agree: masked as IPython transforms" if mine == changed else "DISAGREE: other lines masked"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--show", type=int, default=5, help="disagreements to print")
    args = parser.parse_args()
    for folder in args.folders:
        counts: Counter[str] = Counter()
        shown = 0
        notebooks = sorted(folder.rglob("*.ipynb"))
        for path in notebooks:
            for cell in code_cells(path):
                verdict = judge(cell)
                counts[verdict] += 1
                if verdict.startswith("DISAGREE") and shown < args.show:
                    shown += 1
                    print(f"--- {path}: {verdict}\n{cell[:400]}")
        print(f"{folder}: {len(notebooks)} notebooks, {sum(counts.values())} code cells")
        for verdict, count in sorted(counts.items()):
            print(f"  {count:7d}  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
