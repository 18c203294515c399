"""The precondition stage: initialize in one module-level function and scale_loss in another that it calls (apex's
ImageNet example: initialize in `main`, scale_loss in `train(train_loader, model, criterion, optimizer, epoch)`).

The scaler is handed to the other function as a parameter: `def train(..., scaler)`, called `train(..., scaler)`.
Not a module-level global (as a set-up split across modules keeps it): a parameter is bound at every call, so the
function cannot read a scaler of an earlier initialize, nor one never made; a global would be read wherever the
function runs. Only where that means the same: the function is a plain module-level function (no decorator, only
plain positional parameters, no defaults), named in the module only as calls `f(...)` in initialize's function after
initialize (so the scaler is bound at every call the module makes), given initialize's optimizer for its parameter
of that name (so every optimizer whose gradients it scales steps through the scaler), and the name `scaler` is free
in it. A call from another module would now miss the argument: a TypeError where it runs, not a silent change.
"""

from __future__ import annotations

import ast

from ampfix.families.apex.rewrite.tree import _Tree, _use_holders
from ampfix.families.apex.rewrite.vocabulary import AmpUse, NotMechanical, SCALER


def _module_function(tree: _Tree, function: ast.AST) -> bool:
    """`function` is a plain function at module level."""
    return isinstance(function, ast.FunctionDef) and function in tree.engine.tree.body \
        and not function.decorator_list


def _functions_reached(tree: _Tree, uses: list[AmpUse], function: ast.AST, lines: tuple[int, int],
                       opt_name: str) -> list[ast.FunctionDef]:
    """The module-level functions other than initialize's that hold apex.amp uses, each checked as above (every
    other use lies in initialize's function between the lines of `lines`)."""
    callees = _use_holders(tree, uses, function, lines, lambda holder: _module_function(tree, holder),
                           "a module-level function it calls")
    for callee in callees:
        _handed_the_optimizer(tree, callee, function, lines, opt_name)
    return callees


def _handed_the_optimizer(tree: _Tree, callee: ast.FunctionDef, function: ast.AST, lines: tuple[int, int],
                          opt_name: str) -> None:
    """Every mention of `callee` in the module is a call in `function` within `lines`, passing `opt_name` itself for
    the parameter `opt_name`; the callee takes plain positional parameters only, and `scaler` is free in it."""
    arguments = callee.args
    parameters = [a.arg for a in arguments.args]
    if arguments.posonlyargs or arguments.vararg or arguments.kwonlyargs or arguments.kwarg or arguments.defaults:
        raise NotMechanical(f"`{callee.name}` uses apex.amp and takes more than plain positional parameters (the "
                            "scaler would be handed to it as its last one)")
    if opt_name not in parameters:
        raise NotMechanical(f"`{callee.name}` uses apex.amp but has no parameter `{opt_name}` to be given "
                            "initialize's optimizer")
    if any(isinstance(n, ast.Name) and n.id == SCALER or isinstance(n, ast.arg) and n.arg == SCALER
           or isinstance(n, (ast.Global, ast.Nonlocal)) and SCALER in n.names for n in ast.walk(callee)):
        raise NotMechanical(f"the name `{SCALER}` is used in `{callee.name}`, where the scaler would be handed")
    for call, node in _mentions(tree, callee.name):
        given = None
        if call is not None and not any(isinstance(a, ast.Starred) for a in call.args) \
                and not any(k.arg is None for k in call.keywords):
            keyword = next((k.value for k in call.keywords if k.arg == opt_name), None)
            position = parameters.index(opt_name)
            given = keyword or (call.args[position] if position < len(call.args) else None)
        if not (call is not None and tree.function_of(node) is function and lines[0] <= node.lineno <= lines[1]
                and isinstance(given, ast.Name) and given.id == opt_name):
            raise NotMechanical(f"`{callee.name}` is used otherwise than called from "
                                f"`{getattr(function, 'name', '')}` after initialize with its optimizer")


def _called_after(tree: _Tree, callee: ast.FunctionDef, function: ast.AST, lines: tuple[int, int]) -> bool:
    """Every mention of `callee` in the module is a call in `function` within `lines` (the scaler, and O1's patching,
    are there at every call the module makes)."""
    return all(call is not None and tree.function_of(node) is function and lines[0] <= node.lineno <= lines[1]
               for call, node in _mentions(tree, callee.name))


def _mentions(tree: _Tree, name: str) -> list[tuple[ast.Call | None, ast.stmt | ast.expr | ast.arg]]:
    """Each mention of the module-level function `name` in the module, and the call it is the callee of (or None).
    A name bound otherwise too (another `def`, an assignment, an import, a parameter) counts as a mention that is
    not a call: what a call of it reaches cannot be told. An attribute (`model.train()`) is another object's."""
    found: list[tuple[ast.Call | None, ast.stmt | ast.expr | ast.arg]] = []
    if len(tree.engine.module_scope.bindings.get(name, [])) != 1:
        found.append((None, tree.engine.tree.body[0]))
    for node in ast.walk(tree.engine.tree):
        if isinstance(node, ast.Name) and node.id == name:
            call = tree.parent(node)
            plain = isinstance(node.ctx, ast.Load) and isinstance(call, ast.Call) and call.func is node
            found.append((call if plain and isinstance(call, ast.Call) else None, node))
        elif isinstance(node, ast.arg) and node.arg == name \
                or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name \
                and node not in tree.engine.tree.body:
            found.append((None, node))
    return found
