"""String literals that name deprecated paths: dotted paths (`mock.patch("torch.cuda.amp.X")`, an
unsafe fix) and string annotations (`"torch.cuda.amp.GradScaler | None"`, resolved like code)."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from ampfix.engine.analysis import NO_TWIN_CODE
from ampfix.syntax.bindings import ChainRef, StringRef, dotted_parts

if TYPE_CHECKING:
    from ampfix.engine.analysis import Analysis, Decision, Use

_DOTTED_PATH = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def plan_strings(analysis: Analysis) -> None:
    for ref in analysis.walker.strings:
        if ref.in_annotation:
            _string_annotation(analysis, ref)
        elif _DOTTED_PATH.fullmatch(ref.node.value) and analysis.family.deprecated_root(ref.node.value):
            _string_path(analysis, ref)


def _string_path(analysis: Analysis, ref: StringRef) -> None:
    path = ref.node.value
    symbol = analysis.family.symbol(path)
    if symbol is None or symbol[2] is None or symbol[0] != path:
        code = symbol[1].code if symbol and analysis.family.exists(path) else NO_TWIN_CODE
        analysis.add_finding(ref.node, code, f"string names `{path}`, which has no {analysis.family.twin_namespace} twin", fixable=False)
        return
    if analysis.suppressions.covers(ref.node.lineno, symbol[1].code):
        return
    new_path = symbol[2].new
    literal = literal_with(analysis.lines, ref.node, [(0, len(path), new_path)])
    fixable = literal is not None
    unsafe_fixes = analysis.options.unsafe_fixes
    if fixable and unsafe_fixes:
        analysis.add_edit(ref.node, "SimpleString", path, literal)
    message = (f"string names the deprecated `{path}`: once the code uses `{new_path}`, a patch or "
               f"lookup of this path no longer reaches it")
    if fixable and not unsafe_fixes:
        message += " (an unsafe fix exists: --unsafe-fixes)"
    analysis.add_finding(ref.node, symbol[1].code, message, fixable=fixable, unsafe=True,
                         will_fix=fixable and unsafe_fixes, suggestion=f'"{new_path}"')


def _string_annotation(analysis: Analysis, ref: StringRef) -> None:
    """`"torch.cuda.amp.GradScaler | None"`: each dotted name inside is resolved like code."""
    value = ref.node.value
    try:
        inner = ast.parse(value.strip(), mode="eval")
    except SyntaxError:
        return
    offset = len(value) - len(value.lstrip())
    inner_values = {id(n.value) for n in ast.walk(inner) if isinstance(n, ast.Attribute)}
    replacements: list[tuple[int, int, str]] = []
    decided: list[tuple[Use, Decision]] = []
    for node in ast.walk(inner):
        if id(node) in inner_values or not isinstance(node, (ast.Name, ast.Attribute)):
            continue
        parts = dotted_parts(node)
        if parts is None or parts[0] not in analysis.heads:
            continue
        as_code = ChainRef(node, parts, ref.scope, "type", None, ref.guards, in_string=True)
        use = analysis.resolve(as_code)
        if use is None:
            continue
        decision = analysis.decide(use)
        if use.group is not None and decision.edit is not None:
            continue  # through a deprecated import: the import's rewrite covers it
        decided.append((use, decision))
        if decision.edit is not None and decision.edit.new_dotted is not None:
            replacements.append((offset + node.col_offset, offset + node.end_col_offset, decision.edit.new_dotted))
    if not decided or any(analysis.suppressions.covers(ref.node.lineno, d.code) for _, d in decided):
        return  # one literal: suppressed as a whole
    literal = literal_with(analysis.lines, ref.node, replacements)
    reason = next((decision.message for _, decision in decided if decision.edit is None), None)
    if literal is None:
        reason = reason or "the literal has escapes, a prefix or several lines"
    for use, decision in decided:
        written = ".".join(use.ref.parts)
        if reason:
            analysis.add_finding(ref.node, decision.code, f"string annotation names `{written}`; left: {reason}",
                                 fixable=False, suggestion=decision.suggestion)
        else:
            assert decision.edit is not None
            analysis.add_finding(ref.node, decision.code,
                                 f"string annotation `{written}` -> `{decision.edit.new_dotted}`",
                                 fixable=True, will_fix=True)
    if not reason:
        analysis.add_edit(ref.node, "SimpleString", value, literal)


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
