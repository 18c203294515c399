"""The precondition stage: the `if` around initialize and what it tests (a flag of the optional import, a
caller's condition, a local import's condition, the checks that apex is there), the module-level `if` around the
import, and whether a condition means the same at the scaler and at every autocast."""

from __future__ import annotations

import ast

from ampfix.families.apex.optional import OptionalImport, flag_reason
from ampfix.families.apex.rewrite.guard_reason import _not_alone
from ampfix.families.apex.rewrite.tree import _Tree, _binds_otherwise, _chain, _name_stores
from ampfix.families.apex.rewrite.vocabulary import AmpUse, NotMechanical, _FUNCTIONS
from ampfix.syntax.bindings import Scope


def _initialize_guard(tree: _Tree, init: ast.stmt, init_use: AmpUse, enabled: ast.expr | None,
                      optional: OptionalImport | None, checks: _ApexChecks
                      ) -> tuple[ast.stmt, ast.expr | None, tuple[str, ...], ast.expr | None]:
    """`if flag: model, optimizer = amp.initialize(...)`: the flag says whether apex imported, so it goes to
    `enabled=` of the scaler and of autocast (True once the optional import is gone). Or, beside the optional
    import, `if COND:` with COND a parameter of the function or an attribute chain from one (flair's `use_amp`, a
    caller's choice): COND goes to `enabled=`, as for a local import's condition. The statement that initialize
    becomes the scaler of, the `enabled` expression, the flag, the condition."""
    guard = tree.parent(init)
    flag = _branch_flag(guard, init) if isinstance(guard, ast.If) else None
    if flag is not None:
        assert isinstance(guard, ast.If)  # _branch_flag
        if enabled is not None:
            raise NotMechanical("initialize under a flag has an `enabled=` of its own")
        return guard, flag, (), flag
    if not isinstance(guard, ast.If):
        return init, enabled, (), None
    if optional is None:
        # `if args.fp16: initialize(...)` beside a plain module-level import: COND decides as where the import is
        # local to the `if` (apex.amp is bound either way; only initialize is conditional)
        statement, enabled, condition = _local_guard(tree, init, init, enabled, checks)
        return statement, enabled, (), condition
    if checks.strip(guard.body) != [init] or guard.orelse:
        raise _not_alone(guard, init, [s for s in checks.strip(guard.body) if s is not init], False)
    if enabled is not None:
        raise NotMechanical("initialize under a flag has an `enabled=` of its own")
    if flag_reason(guard.test, optional, init_use.ref.scope) is not None \
            and _parameter_chain(guard.test, tree.function_of(guard)):
        return guard, guard.test, (), guard.test
    if guard.body != [init]:
        raise _not_alone(guard, init, [s for s in guard.body if s is not init], False)
    _availability_guard(guard, optional, init_use.ref.scope, "initialize")
    assert isinstance(guard.test, ast.Name)  # flag_reason: a flag is a single name
    return guard, guard.test, (guard.test.id,), None


def _branch_flag(guard: ast.If, init: ast.stmt) -> ast.expr | None:
    """`if TEST: [if T: raise ...]; initialize; FLAG = True` (torchdistill's set-up: any TEST, checks that only
    raise before initialize, no `else`), FLAG a name or `self.attribute`: after the `if`, FLAG says whether initialize
    ran, where it was False before (`_flag_assignments` checks that), so it is the scaler's `enabled=` and the
    condition the uses test. The flag, or None for another shape."""
    body = guard.body
    last = body[-1]
    if guard.orelse or len(body) < 2 or body[-2] is not init or not (
            isinstance(last, ast.Assign) and len(last.targets) == 1 and isinstance(last.value, ast.Constant)
            and last.value.value is True and _flag_target(last.targets[0])):
        return None
    if not all(isinstance(s, ast.If) and not s.orelse and all(isinstance(r, ast.Raise) for r in s.body)
               for s in body[:-2]):
        return None
    return last.targets[0]


def _flag_target(target: ast.expr) -> bool:
    """A name, or an attribute of a name (`self.apex`)."""
    return isinstance(target, ast.Name) or isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)


