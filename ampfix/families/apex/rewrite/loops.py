"""A precondition of the shape: where initialize runs in a loop. Once per iteration is a scaler made more than
once, reported; but one call per list item (sentence-transformers 0.3.4's `fit`, one per training objective)

    for i in range(len(models)):
        model, optimizer = amp.initialize(models[i], optimizers[i], opt_level="O1")
        models[i] = model                                 (the results stored back, or not at all)
        optimizers[i] = optimizer

is one GradScaler made where the loop was: apex made a new loss scaler at each call, and the last one served every
optimizer (each call replaced the process-wide scaler); O1 returned the objects it was given, patched in place, so
the stores change nothing. The loop goes where what it binds is dead after it, and the steps are tied to the
optimizers it went through: the list is not rebound, its items are not replaced nor added to after the loop, and
every use of the name the steps go through is preceded, in its block, by `optimizer = optimizers[...]`."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

from ampfix.families.apex.rewrite.tree import _Tree, _binds_otherwise, _last_line, _name_stores
from ampfix.families.apex.rewrite.vocabulary import NotMechanical, _SCOPES, _lines


@dataclass(frozen=True)
class _ItemLoop:
    """initialize's loop over list items, its conditions checked."""

    loop: ast.For
    optimizers: str  # the list whose items initialize was given (`optimizers`)
    opt_name: str  # the name every step goes through, bound from its items (`optimizer = optimizers[train_idx]`)


def _initialize_loop(tree: _Tree, init: ast.Assign) -> _ItemLoop | None:
    """The loop initialize runs in, where it is the per-item shape with its conditions (`_item_loop`); None where
    initialize is in no loop; NotMechanical for another loop."""
    function = tree.function_of(init)
    found = None
    node: ast.AST | None = init
    while node is not None and node is not function:
        parent = tree.parent(node)
        if isinstance(parent, (ast.For, ast.AsyncFor, ast.While)) and any(node is s for s in parent.body):
            reason = f"initialize is called in a loop (line {parent.lineno}), once per iteration"
            if found is not None or not _per_item(init, parent):
                raise NotMechanical(f"{reason}: a scaler is created once, in one place")
            found = parent
        node = parent
    if found is None:
        return None
    assert isinstance(found, ast.For)  # _per_item
    return _item_loop(tree, init, found, function)


def _per_item(init: ast.Assign, loop: ast.stmt) -> bool:
    """initialize is given a list item picked by the `for` loop's own variable (`optimizers[train_idx]`)."""
    call = init.value
    given = call.args[1] if isinstance(call, ast.Call) and len(call.args) > 1 else None
    return (isinstance(loop, ast.For) and isinstance(loop.target, ast.Name)
            and isinstance(given, ast.Subscript) and isinstance(given.slice, ast.Name)
            and given.slice.id == loop.target.id)


def _item_loop(tree: _Tree, init: ast.Assign, loop: ast.For, function: ast.AST) -> _ItemLoop:
    """`for i in range(len(L)):` (L one of the two lists), initialize given `models[i]` and `optimizers[i]`, then
    at most the stores back; what the loop binds is dead after it; the optimizers' list keeps its items; the name
    the steps go through."""
    reason = (f"initialize is called in a loop (line {loop.lineno}), once per list item: one GradScaler would serve "
              "every optimizer (apex's last loss scaler did), but ")
    call = init.value
    assert isinstance(call, ast.Call) and isinstance(loop.target, ast.Name)  # _per_item
    index = loop.target.id
    lists = [_list_item(given, index) for given in call.args]
    target = init.targets[0]
    bound = [e.id for e in target.elts if isinstance(e, ast.Name)] if isinstance(target, ast.Tuple) else []
    if len(lists) != 2 or None in lists or lists[0] == lists[1] or len(bound) != 2:
        raise NotMechanical(reason + "initialize is not given two lists' items by the loop's variable, binding two "
                                     "names")
    models, optimizers = str(lists[0]), str(lists[1])
    if loop.orelse or not _over_a_list(loop, (models, optimizers)):
        raise NotMechanical(reason + f"the loop is not `for {index} in range(len({models})):` (or of "
                                     f"`{optimizers}`), with no `else`")
    stores = [_store(s, index) for s in loop.body[1:]]
    if loop.body[0] is not init or len(set(stores)) != len(stores) \
            or not set(stores) <= {(models, bound[0]), (optimizers, bound[1])}:
        raise NotMechanical(reason + "the loop does more than initialize and store its results back "
                                     f"(`{models}[{index}] = {bound[0]}`, `{optimizers}[{index}] = {bound[1]}`)")
    for builtin in ("range", "len"):
        if _bound_anywhere(tree, builtin):
            raise NotMechanical(reason + f"`{builtin}` is bound in the module (not the builtin)")
    for name in (index, *bound):
        _dead_after(tree, function, loop, name, reason)
    _list_kept(tree, function, loop, optimizers, reason)
    stepped = _item_name(tree, function, loop, optimizers, reason)
    # a global (or a closure's) name is seen by other functions, which the checks here do not read
    shared = sorted({n for node in ast.walk(function) if isinstance(node, (ast.Global, ast.Nonlocal))
                     for n in node.names} & {index, *bound, optimizers, stepped})
    if shared:
        raise NotMechanical(reason + f"`{shared[0]}` is declared global or nonlocal in the function")
    return _ItemLoop(loop, optimizers, stepped)


