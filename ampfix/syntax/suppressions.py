"""Inline suppressions: `# noqa`, `# noqa: AMP001,AMP01`, `# ampfix: ignore`, `# ampfix: ignore[AMP001]`
and a file-wide `# ampfix: skip-file` on a line of its own.

Comments are found with `tokenize`, so a `# noqa` inside a string never counts. A directive covers
its whole logical line: within a statement that spans several lines (brackets, a backslash, a
multi-line string), a comment on any of its lines suppresses findings on all of them, as in ruff.
Codes match as ruff's do: a code, or a prefix of one (`AMP0`).

Scanned only for files that passed the pre-filter, and tokenized only when the text holds a directive
that could cover one of ampfix's codes (`# noqa: F401` cannot). In a file without an `ampfix:` directive, only when
a finding asks, and then only the statement that holds the finding's line (`Suppressions.within`), where a line of
it holds such a directive: a logical line never reaches past the innermost statement holding it, and a statement
begins a logical line, so tokenizing its lines alone finds what tokenizing the file finds there.
"""

from __future__ import annotations

import ast
import bisect
import functools
import itertools
import re
import tokenize
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

from ampfix.core.locations import source_lines, tokens
from ampfix.syntax.parents import span_of

# `noqa` as ruff spells it (case-insensitive, codes after a colon, comma- or space-separated).
_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]*(?:[\s,]+[A-Z]+[0-9]*)*))?", re.IGNORECASE)
# `ampfix: ignore` with optional codes in brackets, as mypy's `type: ignore[code]`.
_IGNORE = re.compile(r"#\s*ampfix:\s*ignore(?:\[(?P<codes>[^\]]*)\])?", re.IGNORECASE)
_SKIP_FILE = re.compile(r"#\s*ampfix:\s*skip-file\s*$", re.IGNORECASE)



@dataclass(frozen=True)
class Suppressions:
    # 1-based line -> the codes and prefixes suppressed there; an empty tuple stands for all codes.
    lines: Mapping[int, tuple[str, ...]]
    skip_file: bool = False

    def covers(self, line: int, code: str) -> bool:
        codes = self.lines.get(line)
        if codes is None:
            return False
        return not codes or any(code.startswith(prefix) for prefix in codes)

    def within(self, tree: ast.Module) -> Suppressions:
        """The same directives, where they are still to be read read statement by statement (the module
        docstring): `tree` is the source's own."""
        if isinstance(self.lines, _LinesWhenAsked):
            return replace(self, lines=self.lines.within(tree))
        return self


NONE = Suppressions({})


def scan_when_asked(source: str) -> Suppressions:
    """`scan(source)`, but where the text has no `ampfix:` directive (so no skip-file) the comments are tokenized
    only when a finding asks whether one covers it: on real code most files the pre-filter keeps (a mention of
    apex, of a state function) have none, and tokenizing each cost about half its parse."""
    if "ampfix" in source.lower():
        return scan(source)
    if not _may_cover_own_codes(source):
        return NONE
    return Suppressions(_LinesWhenAsked(source))


class _LinesWhenAsked(Mapping[int, tuple[str, ...]]):
    """`scan(source).lines`, computed on first use: the whole file, or (`within` a tree) the statement of each line
    asked about that has a line with a candidate directive."""

    def __init__(self, source: str, tree: ast.Module | None = None) -> None:
        self._source = source
        self._tree = tree
        self._lines: Mapping[int, tuple[str, ...]] | None = None  # the whole file's, once scanned
        self._regions: dict[tuple[int, int], Mapping[int, tuple[str, ...]]] = {}

    def within(self, tree: ast.Module) -> _LinesWhenAsked:
        return _LinesWhenAsked(self._source, tree)

    def _scanned(self) -> Mapping[int, tuple[str, ...]]:
        if self._lines is None:
            self._lines = scan(self._source).lines
        return self._lines

    @functools.cached_property
    def _candidates(self) -> list[int]:
        """The lines (sorted) where a `#` may open a directive covering one of ampfix's codes."""
        return sorted(_candidate_lines(self._source))

    @functools.cached_property
    def _physical(self) -> list[str]:
        return source_lines(self._source)

    def __getitem__(self, line: int) -> tuple[str, ...]:
        if self._lines is not None or self._tree is None:
            return self._scanned()[line]
        region = _statement_region(self._tree.body, line)
        if region is None:
            return self._scanned()[line]
        first, last = region
        at = bisect.bisect_left(self._candidates, first)
        if at == len(self._candidates) or self._candidates[at] > last:
            raise KeyError(line)  # no directive in the statement: nothing covers the line
        if region not in self._regions:
            fragment = "".join(self._physical[first - 1:last])
            try:
                found = _directives(fragment)
            except (tokenize.TokenError, SyntaxError):
                found = None
            if found is None:  # (no skip-file: the text has no `ampfix`)
                return self._scanned()[line]
            self._regions[region] = {first - 1 + number: codes for number, codes in found.items()}
        return self._regions[region][line]

    def __iter__(self) -> Iterator[int]:
        return iter(self._scanned())

    def __len__(self) -> int:
        return len(self._scanned())


def _statement_region(body: list[ast.stmt], line: int) -> tuple[int, int] | None:
    """The lines of the innermost statements (of one block) holding `line`, decorators included, or None. A loop,
    not a recursion: statements nest as deep as `ast` builds."""
    region = None
    blocks = [body]
    while blocks:
        holding = [statement for statement in blocks.pop()
                   if _first_line(statement) <= line <= (statement.end_lineno or 0)]
        if holding:
            region = min(map(_first_line, holding)), max(statement.end_lineno or 0 for statement in holding)
            blocks = list(_blocks(holding[0])) if len(holding) == 1 else []
    return region


