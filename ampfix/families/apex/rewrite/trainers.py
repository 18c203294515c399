"""The precondition stage: a trainer's methods, which reach the scaler as `self.scaler`: initialize in
`__init__` binding `self.<optimizer>` (the uses in any plain method of the class), or a step method called from
initialize's function with its optimizer."""

from __future__ import annotations

import ast

from ampfix.families.apex.rewrite.conditions import _parameter_chain
from ampfix.families.apex.rewrite.tree import _Tree, _use_holders
from ampfix.families.apex.rewrite.vocabulary import AmpUse, NotMechanical, SCALER, _FUNCTIONS


def _self_of(tree: _Tree, function: ast.AST) -> str | None:
    """The first parameter of a plain method (undecorated, directly in a class), or None."""
    if isinstance(function, ast.FunctionDef) and function.args.args and not function.decorator_list \
            and isinstance(tree.parent(function), ast.ClassDef):
        return function.args.args[0].arg
    return None


def _self_name(function: ast.AST) -> str:
    assert isinstance(function, _FUNCTIONS)  # _methods_reached: a method
    return function.args.args[0].arg


def _methods_reached(tree: _Tree, uses: list[AmpUse], function: ast.AST, lines: tuple[int, int],
                     opt_name: str) -> list[ast.FunctionDef]:
    """The other methods of initialize's class that hold apex.amp uses (a trainer's step method: the scaler then
    lives in `self.scaler`); each use lies in initialize's function between initialize and `lines[1]`, or in such a
    method. Such a method takes the same `self`, is called only as `self.method(...)` from initialize's function
    where the scaler is bound, and is given initialize's optimizer for its parameter of that name (a scale_loss
    there names it): every optimizer whose gradients it scales then steps through the scaler."""
    methods = _use_holders(tree, uses, function, lines, lambda holder: _sibling_method(tree, function, holder),
                           "a method of its class")
    for method in methods:
        _called_from(tree, method, function, lines, opt_name)
    if methods and any(isinstance(node, ast.Attribute) and node.attr == SCALER for node in ast.walk(tree.engine.tree)):
        raise NotMechanical(f"an attribute `{SCALER}` is already used in the module")
    return methods


def _set_up_call(tree: _Tree, function: ast.AST) -> ast.Expr | None:
    """For a plain method `M` of a class other than `__init__`: the statement `self.M(...)` of the class's
    `__init__`'s own body (torchdistill's `setup`), with no `return` before it; None otherwise. `M` then runs when
    the object is made, before any other method can, as `__init__` itself does."""
    klass = tree.parent(function)
    self_name = _self_of(tree, function)
    if self_name is None or not isinstance(function, ast.FunctionDef) or function.name == "__init__":
        return None
    assert isinstance(klass, ast.ClassDef)  # _self_of
    init = next((s for s in klass.body if isinstance(s, _FUNCTIONS) and s.name == "__init__"), None)
    if not isinstance(init, ast.FunctionDef) or _self_of(tree, init) is None:
        return None
    init_self = init.args.args[0].arg
    for statement in init.body:
        if not isinstance(statement, ast.Expr):
            continue
        call = statement.value
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == function.name \
                and isinstance(call.func.value, ast.Name) and call.func.value.id == init_self:
            returns = any(isinstance(n, ast.Return) and n.lineno < statement.lineno and tree.function_of(n) is init
                          for n in ast.walk(init))
            return statement if not returns else None
    return None


