"""Where a node of the `ast` lies in the source text, in characters.

`ast` gives (line, column) pairs whose column counts UTF-8 bytes; every edit is keyed by the
character offsets computed here, once, from the node the decision was made on.
"""

from __future__ import annotations

import ast
import io
import itertools
from typing import TYPE_CHECKING, Any
from collections.abc import Iterator

if TYPE_CHECKING:
    import tokenize


def source_lines(source: str) -> list[str]:
    """Lines as the tokenizer counts them (str.splitlines would also split on form feeds)."""
    return io.StringIO(source, newline="").readlines()


def tokens(source: str) -> Iterator[tokenize.TokenInfo]:
    """The tokens of `source`, on lines numbered as `ast` and `source_lines` number them: a lone CR ends a line
    too (`newline=None`; read as it stands, tokenize would see a CR-only file as one line). Raises what
    tokenize raises on text that does not tokenize."""
    import tokenize

    return tokenize.generate_tokens(io.StringIO(source, newline=None).readline)


_BLANK = " \t\r\n"  # what a blank line holds: a form feed is a page break the author put there, not a blank


class SourceIndex:
    def __init__(self, source: str) -> None:
        self.text = source
        self.lines = source_lines(source)
        self.starts: list[int] = [0, *itertools.accumulate(map(len, self.lines))]
        self.length = self.starts.pop()

    def col(self, line: int, byte_col: int) -> int:
        """The character column of a byte column on a 1-based line."""
        if not 0 < line <= len(self.lines):
            return byte_col
        text = self.lines[line - 1]
        if text.isascii():
            return byte_col
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="replace"))

    def offset(self, line: int, byte_col: int) -> int:
        if line > len(self.lines):
            return self.length
        return self.starts[line - 1] + self.col(line, byte_col)

    def span(self, node: ast.AST) -> tuple[int, int]:
        """The node's [start, end) in characters."""
        positioned: Any = node  # every node spanned is an expression or a statement: it has a position
        return (
            self.offset(positioned.lineno, positioned.col_offset),
            self.offset(positioned.end_lineno, positioned.end_col_offset),
        )

    def line_start(self, line: int) -> int:
        return self.starts[line - 1] if line <= len(self.lines) else self.length

    def line_end(self, line: int) -> int:
        """The offset just after the line, its line break included."""
        return self.starts[line] if line < len(self.lines) else self.length

    def removal(self, first: int, last: int) -> tuple[int, int]:
        """The span that removing lines `first`..`last` takes. Where blank lines stand both before and after them,
        the two runs would join into one as long as both: the shorter run goes too (from the lines after), so the
        run left is as long as the longer, as if the lines had never been written."""
        before = 0
        while first - before > 1 and not self.lines[first - before - 2].strip(_BLANK):
            before += 1
        after = 0
        while last + after < len(self.lines) and not self.lines[last + after].strip(_BLANK):
            after += 1
        return self.line_start(first), self.line_end(last + min(before, after))


def first_line(statement: ast.stmt) -> int:
    """The statement's first line, its decorators included (`ast` starts a decorated one at `def`)."""
    return min([statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", ()))])


def statement_groups(tree: ast.Module, index: SourceIndex) -> list[tuple[int, int]]:
    """The module's top-level statements as [start, end) ranges of whole lines, decorators
    included; statements that share a line are one range. Sorted, disjoint."""
    groups: list[tuple[int, int]] = []
    for stmt in tree.body:
        start, end = index.line_start(first_line(stmt)), index.line_end(stmt.end_lineno or stmt.lineno)
        if groups and start < groups[-1][1]:
            groups[-1] = (groups[-1][0], max(end, groups[-1][1]))
        else:
            groups.append((start, end))
    return groups


def literal_with(lines: list[str], node: ast.Constant, replacements: list[tuple[int, int, str]]) -> str | None:
    """The string literal with spans of its value replaced; None if value != raw content."""
    if node.lineno != node.end_lineno:
        return None
    line = lines[node.lineno - 1].encode("utf-8")
    raw = line[node.col_offset : node.end_col_offset].decode("utf-8")
    quote = next((q for q in ('"""', "'''", '"', "'") if raw.startswith(q)), None)
    if quote is None or not raw.endswith(quote) or len(raw) < 2 * len(quote):
        return None  # a prefix (r, u, b, f) or a concatenation
    content = raw[len(quote) : -len(quote)]
    if content != node.value or "\\" in content:
        return None
    for start, end, new in sorted(replacements, reverse=True):
        content = content[:start] + new + content[end:]
    return quote + content + quote