def _first_line(statement: ast.stmt) -> int:
    span = span_of(statement)  # a statement always has one
    return span[0][0] if span is not None else statement.lineno


def _blocks(statement: ast.stmt) -> Iterator[list[ast.stmt]]:
    for name in ("body", "orelse", "finalbody"):
        block = getattr(statement, name, None)
        if isinstance(block, list):
            yield block
    for holder in itertools.chain(getattr(statement, "handlers", ()), getattr(statement, "cases", ())):
        yield holder.body


def scan(source: str) -> Suppressions:
    """The directives in `source`; NONE when there are none or the text does not tokenize
    (such text does not parse either, and is reported as it stands)."""
    if "ampfix" not in source.lower() and not _may_cover_own_codes(source):
        return NONE
    try:
        lines = _directives(source)
    except (tokenize.TokenError, SyntaxError):
        return NONE
    if lines is None:
        return Suppressions({}, skip_file=True)
    return Suppressions(lines) if lines else NONE


def _directives(source: str) -> dict[int, tuple[str, ...]] | None:
    """The codes each line's directives suppress (None: a `# ampfix: skip-file`); raises what tokenize raises."""
    lines: dict[int, tuple[str, ...]] = {}
    logical_start: int | None = None
    pending: list[tuple[str, ...]] = []  # directives met in the current logical line
    for token in tokens(source):
        kind = token.type
        if kind == tokenize.COMMENT:
            if _SKIP_FILE.match(token.string) and not token.line[: token.start[1]].strip():
                return None
            codes = _directive(token.string)
            if codes is not None:
                if logical_start is None:  # a comment on a line of its own covers that line
                    _merge(lines, token.start[0], token.start[0], codes)
                else:
                    pending.append(codes)
        elif kind in (tokenize.NEWLINE, tokenize.ENDMARKER):
            if logical_start is not None:
                for codes in pending:
                    _merge(lines, logical_start, token.end[0], codes)
            logical_start, pending = None, []
        elif kind not in (tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING):
            if logical_start is None:
                logical_start = token.start[0]
    return lines


# Every code ampfix reports starts so (rules AMP0xx/AMP1xx, errors AMP9xx; tests/test_suppressions.py checks).
OWN_PREFIX = "AMP"
_NOQA_WORD = re.compile("noqa", re.IGNORECASE)


def _may_cover_own_codes(source: str) -> bool:
    """Could a `noqa` in `source` cover one of ampfix's codes? Asked of every `#` on each line naming noqa (a
    comment runs from one of them to the line's end): a superset of the comments tokenize finds. On real code
    most `noqa` name other tools' codes (`# noqa: F401`), and tokenizing such a file cost more than its parse."""
    return next(_candidate_offsets(source), None) is not None


def _candidate_offsets(source: str) -> Iterator[int]:
    """Where each line with a `noqa` that may cover one of ampfix's codes begins (see `_may_cover_own_codes`)."""
    for found in _NOQA_WORD.finditer(source):
        begin = max(source.rfind("\n", 0, found.start()), source.rfind("\r", 0, found.start())) + 1
        ends = [end for end in (source.find("\n", found.end()), source.find("\r", found.end())) if end != -1]
        line = source[begin:min(ends, default=len(source))]
        for at in (i for i, char in enumerate(line) if char == "#"):
            codes = _directive(line[at:])
            if codes is not None and (not codes or any(
                    code.startswith(OWN_PREFIX) or OWN_PREFIX.startswith(code) for code in codes)):
                yield begin
                break


def _candidate_lines(source: str) -> set[int]:
    """The line numbers (as `ast` counts them) of `_candidate_offsets`."""
    starts = [0, *itertools.accumulate(map(len, source_lines(source)))]
    return {bisect.bisect_right(starts, offset) for offset in _candidate_offsets(source)}


def _directive(comment: str) -> tuple[str, ...] | None:
    """The codes a comment suppresses (() for all), or None when it is no directive.
    A comment may hold several (`# type: ignore  # noqa: AMP001`): each is looked for."""
    found: list[str] = []
    any_directive = False
    for pattern in (_NOQA, _IGNORE):
        for match in pattern.finditer(comment):
            any_directive = True
            codes = match.group("codes")
            if not codes or not codes.strip():
                return ()
            found.extend(code.upper() for code in re.split(r"[\s,]+", codes.strip()) if code)
    return tuple(found) if any_directive else None


def _merge(lines: dict[int, tuple[str, ...]], first: int, last: int, codes: tuple[str, ...]) -> None:
    for line in range(first, last + 1):
        known = lines.get(line)
        if known is None:
            lines[line] = codes
        elif known and codes:
            lines[line] = known + codes
        else:
            lines[line] = ()


def line_suppresses(line: str, code: str) -> bool:
    """Does a directive in this line's comment cover `code`? For a line of text that does not
    tokenize (a notebook cell that is not Python), where `scan` finds nothing: every `#` starts a
    candidate comment."""
    for start in [i for i, char in enumerate(line) if char == "#"]:
        codes = _directive(line[start:])
        if codes is not None:
            return not codes or any(code.startswith(prefix) for prefix in codes)
    return False
