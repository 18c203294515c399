"""Statements added at the head of the module (`import functools` for a functools.partial, the module's
device name for --device auto): which ones, and where they go (after the docstring and imports that
open the module)."""

from __future__ import annotations

import ast
import bisect
import re

from ampfix.core.locations import SourceIndex
from ampfix.engine.planners.uses import FUNCTOOLS, MODULE_DEVICE
from ampfix.families.torch_amp.device import ModuleDevice, module_device
from ampfix.syntax.context import ModuleContext


def head_statements(context: ModuleContext, needs: frozenset[str]) -> tuple[str, ...]:
    """The statements the kept edits need that the module lacks, in the order they go."""
    head: list[str] = []
    if FUNCTOOLS in needs and not _functools_imported(context):
        head.append("import functools")
    module = context.fact(module_device) if MODULE_DEVICE in needs else None
    if isinstance(module, ModuleDevice) and module.statement is not None:
        head += ["import torch"] * module.add_torch_import + [module.statement]
    return tuple(head)


def _functools_imported(context: ModuleContext) -> bool:
    bindings = context.walker.module_scope.bindings.get("functools", [])
    return any(b.kind == "import" and b.qname == "functools" for b in bindings)


def head_insertion(tree: ast.Module, index: SourceIndex, groups: list[tuple[int, int]],
                   statements: tuple[str, ...]) -> tuple[int, str]:
    """Where the statements go and their text: on the lines after the docstring and imports that open the
    module (before its first statement when nothing opens it, after the comments above that statement), in
    the file's first line break. A statement that is not an import gets a blank line above it where imports
    or a docstring stand there (PEP 8; black and isort put it back otherwise). Decided here only;
    `ampfix.engine.apply` inserts the text as it stands."""
    at, opened = _after_opening(tree, index, groups)
    first_other = next((i for i, text in enumerate(statements) if not text.startswith(("import ", "from "))), None)
    if first_other is not None and (first_other > 0 or opened):
        statements = (*statements[:first_other], "", *statements[first_other:])
    source = index.text
    newline = _first_line_break(source)
    if at == len(source) and source and not source.endswith(("\n", "\r")):
        return at, "".join(newline + statement for statement in statements)  # the file keeps its unended last line
    return at, "".join(statement + newline for statement in statements)


def _after_opening(tree: ast.Module, index: SourceIndex, groups: list[tuple[int, int]]) -> tuple[int, bool]:
    """The offset after the line groups that hold only the module's opening docstring and imports, and
    whether there are any."""
    opening = [True] * len(groups)
    starts = [start for start, _ in groups]
    for i, stmt in enumerate(tree.body):
        group = bisect.bisect_right(starts, index.line_start(stmt.lineno)) - 1
        # (A bytes docstring counts as one: it stands where a docstring stands.)
        docstring = i == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) \
            and isinstance(stmt.value.value, (str, bytes))
        if not (isinstance(stmt, (ast.Import, ast.ImportFrom)) or docstring):
            opening[group] = False
        elif docstring and group < len(groups) and sum(1 for s in tree.body
                                                       if index.line_start(s.lineno) < groups[group][1]) > 1:
            opening[group] = False  # a docstring sharing its line with another statement is not alone
    first_other = next((i for i, flag in enumerate(opening) if not flag), len(groups))
    return (groups[first_other - 1][1], True) if first_other else (groups[0][0], False)


def _first_line_break(source: str) -> str:
    """The file's first line break, "\\n" where it has none (the one LibCST prints new lines with)."""
    match = _LINE_BREAK.search(source)
    return match.group(0) if match is not None else "\n"


_LINE_BREAK = re.compile(r"\r\n?|\n")
