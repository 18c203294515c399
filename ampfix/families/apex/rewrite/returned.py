"""The precondition stage: a set-up function that returns initialize's optimizer to its caller in the module (BERT's
run_glue.py: `init_optimizer_and_amp(...)` calls initialize under `if use_fp16:` and returns `model, optimizer,
scheduler` to `main`, whose training loop scales the loss and steps that optimizer): the reverse of `callees`.

The scaler lives in the module, as apex's state lived in `apex.amp` and as a set-up split across modules keeps it:
a disabled `scaler` bound at the module's top before the set-up function (what a run that never reaches initialize
steps through: a disabled scaler passes the loss and the step through), and initialize's statement becomes `global
scaler` / `scaler = torch.amp.GradScaler(...)` in its place, so the scaler is enabled exactly where initialize ran,
whatever `if`/`else` is around it. The caller reads the module's `scaler` after the call. Only where that means what
apex meant:

- the set-up function is a plain module-level function, named in the module only by one call in the own body of
  another module-level function (the caller), `T1, ..., Tn = set_up(...)`, each target a name; it ends with its one
  `return`, a tuple of as many names, returning the optimizer initialize was given (by that name, or the name it bound
  it to: apex returned the objects it was given, patched in place) at the position
  whose target the caller's scale_loss calls and steps are given: every optimizer stepped through the scaler is the
  one the set-up returned (where it is one initialize never saw, apex raised at scale_loss, where the scaler now
  steps it, a set-up error, not a path a program took);
- initialize is a statement of the set-up function's own body, or of the body of an `if P:` there, P a parameter
  of it that it never rebinds; then the caller gives the call an expression E for P (a name or attribute chain) that
  it does not assign after the call, and every scale_loss is under `if E:` (with its `else` the same loss's plain
  backward, collapsed as for a flag): where E is false the scaler is disabled, where it is true initialize ran;
- no other apex.amp use outside the caller; the name `scaler` is nowhere in the module (the module's scaler is bound
  there); torch imported at the module's top before the set-up function.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

from ampfix.families.apex import rules
from ampfix.families.apex.rewrite.callees import _mentions, _module_function
from ampfix.families.apex.rewrite.conditions import _parameter_chain, _stable, _stable_in_callees
from ampfix.families.apex.rewrite.tree import _Tree, _binds_otherwise, _chain, _name_stores
from ampfix.families.apex.rewrite.vocabulary import AmpUse, NotMechanical, SCALER, _lines
from ampfix.syntax.bindings import Scope


@dataclass(frozen=True)
class _Returned:
    """initialize in `set_up`, whose one caller steps the optimizer it returns."""

    set_up: ast.FunctionDef
    init: ast.Assign  # initialize's statement in `set_up`
    call: ast.Assign  # `T1, ..., Tn = set_up(...)` in the caller's own body
    caller: ast.FunctionDef
    condition: ast.expr | None  # E, the caller's expression for the `if P:` around initialize
    model_name: str  # the caller's names for the model and the optimizer the set-up returns
    opt_name: str
    scope: Scope  # the caller's


def returned_set_up(tree: _Tree, init: ast.Assign, arguments: Callable[[], tuple[ast.expr, ast.expr]],
                    others: list[AmpUse]) -> _Returned | None:
    """The shape above, where initialize is in a module-level function and every other apex.amp use (`others`) is in
    one other module-level function that names it; None where it is not that case (the other shapes decide);
    NotMechanical where it is, with the first condition that fails. `arguments`: initialize's model and optimizer."""
    set_up = tree.parent(init)
    guard = None
    if isinstance(set_up, ast.If) and init in set_up.body:
        guard, set_up = set_up, tree.parent(set_up)
    if not (others and isinstance(set_up, ast.FunctionDef) and _module_function(tree, set_up)):
        return None
    callers = {id(tree.function_of(use.ref.node)): tree.function_of(use.ref.node) for use in others}
    caller = next(iter(callers.values()))
    if len(callers) != 1 or caller is set_up or not isinstance(caller, ast.FunctionDef) \
            or not _module_function(tree, caller) or not any(node is caller for _, node in _mentions_in(tree, set_up)):
        return None
    if guard is not None and guard not in set_up.body or guard is None and init not in set_up.body:
        raise NotMechanical(f"initialize is neither a statement of `{set_up.name}`'s own body nor of an `if` there "
                            f"(`{set_up.name}` returns to `{caller.name}`, which scales the loss)")
    mentions = _mentions(tree, set_up.name)
    call = tree.parent(mentions[0][0]) if len(mentions) == 1 and mentions[0][0] is not None else None
    if not (isinstance(call, ast.Assign) and call in caller.body and len(call.targets) == 1
            and isinstance(call.targets[0], ast.Tuple) and all(isinstance(e, ast.Name) for e in call.targets[0].elts)):
        raise NotMechanical(f"`{set_up.name}` (initialize's function) is not named once in the module, by `names = "
                            f"{set_up.name}(...)` in `{caller.name}`'s own body, which scales the loss")
    model, optimizer = arguments()
    targets = [e.id for e in call.targets[0].elts if isinstance(e, ast.Name)]
    returned = set_up.body[-1]
    values = returned.value.elts if isinstance(returned, ast.Return) and isinstance(returned.value, ast.Tuple) else []
    if not (len(values) == len(targets) and all(isinstance(v, ast.Name) for v in values)
            and sum(isinstance(n, ast.Return) for n in ast.walk(set_up)) == 1):
        raise NotMechanical(f"`{set_up.name}` does not end with its one `return`, a tuple of {len(targets)} names "
                            f"(what `{caller.name}` unpacks)")
    names = [v.id for v in values if isinstance(v, ast.Name)]
    # apex returned the objects it was given (patched in place): the names given or bound hold them
    bound = init.targets[0].elts if isinstance(init.targets[0], ast.Tuple) else []
    opt_at = _position(names, optimizer, bound[1] if len(bound) == 2 else None)
    model_at = _position(names, model, bound[0] if len(bound) == 2 else None)
    if opt_at is None or model_at is None or opt_at == model_at:
        raise NotMechanical(f"`{set_up.name}` does not return the model and the optimizer initialize was given, by "
                            "the names it was given them or bound them to")
    opt_name, model_name = targets[opt_at], targets[model_at]
    given = {_optimizer_of(use) for use in others if _optimizer_of(use) is not None}
    if given != {opt_name} or _name_stores(caller, opt_name) != [call.targets[0].elts[opt_at]] \
            or opt_name in {a.arg for a in ast.walk(caller.args) if isinstance(a, ast.arg)} \
            or any(_binds_otherwise(n, opt_name) for n in ast.walk(caller)):
        raise NotMechanical(f"the scale_loss calls in `{caller.name}` are not all given `{opt_name}`, bound once there "
                            f"by `{set_up.name}(...)` from the optimizer initialize was given")
    early = [use.ref.node.lineno for use in others if use.ref.node.lineno <= (call.end_lineno or call.lineno)]
    if early:
        raise NotMechanical(f"apex.amp is used in `{caller.name}` before `{set_up.name}(...)` on {_lines(early)}")
    held = {ast.unparse(node) for node in (optimizer, *bound[1:2])}  # the optimizer's names in the set-up
    stepped = next((ast.unparse(n.value) for n in ast.walk(set_up) if isinstance(n, ast.Attribute) and n.attr == "step"
                    and _chain(n.value) and ast.unparse(n.value) in held), None)
    if stepped is not None:
        raise NotMechanical(f"`{stepped}` is stepped in `{set_up.name}` too")
    condition = _condition(tree, guard, set_up, caller, call) if guard is not None else None
    if any(isinstance(n, ast.Name) and n.id == SCALER or isinstance(n, ast.arg) and n.arg == SCALER
           or isinstance(n, (ast.Global, ast.Nonlocal)) and SCALER in n.names
           or _binds_otherwise(n, SCALER) for n in ast.walk(tree.engine.tree)):
        raise NotMechanical(f"the name `{SCALER}` is used in the module, where the scaler `{caller.name}` reads would "
                            "be bound")
    return _Returned(set_up, init, call, caller, condition, model_name, opt_name, others[0].ref.scope)


