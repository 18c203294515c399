"""Continuation lines kept where they stood against their bracket, once a rewrite has moved it.

`torch.cuda.amp.autocast(` is five columns longer than `torch.amp.autocast(`: the lines aligned under the
first argument would be left five columns off (pycodestyle E127/E128, which a flake8 CI fails), and a
branch dedented around a call (`ampfix.engine.planners.branches`) would leave the call's own lines where
they were (E121/E126). So, after a fragment is re-printed, each continuation line keeps its relation to the
innermost bracket open at its start:

- a visual indent (the bracket has a token after it on its line, and the line starts one column right of it;
  a closing bracket under it or one right of it) stays under the bracket where it now is;
- a hanging indent (the bracket ends its line) stays as many columns right of the bracket's line as it was.

Lines are paired old to new by their text without indentation (`difflib`); a line the rewrite added (a device
argument on a line of its own) moves with the first paired line under its bracket. Only the spaces before a
line's first token change, and only inside brackets, where Python ignores them; never a line that begins
inside a string, nor one indented with tabs. Decided from tokens, not from the text's look.
"""

from __future__ import annotations

import difflib
import io
import tokenize
from dataclasses import dataclass

_OPENERS = {"(": ")", "[": "]", "{": "}"}
_CLOSERS = frozenset(_OPENERS.values())


@dataclass
class _Bracket:
    line: int  # 0-based physical line
    col: int
    char: str
    visual: bool = False  # a token follows it on its own line


@dataclass(frozen=True)
class _Continuation:
    bracket: _Bracket  # the innermost bracket open where the line starts
    depth: int
    closes: bool  # the line's first token closes that bracket


def realigned(old: str, new: str) -> str:
    """`new` (a rewrite of `old`, both whole lines) with its continuation lines moved back into the
    relation to their bracket they had in `old`."""
    if new.count("\r") != new.count("\r\n") or old.count("\r") != old.count("\r\n"):
        return new  # old Mac line endings: the tokenizer reads lines at "\n" only, and would count others
    old_lines, new_lines = old.splitlines(keepends=True), new.splitlines(keepends=True)
    pairs = _pairs(old_lines, new_lines)
    if not _may_need(old_lines, new_lines, pairs):
        return new
    before, after = _continuations(old), _continuations(new)
    if before is None or after is None:
        return new
    shifts = _shifts(old_lines, new_lines, pairs, before, after)
    if not shifts:
        return new
    for j, shift in shifts.items():
        line = new_lines[j]
        body = line.lstrip(" ")
        new_lines[j] = " " * (len(line) - len(body) + shift) + body
    return "".join(new_lines)


def _shifts(old_lines: list[str], new_lines: list[str], pairs: dict[int, int],
            before: dict[int, _Continuation], after: dict[int, _Continuation]) -> dict[int, int]:
    """new line -> the columns it moves. Paired lines first, in order (a bracket on a moved line moves
    with it); then each added line as the first paired line under its bracket moved."""
    shifts: dict[int, int] = {}
    under: dict[tuple[int, int], int] = {}  # a new bracket (line, col) -> what its first paired line moved
    loose: list[int] = []  # lines with no old continuation line of their own: added, or edited into one
    for j, now in sorted(after.items()):
        was = before.get(pairs[j]) if j in pairs else None
        if was is None or was.depth != now.depth or was.bracket.char != now.bracket.char \
                or was.bracket.visual != now.bracket.visual:
            loose.append(j)
            continue
        target = _target(old_lines, new_lines, pairs[j], was, now, shifts)
        current = _indent(new_lines[j])
        if target is None or current is None:
            continue
        under.setdefault((now.bracket.line, now.bracket.col), target - current)
        if target != current:
            shifts[j] = target - current
    for j in loose:
        indent, bracket = _indent(new_lines[j]), after[j].bracket
        shift = under.get((bracket.line, bracket.col), 0)
        if indent is not None and shift and indent + shift >= 0:
            shifts[j] = shift
    return shifts


def _target(old_lines: list[str], new_lines: list[str], i: int, was: _Continuation, now: _Continuation,
            shifts: dict[int, int]) -> int | None:
    """Where new line `now` starts to stand against its bracket as old line `i` stood; None: leave it."""
    old_indent = _indent(old_lines[i])
    if old_indent is None:
        return None
    if was.bracket.visual:
        offset = old_indent - was.bracket.col
        if offset != 1 and not (was.closes and offset == 0):
            return None  # aligned with something else than the bracket: not this module's to judge
        return now.bracket.col + shifts.get(now.bracket.line, 0) + offset
    old_base, new_base = _indent(old_lines[was.bracket.line]), _indent(new_lines[now.bracket.line])
    if old_base is None or new_base is None:
        return None
    target = new_base + shifts.get(now.bracket.line, 0) + old_indent - old_base
    return target if target >= 0 else None