def _list_item(given: ast.expr, index: str) -> str | None:
    """`L[i]`, L a name, i the loop's variable: L."""
    if isinstance(given, ast.Subscript) and isinstance(given.value, ast.Name) and isinstance(given.slice, ast.Name) \
            and given.slice.id == index:
        return given.value.id
    return None


def _over_a_list(loop: ast.For, lists: tuple[str, str]) -> bool:
    """`range(len(L))`, L one of `lists`."""
    iterated = loop.iter
    inner = iterated.args[0] if isinstance(iterated, ast.Call) and len(iterated.args) == 1 else None
    return (isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Name) and iterated.func.id == "range"
            and not iterated.keywords and isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name)
            and inner.func.id == "len" and not inner.keywords and len(inner.args) == 1
            and isinstance(inner.args[0], ast.Name) and inner.args[0].id in lists)


def _store(statement: ast.stmt, index: str) -> tuple[str, str] | None:
    """`L[i] = name`: (L, name)."""
    if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1
            and isinstance(statement.value, ast.Name)):
        return None
    listed = _list_item(statement.targets[0], index)
    return None if listed is None else (listed, statement.value.id)


def _bound_anywhere(tree: _Tree, name: str) -> bool:
    module = tree.engine.tree
    return bool(_name_stores(module, name)) or any(_binds_otherwise(n, name) for n in ast.walk(module))


def _after(node: ast.AST, loop: ast.For) -> bool:
    return getattr(node, "lineno", 0) > _last_line(loop)


def _dead_after(tree: _Tree, function: ast.AST, loop: ast.For, name: str, reason: str) -> None:
    """What the loop binds (its variable, initialize's names) is read after it only where a statement before the
    read, in a block holding it, binds the name again: the loop can go."""
    read = _reads_unbound(tree, function, loop, name, lambda s: _binds(s, name))
    if read:
        raise NotMechanical(reason + f"`{name}`, which the loop binds, is read on line {read} before being bound "
                                     "again (the loop cannot go)")


def _reads_unbound(tree: _Tree, function: ast.AST, loop: ast.For, name: str,
                   binds: Callable[[ast.stmt], bool]) -> int:
    """The first line after the loop where `name` is read with no statement that `binds` it before (0: none)."""
    lines = [node.lineno for node in ast.walk(function) if isinstance(node, ast.Name) and node.id == name
             and isinstance(node.ctx, ast.Load) and _after(node, loop)
             and not _bound_before(tree, node, function, loop, binds)]
    return min(lines, default=0)


def _binds(statement: ast.stmt, name: str) -> bool:
    """An assignment or a `for` whose target binds `name` itself (a name, or a name in a tuple)."""
    if isinstance(statement, ast.Assign):
        targets: list[ast.expr] = list(statement.targets)
    elif isinstance(statement, (ast.For, ast.AsyncFor)):
        targets = [statement.target]
    else:
        return False
    names = [t for target in targets for t in ([target] if isinstance(target, ast.Name) else
                                              getattr(target, "elts", []))]
    return any(isinstance(t, ast.Name) and t.id == name for t in names)


