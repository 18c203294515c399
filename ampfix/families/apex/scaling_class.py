"""A set-up split across modules where the module that calls initialize builds, after it, an object of a class of
the other module whose method scales the loss (DeepLearningExamples' GNMT: `Seq2SeqTrainer.__init__` calls
initialize, then builds `AMPOptimizer`, whose `step` holds scale_loss and whose `__init__` sets apex's loss scaler
through its private `_amp_state`): what each half's finding says of that class and of those settings. Nothing is
rewritten from here (docs/apex.md, *Set-ups split across modules*): the notes say what the rewrite across modules
would have to make and does not.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

from ampfix.core.project import ProjectModules
from ampfix.families.apex import rules
from ampfix.syntax.bindings import ChainRef, Scope

Parent = Callable[[ast.AST], "ast.AST | None"]
ResolveValue = Callable[[ast.expr, Scope], "str | None"]

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class Setting:
    """One write of a setting of apex's first loss scaler."""

    line: int
    attribute: str  # apex's (`_loss_scale`)
    value: str  # as the code spells it


def loss_scaler_settings(refs: list[ChainRef], parent: Parent, text: Callable[[ast.AST], str]) -> list[Setting] | None:
    """The settings the uses of `loss_scalers` (`refs`, every one in the module) write to apex's first loss scaler,
    directly (`loss_scalers[0]._loss_scale = v`) or through a local name bound to it once in a function (`s =
    loss_scalers[0]`, then only `s.<attr> = v` there); None where there is none, or any use is something else (a
    read of the scale is the one-file rewrite's, `scaler_state`)."""
    settings: list[Setting] = []
    for ref in refs:
        subscript = ref.parent
        if not (isinstance(subscript, ast.Subscript) and subscript.value is ref.node
                and isinstance(subscript.slice, ast.Constant) and subscript.slice.value == 0):
            return None
        above = parent(subscript)
        written = _written(above, parent, text)
        if written is not None:
            settings.append(written)
            continue
        if not (isinstance(above, ast.Assign) and above.value is subscript and len(above.targets) == 1
                and isinstance(above.targets[0], ast.Name)):
            return None
        name = above.targets[0].id
        function = _function_of(above, parent)
        if function is None:
            return None
        for node in ast.walk(function):
            if not isinstance(node, ast.Name) or node.id != name or node is above.targets[0]:
                continue
            written = _written(parent(node), parent, text) if isinstance(node.ctx, ast.Load) else None
            if written is None:
                return None
            settings.append(written)
        if any(isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names for n in ast.walk(function)):
            return None
    return sorted(settings, key=lambda s: s.line) or None


def _written(node: ast.AST | None, parent: Parent, text: Callable[[ast.AST], str]) -> Setting | None:
    """`X.<attr> = value`, the attribute the one target of a plain assignment (the value as the code spells it)."""
    statement = parent(node) if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) else None
    if not (isinstance(node, ast.Attribute) and isinstance(statement, ast.Assign) and statement.targets == [node]):
        return None
    return Setting(statement.lineno, node.attr, text(statement.value))


def _function_of(node: ast.AST, parent: Parent) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    above = parent(node)
    while above is not None and not isinstance(above, _FUNCTIONS):
        above = parent(above)
    return above if isinstance(above, _FUNCTIONS) else None


def settings_note(settings: list[Setting]) -> str:
    """What the settings are to a GradScaler (`rules.LOSS_SCALER_SETTINGS`), and which have no twin."""
    lines = sorted({s.line for s in settings})
    shown = ", ".join(f"`{s.attribute} = {s.value}`" for s in settings)
    mapped = [f"{rules.LOSS_SCALER_SETTINGS[s.attribute]}={s.value}" for s in settings
              if s.attribute in rules.LOSS_SCALER_SETTINGS]
    unmapped = [f"`{s.attribute}`" for s in settings if s.attribute not in rules.LOSS_SCALER_SETTINGS]
    where = f"line {lines[0]}" if len(lines) == 1 else f"lines {', '.join(map(str, lines))}"
    note = f"apex's loss scaler is set through its private `_amp_state.loss_scalers[0]` on {where} ({shown})"
    attributes = {s.attribute for s in settings}
    if mapped:
        note += f": a GradScaler's `{', '.join(mapped)}`"
        why = [_WHY[a] for a in rules.LOSS_SCALER_SETTINGS if a in attributes]
        note += f" ({'; '.join(why)})"
    if unmapped:
        note += f"; {', '.join(unmapped)} {'has' if len(unmapped) == 1 else 'have'} no GradScaler twin"
    return note