def _indent(line: str) -> int | None:
    """The spaces before the line's first character; None for a line indented with a tab or a form feed."""
    body = line.lstrip(" ")
    return None if body[:1] in ("\t", "\f") else len(line) - len(body)


def _pairs(old_lines: list[str], new_lines: list[str]) -> dict[int, int]:
    """new line -> the old line it is, by text without indentation: the lines the rewrite left (a block of
    changed lines as long in both is paired line by line: the same lines, edited)."""
    head = 0
    limit = min(len(old_lines), len(new_lines))
    while head < limit and old_lines[head] == new_lines[head]:
        head += 1
    tail = 0
    while tail < limit - head and old_lines[-1 - tail] == new_lines[-1 - tail]:
        tail += 1
    pairs = {j: j for j in range(head)}
    pairs.update({len(new_lines) - 1 - k: len(old_lines) - 1 - k for k in range(tail)})
    old_middle = [line.strip() for line in old_lines[head:len(old_lines) - tail]]
    new_middle = [line.strip() for line in new_lines[head:len(new_lines) - tail]]
    matcher = difflib.SequenceMatcher(None, old_middle, new_middle, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
            pairs.update({head + j1 + k: head + i1 + k for k in range(j2 - j1)})
    return pairs


def _may_need(old_lines: list[str], new_lines: list[str], pairs: dict[int, int]) -> bool:
    """Could a continuation line have lost its bracket? Yes where a line was reindented, or where a line the
    rewrite changed is followed by one indented past the column where the change begins: a bracket that
    moved stands there or right of it, so the first line under it does. (Text only, so that most fragments
    are never tokenized; a line under a moved bracket that follows a line left of it is not looked for.)"""
    changed_old = set(range(len(old_lines))) - set(pairs.values())
    for j, i in pairs.items():
        if old_lines[i] != new_lines[j]:
            if _indent(old_lines[i]) != _indent(new_lines[j]):
                return True
            changed_old.add(i)
    partner = {i: j for j, i in pairs.items()}
    for i in changed_old:
        start = _indent(old_lines[i]) or 0
        if i in partner:
            start = _common_prefix(old_lines[i], new_lines[partner[i]])
        following = next((line for line in old_lines[i + 1:] if line.strip()), None)
        if following is not None and (_indent(following) or 0) > start:
            return True
    return False


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _continuations(text: str) -> dict[int, _Continuation] | None:
    """The lines that start inside brackets (0-based), each with its innermost open bracket; None when the
    text does not tokenize."""
    found: dict[int, _Continuation] = {}
    stack: list[_Bracket] = []
    pending: _Bracket | None = None  # the bracket opened last, until the next token says visual or not
    seen_line = -1  # the last line whose first token was looked at
    in_string_until = -1  # the last line a multi-line string (or an f-string) covers
    fstring_depth = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            kind, line = token.type, token.start[0] - 1
            if kind in (tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER, tokenize.DEDENT, tokenize.INDENT):
                pending = None
                continue
            if pending is not None:
                pending.visual = kind != tokenize.COMMENT and line == pending.line
                pending = None
            if line > seen_line:
                seen_line = line
                if stack and line > in_string_until and fstring_depth == 0:
                    closes = kind == tokenize.OP and token.string == _OPENERS[stack[-1].char]
                    found[line] = _Continuation(stack[-1], len(stack), closes)
            kind_name = tokenize.tok_name.get(kind, "")
            if kind_name == "FSTRING_START":
                fstring_depth += 1
            elif kind_name == "FSTRING_END":
                fstring_depth -= 1
                in_string_until = max(in_string_until, token.end[0] - 1)
            elif kind == tokenize.STRING and token.end[0] > token.start[0]:
                in_string_until = max(in_string_until, token.end[0] - 1)
            elif kind == tokenize.OP and fstring_depth == 0:
                if token.string in _OPENERS:
                    pending = _Bracket(line, token.start[1], token.string)
                    stack.append(pending)
                elif token.string in _CLOSERS and stack:
                    stack.pop()
    except (tokenize.TokenError, SyntaxError):
        return None
    return found
