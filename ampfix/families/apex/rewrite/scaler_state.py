"""The sub-rewrites of apex's loss scaler outside the training step: `amp.state_dict()` and
`amp.load_state_dict(...)` -> the scaler's (what is loaded goes through a helper that also reads apex's format), and
apex's private loss scale read -> `scaler.get_scale()`."""

from __future__ import annotations

import ast

from ampfix.core.locations import first_line
from ampfix.families.apex import rules
from ampfix.families.apex.rewrite.shape import _call_of
from ampfix.families.apex.rewrite.statements import _whole_lines_only
from ampfix.families.apex.rewrite.sub_rewrite import _Rewrite
from ampfix.families.apex.rewrite.tree import _last_line
from ampfix.families.apex.rewrite.vocabulary import NotMechanical
from ampfix.families.apex.scaler_settings import settings_note
from ampfix.syntax.bindings import Scope


def _rewrite_state(rw: _Rewrite) -> None:
    """`amp.state_dict()` / `amp.load_state_dict(...)` -> the scaler's; what is loaded goes through a helper that
    also reads apex's format."""
    amp, index = rw.shape.amp, rw.tree.index
    helper = None
    for use in rw.shape.states:
        if use.ref.role != "call" or len(use.ref.parts) != 2:
            raise NotMechanical("state_dict/load_state_dict is not called directly")
        start, end = index.span(use.ref.node)
        method = use.ref.parts[1]
        if method == "state_dict":
            rw.splices.append((start, end, f"{rw.shape.scaler}.{method}"))
            rw.messages[id(use.ref)] = (
                f"`{amp}.state_dict` -> `{rw.shape.scaler}.state_dict`: checkpoints now hold GradScaler's format "
                f"{rules.SCALER_STATE_KEYS}, not apex's {rules.APEX_STATE_KEYS}")
            continue
        helper = helper or _scaler_state_helper(rw, use.ref.scope)
        call = _call_of(use)
        if len(call.args) != 1 or call.keywords or isinstance(call.args[0], ast.Starred):
            raise NotMechanical("load_state_dict is not given one state")
        state_start, state_end = index.span(call.args[0])
        around = index.text[end:state_start] + index.text[state_end:index.span(call)[1]]
        if "#" in around:
            raise NotMechanical("a comment sits inside the parentheses of load_state_dict")
        rw.splices.append((start, state_start, f"{rw.shape.scaler}.load_state_dict({helper[0]}("))
        rw.splices.append((state_end, index.span(call)[1], "))"))
        rw.messages[id(use.ref)] = (
            f"`{amp}.load_state_dict(state)` -> `{rw.shape.scaler}.load_state_dict({helper[0]}(state))`: `{helper[0]}` "
            f"({'added at module level' if helper[1] else 'already in the module'}) also reads the format "
            f"apex.amp.state_dict() wrote ({rules.APEX_STATE_KEYS}) into GradScaler's, with "
            "apex's dynamic scaling: old apex checkpoints load")


def _scaler_state_helper(rw: _Rewrite, scope: Scope) -> tuple[str, bool]:
    """The name of the module-level helper that turns an apex checkpoint's state into GradScaler's, and whether
    it is added: one already in the module (same code, any name, bound once and seen from `scope`) is reused;
    else it goes before the top-level statement that holds the function, or before initialize's in a script."""
    engine, shape = rw.tree.engine, rw.shape
    for statement in engine.tree.body:
        if isinstance(statement, ast.FunctionDef) and len(scope.lookup(statement.name)[1]) == 1 \
                and scope.lookup(statement.name)[0] is engine.module_scope:
            same = rules.SCALER_STATE_HELPER.format(name=statement.name, nl="\n")
            if ast.dump(statement) == ast.dump(ast.parse(same).body[0]):
                return statement.name, False
    name = engine.free_name(rules.SCALER_STATE_HELPER_NAME)
    text = rules.SCALER_STATE_HELPER.format(name=name, nl=shape.newline) + shape.newline * 2
    index = rw.tree.index
    if isinstance(shape.function, ast.Module):  # a script: with the scaler that replaces initialize (one splice there)
        start, end, created = next(s for s in rw.splices if s[0] == index.line_start(shape.init_statement.lineno))
        rw.splices.remove((start, end, created))
        rw.splices.append((start, end, shape.newline * 2 + text + created))
    else:
        top: ast.AST = shape.function
        while (above := rw.tree.parent(top)) is not engine.tree:
            assert above is not None  # the function is in the module
            top = above
        assert isinstance(top, ast.stmt)
        at = index.line_start(first_line(top))
        rw.splices.append((at, at, text))
    return name, True


def _rewrite_scale_reads(rw: _Rewrite) -> None:
    """apex's private loss scale read, `amp._amp_state.loss_scalers[0]._loss_scale` (or `.loss_scale()`), ->
    `scaler.get_scale()`, the GradScaler's twin (one scaler: index 0 only). Anything else of `_amp_state`, a
    write included, holds the rewrite back."""
    tree, index = rw.tree, rw.tree.index
    for use in rw.shape.scale_reads:
        subscript = use.ref.parent
        read = tree.parent(subscript)
        if not (isinstance(subscript, ast.Subscript) and subscript.value is use.ref.node
                and isinstance(subscript.slice, ast.Constant) and subscript.slice.value == 0
                and isinstance(read, ast.Attribute) and isinstance(read.ctx, ast.Load)
                and read.attr in rules.LOSS_SCALE_READS):
            raise NotMechanical("apex's private `_amp_state` is used otherwise than reading loss_scalers[0]'s scale")
        whole: ast.expr = read
        if read.attr == "loss_scale":
            call = tree.parent(read)
            if not (isinstance(call, ast.Call) and call.func is read and not call.args and not call.keywords):
                raise NotMechanical("loss_scalers[0].loss_scale is not called")
            whole = call
        start, end = index.span(whole)
        rw.splices.append((start, end, f"{rw.shape.scaler}.get_scale()"))
        rw.messages[id(use.ref)] = (f"apex's private loss scale `{tree.text(whole)}` -> `{rw.shape.scaler}.get_scale()`"
                                    " "
                                    "(the GradScaler updates its scale in update(), apex did in scale_loss)")


def _rewrite_scaler_settings(rw: _Rewrite) -> None:
    """apex's loss scaler set through `_amp_state` right after initialize (`loss_scale.settings_beside_initialize`):
    the statements go, their values given to the GradScaler made in initialize's place (`_Rewrite.scaler_args`)."""
    settings, index = rw.shape.scaler_settings, rw.tree.index
    if settings is None:
        return
    for statement in settings.statements:
        _whole_lines_only(rw, statement)
    rw.splices.append((*index.removal(settings.statements[0].lineno, _last_line(settings.statements[-1])), ""))
    for use in settings.uses:
        rw.messages[id(use.ref)] = (f"{settings_note(list(settings.settings))} -> given to the GradScaler made where "
                                    "initialize was")
