"""Apply a `Plan` with LibCST, re-printing only what changes.

Every edit carries the character span of the `ast` node it was decided on. The applier parses, with
LibCST, only the line groups of top-level statements that hold edits (`Plan.statements`), finds each
edit's node in that small tree by its position (one lean printing pass that counts characters,
`_Spans`), and checks that it is the node the analysis saw (its type and, NFKC-normalised, its name
or value). Expression edits then re-print only the outermost node that changes (the dotted name, or
the call whose arguments change) and splice it over its own text; edits that change statements (an
import split or removed) re-print their fragment. Statements added at the head (`import functools`)
are text put where `ampfix.engine.heads` decided. The rest of the file is never parsed by LibCST nor
printed.

Any disagreement raises `PlanMismatch` naming the line: the engine then leaves the whole file
untouched (an edit dropped in one statement could strand a use whose import moved in another).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import re
import unicodedata
from collections.abc import Callable
from typing import cast

import libcst as cst
from libcst import MaybeSentinel
# The printer's state class: LibCST's own PositionProvider subclasses it the same way (stable in 1.x).
from libcst._nodes.internal import CodegenState

from ampfix.core.plan import CallEdit, ChainEdit, Edit, ImportEdit, Plan, Splice, ValueEdit
from ampfix.engine.continuation import realigned


class PlanMismatch(Exception):
    """The CST does not match what the analysis planned: an internal error, never a guess."""

    def __init__(self, message: str, line: int = 1) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


def apply_plan(source: str, plan: Plan, line_length: int = 88, formatted: bool = False) -> str:
    """`source` with the plan's edits; `line_length` is the formatter's (black's, ruff's), which an
    argument joined to the line of the others must fit in (`_with_arguments`); `formatted`: the project
    declares that formatter, so a one-line call pushed past it is split as the formatter splits it."""
    pieces: list[str] = []
    done = 0
    head_at = plan.head_at  # a line boundary outside every fragment (`ampfix.engine.heads`)
    for start, end, edits in _fragments(source, plan):
        if head_at is not None and head_at <= start:
            pieces += [source[done:head_at], plan.head_text]
            done, head_at = head_at, None
        pieces.append(source[done:start])
        pieces.append(_apply_to_fragment(source[start:end], start, edits, line_length, formatted))
        done = end
        if head_at is not None and head_at < end:
            # The head goes where a statement was removed with the blank lines after it: it takes that statement's
            # place, so those blank lines stay, after it (the code below keeps its spacing).
            pieces += [plan.head_text, source[head_at:end]]
            head_at = None
    if head_at is not None:
        pieces += [source[done:head_at], plan.head_text]
        done = head_at
    pieces.append(source[done:])
    return "".join(pieces)


def _fragments(source: str, plan: Plan) -> list[tuple[int, int, list[Edit]]]:
    """The line groups to re-print, merged where they touch, each with its edits. A text splice may go on over the
    blank lines after its statement (a statement removed takes blank lines with it, `SourceIndex.removal`): its group
    then ends where the splice does."""
    starts = [start for start, _ in plan.statements]
    wanted: dict[int, list[Edit]] = {}
    ends = [end for _, end in plan.statements]
    for edit in plan.edits:
        i = bisect.bisect_right(starts, edit.start) - 1
        if i >= 0 and edit.end > ends[i] and isinstance(edit.change, Splice) and not source[ends[i]:edit.end].strip() \
                and (i + 1 == len(starts) or edit.end <= starts[i + 1]):
            ends[i] = edit.end
        if i < 0 or edit.end > ends[i]:
            raise PlanMismatch("the edit lies outside every top-level statement", edit.line)
        wanted.setdefault(i, []).append(edit)
    ranges = [(plan.statements[i][0], ends[i], edits) for i, edits in sorted(wanted.items())]
    merged: list[tuple[int, int, list[Edit]]] = []
    for start, end, edits in ranges:
        if merged and start < merged[-1][1]:
            last = merged[-1]
            merged[-1] = (last[0], max(end, last[1]), last[2] + edits)
        else:
            merged.append((start, end, list(edits)))
    return merged


_NODE_TYPES = {
    "Name": cst.Name,
    "Attribute": cst.Attribute,
    "SimpleString": cst.SimpleString,
    "Import": cst.Import,
    "ImportFrom": cst.ImportFrom,
}


def _apply_to_fragment(text: str, offset: int, edits: list[Edit], line_length: int = 88,
                       formatted: bool = False) -> str:
    """The fragment with its edits, its continuation lines kept against their brackets (`continuation`)."""
    return realigned(text, _edited_fragment(text, offset, edits, line_length, formatted))


def _edited_fragment(text: str, offset: int, edits: list[Edit], line_length: int, formatted: bool) -> str:
    splices = [edit for edit in edits if isinstance(edit.change, Splice)]
    edits = [edit for edit in edits if not isinstance(edit.change, Splice)]
    if not edits:
        return _splice(text, offset, [], splices)  # text splices alone: nothing for LibCST to parse
    if splices and any(isinstance(edit.change, ImportEdit) for edit in edits):
        # The fragment is re-printed whole: the text splices go first, and the other edits move with the text.
        text, edits = _splice(text, offset, [], splices), _shifted(edits, splices)
        splices = []
    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError as error:
        line = edits[0].line if edits else 1
        raise PlanMismatch(f"LibCST cannot parse the statement: {error.message}", line) from error
    if text.endswith("\r") and not module.has_trailing_newline:
        # LibCST's native parser counts only "\n" as a final newline: a statement re-printed from a
        # file with old Mac line endings (CR only) would lose its "\r", and the next line join it.
        module = module.with_changes(has_trailing_newline=True)
    located, spans = _locate(module, offset, edits)
    applier = _Applier(located, spans.extent, sorted(e.start - offset for e in edits),
                       _Layout(line_length, None, module.default_indent, formatted))
    statements_change = any(isinstance(edit.change, ImportEdit) for edit in edits)
    if statements_change and splices:
        raise PlanMismatch("a fragment re-printed whole holds text splices", splices[0].line)
    if statements_change:  # an import split or removed: the fragment is re-printed
        new_module = module.visit(applier)
        # Every statement removed: an empty module would still print a line break.
        new_text = new_module.code if new_module.body or new_module.header or new_module.footer else ""
    else:
        new_text = _splice(text, offset, _reprinted_roots(module, located, spans, applier, text), splices)
    if applier.applied != len(edits):
        missed = [e for e in edits if id(e) not in applier.applied_edits] or edits
        raise PlanMismatch("a planned edit was not applied exactly once", missed[0].line)
    return new_text


def _shifted(edits: list[Edit], splices: list[Edit]) -> list[Edit]:
    """The edits at their offsets once the splices are applied; a splice that meets an edit is a mismatch."""
    shifted = []
    for edit in edits:
        delta = 0
        for splice in splices:
            assert isinstance(splice.change, Splice)
            if splice.start < edit.end and edit.start < splice.end:
                raise PlanMismatch("a text splice overlaps another edit", splice.line)
            if splice.end <= edit.start:
                delta += len(splice.change.text) - (splice.end - splice.start)
        shifted.append(dataclasses.replace(edit, start=edit.start + delta, end=edit.end + delta))
    return shifted


def _reprinted_roots(module: cst.Module, located: dict[int, Edit], spans: _Spans, applier: _Applier,
                     text: str) -> list[tuple[int, int, Callable[[], str]]]:
    """Expression edits: the outermost nodes that change (the chain, or the call whose arguments
    change), each with its extent in the fragment and what prints it with its edits applied."""
    roots: dict[int, tuple[cst.CSTNode, tuple[str, ...]]] = {}
    for node_id, edit in located.items():
        node = spans.nodes[node_id]
        root = node
        if isinstance(edit.change, ChainEdit) and edit.change.call is not None:
            call = spans.calls.get(node_id)
            if call is None:
                raise PlanMismatch(f"`{edit.text}` is not the callee of a call", edit.line)
            root = call
        elif isinstance(edit.change, ChainEdit) and edit.change.partial_device is not None:
            call = spans.first_arguments.get(node_id)
            if call is None:
                raise PlanMismatch(f"`{edit.text}` is not the first argument of a call", edit.line)
            root = call
        roots[id(root)] = (root, spans.fstring_quotes[node_id])

    def printer(root: cst.CSTNode, quotes: tuple[str, ...]) -> Callable[[], str]:
        def reprint() -> str:
            applier.fstring_quotes = list(quotes)
            applier.layout.block_indent = "".join(spans.indents[id(root)])
            applied = applier.applied
            printed = _print(module, _apply_to_root(root, applier, spans), spans.indents[id(root)])
            if isinstance(root, cst.Call) and _pushed_past(text, spans.extent[id(root)], printed, applier.layout):
                applier.applied, applier.layout.split = applied, True  # printed again, split: `_with_arguments`
                printed = _print(module, _apply_to_root(root, applier, spans), spans.indents[id(root)])
                applier.layout.split = False
            return printed
        return reprint

    return [(*spans.extent[id(root)], printer(root, quotes)) for root, quotes in roots.values()]


def _splice(text: str, offset: int, reprinted: list[tuple[int, int, Callable[[], str]]], splices: list[Edit]) -> str:
    """The one splice path: the fragment's text with the re-printed roots and the text splices
    (`ampfix.families.apex.rewrite`) put over their extents. A splice goes between roots (an insertion at a
    root's start goes first); one that overlaps another edit is a mismatch. A root inside a root already
    re-printed was applied with it."""
    changes: list[tuple[int, int, int, Callable[[], str] | Edit]] = [(start, end, 1, p) for start, end, p in reprinted]
    changes += [(edit.start - offset, edit.end - offset, 0, edit) for edit in splices]
    pieces: list[str] = []
    done = 0
    for start, end, _, change in sorted(changes, key=lambda item: item[:3]):
        if isinstance(change, Edit):
            if start < done:
                raise PlanMismatch("a text splice overlaps another edit", change.line)
            assert isinstance(change.change, Splice)
            pieces += [text[done:start], change.change.text]
        elif start < done:
            continue
        else:
            pieces += [text[done:start], change()]
        done = end
    pieces.append(text[done:])
    return "".join(pieces)


def _print(module: cst.Module, node: cst.CSTNode, indent_tokens: tuple[str, ...]) -> str:
    """A node's text where it stands: a line break inside its parentheses is followed by the
    indentation of the block around it, which the printer takes from its state."""
    state = CodegenState(default_indent=module.default_indent, default_newline=module.default_newline,
                         indent_tokens=list(indent_tokens))
    node._codegen(state)
    return "".join(state.tokens)


def _apply_to_root(root: cst.CSTNode, applier: _Applier, spans: _Spans) -> cst.CSTNode:
    """The root with its edits applied: directly when its only edit is its own (the common case:
    a visit of the whole subtree costs more than printing it), else by visiting it."""
    start, end = spans.extent[id(root)]
    i = bisect.bisect_left(applier.starts, start)
    alone = i + 1 == len(applier.starts) or applier.starts[i + 1] >= end
    if alone and isinstance(root, (cst.Name, cst.Attribute)):
        return applier.replace_chain(root, root)
    if alone and isinstance(root, cst.Call) and id(root.func) in applier.located:
        return applier.leave_Call(root, root.with_changes(func=applier.replace_chain(root.func, root.func)))
    visited = root.visit(applier)
    assert isinstance(visited, cst.CSTNode)  # the applier removes only whole statements, never an expression
    return visited


class _Spans(CodegenState):
    """A printing pass that records character offsets instead of keeping text: each node's extent
    (whitespace it owns included), and the syntactic extent of the node types edits are keyed on
    (what `ast` calls the node's position: without its parentheses). LibCST's PositionProvider
    computes line/column objects for every node and costs more than the parse."""

    def __init__(self, module: cst.Module) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.offset = 0
        self.stack: list[int] = []
        self.extent: dict[int, tuple[int, int]] = {}
        self.syntactic: dict[tuple[int, int], list[cst.CSTNode]] = {}
        # For the located node types: the node by id, the call it is the callee of, the quotes of
        # the f-strings around it.
        self.nodes: dict[int, cst.CSTNode] = {}
        self.calls: dict[int, cst.Call] = {}
        self.first_arguments: dict[int, cst.Call] = {}
        self.indents: dict[int, tuple[str, ...]] = {}  # the block indentation around a located node or call
        self.fstring_quotes: dict[int, tuple[str, ...]] = {}
        self.quotes: tuple[str, ...] = ()

    def add_indent_tokens(self) -> None:
        self.offset += sum(len(token) for token in self.indent_tokens)

    def add_token(self, value: str) -> None:
        self.offset += len(value)

    def pop_trailing_newline(self) -> None:
        pass  # only the end of the text moves; every offset recorded stays right

    # This runs for every node: exact types, not isinstance (LibCST's node classes are ABCs), and
    # extents kept only for the nodes an edit can be spliced at or visited through.
    def before_codegen(self, node: cst.CSTNode) -> None:
        kind = type(node)
        if kind in _TRACKED_TYPES:
            self.stack.append(self.offset)
            if kind in _ROOT_TYPES:
                self.indents[id(node)] = tuple(self.indent_tokens)
            if kind in _LOCATED_TYPES:
                key = id(node)
                self.nodes[key] = node
                self.fstring_quotes[key] = self.quotes
            elif kind is cst.FormattedString:
                self.quotes = (*self.quotes, cast(cst.FormattedString, node).quote)

    def after_codegen(self, node: cst.CSTNode) -> None:
        kind = type(node)
        if kind in _TRACKED_TYPES:
            self.extent[id(node)] = (self.stack.pop(), self.offset)
            if kind is cst.Call:
                call = cast(cst.Call, node)  # its exact type, checked above
                self.calls[id(call.func)] = call
                if call.args:  # a `functools.partial(<name>, ...)` whose name gets a device after it
                    self.first_arguments[id(call.args[0].value)] = call
            elif kind is cst.FormattedString:
                self.quotes = self.quotes[:-1]

    # A plain context class, not the generator-based one LibCST declares (that cost a fifth of the pass).
    def record_syntactic_position(  # type: ignore[override]  # returns _Syntactic: same protocol, cheaper
            self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None,
            end_node: cst.CSTNode | None = None) -> _Syntactic:
        return _Syntactic(self, node)


class _Syntactic:
    """The context LibCST's printer opens around a node's syntactic extent (a plain class: a
    generator-based context manager per node cost a fifth of the pass)."""

    __slots__ = ("spans", "node", "start")

    def __init__(self, spans: _Spans, node: cst.CSTNode) -> None:
        self.spans, self.node = spans, node

    def __enter__(self) -> None:
        self.start = self.spans.offset

    def __exit__(self, *exc: object) -> None:
        if type(self.node) in _LOCATED_TYPES:
            self.spans.syntactic.setdefault((self.start, self.spans.offset), []).append(self.node)


_LOCATED_TYPES = frozenset(_NODE_TYPES.values())
_ROOT_TYPES = _LOCATED_TYPES | {cst.Call}
_TRACKED_TYPES = _LOCATED_TYPES | {cst.Call, cst.FormattedString, cst.SimpleStatementLine, cst.SimpleStatementSuite,
                                   cst.IndentedBlock, cst.FunctionDef, cst.ClassDef, cst.If, cst.For, cst.While,
                                   cst.With, cst.Try, cst.Expr, cst.Assign, cst.Return}


def _locate(module: cst.Module, offset: int, edits: list[Edit]) -> tuple[dict[int, Edit], _Spans]:
    """id(CST node) -> its edit, each found at the edit's span and checked against what it spells."""
    spans = _Spans(module)
    module._codegen(spans)
    located: dict[int, Edit] = {}
    for edit in edits:
        candidates = spans.syntactic.get((edit.start - offset, edit.end - offset), [])
        node = next((n for n in candidates if _spells(n, edit)), None)
        if node is None:
            seen = ", ".join(type(n).__name__ for n in candidates) or "nothing"
            raise PlanMismatch(f"the analysis saw {edit.node} `{edit.text}` where LibCST has {seen}", edit.line)
        located[id(node)] = edit
    return located, spans


def _spells(node: cst.CSTNode, edit: Edit) -> bool:
    if not isinstance(node, _NODE_TYPES[edit.node]):
        return False
    if isinstance(node, (cst.Name, cst.Attribute)):
        dotted = _dotted(node)
        return dotted is not None and unicodedata.normalize("NFKC", dotted) == edit.text
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value == edit.text
    return True


def _dotted(node: cst.BaseExpression) -> str | None:
    parts: list[str] = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if not isinstance(node, cst.Name):
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


@dataclasses.dataclass
class _Layout:
    """What an inserted argument needs to know of the lines around it."""

    line_length: int  # the formatter's
    block_indent: str | None  # the indentation of the block around the root re-printed; None: unknown
    indent_unit: str  # the file's own (LibCST's `default_indent`)
    formatted: bool = False  # the project declares the formatter (`apply_plan`)
    split: bool = False  # the call re-printed is split as the formatter splits a line too long


# The line of a call the formatter splits at its own brackets: the statement's indentation, then nothing, `with `,
# `return ` or an assignment to names; after the call, nothing or the `with`'s colon, then a comment or not.
_SPLIT_HEAD = re.compile(r"[ \t]*(with |return |[A-Za-z_][\w.]*(\s*,\s*[A-Za-z_][\w.]*)*\s*=\s*)?")
_SPLIT_TAIL = re.compile(r":?[ \t]*(#[^\r\n]*)?\r?")


def _pushed_past(text: str, extent: tuple[int, int], printed: str, layout: _Layout) -> bool:
    """Is the call at `extent`, re-printed as `printed`, the only bracket of a one-line statement that fit
    in the line length and no longer does, in a project whose formatter splits it (black's right-hand
    split: the last brackets of the line)?"""
    start, end = extent
    if not layout.formatted or "\n" in text[start:end] or "\n" in printed or "\r" in printed:
        return False
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    head, tail = text[line_start:start], text[end:len(text) if line_end < 0 else line_end]
    if _SPLIT_HEAD.fullmatch(head) is None or _SPLIT_TAIL.fullmatch(tail) is None:
        return False
    width = len(head) + len(tail.rstrip("\r"))
    return width + (end - start) <= layout.line_length < width + len(printed)


class _Applier(cst.CSTTransformer):
    def __init__(self, located: dict[int, Edit], extent: dict[int, tuple[int, int]], starts: list[int],
                 layout: _Layout) -> None:
        super().__init__()
        self.layout = layout
        self.located = located
        self.extent = extent
        self.starts = starts  # where the edits begin, sorted
        self.skipped: set[int] = set()
        self.applied = 0
        self.applied_edits: set[int] = set()
        self.split_lines: dict[int, cst.ImportFrom] = {}  # id(original ImportFrom) -> kept part
        # The quotes of the f-strings around the current node: a string put inside one must not
        # use its quote character (Python < 3.12 ends the f-string there).
        self.fstring_quotes: list[str] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        # Only the nodes around an edit are visited: the rest is kept as it is.
        extent = self.extent.get(id(node))
        if extent is not None:
            i = bisect.bisect_left(self.starts, extent[0])
            if i == len(self.starts) or self.starts[i] >= extent[1]:
                self.skipped.add(id(node))
                return False
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):
        if id(original_node) in self.skipped:
            return updated_node
        return super().on_leave(original_node, updated_node)

    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        self.fstring_quotes.append(node.quote)

    def leave_FormattedString(self, original_node: cst.FormattedString,
                              updated_node: cst.FormattedString) -> cst.FormattedString:
        self.fstring_quotes.pop()
        return updated_node

    def expression(self, text: str, line: int) -> cst.BaseExpression:
        """`text` parsed, its string literals re-quoted to fit inside the f-strings around it."""
        node = _parsed_expression(text)
        if not self.fstring_quotes:
            return node
        taken = {quote[0] for quote in self.fstring_quotes}
        free = [q for q in ('"', "'") if q not in taken]
        if not free:
            raise PlanMismatch("no quote character is free inside these nested f-strings", line)
        requoted = node.visit(_Requote(free[0], line))
        assert isinstance(requoted, cst.BaseExpression)  # re-quoting replaces strings by strings
        return requoted

    def take(self, node: cst.CSTNode) -> Edit | None:
        edit = self.located.get(id(node))
        if edit is not None:
            self.applied += 1
            self.applied_edits.add(id(edit))
        return edit

    def chain_edit(self, node: cst.CSTNode) -> ChainEdit | None:
        edit = self.located.get(id(node))
        return edit.change if edit is not None and isinstance(edit.change, ChainEdit) else None

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        return self.replace_chain(original_node, updated_node)

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        return self.replace_chain(original_node, updated_node)

    def replace_chain(self, original: cst.BaseExpression, updated: cst.BaseExpression) -> cst.BaseExpression:
        located = self.take(original)
        if located is None:
            return updated
        edit = located.change
        assert isinstance(edit, ChainEdit)
        result = updated
        if edit.new_dotted is not None:
            result = _dotted_node(edit.new_dotted).with_changes(lpar=updated.lpar, rpar=updated.rpar)
        if edit.decorator_call is not None:
            call = _parsed_expression(f"_({edit.decorator_call})")
            assert isinstance(call, cst.Call)
            result = call.with_changes(func=result)
        if edit.partial_args is not None:
            bare = result.with_changes(lpar=(), rpar=())
            partial = self.expression(f"functools.partial(_, {edit.partial_args})", located.line)
            assert isinstance(partial, cst.Call)
            args = [partial.args[0].with_changes(value=bare), *partial.args[1:]]
            result = partial.with_changes(args=args, lpar=updated.lpar, rpar=updated.rpar)
        return result

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        updated_node = self.partial_device(original_node, updated_node)
        edit = self.chain_edit(original_node.func)
        if edit is None or edit.call is None:
            return updated_node
        device = self.expression(edit.call.device, self.located[id(original_node.func)].line)
        return _with_arguments(updated_node, edit.call, device, self.layout)

    def partial_device(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        """`functools.partial(<name>, k=v)` -> `functools.partial(<new name>, <device>, k=v)`."""
        first = original.args[0].value if original.args else None
        edit = self.chain_edit(first) if first is not None else None
        if first is None or edit is None or edit.partial_device is None:
            return updated
        device = self.expression(edit.partial_device, self.located[id(first)].line)
        args = list(updated.args)
        inserted = cst.Arg(device, comma=args[0].comma)
        args[0] = args[0].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args = [args[0], inserted, *args[1:]]
        separator = _argument_separator(updated)
        tight = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
        for keyword, text in edit.partial_keywords:
            added = cst.Arg(value=_parsed_expression(text), keyword=cst.Name(keyword), equal=tight)
            args = _insert_argument(args, len(args), added, separator)
        return updated.with_changes(args=args)

    # strings -------------------------------------------------------------------------------
    def leave_SimpleString(self, original_node: cst.SimpleString,
                           updated_node: cst.SimpleString) -> cst.BaseExpression:
        located = self.take(original_node)
        if located is None:
            return updated_node
        if isinstance(located.change, ValueEdit):
            value = self.expression(located.change.text, located.line)
            return value.with_changes(lpar=updated_node.lpar, rpar=updated_node.rpar)
        assert isinstance(located.change, str)
        return updated_node.with_changes(value=located.change)

    # imports -------------------------------------------------------------------------------
    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def import_edit(self, node: cst.CSTNode) -> ImportEdit | None:
        located = self.take(node)
        if located is None:
            return None
        assert isinstance(located.change, ImportEdit)
        return located.change

    def leave_Import(self, original_node: cst.Import, updated_node: cst.Import):
        edit = self.import_edit(original_node)
        if edit is None:
            return updated_node
        names = list(updated_node.names)
        for i, new_name in edit.renamed_aliases.items():
            names[i] = names[i].with_changes(name=_dotted_node(new_name))
        kept = [name for i, name in enumerate(names) if i not in edit.removed_aliases]
        if not kept:
            return cst.RemoveFromParent()
        return updated_node.with_changes(names=_without_trailing_comma(kept, names))

    def leave_ImportFrom(self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom) -> cst.ImportFrom:
        edit = self.import_edit(original_node)
        if edit is None or edit.new_module is None:
            return updated_node
        if edit.renamed_names:
            if isinstance(updated_node.names, cst.ImportStar):
                raise PlanMismatch("a star import names nothing to rename", self.located[id(original_node)].line)
            renamed = list(updated_node.names)
            for i, new_name in edit.renamed_names.items():
                renamed[i] = renamed[i].with_changes(name=cst.Name(new_name))
            updated_node = updated_node.with_changes(names=renamed)
        if not edit.kept_aliases:
            return updated_node.with_changes(module=_dotted_node(edit.new_module))
        if isinstance(updated_node.names, cst.ImportStar):
            raise PlanMismatch("a star import cannot be split", self.located[id(original_node)].line)
        names = list(updated_node.names)
        migrated = [n for i, n in enumerate(names) if i not in edit.kept_aliases]
        kept = [n for i, n in enumerate(names) if i in edit.kept_aliases]
        self.split_lines[id(original_node)] = updated_node.with_changes(
            names=_without_trailing_comma(kept, names), lpar=None, rpar=None,
            whitespace_after_import=cst.SimpleWhitespace(" "),
        )
        return updated_node.with_changes(module=_dotted_node(edit.new_module),
                                         names=_without_trailing_comma(migrated, names))

    def leave_SimpleStatementLine(self, original_node: cst.SimpleStatementLine,
                                  updated_node: cst.SimpleStatementLine):
        splits = [self.split_lines.pop(id(s)) for s in original_node.body if id(s) in self.split_lines]
        if not splits:
            return updated_node
        extra = [cst.SimpleStatementLine(body=[kept]) for kept in splits]
        return cst.FlattenSentinel([updated_node, *extra])

    def leave_SimpleStatementSuite(self, original_node: cst.SimpleStatementSuite,
                                   updated_node: cst.SimpleStatementSuite):
        body: list[cst.BaseSmallStatement] = []
        for original, updated in zip(original_node.body, updated_node.body):
            body.append(updated)
            kept = self.split_lines.pop(id(original), None)
            if kept is not None:
                body.append(kept)
        return updated_node.with_changes(body=body)


def _dotted_node(dotted: str) -> cst.Attribute | cst.Name:
    head, *rest = dotted.split(".")
    node: cst.Attribute | cst.Name = cst.Name(head)
    for part in rest:
        node = cst.Attribute(value=node, attr=cst.Name(part))
    return node


@functools.lru_cache(maxsize=64)
def _parsed_expression(text: str) -> cst.BaseExpression:
    """The few texts inserted (the device, `functools.partial(...)`) parsed once: LibCST nodes are
    immutable, so one may stand in several places."""
    return cst.parse_expression(text)


def _without_trailing_comma(chosen: list[cst.ImportAlias], every: list[cst.ImportAlias]) -> list[cst.ImportAlias]:
    """Keep the user's commas, but the last chosen alias ends like the original last one."""
    if not chosen:
        return chosen
    last_original = every[-1]
    chosen = list(chosen)
    if chosen[-1] is not last_original:
        trailing = last_original.comma
        if isinstance(trailing, MaybeSentinel):
            chosen[-1] = chosen[-1].with_changes(comma=MaybeSentinel.DEFAULT)
        else:
            chosen[-1] = chosen[-1].with_changes(comma=trailing)
    return chosen


class _Requote(cst.CSTTransformer):
    def __init__(self, quote: str, line: int) -> None:
        super().__init__()
        self.quote, self.line = quote, line

    def leave_SimpleString(self, original_node: cst.SimpleString, updated_node: cst.SimpleString) -> cst.SimpleString:
        if updated_node.quote[0] == self.quote:
            return updated_node
        value = updated_node.evaluated_value
        if not isinstance(value, str) or "\\" in updated_node.value or self.quote in value \
                or updated_node.prefix or len(updated_node.quote) != 1:
            raise PlanMismatch("a string inserted into an f-string cannot change its quotes", self.line)
        return updated_node.with_changes(value=f"{self.quote}{value}{self.quote}")


def _with_arguments(call: cst.Call, edit: CallEdit, device_value: cst.BaseExpression, layout: _Layout) -> cst.Call:
    """The call with its arguments edited. Where the arguments were split off only to end the line
    (`f(\n    x\n)`, black's layout of a line too long, with no trailing comma: `_hugged`), the new one joins
    their line if it fits in the line length, as black would put it; else it has a line of its own. A call
    with no argument whose `(` ends its line (split to hold a comment after the `)`) gets its argument on
    a line of its own after the `(`, one indentation deeper than the `)`. A one-line call the formatter splits
    (`_pushed_past`, `layout.split`) is split as it splits it (`_split`)."""
    whitespace = call.whitespace_before_args
    if layout.split:
        return _split(call, edit, device_value, layout)
    if not call.args and isinstance(whitespace, cst.ParenthesizedWhitespace):
        inner = whitespace.with_changes(last_line=cst.SimpleWhitespace(whitespace.last_line.value + layout.indent_unit))
        closing = cst.ParenthesizedWhitespace(indent=whitespace.indent, last_line=whitespace.last_line)
        args = _edit_arguments(call, edit, device_value, cst.SimpleWhitespace(" "))
        args[-1] = args[-1].with_changes(whitespace_after_arg=closing)
        return call.with_changes(whitespace_before_args=inner, args=args)
    if _hugged(call) and layout.block_indent is not None:  # (unknown in a fragment re-printed whole)
        joined = _edit_arguments(call, edit, device_value, cst.SimpleWhitespace(" "))
        width = _line_width(whitespace, joined, layout)
        if width is not None and width <= layout.line_length:
            return call.with_changes(args=joined)
        if width is not None:
            return call.with_changes(args=_one_a_line(joined, whitespace))
    return call.with_changes(args=_edit_arguments(call, edit, device_value, _argument_separator(call)))


def _split(call: cst.Call, edit: CallEdit, device_value: cst.BaseExpression, layout: _Layout) -> cst.Call:
    """A one-line call split as black splits a line too long at its last brackets: the arguments on a line
    of their own one indentation deeper, the `)` back at the statement's indentation; one a line with a
    trailing comma where they do not fit there either."""
    inner = cst.ParenthesizedWhitespace(indent=True, last_line=cst.SimpleWhitespace(layout.indent_unit))
    closing = cst.ParenthesizedWhitespace(indent=True, last_line=cst.SimpleWhitespace(""))
    hugged = call.with_changes(whitespace_before_args=inner, args=[
        *call.args[:-1], call.args[-1].with_changes(whitespace_after_arg=closing)] if call.args else [])
    joined = _edit_arguments(hugged, edit, device_value, cst.SimpleWhitespace(" "))
    if not call.args:
        joined[-1] = joined[-1].with_changes(whitespace_after_arg=closing)
    width = _line_width(inner, joined, layout)
    if width is None or width <= layout.line_length:
        return hugged.with_changes(args=joined)
    return hugged.with_changes(args=_one_a_line(joined, inner))


def _one_a_line(args: list[cst.Arg], before: cst.BaseParenthesizableWhitespace) -> list[cst.Arg]:
    """Hugged arguments too long for their line, as black lays them out: one a line, at the indentation of
    the first, with a trailing comma, the `)` where it was."""
    assert isinstance(before, cst.ParenthesizedWhitespace)  # `_hugged` said so
    line = cst.ParenthesizedWhitespace(indent=before.indent, last_line=before.last_line)
    laid = [arg.with_changes(comma=cst.Comma(whitespace_after=line)) for arg in args[:-1]]
    last = args[-1]
    return [*laid, last.with_changes(comma=cst.Comma(whitespace_after=last.whitespace_after_arg),
                                     whitespace_after_arg=cst.SimpleWhitespace(""))]


def _hugged(call: cst.Call) -> bool:
    """`f(\n    a, b\n)`: the arguments on one line of their own, no comment, no trailing comma."""
    args, before = call.args, call.whitespace_before_args
    if not args or not isinstance(before, cst.ParenthesizedWhitespace) or before.first_line.comment is not None:
        return False
    last, closing = args[-1], args[-1].whitespace_after_arg
    between = [arg.comma.whitespace_after for arg in args[:-1] if isinstance(arg.comma, cst.Comma)]
    return isinstance(last.comma, MaybeSentinel) and isinstance(closing, cst.ParenthesizedWhitespace) \
        and closing.first_line.comment is None \
        and len(between) == len(args) - 1 and all(isinstance(w, cst.SimpleWhitespace) for w in between)


def _line_width(before: cst.BaseParenthesizableWhitespace, args: list[cst.Arg], layout: _Layout) -> int | None:
    """The width of the arguments' line after the `(`; None where they do not make one line (an argument
    spans lines: left as it was laid out) or the indentation around is not known."""
    if layout.block_indent is None or not isinstance(before, cst.ParenthesizedWhitespace):
        return None
    printer = cst.Module(body=[])
    text = "".join(printer.code_for_node(arg) for arg in args[:-1])
    text += printer.code_for_node(args[-1].with_changes(whitespace_after_arg=cst.SimpleWhitespace("")))
    if "\n" in text or "\r" in text:
        return None
    return len((layout.block_indent if before.indent else "") + before.last_line.value) + len(text)


def _edit_arguments(call: cst.Call, edit: CallEdit, device_value: cst.BaseExpression,
                    separator: cst.BaseParenthesizableWhitespace) -> list[cst.Arg]:
    args = list(call.args)
    # Positional arguments, `*args` included, come before any keyword: the device keyword goes after them.
    positional_count = sum(1 for a in args if a.keyword is None and a.star != "**")
    for i, name in enumerate(edit.keywords_for_positionals):
        args[i] = args[i].with_changes(
            keyword=cst.Name(name),
            equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                  whitespace_after=cst.SimpleWhitespace("")),
        )
    if edit.device_keyword is not None:
        device_arg = cst.Arg(
            value=device_value, keyword=cst.Name(edit.device_keyword),
            equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                  whitespace_after=cst.SimpleWhitespace("")),
        )
        position = positional_count
    else:
        device_arg = cst.Arg(value=device_value)
        position = edit.device_position or 0
    args = _insert_argument(args, position, device_arg, separator)
    for keyword, text in edit.added_keywords:
        tight = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
        added = cst.Arg(value=_parsed_expression(text), keyword=cst.Name(keyword), equal=tight)
        args = _insert_argument(args, len(args), added, separator)
    return args