def _flag_assignments(tree: _Tree, flag: ast.expr, guard: ast.stmt, function: ast.AST,
                      set_up_call: ast.stmt | None) -> None:
    """The flag of `_branch_flag` says whether initialize ran, from the `if` on, wherever it is read: it is set False
    in the `if`'s block before it, True only by the `if`, and assigned nowhere else (a name: in its function; an
    attribute `self.X`: anywhere in the module, but for constants False or None in `__init__` before the call of
    the set-up method, `set_up_call`, which sets it again)."""
    block, position = tree.block_of(guard)
    resets = [s for s in block[:position] if _assigns(s, flag, False)]
    if not resets:
        raise NotMechanical(f"`{tree.text(flag)}`, set True after initialize, is not set False before its `if`")
    set_true = guard.body[-1] if isinstance(guard, ast.If) else None
    assert isinstance(set_true, ast.Assign)  # _branch_flag
    allowed = {id(set_true.targets[0])} | {id(target) for s in resets if isinstance(s, ast.Assign)
                                           for target in s.targets}
    if isinstance(flag, ast.Name):
        others = [n.lineno for n in _name_stores(function, flag.id) if id(n) not in allowed]
        declared = any(_binds_otherwise(n, flag.id) for n in ast.walk(function))
        if others or declared or not isinstance(function, _FUNCTIONS):
            raise NotMechanical(f"the flag `{flag.id}` set True after initialize is bound otherwise too"
                                + (f" (line {others[0]})" if others else ""))
        return
    assert isinstance(flag, ast.Attribute)
    for node in ast.walk(tree.engine.tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr") \
                and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and node.args[1].value == flag.attr:
            raise NotMechanical(f"`{tree.text(flag)}`, set True after initialize, is set by name on line "
                                f"{node.lineno} too (the scaler and the methods' test would disagree)")
        if not (isinstance(node, ast.Attribute) and node.attr == flag.attr and not isinstance(node.ctx, ast.Load)
                and id(node) not in allowed):
            continue
        if set_up_call is not None and tree.function_of(node) is tree.function_of(set_up_call) \
                and node.lineno < set_up_call.lineno and _assigns(tree.parent(node), node, None, False):
            continue  # __init__'s placeholder before the set-up, which sets it again
        raise NotMechanical(f"`{tree.text(flag)}`, set True after initialize, is assigned on line {node.lineno} "
                            "too (the scaler and the methods' test would disagree)")


def _assigns(statement: ast.AST | None, target: ast.expr, *values: object) -> bool:
    """`statement` is `TARGET = <constant>` (one target, the same spelling), the constant one of `values`."""
    return isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
        and ast.dump(statement.targets[0]) == ast.dump(target) and isinstance(statement.value, ast.Constant) \
        and any(statement.value.value is v for v in values)


def _parameter_chain(test: ast.expr, function: ast.AST) -> bool:
    """`test` is a name or an attribute chain whose root is a parameter of `function`, bound nowhere else in it."""
    if not (_chain(test) and isinstance(function, _FUNCTIONS)):
        return False
    root = test
    while isinstance(root, ast.Attribute):
        root = root.value
    assert isinstance(root, ast.Name)
    arguments = function.args
    parameters = {a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)}
    return root.id in parameters and not _name_stores(function, root.id)


def conditional_import(module: ast.Module, import_node: ast.ImportFrom) -> ast.If | None:
    """The module-level `if TEST:` holding only `import_node` (transformers 3's `if is_apex_available():`), or None.
    Where TEST was false, apex.amp was unbound and every use of it failed; the rewrite removes the `if`."""
    return next((s for s in module.body if isinstance(s, ast.If) and s.body == [import_node] and not s.orelse
                 and isinstance(s.test, (ast.Name, ast.Call))), None)


