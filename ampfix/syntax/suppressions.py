"""Inline suppressions: `# noqa`, `# noqa: AMP001,AMP01`, `# ampfix: ignore`, `# ampfix: ignore[AMP001]`
and a file-wide `# ampfix: skip-file` on a line of its own.

Comments are found with `tokenize`, so a `# noqa` inside a string never counts. A directive covers
its whole logical line: within a statement that spans several lines (brackets, a backslash, a
multi-line string), a comment on any of its lines suppresses findings on all of them, as in ruff.
Codes match as ruff's do: a code, or a prefix of one (`AMP0`).

Scanned only for files that passed the pre-filter, and tokenized only when the text names a
directive at all.
"""

from __future__ import annotations

import re
import tokenize
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
    lines: dict[int, tuple[str, ...]]
    skip_file: bool = False

    def covers(self, line: int, code: str) -> bool:
        codes = self.lines.get(line)
        if codes is None:
            return False
        return not codes or any(code.startswith(prefix) for prefix in codes)


NONE = Suppressions({})


def scan(source: str) -> Suppressions:
    """The directives in `source`; NONE when there are none or the text does not tokenize
    (such text does not parse either, and is reported as it stands)."""
    lowered = source.lower()
    if "noqa" not in lowered and "ampfix" not in lowered:
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
