"""IPython's syntax in a notebook cell, read as IPython reads it, and masked so the cell parses.

IPython turns a cell into Python before running it (`IPython.core.inputtransformer2` and, for a
one-line cell, the automagic prefilter). The lines it turns into calls are not Python: a rewrite
must not touch them and the analysis must not choke on them. This module finds exactly those lines,
without importing IPython (the tests compare it with IPython's own transformer):

- a cell magic: a first line `%%name ...`; the whole cell is the magic's, except for the magics
  that run their body as Python in the kernel (`%%time`, `%%capture`, ...), whose body is read as a
  cell of its own;
- an escaped command at the start of a logical line, with its backslash continuations:
  `!cmd`, `!!cmd`, `%magic`, `?obj`, `??obj`, `/f a` (autocall), `,f a`, `;f a` (quoting autocall);
- an assignment from one: `x = !cmd`, `a, b = %sx cmd`, `x = %magic`;
- help at the end of a line: `obj?`, `obj.attr??`, `a = obj?`;
- an automagic: a one-line cell whose first word is a line magic (`pip install x`, `cd dir`).

Masked lines are replaced by a name of underscores at the indentation of the statement they belong
to, so the masked cell has the same lines, parses, and binds nothing that matters; they come back
byte for byte after a rewrite. IPython's clean-up of pasted prompts (`>>> `, `In [1]: `) and of a
cell indented as a whole is not reproduced: such a cell does not parse and is reported as such.
"""

from __future__ import annotations

import ast
import re

from ampfix.core.locations import source_lines

ESCAPES = ("!", "%", "?", "/", ",", ";")
# Cell magics that run their body as Python in the kernel (their body goes through IPython again).
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug"})
# IPython's line magics and aliases (IPython 9's `%lsmagic`; a test compares this list with the
# installed IPython's): the first word of a one-line cell that automagic runs as `%word`.
LINE_MAGICS = frozenset({
    "alias", "alias_magic", "autoawait", "autocall", "automagic", "bookmark", "cat", "cd", "code_wrap", "colors",
    "conda", "config", "cp", "debug", "dhist", "dirs", "doctest_mode", "ed", "edit", "env", "gui", "hist", "history",
    "killbgscripts", "ldir", "lf", "lk", "ll", "load", "load_ext", "loadpy", "logoff", "logon", "logstart",
    "logstate", "logstop", "ls", "lsmagic", "lx", "macro", "magic", "mamba", "matplotlib", "micromamba", "mkdir",
    "mv", "notebook", "page", "pastebin", "pdb", "pdef", "pdoc", "pfile", "pinfo", "pinfo2", "pip", "popd",
    "pprint", "precision", "prun", "psearch", "psource", "pushd", "pwd", "pycat", "pylab", "quickref", "recall",
    "rehashx", "reload_ext", "rep", "rerun", "reset", "reset_selective", "rm", "rmdir", "run", "save", "sc",
    "set_env", "sx", "system", "tb", "time", "timeit", "unalias", "unload_ext", "uv", "who", "who_ls", "whos",
    "xdel", "xmode",
})
# IPython's `_help_end_re`: what may stand before a trailing `?` (`%magic?`, `obj.attr??`, `np.*?`).
_HELP_TARGET = re.compile(r"(%{0,2}(?!\d)[\w*]+(\.(?!\d)[\w*]+)*)\s*$")
_FIRST_WORD = re.compile(r"\s*([A-Za-z_][\w.]*)(.*)", re.DOTALL)
_STRING_START = re.compile(r"(?i:[rbuf]{0,2})('''|\"\"\"|'|\")")


def masked_cell(source: str) -> tuple[str, list[int]] | SyntaxError:
    """(the cell as Python, the 0-based indices of the lines masked), or the syntax error of a cell
    that does not parse even with IPython's lines masked. A cell that parses is returned as it is."""
    first_error = _syntax_error(source)
    if first_error is None:
        return source, []
    lines = source_lines(source)
    masked = _masked_lines(lines)
    if not masked:
        return first_error
    new_lines = list(lines)
    for index, indent in masked.items():
        ending = lines[index][len(lines[index].rstrip("\r\n")):]
        new_lines[index] = indent + "_" * max(1, len(lines[index].strip())) + ending
    text = "".join(new_lines)
    error = _syntax_error(text)
    return error if error is not None else (text, sorted(masked))


def _syntax_error(text: str) -> SyntaxError | None:
    try:
        ast.parse(text)
    except SyntaxError as error:
        return error
    except ValueError as error:  # a null byte
        return SyntaxError(str(error))
    return None