def _position(names: list[str], given: ast.expr, bound: ast.expr | None) -> int | None:
    """Where `names` (the set-up's return) holds what initialize was given (`given`) or bound it to (`bound`)."""
    spelled = {node.id for node in (given, bound) if isinstance(node, ast.Name)}
    return next((position for position, name in enumerate(names) if name in spelled), None)


def _mentions_in(tree: _Tree, set_up: ast.FunctionDef) -> list[tuple[ast.Call | None, ast.AST]]:
    """The functions holding each mention of `set_up` in the module."""
    return [(call, tree.function_of(node)) for call, node in _mentions(tree, set_up.name)]


def _optimizer_of(use: AmpUse) -> str | None:
    """The optimizer's name a scale_loss or master_params call is given (its second or first argument)."""
    call = use.ref.parent
    if not (isinstance(call, ast.Call) and call.func is use.ref.node):
        return None
    given = call.args[1] if use.full == rules.SCALE_LOSS.title and len(call.args) > 1 else (
        call.args[0] if use.full == rules.MASTER_PARAMS.title and call.args else None)
    return given.id if isinstance(given, ast.Name) else None


def _condition(tree: _Tree, guard: ast.If, set_up: ast.FunctionDef, caller: ast.FunctionDef,
               call: ast.Assign) -> ast.expr:
    """E, what the caller gives the call for P, where initialize is under `if P:` (P a parameter of `set_up` it
    never rebinds); E a name or attribute chain the caller does not assign after the call."""
    test = guard.test
    if not (isinstance(test, ast.Name) and _parameter_chain(test, set_up)):
        raise NotMechanical(f"initialize is under `if {tree.text(test)}:` in `{set_up.name}`, whose test is not a "
                            f"parameter `{set_up.name}` never rebinds: whether the scaler is enabled where "
                            f"`{caller.name}` scales the loss cannot be told")
    arguments = set_up.args
    parameters = [a.arg for a in arguments.args]
    value = call.value
    assert isinstance(value, ast.Call)  # _mentions: a call
    position = parameters.index(test.id) if test.id in parameters else None
    given = next((k.value for k in value.keywords if k.arg == test.id), None)
    if given is None and position is not None and position < len(value.args) \
            and not any(isinstance(a, ast.Starred) for a in value.args[:position + 1]):
        given = value.args[position]
    if given is None or not _chain(given) or any(k.arg is None for k in value.keywords):
        raise NotMechanical(f"`{set_up.name}(...)` on line {value.lineno} is not given a name or attribute chain for "
                            f"`{test.id}`, the condition of initialize")
    try:
        _stable(given, caller, call.end_lineno or call.lineno)
        _stable_in_callees(tree, given, caller)
    except NotMechanical as reason:
        raise NotMechanical(f"in `{caller.name}`, after `{set_up.name}(...)` is given `{tree.text(given)}` for "
                            f"`{test.id}`: {reason}") from None
    return given
