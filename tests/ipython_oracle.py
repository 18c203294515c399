"""IPython's own reading of a notebook cell, as an oracle for `ampfix.io.ipython_syntax` (shared by
tests/test_ipython_syntax.py and benchmarks/notebook_oracle.py). IPython is a test dependency only."""

from __future__ import annotations

import ast
import difflib

from IPython.core.inputtransformer2 import TransformerManager
from IPython.core.interactiveshell import InteractiveShell

from ampfix.io.ipython_syntax import PYTHON_CELL_MAGICS

SHELL = InteractiveShell.instance()
CLEANUP = TransformerManager()


def ipython_changed(cell: str) -> tuple[set[int], bool] | None:
    """The 0-based lines IPython turns into something else, and whether its result parses; None when
    IPython's clean-up (pasted prompts, a cell indented as a whole) applies, which ampfix does not
    reproduce."""
    lines = cell.splitlines(keepends=True)
    cleaned = lines
    for transform in CLEANUP.cleanup_transforms[1:]:  # [0] drops leading blank lines: nothing to mask
        cleaned = transform(cleaned)
    if cleaned != lines:
        return None
    try:
        python = SHELL.transform_cell(cell)
    except SyntaxError:  # HelpEnd raises on `f(x)?`-like targets it cannot read
        return set(), False
    try:
        ast.parse(python)
        parses = True
    except SyntaxError:
        parses = False
    first = next((i for i, line in enumerate(lines) if line.strip()), 0)
    head = lines[first].split(maxsplit=1)[0][2:] if lines[first].startswith("%%") else None
    if head in PYTHON_CELL_MAGICS:  # the magic runs its body as a cell of its own
        body = ipython_changed("".join(lines[first + 1:]))
        assert body is not None
        return set(range(first + 1)) | {first + 1 + i for i in body[0]}, body[1]
    # A last line without its newline comes back with one: compare lines without their endings.
    bare = [line.rstrip("\r\n") for line in lines]
    kept = difflib.SequenceMatcher(None, bare, python.splitlines(), autojunk=False)
    same = {block.a + k for block in kept.get_matching_blocks() for k in range(block.size)}
    return {i for i in range(len(lines)) if i not in same and lines[i].strip()}, parses
