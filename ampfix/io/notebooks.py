"""Jupyter notebooks: the codec that hands the code cells to the engine as one module, and back.
Pure: no file is read or written here (ampfix.io.files does), nothing printed.

- The cells are analysed together, in order, as one module would be (a name imported in one cell
  and used in a later one resolves), with a comment line between cells that marks the boundary;
  findings are mapped back to (cell, line, column).
- IPython syntax is read as IPython reads it (`ampfix.io.ipython_syntax`): in a cell that does not
  parse as it stands, the lines IPython turns into calls are masked, and come back as they were. A
  cell that still does not parse is left out: silently when it cannot hold a use (it could not
  run either), as a finding on its line when it may (AMP901; not an error of the notebook, whose
  other cells are handled).
- The notebook's text is never re-serialised: each changed cell's "source" value is spliced into
  the original text, so indentation, key order, outputs, metadata and the final newline stay
  byte for byte. A line kept from the original keeps its JSON spelling.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass, replace
from typing import TypeVar
from collections.abc import Callable, Sequence

from ampfix.core.locations import source_lines
from ampfix.engine import INTERNAL_ERROR_CODE, SYNTAX_ERROR_CODE, Finding, SourceResult
from ampfix.io.codec import Converted, DecodeError
from ampfix.io.ipython_syntax import masked_cell
from ampfix.families import SPELLINGS
from ampfix.syntax.prefilter import could_hold_use, mentions_apex
from ampfix.syntax.suppressions import line_suppresses

# Between two cells in the module handed to the engine: a comment the rewrite never touches.
BOUNDARY = "#-ampfix-cell-boundary-7c1f-"

_Item = TypeVar("_Item")


class NotebookError(ValueError):
    """Not a notebook this tool can read (not JSON, or not nbformat's layout)."""


@dataclass(frozen=True)
class Cell:
    number: int  # 1-based among all the notebook's cells, markdown included, as they are stored
    source: str
    span: tuple[int, int]  # [start, end) of the "source" value in the notebook's text
    elements: tuple[tuple[int, int], ...] | None  # the spans of its strings; None: one string


@dataclass(frozen=True)
class NotebookText:
    """A notebook decoded: its code cells as one module for the engine, and the map back."""

    text: str
    source: str  # the module of the cells that parse
    parsed: tuple[tuple[Cell, str, list[int]], ...]  # (cell, its masked source, the masked lines)
    starts: tuple[int, ...]  # the module line each parsed cell starts on
    lines: _LineIndex
    findings: tuple[Finding, ...] = ()  # the cells that may hold a use but do not parse, left out
    encoding: str = "utf-8"

    def converted(self, result: SourceResult) -> Converted:
        """The engine's findings located in the cells, and its new module spliced into the notebook."""
        findings = [*self.findings, *(self._located(finding) for finding in result.findings)]
        findings.sort(key=lambda f: (f.cell or 0, f.line, f.col, f.code))
        error = result.error
        if not result.changed:
            return Converted(tuple(findings), None, error)
        new_sources = _split_module(result.new_source, self.parsed)
        if new_sources is None:
            message = "internal error, notebook left unchanged: the cells could not be told apart after the rewrite"
            unfixed = tuple(replace(f, fixed=False) for f in findings)
            return Converted((*unfixed, Finding(1, 1, INTERNAL_ERROR_CODE, message, False)), None, message)
        splices = [(cell, new) for (cell, _, _), new in zip(self.parsed, new_sources) if new != cell.source]
        return Converted(tuple(findings), _spliced(self.text, splices), error)

    def _located(self, finding: Finding) -> Finding:
        index = max(bisect.bisect_right(self.starts, finding.line) - 1, 0)
        line = max(1, finding.line - self.starts[index] + 1)
        return _located(replace(finding, line=line), self.parsed[index][0], self.lines)


class NotebookCodec:
    def could_hold(self, data: bytes, retargets: bool) -> bool:
        # In a notebook's JSON a line break before `amp` is spelled `\n`, which the Python test
        # reads as a letter: the bytes are searched plainly (apex's names by apex itself).
        return (b"amp" in data or SPELLINGS.names.anchor.encode("ascii") in data or mentions_apex(data)
                or (retargets and SPELLINGS.retarget_names.anchor.encode("ascii") in data))

    def decode(self, data: bytes, retargets: bool = False) -> NotebookText:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise DecodeError(f"a notebook is UTF-8 JSON: {error}") from None
        try:
            cells = read_cells(text)
        except NotebookError as error:
            raise DecodeError(f"not a readable notebook: {error}", SYNTAX_ERROR_CODE) from None
        lines = _LineIndex(text)
        findings: list[Finding] = []
        parsed: list[tuple[Cell, str, list[int]]] = []
        for cell in cells:
            masked = masked_cell(cell.source)
            if not isinstance(masked, SyntaxError):
                parsed.append((cell, *masked))
            elif could_hold_use(cell.source, retargets, SPELLINGS):
                finding = _unparsable(cell, masked)
                if finding is not None:
                    findings.append(_located(finding, cell, lines))
        module, starts = _module(parsed)
        return NotebookText(text, module, tuple(parsed), tuple(starts), lines, tuple(findings))


def _unparsable(cell: Cell, error: SyntaxError) -> Finding | None:
    """A cell that may hold a use but does not parse, even read as IPython reads it: a finding on its
    line, not an error of the file (the other cells are handled; pseudo-code in a tutorial is no
    broken file). `# noqa: AMP901` on that line accepts it."""
    line, col = error.lineno or 1, error.offset or 1
    cell_lines = source_lines(cell.source)
    if 0 < line <= len(cell_lines) and line_suppresses(cell_lines[line - 1], SYNTAX_ERROR_CODE):
        return None
    message = f"cannot parse the cell: {error.msg}; its deprecated uses are left as they are"
    return Finding(line, col, SYNTAX_ERROR_CODE, message, False)


NOTEBOOK = NotebookCodec()


# ---------------------------------------------------------------------------------------------
# Reading: nbformat's layout, with the position of every code cell's source in the text.

_decoder = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


def read_cells(text: str) -> list[Cell]:
    """The code cells of a notebook in a Python kernel (none for another language)."""
    try:
        root, end = _members(text, _skip(text, 0))
        if _skip(text, end) != len(text):
            raise NotebookError("text after the notebook")
        fields = {key: (start, stop) for key, start, stop in root}
        if "cells" not in fields:
            raise NotebookError('no "cells" (nbformat 4 is read)')
        if not _python_kernel(text, fields.get("metadata")):
            return []
        cells = []
        for number, (start, _) in enumerate(_elements(text, fields["cells"][0])[0], 1):
            spans = {key: (a, b) for key, a, b in _members(text, start)[0]}
            kind = spans.get("cell_type")
            if "source" not in spans or kind is None or json.loads(text[kind[0]:kind[1]]) != "code":
                continue
            span = spans["source"]
            value = json.loads(text[span[0]:span[1]])
            if isinstance(value, list) and all(isinstance(line, str) for line in value):
                elements = tuple(_elements(text, span[0])[0])
                cells.append(Cell(number, "".join(value), span, elements))
            elif isinstance(value, str):
                cells.append(Cell(number, value, span, None))
            else:
                raise NotebookError(f"cell {number}: source is neither text nor a list of lines")
        return cells
    except (ValueError, IndexError) as error:  # json's errors are ValueErrors
        if isinstance(error, NotebookError):
            raise
        raise NotebookError(str(error)) from None


def _python_kernel(text: str, metadata: tuple[int, int] | None) -> bool:
    if metadata is None:
        return True
    value = json.loads(text[metadata[0]:metadata[1]])
    if not isinstance(value, dict):
        return True
    language = (value.get("kernelspec") or {}).get("language") or (value.get("language_info") or {}).get("name")
    return not isinstance(language, str) or language.lower() == "python"


def _skip(text: str, i: int) -> int:
    match = _SPACE.match(text, i)  # never None: the pattern matches the empty string
    return i if match is None else match.end()


def _members(text: str, i: int) -> tuple[list[tuple[str, int, int]], int]:
    """The (key, value start, value end) of the object at `i`, and its end."""

    def member(i: int) -> tuple[tuple[str, int, int], int]:
        key, i = _decoder.raw_decode(text, i)
        i = _skip(text, i)
        if text[i] != ":":
            raise NotebookError(f"expected ':' at offset {i}")
        start = _skip(text, i + 1)
        _, end = _decoder.raw_decode(text, start)
        return (key, start, end), end

    return _items(text, i, "{}", "an object", member)


def _elements(text: str, i: int) -> tuple[list[tuple[int, int]], int]:
    """The [start, end) of each element of the array at `i`, and its end."""

    def element(start: int) -> tuple[tuple[int, int], int]:
        _, end = _decoder.raw_decode(text, start)
        return (start, end), end

    return _items(text, i, "[]", "an array", element)


def _items(text: str, i: int, brackets: str, what: str,
           read_item: Callable[[int], tuple[_Item, int]]) -> tuple[list[_Item], int]:
    """The items of the object or array at `i` (each read by `read_item` from its start, which gives
    the item and its end), and the container's end."""
    opening, closing = brackets[0], brackets[1]
    if text[i] != opening:
        raise NotebookError(f"expected {what} at offset {i}")
    i = _skip(text, i + 1)
    items: list[_Item] = []
    if text[i] == closing:
        return items, i + 1
    while True:
        item, i = read_item(i)
        items.append(item)
        i = _skip(text, i)
        if text[i] == closing:
            return items, i + 1
        if text[i] != ",":
            raise NotebookError(f"expected ',' or '{closing}' at offset {i}")
        i = _skip(text, i + 1)


class _LineIndex:
    """1-based line of an offset in the notebook's text (annotations point at the file's lines)."""

    def __init__(self, text: str) -> None:
        self.breaks = [m.start() for m in re.finditer("\n", text)]

    def line(self, offset: int) -> int:
        return bisect.bisect_left(self.breaks, offset) + 1


def _located(finding: Finding, cell: Cell, lines: _LineIndex) -> Finding:
    if cell.elements:
        start = cell.elements[min(finding.line, len(cell.elements)) - 1][0]
    else:
        start = cell.span[0]
    return replace(finding, cell=cell.number, file_line=lines.line(start))


# ---------------------------------------------------------------------------------------------
# The module of all cells, and back


def _module(parsed: list[tuple[Cell, str, list[int]]]) -> tuple[str, list[int]]:
    """The cells joined, each on its own lines after a boundary comment; the 1-based module line
    each cell starts on."""
    parts: list[str] = []
    starts: list[int] = []
    line = 1
    for number, (_, masked, _) in enumerate(parsed):
        parts.append(f"{BOUNDARY}{number}\n")
        line += 1
        starts.append(line)
        text = masked if masked.endswith("\n") or not masked else masked + "\n"
        parts.append(text)
        line += len(source_lines(text))
    return "".join(parts), starts


def _split_module(new_module: str, parsed: Sequence[tuple[Cell, str, list[int]]]) -> list[str] | None:
    """Each cell's new source (masked lines restored), or None when the boundaries did not survive."""
    import difflib

    segments: list[list[str]] = []
    for line in source_lines(new_module):
        if line.startswith(BOUNDARY):
            if line != f"{BOUNDARY}{len(segments)}\n":
                return None
            segments.append([])
        elif not segments:
            return None
        else:
            segments[-1].append(line)
    if len(segments) != len(parsed):
        return None
    sources = []
    for (cell, masked, masked_indices), lines in zip(parsed, segments):
        if not masked.endswith("\n") and masked and lines:
            if not lines[-1].endswith("\n"):
                return None
            lines[-1] = lines[-1][:-1]
        if masked_indices:
            old = source_lines(masked)
            original = source_lines(cell.source)
            kept = {}
            for block in difflib.SequenceMatcher(None, old, lines, autojunk=False).get_matching_blocks():
                for k in range(block.size):
                    kept[block.a + k] = block.b + k
            if any(i not in kept for i in masked_indices):
                return None
            for i in masked_indices:
                lines[kept[i]] = original[i]
        sources.append("".join(lines))
    return sources


# ---------------------------------------------------------------------------------------------
# Writing: the changed "source" values spliced into the original text


def _spliced(text: str, splices: list[tuple[Cell, str]]) -> str:
    ascii_only = text.isascii() and "\\u" in text  # written with ensure_ascii (nbformat writes UTF-8)
    for cell, new_source in sorted(splices, key=lambda s: s[0].span[0], reverse=True):
        start, end = cell.span
        text = text[:start] + _source_value(text, cell, new_source, ascii_only) + text[end:]
    return text


def _source_value(text: str, cell: Cell, new_source: str, ascii_only: bool) -> str:
    if cell.elements is None:
        return json.dumps(new_source, ensure_ascii=ascii_only)
    start, end = cell.span
    spelled: dict[str, str] = {}  # a line that is already there keeps its spelling
    for a, b in cell.elements:
        spelled.setdefault(json.loads(text[a:b]), text[a:b])
    new_lines = source_lines(new_source)
    raws = [spelled.get(line) or json.dumps(line, ensure_ascii=ascii_only) for line in new_lines]
    elements = cell.elements
    if not elements or not raws:  # a cell emptied is `[]`, as nbformat writes one
        return "[" + ", ".join(raws) + "]"
    head = text[start + 1 : elements[0][0]]  # "\n    " in nbformat's layout
    tail = text[elements[-1][1] : end - 1]  # "\n   "
    if len(elements) > 1:
        separator = text[elements[0][1] : elements[1][0]]
    else:
        separator = "," + head if "\n" in head else ", "
    return "[" + head + separator.join(raws) + tail + "]"