def _masked_lines(lines: list[str]) -> dict[int, str]:
    """Line index -> the indentation its mask is written at."""
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        return {}
    if lines[first].startswith("%%"):
        return _cell_magic(lines, first)
    if len(lines) == 1:
        automagic = _automagic(lines[0])
        if automagic:
            return {0: ""}
    return _line_syntax(lines, 0, len(lines))


def _cell_magic(lines: list[str], first: int) -> dict[int, str]:
    words = lines[first][2:].split(maxsplit=1)
    name = words[0] if words else ""
    if name not in PYTHON_CELL_MAGICS:
        return {i: "" for i in range(first, len(lines))}
    return {i: "" for i in range(first + 1)} | _line_syntax(lines, first + 1, len(lines))


def _automagic(line: str) -> bool:
    match = _FIRST_WORD.fullmatch(line.rstrip("\r\n"))
    if match is None or match.group(1).split(".", 1)[0] not in LINE_MAGICS:
        return False
    rest = match.group(2).lstrip()
    # IPython's AssignmentChecker: `pip = 3`, `cd, x = ...` are Python.
    return not (rest[:1] in ("=", ",") and not rest.startswith("=="))


def _line_syntax(lines: list[str], start: int, stop: int) -> dict[int, str]:
    masked: dict[int, str] = {}
    i = start
    while i < stop:
        line = lines[i]
        body = line.lstrip(" \t")
        indent = line[: len(line) - len(body)]
        if not body.strip() or body.startswith("#"):
            i += 1
            continue
        if body.startswith(ESCAPES) or _assigns_escape(body):
            end = _end_of_backslashes(lines, i, stop)
            masked.update({k: indent for k in range(i, end + 1)})
            i = end + 1
            continue
        end, last_code = _logical_end(lines, i, stop)
        if last_code.endswith("?") and _HELP_TARGET.search(last_code.rstrip("?")):
            masked.update({k: indent for k in range(i, end + 1)})
        i = end + 1
    return masked


def _end_of_backslashes(lines: list[str], i: int, stop: int) -> int:
    while i + 1 < stop and lines[i].rstrip("\r\n").endswith("\\"):
        i += 1
    return i


def _assigns_escape(body: str) -> bool:
    """`x = !cmd`, `a, b = %sx cmd`: the first `=` outside brackets and strings is followed by `!`
    or by `%` and a name (IPython's SystemAssign and MagicAssign)."""
    depth = 0
    i = 0
    while i < len(body):
        char = body[i]
        if char == "#":
            return False
        quote = _string_at(body, i)
        if quote is not None:
            end = body.find(quote[0], quote[1])
            if end < 0:
                return False
            i = end + len(quote[0])
            continue
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(0, depth - 1)
        elif char == "=" and depth == 0:
            if body[i + 1: i + 2] == "=" or (i and body[i - 1] in "=!<>+-*/%&|^@:~"):
                return False
            rest = body[i + 1:].lstrip(" \t")
            return rest.startswith("!") or re.match(r"%\w", rest) is not None
        i += 1
    return False


def _string_at(line: str, k: int) -> tuple[str, int] | None:
    """(the quote, the offset after it) of a string literal starting at `k`, prefix included."""
    if line[k] not in "'\"rbuRBUfF" or (k and (line[k - 1].isalnum() or line[k - 1] == "_")):
        return None
    match = _STRING_START.match(line, k)
    return None if match is None else (match.group(1), match.end())


def _logical_end(lines: list[str], i: int, stop: int) -> tuple[int, str]:
    """The last line of the logical line starting at `i` (brackets, strings, backslashes), and that
    line's code with its comment and trailing blanks removed."""
    depth = 0
    quote: str | None = None
    while True:
        line = lines[i].rstrip("\r\n")
        code_end = len(line)
        k = 0
        while k < len(line):
            if quote is not None:
                if line[k] == "\\":
                    k += 2
                    continue
                if line.startswith(quote, k):
                    k += len(quote)
                    quote = None
                    continue
                k += 1
                continue
            char = line[k]
            if char == "#":
                code_end = k
                break
            opening = _string_at(line, k)
            if opening is not None:
                quote, k = opening
                continue
            if char in "([{":
                depth += 1
            elif char in ")]}":
                depth = max(0, depth - 1)
            k += 1
        if quote is not None and len(quote) == 1:
            quote = None  # an unterminated one-quote string ends with its line (a syntax error anyway)
        continued = quote is not None or depth > 0 or line.endswith("\\")
        if not continued or i + 1 >= stop:
            return i, line[:code_end].rstrip()
        i += 1
