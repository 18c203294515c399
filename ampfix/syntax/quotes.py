"""The file's own quote character, for the strings ampfix inserts (as ruff's fixes do).

The style is read from the string literals of the tree the engine already parsed (the source text at each
literal's start): the quote most of the file's simple literals use (one quote character, not triple-quoted,
not an f-string: docstrings and f-strings say little about a file's habit; an implicit concatenation counts
once); a tie, or no such literal: the double quote (PEP 8 leaves it open; black and ruff default to it).
Not tokenized again: on a tree of files, tokenizing each one cost more than the analysis.
"""

from __future__ import annotations

import ast

from ampfix.core.locations import source_lines
from ampfix.syntax.context import ModuleContext

DOUBLE, SINGLE = '"', "'"


def preferred_quote(source: str, tree: ast.Module | None = None) -> str:
    """The quote of `source` (whose parsed tree is `tree`, parsed here when not given)."""
    if tree is None:
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            return DOUBLE  # the engine asks only of a file it parsed
    lines = source_lines(source)
    counts = {DOUBLE: 0, SINGLE: 0}
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.JoinedStr):
            continue  # an f-string, and the literal parts inside it
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
            quote = _opening_quote(lines, node)
            if quote is not None:
                counts[quote] += 1
            continue
        stack.extend(ast.iter_child_nodes(node))
    return SINGLE if counts[SINGLE] > counts[DOUBLE] else DOUBLE


def _opening_quote(lines: list[str], node: ast.Constant) -> str | None:
    """The quote a simple literal opens with (None: triple-quoted, or not found where ast says it starts)."""
    if not 0 < node.lineno <= len(lines):
        return None
    line = lines[node.lineno - 1]
    head = line[node.col_offset:] if line.isascii() else line.encode("utf-8")[node.col_offset:].decode(
        "utf-8", errors="replace")
    body = head.lstrip("rRbBuU")
    if body[:3] in ('"""', "'''") or body[:1] not in (DOUBLE, SINGLE):
        return None
    return body[0]


def quoted(value: str, quote: str) -> str:
    """`value` (plain text: no quote nor backslash) as a literal in `quote`."""
    return f"{quote}{value}{quote}"


def module_quote(context: ModuleContext) -> str:
    """The module's quote (a `ModuleContext.fact`: read once, only for a module that gets a string)."""
    return preferred_quote(context.source, context.tree)
