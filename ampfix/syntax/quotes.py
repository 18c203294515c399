"""The file's own quote character, for the strings ampfix inserts (as ruff's fixes do).

The style is read from the string literals the engine's walk already collected (the source text at each
literal's start): the quote most of the file's simple literals use (one quote character, not triple-quoted,
not an f-string: docstrings and f-strings say little about a file's habit; an implicit concatenation counts
once); a tie, or no such literal: the double quote (PEP 8 leaves it open; black and ruff default to it).
Neither tokenized nor walked again: on a tree of files, tokenizing each one cost more than the analysis, and a
second walk of the tree a tenth of it.
"""

from __future__ import annotations

import ast
import bisect
from collections.abc import Callable, Iterable

from ampfix.core.locations import source_lines
from ampfix.syntax.bindings import Walker
from ampfix.syntax.context import ModuleContext

DOUBLE, SINGLE = '"', "'"


def preferred_quote(source: str, literals: Iterable[ast.Constant] | None = None,
                    fstrings: Iterable[ast.JoinedStr] = ()) -> str:
    """The quote of `source`, from its str/bytes literals outside the f-strings `fstrings` (literals and
    f-strings found here when not given)."""
    if literals is None:
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            return DOUBLE  # the engine asks only of a file it parsed
        walker = Walker()  # the literals the engine's own walk collects, not a second way of finding them
        walker.statements(tree.body, walker.module_scope)
        literals, fstrings = walker.literals, walker.fstrings
    return _majority(source_lines(source), literals, fstrings)


def _majority(lines: list[str], literals: Iterable[ast.Constant], fstrings: Iterable[ast.JoinedStr]) -> str:
    counts = {DOUBLE: 0, SINGLE: 0}
    inside = _within(fstrings)
    for node in literals:
        quote = None if inside(node) else _opening_quote(lines, node)
        if quote is not None:
            counts[quote] += 1
    return SINGLE if counts[SINGLE] > counts[DOUBLE] else DOUBLE


def _within(fstrings: Iterable[ast.JoinedStr]) -> Callable[[ast.Constant], bool]:
    """Whether a literal lies inside one of `fstrings` (whose expressions the walk visits too)."""
    spans: list[tuple[tuple[int, int], tuple[int, int]]] = []
    for start, end in sorted(((f.lineno, f.col_offset), (f.end_lineno or f.lineno, f.end_col_offset or 0))
                             for f in fstrings):
        if spans and start <= spans[-1][1]:  # nested or overlapping: one span
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        else:
            spans.append((start, end))
    if not spans:
        return lambda node: False
    starts = [start for start, _ in spans]

    def inside(node: ast.Constant) -> bool:
        at = (node.lineno, node.col_offset)
        i = bisect.bisect_right(starts, at) - 1
        return i >= 0 and at < spans[i][1]

    return inside


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
    return _majority(context.lines, context.walker.literals, context.walker.fstrings)