class _ApexChecks:
    """`if not TEST: raise ...` before initialize under its `if`: TEST says whether apex is there, so the check goes
    with initialize's `if` (torch.amp, which takes apex.amp's place, is always there). TEST is the test of the
    module-level `if` around the import (transformers 3's `is_apex_available()`), or a call of a module-level
    function that only returns a flag of the optional import (transformers 2's)."""

    def __init__(self, tree: _Tree, conditional: ast.If | None, optional: OptionalImport | None,
                 scope: Scope) -> None:
        self.tree, self.conditional, self.optional, self.scope = tree, conditional, optional, scope

    def strip(self, body: list[ast.stmt]) -> list[ast.stmt]:
        """`body` without the checks it starts with."""
        position = 0
        while position < len(body) - 1 and self._is_check(body[position]):
            position += 1
        return body[position:]

    def _is_check(self, statement: ast.stmt) -> bool:
        if not (isinstance(statement, ast.If) and not statement.orelse
                and all(isinstance(s, ast.Raise) for s in statement.body)
                and isinstance(statement.test, ast.UnaryOp) and isinstance(statement.test.op, ast.Not)):
            return False
        test = statement.test.operand
        if self.conditional is not None:
            return ast.dump(test) == ast.dump(self.conditional.test) and self._module_name(self.conditional.test)
        if self.optional is None or not (isinstance(test, ast.Call) and isinstance(test.func, ast.Name)
                                         and not test.args and not test.keywords and self._module_name(test)):
            return False
        module = self.tree.engine.module_scope
        definition = next((s for s in self.tree.engine.tree.body
                           if isinstance(s, ast.FunctionDef) and s.name == test.func.id), None)
        body = definition.body if definition is not None else []
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # a docstring
        returned = body[0].value if len(body) == 1 and isinstance(body[0], ast.Return) else None
        return (definition is not None and len(module.bindings.get(test.func.id, [])) == 1
                and isinstance(returned, ast.Name) and flag_reason(returned, self.optional, module) is None)

    def _module_name(self, test: ast.expr) -> bool:
        """The test's name means the same where initialize is as at module level."""
        name = test.func if isinstance(test, ast.Call) else test
        return isinstance(name, ast.Name) and self.scope.lookup(name.id)[0] is self.tree.engine.module_scope


def _local_import_statement(tree: _Tree, import_node: ast.ImportFrom) -> ast.stmt:
    """A local `from apex import amp`, or the `try` holding it alone whose handlers only raise (the import failing
    was an error, and torch.amp, which takes its place, is always there): what removing it removes."""
    parent = tree.parent(import_node)
    if isinstance(parent, ast.Try) and parent.body == [import_node]:
        if parent.orelse or parent.finalbody or not all(
                len(h.body) == 1 and isinstance(h.body[0], ast.Raise) for h in parent.handlers):
            raise NotMechanical("the `try` around the local `from apex import amp` does more than raise")
        return parent
    return import_node


def _local_guard(tree: _Tree, init: ast.stmt, import_statement: ast.stmt, enabled: ast.expr | None,
                 checks: _ApexChecks) -> tuple[ast.stmt, ast.expr | None, ast.expr | None]:
    """`if COND: [from apex import amp]; model, optimizer = amp.initialize(...)` (COND a name or an attribute
    chain; checks that apex is there may come first, `checks`): COND goes to `enabled=` of the scaler and of
    autocast. The statement initialize becomes the scaler of, the `enabled` expression, the condition."""
    guard = tree.parent(init)
    if not isinstance(guard, ast.If):
        return init, enabled, None
    if checks.strip(guard.body) not in ([init], [import_statement, init]) or guard.orelse:
        others = [s for s in checks.strip(guard.body) if s is not init and s is not import_statement]
        raise _not_alone(guard, init, others, import_statement is not init)
    if not (_chain(guard.test) or _config_key(guard.test)):
        raise NotMechanical("the `if` around initialize tests more than a flag (a name, an attribute, or a key of a "
                            "config dict: `args[\"fp16\"]`)")
    if enabled is not None:
        raise NotMechanical("initialize under a condition has an `enabled=` of its own")
    return guard, guard.test, guard.test


def _config_key(test: ast.expr) -> bool:
    """`args["fp16"]`: a constant key of a name or an attribute chain (simpletransformers' dict of settings)."""
    return isinstance(test, ast.Subscript) and isinstance(test.slice, ast.Constant) \
        and isinstance(test.slice.value, str) and _chain(test.value)


# what changes a dict's keys in place
_DICT_MUTATORS = frozenset({"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"})


def _stable_key(tree: _Tree, condition: ast.Subscript, function: ast.AST) -> None:
    """A config key (`args["fp16"]`) means the same at the scaler and at every autocast: what runs from initialize's
    `if` on (its function, and the module's functions and methods it calls by name, transitively) stores or deletes
    that key of no dict (`self.args["fp16"]` may be the same dict as `args`), nor changes a dict in place (`update`,
    `pop`, `|=`, ...) through a name or attribute spelled as the dict's own (`args`, `self.args`) or bound from it
    (`a = self.args`). As for an attribute chain, code of other modules given the dict cannot be seen."""
    assert isinstance(condition.slice, ast.Constant)  # _config_key
    key = condition.slice.value
    names = {_last_name(condition.value)}
    aliases = [n for n in ast.walk(tree.engine.tree) if isinstance(n, ast.Assign)]
    size = 0
    while size != len(names):  # the names bound from the dict's spelling, or from those: its aliases
        size = len(names)
        for assign in aliases:
            if _last_name(assign.value) in names:
                names.update(_last_name(t) for t in assign.targets if _last_name(t))
    for node in _run_from(tree, function, condition.lineno):
        changed = (isinstance(node, ast.Subscript) and not isinstance(node.ctx, ast.Load)
                   and isinstance(node.slice, ast.Constant) and node.slice.value == key) or (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _DICT_MUTATORS
            and _last_name(node.func.value) in names) or (
            isinstance(node, ast.AugAssign) and _last_name(node.target) in names)  # `args |= {...}`
        if changed:
            raise NotMechanical(f"`{tree.text(condition)}`, the condition of initialize, may be changed on line "
                                f"{getattr(node, 'lineno', 0)}")


