"""Every use of a deprecated name: resolved, decided, settled by group, recorded.

Uses that go through one deprecated import binding move together or not at all: one use that cannot
be rewritten (or that a comment suppresses) holds the others and the import back. The settlement is a
fact of the module (`ModuleContext.fact`): the import planner reads it before the uses are recorded.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace

from ampfix.core.plan import ChainEdit, Edit
from ampfix.engine.planners.decide import Decision, Use, decide
from ampfix.engine.planners.suppressed import suppress_uses
from ampfix.syntax.bindings import ChainRef, dotted_parts
from ampfix.syntax.context import ModuleContext, Sink

FUNCTOOLS = "functools"
MODULE_DEVICE = "module_device"


def resolve_use(context: ModuleContext, ref: ChainRef) -> Use | None:
    """The deprecated name `ref` spells through an import, or None."""
    family = context.family
    # A binding in a branch the target torch never runs does not reach a use it runs.
    live = context.judge.dead(ref.guards) is None
    found = context.resolve(ref.node, ref.scope, within=family.owns, live=live)
    if found is None or family.deprecated_root(found.qname) is None:
        return None
    binding = found.binding
    through_binding = family.deprecated_root(binding.qname or "") is not None
    if through_binding:
        imported = family.symbol(binding.qname or "")
        if imported is not None and imported[2] is None:
            return None  # a name with no twin stays imported as it is; its import line is reported
    imports = [b for b in found.bindings if b.kind == "import" and family.owns(b.qname)]
    conflicting = len({b.qname for b in imports}) > 1 or any(
        b.kind == "other" or (b.kind == "import" and not family.owns(b.qname)) for b in found.bindings
    )
    group = (id(found.scope), ref.parts[0]) if through_binding else None
    return Use(ref, found.qname, binding, group, conflicting)


@dataclass
class Settlement:
    decided: list[tuple[Use, Decision]]
    # The groups held back: by a use that cannot be rewritten (that use), or by a suppression comment (why).
    blocked: dict[tuple[int, str], Use] = field(default_factory=dict)
    suppressed: dict[tuple[int, str], str] = field(default_factory=dict)


def settled_uses(context: ModuleContext) -> Settlement:
    """Every use decided, the suppressed ones taken out, each group moved whole or held whole."""
    uses = [use for ref in context.walker.chains if ref.parts[0] in context.heads
            if (use := resolve_use(context, ref)) is not None]
    decided = [(use, decide(context, use)) for use in uses]
    decided, suppressed = suppress_uses(context, decided)
    settlement = Settlement([], suppressed=suppressed)
    for use, decision in decided:
        if use.group is not None and decision.edit is None and use.group not in settlement.blocked:
            settlement.blocked[use.group] = use
    for use, decision in decided:
        settlement.decided.append((use, _settle(settlement, use, decision)))
    return settlement


def _settle(settlement: Settlement, use: Use, decision: Decision) -> Decision:
    blocker = settlement.blocked.get(use.group) if use.group else None
    suppressed = settlement.suppressed.get(use.group) if use.group else None
    if blocker is not None and decision.edit is not None:
        return replace(decision, edit=None, fixable=False, unsafe=False, dtype_edits=(), message=(
            f"left: `{use.ref.parts[0]}` is also used on line {blocker.ref.node.lineno} "
            "in a way that cannot be rewritten"))
    if suppressed is not None and decision.edit is not None:
        return replace(decision, edit=None, fixable=False, unsafe=False,
                       message=f"left: `{use.ref.parts[0]}` is {suppressed}")
    return decision


def record_uses(context: ModuleContext, sink: Sink) -> None:
    """The settled uses' findings, each with its edits and the head statements it needs."""
    for use, decision in context.fact(settled_uses).decided:
        edit = decision.edit
        edits: tuple[Edit, ...] = ()
        needs: set[str] = set()
        if edit is not None and edit.changes_text:
            node = use.ref.node
            edits = (sink.edit(node, type(node).__name__, ".".join(use.ref.parts), edit),
                     *dtype_edits(sink, decision.dtype_edits))
            if edit.partial_args is not None:
                needs.add(FUNCTOOLS)
            if decision.module_device:
                needs.add(MODULE_DEVICE)
        finding = sink.finding(use.ref.node, decision.code, decision.message, fixable=decision.fixable,
                               unsafe=decision.unsafe, will_fix=edit is not None, suggestion=decision.suggestion)
        sink.add((finding,), edits, frozenset(needs))


def dtype_edits(sink: Sink, respelled: tuple[tuple[ast.expr, str], ...]) -> tuple[Edit, ...]:
    """The dtype arguments respelled with a call moved to the CPU (`torch.float16` -> `torch.bfloat16`)."""
    return tuple(sink.edit(value, type(value).__name__, ".".join(dotted_parts(value) or ()),
                           ChainEdit(new_dotted=spelled)) for value, spelled in respelled)