def _bound_before(tree: _Tree, node: ast.AST, function: ast.AST, loop: ast.For,
                  binds: Callable[[ast.stmt], bool]) -> bool:
    """A statement after the loop that `binds` runs before `node` in every path to it: an earlier statement of a
    block holding `node` (in `function`, not in a nested scope), or a `for` whose body holds it."""
    child = node
    while child is not function:
        parent = tree.parent(child)
        if parent is None or (isinstance(parent, _SCOPES) and parent is not function):
            return False
        if isinstance(parent, (ast.For, ast.AsyncFor)) and any(child is s for s in parent.body) \
                and _after(parent, loop) and binds(parent):
            return True
        for name in ("body", "orelse", "finalbody"):
            block = getattr(parent, name, None)
            if isinstance(block, list) and any(child is s for s in block):
                position = next(i for i, s in enumerate(block) if s is child)
                if any(_after(s, loop) and binds(s) for s in block[:position]):
                    return True
        child = parent
    return False


def _list_kept(tree: _Tree, function: ast.AST, loop: ast.For, optimizers: str, reason: str) -> None:
    """The optimizers' list is made in the function (not a parameter: the caller holds no other reference) and holds
    after the loop the optimizers initialize was given: before the loop it is made (`L = [...]`) and appended to,
    after it only indexed or measured (`L[i]`, `len(L)`), never rebound, stored into nor given away (a call could
    add an optimizer apex never saw)."""
    arguments = getattr(function, "args", None)
    parameters = [a.arg for a in ast.walk(arguments) if isinstance(a, ast.arg)] if arguments is not None else []
    if not isinstance(function, _SCOPES) or optimizers in parameters:
        raise NotMechanical(reason + f"`{optimizers}` is not a list made in initialize's function")
    made = False
    for node in ast.walk(function):
        if not (isinstance(node, ast.Name) and node.id == optimizers):
            continue
        parent = tree.parent(node)
        if tree.function_of(node) is not function:
            raise NotMechanical(reason + f"`{optimizers}` is used in a nested scope (line {node.lineno})")
        indexed = isinstance(parent, ast.Subscript) and parent.value is node and isinstance(parent.ctx, ast.Load)
        measured = isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id == "len"
        if node.lineno < loop.lineno:
            grown = isinstance(parent, ast.Attribute) and parent.attr == "append" and isinstance(
                tree.parent(parent), ast.Call)
            making = isinstance(node.ctx, ast.Store) and isinstance(parent, ast.Assign) \
                and isinstance(parent.value, (ast.List, ast.ListComp))
            made = made or making
            if not (making or isinstance(node.ctx, ast.Load) and (indexed or measured or grown)):
                raise NotMechanical(reason + f"`{optimizers}` is used otherwise than made (`{optimizers} = [...]`), "
                                             f"appended to, indexed or measured before the loop (line {node.lineno})")
        elif _after(node, loop) and not (isinstance(node.ctx, ast.Load) and (indexed or measured)):
            raise NotMechanical(reason + f"`{optimizers}` is used on line {node.lineno} otherwise than indexed or "
                                         "measured after the loop (it could hold an optimizer apex never saw)")
    if not made:
        raise NotMechanical(reason + f"`{optimizers}` is not a list made in initialize's function")


def _item_name(tree: _Tree, function: ast.AST, loop: ast.For, optimizers: str, reason: str) -> str:
    """The one name bound after the loop from the list's items (`optimizer = optimizers[train_idx]`), bound
    nowhere else after the loop, each of its reads after the loop preceded in its block by such a binding: every
    optimizer the steps and scale_loss go through is one that initialize was given."""
    def takes_an_item(statement: ast.AST | None) -> bool:
        return (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name) and isinstance(statement.value, ast.Subscript)
                and isinstance(statement.value.value, ast.Name) and statement.value.value.id == optimizers)

    names = {s.targets[0].id for s in ast.walk(function) if isinstance(s, ast.Assign) and takes_an_item(s)
             and _after(s, loop) and isinstance(s.targets[0], ast.Name)}
    if len(names) != 1:
        raise NotMechanical(reason + f"the items of `{optimizers}` are not bound to one name after the loop (the "
                                     "steps cannot be tied to the optimizers initialize was given)")
    name = names.pop()
    other = sorted(n.lineno for n in _name_stores(function, name)
                   if _after(n, loop) and not takes_an_item(tree.parent(n)))
    if other:
        raise NotMechanical(reason + f"`{name}` is bound otherwise than to an item of `{optimizers}` on "
                                     f"{_lines(other)}")
    read = _reads_unbound(tree, function, loop, name, takes_an_item)
    if read:
        raise NotMechanical(reason + f"`{name}` is read on line {read} where no `{name} = {optimizers}[...]` before "
                                     "it in its block binds it")
    return name
