"""apex's dynamic loss scaler set through its private state (`amp._amp_state.loss_scalers[0]._loss_scale = v`,
DeepLearningExamples' GNMT), read as the GradScaler arguments it is (`rules.LOSS_SCALER_SETTINGS`): for the findings
(AMP106, and the reason of a set-up left), and for the rewrite, where the settings directly follow initialize
(`rewrite.shape`)."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

from ampfix.families.apex import rules
from ampfix.syntax.bindings import ChainRef

Parent = Callable[[ast.AST], "ast.AST | None"]

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class Setting:
    """One write of a setting of apex's first loss scaler."""

    line: int
    attribute: str  # apex's (`_loss_scale`)
    value: str  # as the code spells it


@dataclass(frozen=True)
class Written:
    """What one use of `loss_scalers` writes, and the statements that do it (the binding of a name to the scaler
    included), in the order of the code."""

    settings: tuple[Setting, ...]
    statements: tuple[ast.stmt, ...]


def loss_scaler_settings(refs: list[ChainRef], parent: Parent, text: Callable[[ast.AST], str]) -> list[Setting] | None:
    """The settings the uses of `loss_scalers` (`refs`, every one in the module) write to apex's first loss scaler;
    None where there is none, or any use is something else (a read of the scale is the rewrite's, `scaler_state`)."""
    found = [written_by(ref, parent, text) for ref in refs]
    settings = [s for w in found if w is not None for s in w.settings]
    return sorted(settings, key=lambda s: s.line) if settings and None not in found else None


def written_by(ref: ChainRef, parent: Parent, text: Callable[[ast.AST], str]) -> Written | None:
    """What one use of `loss_scalers` writes to apex's first loss scaler, directly (`loss_scalers[0]._loss_scale =
    v`) or through a local name bound to it once in a function (`s = loss_scalers[0]`, then only `s.<attr> = v`
    there), or None where it is not only that."""
    subscript = ref.parent
    if not (isinstance(subscript, ast.Subscript) and subscript.value is ref.node
            and isinstance(subscript.slice, ast.Constant) and subscript.slice.value == 0):
        return None
    above = parent(subscript)
    direct = _written(above, parent, text)
    if direct is not None:
        return Written((direct,), (_statement(above, parent),))
    if not (isinstance(above, ast.Assign) and above.value is subscript and len(above.targets) == 1
            and isinstance(above.targets[0], ast.Name)):
        return None
    name = above.targets[0].id
    function = function_of(above, parent)
    if function is None or any(isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names
                               for n in ast.walk(function)):
        return None
    settings: list[Setting] = []
    statements: list[ast.stmt] = [above]
    for node in ast.walk(function):
        if not isinstance(node, ast.Name) or node.id != name or node is above.targets[0]:
            continue
        written = _written(parent(node), parent, text) if isinstance(node.ctx, ast.Load) else None
        if written is None:
            return None
        settings.append(written)
        statements.append(_statement(parent(node), parent))
    if not settings:
        return None
    order = sorted(range(len(statements)), key=lambda i: (statements[i].lineno, statements[i].col_offset))
    return Written(tuple(sorted(settings, key=lambda s: s.line)), tuple(statements[i] for i in order))


def _written(node: ast.AST | None, parent: Parent, text: Callable[[ast.AST], str]) -> Setting | None:
    """`X.<attr> = value`, the attribute the one target of a plain assignment (the value as the code spells it)."""
    statement = parent(node) if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) else None
    if not (isinstance(node, ast.Attribute) and isinstance(statement, ast.Assign) and statement.targets == [node]):
        return None
    return Setting(statement.lineno, node.attr, text(statement.value))


def _statement(attribute: ast.AST | None, parent: Parent) -> ast.stmt:
    statement = parent(attribute) if attribute is not None else None
    assert isinstance(statement, ast.Assign)  # _written
    return statement


def function_of(node: ast.AST, parent: Parent) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
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
                       "GradScaler counts each step: they differ with gradient accumulation; apex's scale stopped "
                       "growing at 2**24, a GradScaler's has no ceiling"),
}
