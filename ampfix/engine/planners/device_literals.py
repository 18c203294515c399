"""Code already on torch.amp whose device is the literal "cuda", moved by a device target
(`--device cpu|auto`, `--device-expr`): the rules marked `device_target_only` (AMP006).

The same device, dtype and module-name decisions as for deprecated calls (`Analysis.site_device`,
`Analysis.cpu_dtypes`); only the edit differs: the literal is replaced, nothing else moves.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from ampfix.engine.analysis import Use, ValueEdit

if TYPE_CHECKING:
    from ampfix.engine.analysis import Analysis

_TARGETED = "cuda"


def plan_device_literals(analysis: Analysis) -> None:
    family = analysis.family
    table = {name: (rule, target) for rule in family.rules if rule.device_target_only
             for name, target in rule.symbols.items() if target is not None}
    if not table:
        return
    for ref in analysis.walker.chains:
        if ref.role != "call" or ref.in_string or ref.parts[0] not in analysis.heads:
            continue
        full = analysis.resolve_value(ref.node, ref.scope)
        if full not in table or not isinstance(ref.parent, ast.Call):
            continue
        found = _device_literal(analysis, ref.parent, family.device_keywords)
        if found is None:
            continue
        literal, quote = found
        rule, target = table[full]
        if analysis.suppressions.covers(literal.lineno, rule.code):
            continue
        _, bindings = ref.scope.lookup(ref.parts[0])
        use = Use(ref, full, bindings[0], None, False)
        call = f'`{full}(...)` with device "{_TARGETED}"'
        reason = analysis.hold_back(rule, ref.guards)
        site = reason if reason is not None else analysis.site_device(use, rule, target)
        if isinstance(site, str):
            analysis.add_finding(literal, rule.code, f"{call} left: {site}", fixable=False)
            continue
        device, note, module_device = site
        if device.startswith('"') and quote == "'":
            device = "'" + device[1:-1] + "'"  # the file's own quotes
        dtype_edits, said = analysis.cpu_dtypes(use, rule, target)
        analysis.add_edit(literal, "SimpleString", _TARGETED, ValueEdit(device))
        analysis.add_dtype_edits(dtype_edits)
        analysis.needs_module_device |= module_device
        details = "".join(f"; {text}" for text in said)
        analysis.add_finding(literal, rule.code, f"{call} -> device {device}{details}{note}", fixable=True,
                             will_fix=True)


def _device_literal(analysis: Analysis, call: ast.Call,
                    keywords: tuple[str, ...]) -> tuple[ast.Constant, str] | None:
    """The argument that gives the call its device, when it is a plain "cuda" literal, and its quote."""
    candidates = [kw.value for kw in call.keywords if kw.arg in keywords]
    if call.args and not isinstance(call.args[0], ast.Starred):
        candidates.append(call.args[0])
    for node in candidates:
        if isinstance(node, ast.Constant) and node.value == _TARGETED:
            text = analysis.index.text[slice(*analysis.index.span(node))]
            if text in (f'"{_TARGETED}"', f"'{_TARGETED}'"):  # one plain literal, not "cu" "da" nor r"cuda"
                return node, text[0]
    return None
