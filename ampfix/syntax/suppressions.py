"""Inline suppressions: `# noqa`, `# noqa: AMP001,AMP01`, `# ampfix: ignore`, `# ampfix: ignore[AMP001]`
and a file-wide `# ampfix: skip-file` on a line of its own.

Comments are found with `tokenize`, so a `# noqa` inside a string never counts. A directive covers
its whole logical line: within a statement that spans several lines (brackets, a backslash, a
multi-line string), a comment on any of its lines suppresses findings on all of them, as in ruff.
Codes match as ruff's do: a code, or a prefix of one (`AMP0`).

Scanned only for files that passed the pre-filter, and tokenized only when the text holds a directive
that could cover one of ampfix's codes (`# noqa: F401` cannot).
"""

from __future__ import annotations

import re
import tokenize
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ampfix.core.locations import tokens

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
    """`scan(source).lines`, computed on first use."""

    def __init__(self, source: str) -> None:
        self._source: str | None = source
        self._lines: Mapping[int, tuple[str, ...]] = {}

    def _scanned(self) -> Mapping[int, tuple[str, ...]]:
        if self._source is not None:
            self._lines, self._source = scan(self._source).lines, None
        return self._lines

    def __getitem__(self, line: int) -> tuple[str, ...]:
        return self._scanned()[line]

    def __iter__(self) -> Iterator[int]:
        return iter(self._scanned())

    def __len__(self) -> int:
        return len(self._scanned())


def scan(source: str) -> Suppressions:
    """The directives in `source`; NONE when there are none or the text does not tokenize
    (such text does not parse either, and is reported as it stands)."""
    if "ampfix" not in source.lower() and not _may_cover_own_codes(source):
        return NONE
    lines: dict[int, tuple[str, ...]] = {}
    logical_start: int | None = None
    pending: list[tuple[str, ...]] = []  # directives met in the current logical line
    try:
        for token in tokens(source):
            kind = token.type
            if kind == tokenize.COMMENT:
                if _SKIP_FILE.match(token.string) and not token.line[: token.start[1]].strip():
                    return Suppressions({}, skip_file=True)
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
    except (tokenize.TokenError, SyntaxError):
        return NONE
    return Suppressions(lines) if lines else NONE


# Every code ampfix reports starts so (rules AMP0xx/AMP1xx, errors AMP9xx; tests/test_suppressions.py checks).
OWN_PREFIX = "AMP"
_NOQA_WORD = re.compile("noqa", re.IGNORECASE)


def _may_cover_own_codes(source: str) -> bool:
    """Could a `noqa` in `source` cover one of ampfix's codes? Asked of every `#` on each line naming noqa (a
    comment runs from one of them to the line's end): a superset of the comments tokenize finds. On real code
    most `noqa` name other tools' codes (`# noqa: F401`), and tokenizing such a file cost more than its parse."""
    for found in _NOQA_WORD.finditer(source):
        begin = max(source.rfind("\n", 0, found.start()), source.rfind("\r", 0, found.start())) + 1
        ends = [end for end in (source.find("\n", found.end()), source.find("\r", found.end())) if end != -1]
        line = source[begin:min(ends, default=len(source))]
        for at in (i for i, char in enumerate(line) if char == "#"):
            codes = _directive(line[at:])
            if codes is not None and (not codes or any(
                    code.startswith(OWN_PREFIX) or OWN_PREFIX.startswith(code) for code in codes)):
                return True
    return False


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
