"""Code already on torch.amp whose device is the literal "cuda", moved by a device target
(`--device cpu|auto`, `--device-expr`): the rules marked `device_target_only` (AMP006),
and calls that mean CUDA by giving no device (AMP008/AMP009: the device is inserted).

The same device, dtype and module-name decisions as for deprecated calls (the device policy,
`ampfix.families.torch_amp.device`); only the edit differs: the literal is replaced, nothing else moves.
"""

from __future__ import annotations

import ast

from ampfix.core.plan import CallEdit, ChainEdit, ValueEdit
from ampfix.core.rules import Rule, Target
from ampfix.engine.planners.uses import MODULE_DEVICE, dtype_edits
from ampfix.families.torch_amp.device import cpu_dtypes, site_device
from ampfix.syntax.bindings import ChainRef
from ampfix.syntax.context import ModuleContext, Sink

_TARGETED = "cuda"


def plan_device_literals(context: ModuleContext, sink: Sink) -> None:
    """Only under a device target: without one, "cuda" stays "cuda"."""
    if not context.options.retargets:
        return
    family = context.family
    table = {name: (rule, target) for rule in family.rules if rule.device_target_only
             for name, target in rule.symbols.items() if target is not None}
    if not table:
        return
    for ref in context.walker.chains:
        if ref.role != "call" or ref.in_string or ref.parts[0] not in context.heads:
            continue
        full = context.resolve_value(ref.node, ref.scope)
        if full not in table or not isinstance(ref.parent, ast.Call):
            continue
        rule, target = table[full]
        found = _device_literal(context, ref.parent, family.device_keywords)
        if found is None:
            if _lacks_device(ref.parent, rule, family.device_keywords):
                _plan_device_argument(context, sink, ref, rule, target, full)
            continue
        literal, quote = found
        call = f'`{full}(...)` with device "{_TARGETED}"'
        reason = context.hold_back(rule, ref.guards)
        site = reason if reason is not None else site_device(context, ref, target)
        if isinstance(site, str):
            sink.add_finding(literal, rule.code, f"{call} left: {site}", fixable=False)
            continue
        device, note, module_device = site
        if device[:1] in ('"', "'") and device[:1] != quote:
            device = quote + device[1:-1] + quote  # the literal's own quotes
        respelled, said = cpu_dtypes(context, ref, rule, target)
        edits = (sink.edit(literal, "SimpleString", _TARGETED, ValueEdit(device)), *dtype_edits(sink, respelled))
        details = "".join(f"; {text}" for text in said)
        finding = sink.finding(literal, rule.code, f"{call} -> device {device}{details}{note}", fixable=True,
                               will_fix=True)
        sink.add((finding,), edits, frozenset({MODULE_DEVICE}) if module_device else frozenset())


def _lacks_device(call: ast.Call, rule: Rule, keywords: tuple[str, ...]) -> bool:
    """Is this a call that means CUDA by giving no device (`torch.is_autocast_enabled()`, AMP008): the rule
    says where the device goes, and the call passes exactly the old positionals and no device keyword?"""
    shape = rule.shape
    return (shape is not None and shape.device_position is not None
            and not any(isinstance(arg, ast.Starred) for arg in call.args)
            and len(call.args) == len(shape.old_params)
            and not any(kw.arg is None or kw.arg in keywords for kw in call.keywords))


def _plan_device_argument(context: ModuleContext, sink: Sink, ref: ChainRef, rule: Rule, target: Target,
                          full: str) -> None:
    """The device target inserted where the rule's shape puts it."""
    shape = rule.shape
    assert shape is not None
    call = f"`{full}(...)` without a device (CUDA)"
    reason = context.hold_back(rule, ref.guards)
    site = reason if reason is not None else site_device(context, ref, target)
    if isinstance(site, str):
        sink.add_finding(ref.node, rule.code, f"{call} left: {site}", fixable=False)
        return
    device, note, module_device = site
    edit = ChainEdit(new_dotted=None, call=CallEdit(device, shape.device_position, shape.device_keyword, ()))
    edits = (sink.edit(ref.node, type(ref.node).__name__, ".".join(ref.parts), edit),)
    finding = sink.finding(ref.node, rule.code, f"{call} -> device {device}{note}", fixable=True, will_fix=True)
    sink.add((finding,), edits, frozenset({MODULE_DEVICE}) if module_device else frozenset())


def _device_literal(context: ModuleContext, call: ast.Call,
                    keywords: tuple[str, ...]) -> tuple[ast.Constant, str] | None:
    """The argument that gives the call its device, when it is a plain "cuda" literal, and its quote."""
    candidates = [kw.value for kw in call.keywords if kw.arg in keywords]
    if call.args and not isinstance(call.args[0], ast.Starred):
        candidates.append(call.args[0])
    for node in candidates:
        if isinstance(node, ast.Constant) and node.value == _TARGETED:
            text = context.index.text[slice(*context.index.span(node))]
            if text in (f'"{_TARGETED}"', f"'{_TARGETED}'"):  # one plain literal, not "cu" "da" nor r"cuda"
                return node, text[0]
    return None
