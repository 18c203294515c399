"""The floors ampfix is measured against: what any Python checker / any LibCST tool must at least do.

    python benchmarks/floors.py ast TREE      walk, read every .py, keep those matching \\bamp\\b,
                                              ast.parse them (the floor of any Python checker)
    python benchmarks/floors.py libcst TREE   the same walk and filter, then LibCST parse and print
                                              each candidate (the floor of any LibCST rewriter)

One process, no pool. Prints `files candidates` on stdout (the benchmark checks the counts).
"""

from __future__ import annotations

import os
import re
import sys

CANDIDATE = re.compile(rb"\bamp\b")


def main(argv: list[str]) -> int:
    mode, tree = argv
    if mode not in ("ast", "libcst"):
        raise SystemExit(__doc__)
    if mode == "libcst":
        import libcst

        def work(data: bytes) -> None:
            _ = libcst.parse_module(data).code  # bytes: LibCST detects the encoding, as a tool must
    else:
        import ast

        def work(data: bytes) -> None:
            ast.parse(data)

    files = candidates = 0
    for root, dirs, names in os.walk(tree):
        dirs.sort()
        for name in sorted(names):
            if not name.endswith(".py"):
                continue
            files += 1
            with open(os.path.join(root, name), "rb") as handle:
                data = handle.read()
            if CANDIDATE.search(data):
                candidates += 1
                try:
                    work(data)
                except Exception:  # noqa: BLE001 - a file that does not parse still cost its parse
                    pass
    print(files, candidates)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