def _argument_separator(call: cst.Call) -> cst.BaseParenthesizableWhitespace:
    """What goes after the comma of an inserted argument: in a call laid out one argument per line (a
    line break after the `(` and after every comma between the arguments), a line break and the
    indentation of the line after the `(`, without the comments there; else one space (a call aligned
    on its `(`, or with several arguments on a line, keeps its lines: the device shares one)."""
    args = call.args
    between = [arg.comma.whitespace_after for arg in args[:-1] if isinstance(arg.comma, cst.Comma)]
    layout = [call.whitespace_before_args, *between]
    if not args or len(between) != len(args) - 1 \
            or not all(isinstance(w, cst.ParenthesizedWhitespace) for w in layout):
        return cst.SimpleWhitespace(" ")
    line = cast(cst.ParenthesizedWhitespace, layout[0])
    return cst.ParenthesizedWhitespace(indent=line.indent, last_line=line.last_line)


def _insert_argument(args: list[cst.Arg], position: int, new: cst.Arg,
                     separator: cst.BaseParenthesizableWhitespace) -> list[cst.Arg]:
    # The user's line breaks and comments stay exactly where they were: the new argument shares a line
    # with its neighbour, or has a line of its own where every argument has one (`separator`).
    if position < len(args):
        args.insert(position, new.with_changes(comma=cst.Comma(whitespace_after=separator)))
        return args
    if args:  # appending after the last argument
        last = args[-1]
        if isinstance(last.comma, MaybeSentinel):  # what stood before `)` (a space, a comment) stays there
            args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=separator),
                                         whitespace_after_arg=cst.SimpleWhitespace(""))
            args.append(new.with_changes(whitespace_after_arg=last.whitespace_after_arg))
        elif isinstance(separator, cst.ParenthesizedWhitespace) \
                and isinstance(last.comma.whitespace_after, cst.ParenthesizedWhitespace):
            # One argument per line, with a trailing comma: a comment after it stays on its line, and
            # the new argument ends the way the last one did (its comma, the line break before `)`).
            closing = last.comma.whitespace_after
            args[-1] = last.with_changes(comma=last.comma.with_changes(
                whitespace_after=closing.with_changes(indent=separator.indent, last_line=separator.last_line)))
            args.append(new.with_changes(comma=cst.Comma(whitespace_after=cst.ParenthesizedWhitespace(
                indent=closing.indent, last_line=closing.last_line))))
        else:  # keep the user's trailing comma (and its line break) after the new last argument
            args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=separator))
            args.append(new.with_changes(comma=last.comma))
        return args
    return [new]


__all__ = ["PlanMismatch", "apply_plan"]