def _trainer_methods(tree: _Tree, uses: list[AmpUse], function: ast.AST, init: ast.Assign,
                     opt_name: str, set_up_call: ast.Expr | None = None) -> list[ast.FunctionDef]:
    """initialize in `__init__`, binding `self.<optimizer>` (the issue's first example), or in a set-up method that
    `__init__` calls (`set_up_call`): `self.scaler` is bound when the object is made, before any other method can
    run, so the uses may lie in any plain method of the class with the same `self`. The methods holding them;
    `self.<optimizer>` is assigned nowhere in the module but in initialize's method up to initialize (and in
    `__init__` before the set-up call): every step and scale_loss then means initialize's optimizer."""
    methods: list[ast.FunctionDef] = []
    for use in uses:
        where = tree.function_of(use.ref.node)
        if where is function:
            if use.ref.node.lineno < init.lineno:
                raise NotMechanical("apex.amp is used in `__init__` before initialize")
            continue
        if not (_sibling_method(tree, function, where) and isinstance(where, ast.FunctionDef)):
            raise NotMechanical("an apex.amp use lies outside the methods of initialize's class")
        if where not in methods:
            methods.append(where)
    klass = tree.parent(function)
    assert isinstance(klass, ast.ClassDef)  # _self_of: a method
    if any(isinstance(node, ast.Return) and node.lineno < init.lineno and tree.function_of(node) is function
           for node in ast.walk(function)):
        raise NotMechanical("`__init__` may return before initialize, leaving the object without the scaler")
    set_up = function if set_up_call is not None and isinstance(function, ast.FunctionDef) else None
    _subclasses_make_the_scaler(tree, klass, set_up)
    if set_up_call is not None:
        _methods_not_called_in_set_up(tree, klass, function, methods)
    attribute = opt_name.partition(".")[2]
    for node in tree.attribute_stores(attribute):
        if not (tree.function_of(node) is function and node.lineno <= init.lineno) \
                and not (set_up_call is not None and tree.function_of(node) is tree.function_of(set_up_call)
                         and node.lineno < set_up_call.lineno):
            raise NotMechanical(f"`{opt_name}` is assigned again on line {node.lineno} (initialize's optimizer must "
                                "be the one every method scales and steps)")
    if any(isinstance(node, ast.Attribute) and node.attr == SCALER for node in ast.walk(tree.engine.tree)):
        raise NotMechanical(f"an attribute `{SCALER}` is already used in the module")
    return methods


def _subclasses_make_the_scaler(tree: _Tree, klass: ast.ClassDef, set_up: ast.FunctionDef | None) -> None:
    """Every subclass of `klass` in the module makes the scaler: an `__init__` of its own calls `super().__init__(...)`
    as a statement of its own body, with no `return` and no use of `self` before it (torchdistill's
    `MultiStagesTrainingBox`), and none overrides the set-up method (`set_up`, where initialize is not in
    `__init__`). A subclass in another module cannot be seen."""
    for node in ast.walk(tree.engine.tree):
        if not (isinstance(node, ast.ClassDef) and any(isinstance(b, ast.Name) and b.id == klass.name
                                                       for b in node.bases)):
            continue
        if set_up is not None and any(isinstance(m, _FUNCTIONS) and m.name == set_up.name for m in node.body):
            raise NotMechanical(f"a subclass of `{klass.name}` overrides `{set_up.name}`, which may not make the "
                                "scaler")
        own_init = next((m for m in node.body if isinstance(m, _FUNCTIONS) and m.name == "__init__"), None)
        if own_init is not None and not _calls_super_init_first(tree, own_init):
            raise NotMechanical(f"a subclass of `{klass.name}` has an `__init__` of its own, which may not make the "
                                "scaler")