def _run_from(tree: _Tree, function: ast.AST, line: int) -> list[ast.AST]:
    """The nodes of `function` from `line` on, and of the module's functions and methods it calls by name
    (`helper(...)`, `self.method(...)`), transitively."""
    defined: dict[str, list[ast.AST]] = {}
    for node in ast.walk(tree.engine.tree):
        if isinstance(node, _FUNCTIONS):
            defined.setdefault(node.name, []).append(node)
    found = [n for n in ast.walk(function) if getattr(n, "lineno", line) >= line]
    seen = {id(function)}
    position = 0
    while position < len(found):
        node = found[position]
        position += 1
        called = node.func if isinstance(node, ast.Call) else None
        name = called.attr if isinstance(called, ast.Attribute) else called.id if isinstance(called, ast.Name) else ""
        for callee in defined.get(name, []):
            if id(callee) not in seen:
                seen.add(id(callee))
                found.extend(ast.walk(callee))
    return found


def _stable_in_callees(tree: _Tree, condition: ast.expr, function: ast.AST) -> None:
    """The condition (`args.fp16`, `use_amp`) means the same at the scaler and at every autocast where nothing run
    from initialize's `if` on (its function, and the module's functions and methods it calls by name, transitively)
    rebinds its root name through `global`/`nonlocal`, nor, for an attribute chain, stores an attribute of that name
    or sets or deletes one by that name (`setattr(a, "fp16", ...)`): a helper given `args` may switch it. Code of
    other modules given the object cannot be seen, as for a config key."""
    root = condition
    while isinstance(root, ast.Attribute):
        root = root.value
    root_name = root.id if isinstance(root, ast.Name) else ""
    attribute = condition.attr if isinstance(condition, ast.Attribute) else None
    for node in _run_from(tree, function, condition.lineno):
        rebound = isinstance(node, (ast.Global, ast.Nonlocal)) and root_name in node.names
        stored = attribute is not None and isinstance(node, ast.Attribute) and node.attr == attribute \
            and not isinstance(node.ctx, ast.Load)
        named = (attribute is not None and isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                 and node.func.id in ("setattr", "delattr") and len(node.args) > 1
                 and isinstance(node.args[1], ast.Constant) and node.args[1].value == attribute)
        if rebound or stored or named:
            raise NotMechanical(f"`{tree.text(condition)}`, the condition of initialize, may be changed on line "
                                f"{getattr(node, 'lineno', 0)} (the scaler and the autocast there would disagree)")


def _last_name(node: ast.expr) -> str:
    """The last name of a name or an attribute chain (`self.args` -> `args`), else ""."""
    if isinstance(node, ast.Attribute) and _chain(node):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _stable(condition: ast.expr, function: ast.AST, after: int) -> None:
    """The condition means the same at the scaler and at every autocast: nothing in the function assigns it after
    line `after` (nor, for an attribute chain, any chain it starts with; a config key: the chain it is read from)."""
    dumps = set()
    link: ast.expr = condition.value if isinstance(condition, ast.Subscript) else condition
    while isinstance(link, ast.Attribute):
        dumps.add(ast.dump(link))
        link = link.value
    dumps.add(ast.dump(link))
    for node in ast.walk(function):
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For)) else [])
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, (ast.Name, ast.Attribute)) and isinstance(part.ctx, ast.Store) \
                        and part.lineno > after \
                        and ast.dump(part).replace("Store()", "Load()") in dumps:
                    raise NotMechanical(f"the condition of initialize is assigned on line {part.lineno}")


def _availability_guard(guard: ast.If, optional: OptionalImport, scope: Scope, what: str) -> None:
    reason = flag_reason(guard.test, optional, scope)
    if reason is not None:
        raise NotMechanical(f"{what} is under an `if` whose test is not whether apex imported: {reason}")
