"""yolov5's optional apex import, recognised from its structure so that the O1 rewrite (`ampfix.families.apex.rewrite`)
can remove it with mixed precision left on:

    mixed_precision = True                    (a flag: every binding True, the handler's False, or
    try:                                       `amp is not None`; so it is True exactly where apex imported;
                                               timm's `has_apex = False` just before the `try` counts as the
                                               handler's False: nothing runs between them)
        from apex import amp
        from apex.parallel import convert_syncbn_model  (timm's: apex.parallel imports may follow, `others`)
        has_apex = True                       (the try may also set flags True after the import)
    except ImportError:
        amp = None                            (the handler only sets `amp = None`, flags False,
        mixed_precision = False                passes, prints or warns)
    ...
        if mixed_precision:                   (a guard: a flag as the whole test)
            model, optimizer = amp.initialize(...)

Once the rewrite has removed the `try`, each flag is True wherever it is bound: it was True on the path where apex
imported, which is the path the rewrite keeps, so `if flag:` around apex's calls still holds where it held then.
Where the `try` also imports apex.parallel, the rewrites of apex.amp and of apex.parallel leave its imports to one
step after both (`ampfix.families.apex.detect`): the `try` goes only where every import of it went, else only the
imports that went, and the flags keep their meaning, True where what is left imported.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ampfix.families.apex import rules
from ampfix.syntax.bindings import Binding, Scope, catches_missing_names, qualified_name


@dataclass(frozen=True)
class OptionalImport:
    statement: ast.Try  # at module level; removed whole by the rewrite
    import_node: ast.ImportFrom  # `from apex import amp`, the first statement of its body
    amp_name: str  # the name the import binds
    flags_set: tuple[ast.Assign, ...]  # `FLAG = True` after the import in the try's body: kept where the try was
    cleared_before: ast.Assign | None  # `FLAG = False` just before the try, a flag's False as the handler's is
    others: tuple[ast.ImportFrom, ...] = ()  # `from apex.parallel import ...` in the try's body, after the import


def optional_import(tree: ast.Module, binding: Binding, module_scope: Scope) -> OptionalImport | str:
    """The module-level `try` that imports apex.amp as `binding`, in the shape above, or why it is not one. The
    `try` is the one the walk recorded around the import (`ImportRef.tried`, whose `optional` detection reports):
    this shape is the strict case of that record."""
    imported = binding.imported_by
    statement = imported.tried if imported is not None else None
    import_node = imported.node if imported is not None else None
    if not (isinstance(statement, ast.Try) and statement in tree.body and statement.body[0] is import_node
            and isinstance(import_node, ast.ImportFrom)):
        return ("`from apex import amp` is neither a plain statement at module level nor first in a module-level "
                "`try` (a conditional import)")
    rest = statement.body[1:]
    handler = statement.handlers[0] if len(statement.handlers) == 1 else None
    if not imports_amp_alone(import_node):
        return "the optional import is not a plain `from apex import amp`"
    if statement.orelse or statement.finalbody or handler is None or handler.name is not None \
            or not catches_missing_names(handler):
        return "the optional import's `try` has an `else`, a `finally`, or not one `except ImportError:`"
    if not all(_sets(s, True) or imports_parallel(s) for s in rest):
        return "the optional import's `try` does more than import apex.amp (and apex.parallel) and set flags True"
    if not all(_handles(s, binding.name, module_scope) for s in handler.body):
        return ("the optional import's `except` does more than set `amp = None` and flags False, pass, print, warn or "
                "raise (removing it would drop that)")
    others = [b for b in module_scope.bindings.get(binding.name, []) if b is not binding]
    if not all(b.kind == "none" and _made_in(handler, b) for b in others):
        return f"`{binding.name}` is also bound to something else"
    flags_set = tuple(s for s in rest if isinstance(s, ast.Assign))
    return OptionalImport(statement, import_node, binding.name, flags_set,
                          _flag_cleared_before(tree, statement, flags_set),
                          tuple(s for s in rest if isinstance(s, ast.ImportFrom)))


def imports_parallel(statement: ast.stmt) -> bool:
    """`from apex.parallel import ...`, absolute."""
    return isinstance(statement, ast.ImportFrom) and statement.module == "apex.parallel" and not statement.level


def optional_holding(tree: ast.Module, statement: ast.stmt, module_scope: Scope) -> OptionalImport | None:
    """The optional import whose `try` also holds `statement` (one of its `others`), or None."""
    for top in tree.body:
        if not (isinstance(top, ast.Try) and any(statement is s for s in top.body[1:])
                and isinstance(first := top.body[0], ast.ImportFrom) and imports_amp_alone(first)):
            continue
        name = first.names[0].asname or first.names[0].name
        binding = next((b for b in module_scope.bindings.get(name, [])
                        if b.imported_by is not None and b.imported_by.node is first), None)
        found = optional_import(tree, binding, module_scope) if binding is not None else None
        return found if isinstance(found, OptionalImport) and statement in found.others else None
    return None


def _flag_cleared_before(tree: ast.Module, statement: ast.Try, flags_set: tuple[ast.Assign, ...]) -> ast.Assign | None:
    """`FLAG = False` the statement just before the `try` (timm's `has_apex = False`), FLAG one the `try` sets True
    after the import: nothing runs between them, so FLAG is False after the `try` exactly where apex failed to
    import, as a False set in the handler is (None: no such statement)."""
    position = tree.body.index(statement)
    before = tree.body[position - 1] if position else None
    flags = {target.id for flag in flags_set for target in flag.targets if isinstance(target, ast.Name)}
    if isinstance(before, ast.Assign) and _sets(before, False) and isinstance(before.targets[0], ast.Name) \
            and before.targets[0].id in flags:
        return before
    return None


def imports_amp_alone(node: ast.ImportFrom) -> bool:
    """`from apex import amp`, absolute, importing nothing else."""
    package, _, name = rules.AMP_MODULE.rpartition(".")
    return node.module == package and not node.level and [a.name for a in node.names] == [name]


def _sets(statement: ast.stmt, value: bool) -> bool:
    """`NAME = True` (or False)."""
    return (isinstance(statement, ast.Assign) and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name) and isinstance(statement.value, ast.Constant)
            and statement.value.value is value)


def _handles(statement: ast.stmt, amp_name: str, module_scope: Scope) -> bool:
    """A statement the handler may hold: `amp = None`, `FLAG = False`, `pass`, a call of the builtin print or of
    `warnings.warn` (the message that apex is missing, moot once nothing needs apex; Transformer-XL's
    `warnings.warn('APEX AMP is unavailable')`), or a `raise` (apex missing was an error: apex's DCGAN example,
    `raise ImportError("Please install apex ...")`; torch.amp, which takes its place, is always there)."""
    if isinstance(statement, (ast.Pass, ast.Raise)) or _sets(statement, False):
        return True
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.value, ast.Constant):
        target = statement.targets[0]
        return isinstance(target, ast.Name) and target.id == amp_name and statement.value.value is None
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        func = statement.value.func
        if isinstance(func, ast.Name) and func.id == "print":
            return "print" not in module_scope.bindings
        return qualified_name(func, module_scope, unanimous=True) == "warnings.warn"
    return False


def is_availability_test(node: ast.AST, optional: OptionalImport, scope: Scope, missing: bool = False) -> bool:
    """`amp is not None` on the name the optional import binds: True exactly where apex imported (with `missing`,
    `amp is None`: True exactly where it did not)."""
    return (isinstance(node, ast.Compare) and len(node.ops) == 1
            and isinstance(node.ops[0], ast.Is if missing else ast.IsNot)
            and isinstance(node.left, ast.Name) and node.left.id == optional.amp_name
            and isinstance(node.comparators[0], ast.Constant) and node.comparators[0].value is None
            and scope.lookup(optional.amp_name)[0] is _module(scope))


def flag_reason(test: ast.expr, optional: OptionalImport, scope: Scope) -> str | None:
    """Why `test` (an `if` test in `scope`) is not a flag of apex's availability, or None when it is: a name whose
    every binding is True, the handler's False (or the one just before the `try`), or `amp is not None`, and at least
    one of them not the handler's."""
    if not isinstance(test, ast.Name):
        return "the test is not a single name"
    found, bindings = scope.lookup(test.id)
    if not bindings:
        return f"`{test.id}` is never bound"
    handler = optional.statement.handlers[0]
    cleared = optional.cleared_before.value if optional.cleared_before is not None else None
    in_handler = [found is _module(scope) and (_made_in(handler, b) or b.value is cleared) for b in bindings]
    for binding, handled in zip(bindings, in_handler):
        value = binding.value
        if binding.kind != "other" or not isinstance(value, ast.expr):
            return f"`{test.id}` is bound otherwise than by an assignment (line {binding.line})"
        if handled and isinstance(value, ast.Constant) and value.value is False:
            continue
        if isinstance(value, ast.Constant) and value.value is True:
            continue
        if found is not None and is_availability_test(value, optional, found):
            continue
        return f"`{test.id}` is set on line {binding.line} to something other than whether apex imported"
    if all(in_handler):
        return f"`{test.id}` is only set where apex failed to import"
    return None


def _made_in(handler: ast.ExceptHandler, binding: Binding) -> bool:
    """Was `binding` made under `handler`? The walk records the handler among the binding's branches."""
    return any(guard.handler is handler for guard in binding.guards)


def _module(scope: Scope) -> Scope:
    while scope.parent is not None:
        scope = scope.parent
    return scope