def _calls_super_init_first(tree: _Tree, init: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """`super().__init__(...)` is a statement of `init`'s own body, with no `return` and no use of `self` before it."""
    self_name = _self_of(tree, init)
    for position, statement in enumerate(init.body):
        call = statement.value if isinstance(statement, ast.Expr) else None
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "__init__" \
                and isinstance(call.func.value, ast.Call) and isinstance(call.func.value.func, ast.Name) \
                and call.func.value.func.id == "super" and not call.func.value.args:
            before = [n for s in init.body[:position] for n in ast.walk(s)]
            return self_name is not None and not any(
                isinstance(n, ast.Return) or isinstance(n, ast.Name) and n.id == self_name for n in before)
    return False


def _methods_not_called_in_set_up(tree: _Tree, klass: ast.ClassDef, set_up: ast.AST,
                                  methods: list[ast.FunctionDef]) -> None:
    """The methods that use apex.amp are not named in `__init__` nor in the set-up method: they would run before
    the scaler is there."""
    names = {m.name for m in methods}
    init = next((s for s in klass.body if isinstance(s, _FUNCTIONS) and s.name == "__init__"), None)
    for holder in (init, set_up):
        for node in ast.walk(holder) if holder is not None else ():
            if isinstance(node, ast.Attribute) and node.attr in names:
                raise NotMechanical(f"`{node.attr}`, which uses apex.amp, is named on line {node.lineno}, in "
                                    f"`{getattr(holder, 'name', '')}`, before the scaler is made")


def _method_condition(tree: _Tree, function: ast.AST, init_statement: ast.stmt,
                      condition: ast.expr | None, set_up_call: ast.Expr | None = None) -> ast.expr | None:
    """The condition of initialize as the trainer's other methods test it: itself where it reads `self`
    (`self.use_amp`); for a parameter (`use_amp`), the attribute `__init__` assigns it to in its own body before
    initialize's `if` (`self.use_amp = use_amp`), the parameter rebound nowhere in `__init__`. Either way the
    attribute is assigned nowhere else in the module (nor, for a chain, what it starts with) but, where initialize is
    in a set-up method, in `__init__` before its call (`set_up_call`): else NotMechanical."""
    if condition is None:
        return None
    self_name = _self_name(function)
    tested = condition
    if not _reads_self(condition, self_name):
        assert isinstance(function, ast.FunctionDef)  # _self_of: a method
        block, position = tree.block_of(init_statement)
        found = next((s.targets[0] for s in block[:position] if isinstance(s, ast.Assign) and len(s.targets) == 1
                      and isinstance(s.value, ast.Name) and isinstance(condition, ast.Name)
                      and s.value.id == condition.id and _reads_self(s.targets[0], self_name)), None)
        if found is None or block is not function.body or not _parameter_chain(condition, function):
            raise NotMechanical(f"`{tree.text(condition)}`, the condition of initialize in `__init__`, is not a "
                                "parameter assigned to an attribute before it (`self.flag = flag`) for the other "
                                "methods to test")
        tested = found
    assigned = tree.parent(tested) if tested is not condition else None
    attributes = set()
    link = tested
    while isinstance(link, ast.Attribute):
        attributes.add(link.attr)
        link = link.value
    for node in tree.attribute_stores(*attributes):
        if tree.parent(node) is not assigned \
                and not (tree.function_of(node) is function and node.lineno < init_statement.lineno) \
                and not (set_up_call is not None and tree.function_of(node) is tree.function_of(set_up_call)
                         and node.lineno < set_up_call.lineno):
            raise NotMechanical(f"`{tree.text(tested)}`, the condition of initialize as the methods test it, is "
                                f"assigned on line {node.lineno}")
    return tested


def _reads_self(node: ast.expr, self_name: str) -> bool:
    """`node` is an attribute chain from `self_name` (`self.use_amp`, `self.args.fp16`)."""
    while isinstance(node, ast.Attribute):
        node = node.value
        if isinstance(node, ast.Name):
            return node.id == self_name
    return False


def _other_methods(tree: _Tree, function: ast.AST, condition: ast.expr) -> list[ast.FunctionDef]:
    """Where `condition` starts from the `self` of a method, the class's other methods but `__init__` (any of them
    may run between initialize and a step, and rebind what the condition reads)."""
    root = condition
    while isinstance(root, ast.Attribute):
        root = root.value
    holder = tree.parent(function)
    if not (isinstance(holder, ast.ClassDef) and isinstance(function, ast.FunctionDef) and function.args.args
            and isinstance(root, ast.Name) and root.id == _self_name(function)):
        return []
    return [s for s in holder.body if isinstance(s, ast.FunctionDef) and s is not function and s.name != "__init__"]


def _sibling_method(tree: _Tree, function: ast.AST, other: ast.AST) -> bool:
    """`other` is a plain method of the class whose plain method `function` is, with the same first parameter."""
    def plain(node: ast.AST) -> bool:
        return isinstance(node, ast.FunctionDef) and not node.decorator_list and bool(node.args.args)
    return (plain(function) and plain(other) and tree.parent(function) is tree.parent(other)
            and isinstance(tree.parent(function), ast.ClassDef) and _self_name(function) == _self_name(other))


def _called_from(tree: _Tree, method: ast.FunctionDef, function: ast.AST, lines: tuple[int, int],
                 opt_name: str) -> None:
    """Every mention of `method` in the module is a call `self.method(...)` in `function` within `lines`, passing
    `opt_name` itself for the method's parameter `opt_name`."""
    self_name = _self_name(function)
    parameters = [a.arg for a in method.args.args]
    if opt_name not in parameters:
        raise NotMechanical(f"`{method.name}` uses apex.amp but has no parameter `{opt_name}` to be given "
                            "initialize's optimizer")
    position = parameters.index(opt_name) - 1  # the call's arguments after self
    for node in ast.walk(tree.engine.tree):
        if not ((isinstance(node, ast.Attribute) and node.attr == method.name)
                or (isinstance(node, ast.Name) and node.id == method.name)):
            continue
        call = tree.parent(node)
        given = None
        if isinstance(call, ast.Call) and call.func is node and not any(isinstance(a, ast.Starred) for a in call.args):
            keyword = next((k.value for k in call.keywords if k.arg == opt_name), None)
            given = keyword or (call.args[position] if position < len(call.args) else None)
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == self_name
                and tree.function_of(node) is function and lines[0] <= node.lineno <= lines[1]
                and isinstance(given, ast.Name) and given.id == opt_name):
            raise NotMechanical(f"`{method.name}` is used otherwise than called from `{getattr(function, 'name', '')}` "
                                f"after initialize with its optimizer")
