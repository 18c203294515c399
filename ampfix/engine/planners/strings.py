"""String literals that name deprecated paths: dotted paths (`mock.patch("torch.cuda.amp.X")`, an
unsafe fix), a state function's name given with the `torch` module (`mock.patch.object(torch,
"set_autocast_cpu_enabled")`, `getattr(torch, ...)`: reported) and string annotations
(`"torch.cuda.amp.GradScaler | None"`, resolved like code)."""

from __future__ import annotations

import ast
import re

from ampfix.core.locations import literal_with
from ampfix.engine.planners.decide import Decision, Use, decide
from ampfix.engine.planners.uses import resolve_use, settled_uses
from ampfix.core.rules import Rule
from ampfix.families import NO_TWIN_CODE
from ampfix.syntax.bindings import ChainRef, StringRef, dotted_parts
from ampfix.syntax.context import ModuleContext, Sink

_DOTTED_PATH = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def plan_strings(context: ModuleContext, sink: Sink) -> None:
    for ref in context.walker.strings:
        if ref.in_annotation:
            _string_annotation(context, sink, ref)
        elif _DOTTED_PATH.fullmatch(ref.value) and context.family.deprecated_root(ref.value):
            _string_path(context, sink, ref)
        elif ref.value.isidentifier() and isinstance(ref.parent, ast.Call):
            _attribute_name(context, sink, ref, ref.parent)


def _attribute_name(context: ModuleContext, sink: Sink, ref: StringRef, call: ast.Call) -> None:
    """`getattr(torch, "get_autocast_gpu_dtype")`, `mock.patch.object(torch, "set_autocast_cpu_enabled")`,
    `monkeypatch.setattr(torch, "...", ...)`: a positional string right after an argument that is the module a
    deprecated name outside the deprecated namespaces lies in (a state function of `torch`) names that function as
    its dotted path would, and is reported as one."""
    positions = [i for i, arg in enumerate(call.args) if arg is ref.node]
    if not positions or positions[0] == 0:
        return
    module = context.resolve_value(call.args[positions[0] - 1], ref.scope)
    path = f"{module}.{ref.value}"
    if module is None or path not in context.family.deprecated_names:
        return
    symbol = context.family.symbol(path)
    if symbol is not None and symbol[2] is not None:
        _state_function_path(sink, ref, path, symbol[2].new, symbol[1].code, symbol[2].device,
                             (f"`{ast.unparse(call.func)}(...)` names", " by its attribute name"))


def _string_path(context: ModuleContext, sink: Sink, ref: StringRef) -> None:
    path = ref.value
    symbol = context.family.symbol(path)
    if symbol is None or symbol[2] is None or symbol[0] != path:
        code = symbol[1].code if symbol and context.family.exists(path) else NO_TWIN_CODE
        sink.add_finding(ref.node, code, f"string names `{path}`, which has no {context.family.twin_namespace} twin",
                         fixable=False)
        return
    new_path = symbol[2].new
    if path in context.family.deprecated_names:  # a state function: its twin takes the device
        _state_function_path(sink, ref, path, new_path, symbol[1].code, symbol[2].device)
        return
    held = _code_held_back(context, ref, path, symbol[1])
    if held is not None:
        sink.add_finding(ref.node, symbol[1].code, f"string names the deprecated `{path}`; left: {held}",
                         fixable=False, suggestion=f'"{new_path}"')
        return
    literal = literal_with(context.lines, ref.node, [(0, len(path), new_path)])
    fixable = literal is not None
    unsafe_fixes = context.options.unsafe_fixes
    edits = (sink.edit(ref.node, "SimpleString", path, literal),) if literal is not None and unsafe_fixes else ()
    message = (f"string names the deprecated `{path}`: once the code uses `{new_path}`, a patch or "
               f"lookup of this path no longer reaches it")
    if fixable and not unsafe_fixes:
        message += " (an unsafe fix exists: --unsafe-fixes)"
    sink.add((sink.finding(ref.node, symbol[1].code, message, fixable=fixable, unsafe=True,
                           will_fix=fixable and unsafe_fixes, suggestion=f'"{new_path}"'),), edits)


def _code_held_back(context: ModuleContext, ref: StringRef, path: str, rule: Rule) -> str | None:
    """Why the code a patch or lookup of `path` reaches keeps the old name, or None. The string must do what
    that code does: rewritten alone, `mock.patch("torch.amp.autocast")` no longer reaches a
    `torch.cuda.amp.autocast()` the target (the declared floor) or a report holds back, and a test that passed
    goes red. Held back as code is (`ModuleContext.hold_back`: the rule selection, the target, the guards), or
    where a use of the path (or a name below it) in this module is left."""
    reason = context.hold_back(rule, ref.guards)
    if reason is not None:
        return reason
    for use, decision in context.fact(settled_uses).decided:
        if decision.edit is None and (use.full == path or use.full.startswith(path + ".")) \
                and context.judge.dead(use.ref.guards) is None:
            return f"the code it names stays (`{use.full}` on line {use.ref.node.lineno} is left)"
    return None


def _state_function_path(sink: Sink, ref: StringRef, path: str, new_path: str, code: str, device: str | None,
                         said: tuple[str, str] = ("string names", "")) -> None:
    """`mock.patch("torch.get_autocast_gpu_dtype")`: reported, never rewritten, not even as an unsafe fix. The
    twin is one function for every device (`torch.is_autocast_enabled` is also CUDA's own, not deprecated, check):
    a patch of its path would stand in for every device's state, not the one the old name read."""
    sink.add_finding(ref.node, code,
                     f"{said[0]} the deprecated `{path}`{said[1]}: once the code calls `{new_path}` with the device "
                     f"(\"{device}\"), a patch or lookup of this path no longer reaches it; `{new_path}` serves every "
                     "device, so the string is not rewritten", fixable=False, suggestion=f'"{new_path}"')


def _string_annotation(context: ModuleContext, sink: Sink, ref: StringRef) -> None:
    """`"torch.cuda.amp.GradScaler | None"`: each dotted name inside is resolved like code."""
    value = ref.value
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
        if parts is None or parts[0] not in context.heads:
            continue
        as_code = ChainRef(node, parts, ref.scope, "type", None, ref.guards, in_string=True)
        use = resolve_use(context, as_code)
        if use is None:
            continue
        decision = decide(context, use)
        if use.group is not None and decision.edit is not None:
            continue  # through a deprecated import: the import's rewrite covers it
        decided.append((use, decision))
        if decision.edit is not None and decision.edit.new_dotted is not None:
            replacements.append((offset + node.col_offset, offset + (node.end_col_offset or node.col_offset),
                                 decision.edit.new_dotted))
    if not decided:
        return
    literal = literal_with(context.lines, ref.node, replacements)
    reason = next((decision.message for _, decision in decided if decision.edit is None), None)
    if literal is None:
        reason = reason or "the literal has escapes, a prefix or several lines"
    findings = []
    for use, decision in decided:
        written = ".".join(use.ref.parts)
        if reason:
            message = f"string annotation names `{written}`; left: {reason}"
            findings.append(sink.finding(ref.node, decision.code, message, fixable=False,
                                         suggestion=decision.suggestion))
        else:
            assert decision.edit is not None
            findings.append(sink.finding(ref.node, decision.code,
                                         f"string annotation `{written}` -> `{decision.edit.new_dotted}`",
                                         fixable=True, will_fix=True))
    # One literal: its findings and its edit stand or fall together (a comment suppressing one holds all).
    edits = (sink.edit(ref.node, "SimpleString", value, literal),) if not reason and literal is not None else ()
    sink.add(tuple(findings), edits)