_WHY = {
    "_loss_scale": "the scale it starts from, where it is set before the first loss is scaled",
    "_scale_seq_len": ("apex doubled its scale after that many clean updates and halved it on inf/NaN gradients, as "
                       "a GradScaler does with its default factors; apex counted each scale_loss as an update, a "
                       "GradScaler counts each step: they differ with gradient accumulation"),
}


def scaling_class(holder: ast.AST | None, parent: Parent, module: ast.Module) -> tuple[ast.ClassDef, str] | None:
    """The module-level class and the plain method (directly in its body, undecorated: it takes the object) that
    hold `holder`, or None (a staticmethod's object is not the one built)."""
    method = _function_of(holder, parent) if holder is not None else None
    klass = parent(method) if method is not None else None
    if isinstance(klass, ast.ClassDef) and klass in module.body and method is not None \
            and not method.decorator_list and method.args.args:
        return klass, method.name
    return None


def step_class_note(project: ProjectModules, scale_losses: list[ChainRef], parent: Parent,
                    module: ast.Module) -> str:
    """In the module holding scale_loss and no initialize: the class whose method scales the loss, where the project
    builds it and what the rewrite across modules does not make ("" where scale_loss is in no method of a class)."""
    found = {scaling_class(ref.node, parent, module) for ref in scale_losses}
    only = found.pop() if len(found) == 1 else None
    if only is None:
        return ""
    klass, method = only
    calls = project.constructions(klass.name)
    if calls is None or not calls.seen or calls.escape is not None:
        return ""  # built otherwise (a registry, by name): who holds the object cannot be told
    # the project's files are read up to the first construction given an argument by position
    built = f"built at {', '.join(calls.seen[:3])}" + (" (at least)" if calls.positional is not None else "")
    return (f"; `{klass.name}.{method}` scales the loss, and the class is {built}: the rewrite across modules takes "
            "a set-up function that returns `model, optimizer` to the module scaling the loss, not a class of this "
            f"module that the set-up's module builds (by hand: {_by_hand(klass.name, method)}, initialize removed "
            "where the class is built, and the forward passes whose loss reaches it under autocast there)")


def _by_hand(klass: str, method: str) -> str:
    return (f"a GradScaler made in `{klass}.__init__` and used in `{klass}.{method}` (scale, `unscale_` before "
            "clipping, step, update)")


def set_up_class_note(project: ProjectModules, init: ChainRef, parent: Parent, resolve: ResolveValue) -> str:
    """In the module holding initialize and no scale_loss: the object built after initialize (a statement after it in
    its block) of a class of the project whose method holds a scale_loss, or ""."""
    statement = parent(init.parent) if init.parent is not None else None
    block = parent(statement) if statement is not None else None
    body = getattr(block, "body", None)
    if not isinstance(statement, ast.stmt) or not isinstance(body, list) or statement not in body:
        return ""
    places = project.uses(rules.SCALE_LOSS.title)
    for later in body[body.index(statement) + 1:]:
        if not (isinstance(later, ast.Assign) and isinstance(later.value, ast.Call) and len(later.targets) == 1):
            continue
        qname = resolve(later.value.func, init.scope)
        module, _, name = (qname or "").rpartition(".")
        file = project.file_of(module) if module else None
        tree = project.tree_of(file) if file is not None else None
        if tree is None:
            continue
        for place in places:
            head, _, line = place.rpartition(":")
            if head != file or not line.isdigit():
                continue
            klass = next((c for c in tree.body if isinstance(c, ast.ClassDef) and c.name == name
                          and c.lineno <= int(line) <= (c.end_lineno or 0)), None)
            method = next((m for m in (klass.body if klass is not None else []) if isinstance(m, _FUNCTIONS)
                           and m.lineno <= int(line) <= (m.end_lineno or 0)), None)
            if klass is not None and method is not None:
                kept = ast.unparse(later.targets[0])
                return (f"; the loss is scaled in `{name}.{method.name}` ({place}), an object of which is built on "
                        f"line {later.lineno} after initialize and kept as `{kept}`: the rewrite across modules takes "
                        "a set-up function that returns `model, optimizer` to the module scaling the loss, not an "
                        f"object of the other module built here (by hand: {_by_hand(name, method.name)}, initialize "
                        "removed here, and the forward passes whose loss reaches it under `torch.autocast(..., "
                        f"enabled=isinstance({kept}, {ast.unparse(later.value.func)}))`)")
    return ""
