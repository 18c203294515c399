"""Whether this module's half of an apex set-up split across modules is rewritten (`--unsafe-fixes`): the project's
facts every half reads alike, so the halves agree (docs/apex.md, *Set-ups split across modules*).

Whole in the project: one initialize in the project, in a module-level function of the set-up module that returns the
optimizer it bound; the modules that call that function are the other halves, and every other use of apex.amp in
the project is in one of them; every half is processed in this run; and each half's own rewrite plans (asked of the
others' files, which answer from the same facts without asking back: `ProjectModules.half_planned`).
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from ampfix.core.project import ProjectModules
from ampfix.families.apex import rules
from ampfix.families.apex.rewrite import Split
from ampfix.families.apex.rules import NATIVE
from ampfix.syntax.bindings import ChainRef, Scope

SCALER = NATIVE.scaler


ResolveValue = Callable[[ast.expr, Scope], "str | None"]


def split_half(project: ProjectModules, set_up: bool, uses: list[ChainRef], resolve: ResolveValue) -> Split | str:
    """This module's half (`set_up`: it holds initialize, else scale_loss; `uses`: its apex.amp uses), or why the
    set-up is not rewritten across modules."""
    if set_up:
        elsewhere = project.uses(rules.INITIALIZE.title)
        if elsewhere:
            return f"initialize is called in another module too ({_shown(elsewhere)}): the shared scaler is made once"
        module = project.module()
        function = _function_of(uses)
        if module is None or function is None:
            return "initialize is not in a module-level function of a module the project imports by name"
        qname = f"{module}.{function}"
        callers = project.uses(qname)
        if not callers:
            return f"no other module of the project calls `{qname}`, whose optimizer the other half would step"
        halves = _files(callers)
        set_up_file = None
    else:
        found = project.uses(rules.INITIALIZE.title)
        called = _set_up_function(uses, resolve)
        module = called.rpartition(".")[0] if called is not None else ""
        set_up_file = project.file_of(module) if called is not None else None
        if set_up_file is None or called is None:
            return ("the optimizer given to scale_loss is not bound from a call of a function of the project, as "
                    "`model, optimizer = function(...)`")
        qname = called
        # written already by this run (the project's uses may have been read before): its rewritten shape
        if not _set_up_rewritten(project.tree_of(set_up_file), qname) \
                and (_files(found) != (set_up_file,) or len(found) > 1):
            return (f"the optimizer given to scale_loss is not bound from a call of `{qname}` in the module of the "
                    "project's one initialize, as `model, optimizer = function(...)`")
        halves = tuple(dict.fromkeys((set_up_file, *_files(project.uses(qname)))))
    amp_elsewhere = [place for place in project.uses_below(rules.AMP_MODULE) if _file(place) not in halves]
    if amp_elsewhere:
        return (f"apex.amp is used at {_shown(amp_elsewhere)} too, neither initialize's module nor a module "
                "stepping the optimizer it returns")

    def settled(half: str) -> bool:
        """Rewritten already by this run (another worker may write it while this file is planned: asked again after
        its plan says no, since a file is written once, from the old text to the new)."""
        tree = project.tree_of(half)
        return _set_up_rewritten(tree, qname) if half == set_up_file else _steps_rewritten(tree, module)

    missing = [half for half in halves if not settled(half) and not project.in_run(half)]
    if missing:
        return (f"the other half of the set-up must be rewritten in the same run: {', '.join(missing)} (give this run "
                "every module of the set-up, or the project's folder)")
    refused = [half for half in halves if not settled(half) and not project.half_planned(half) and not settled(half)]
    if refused:
        return f"the other half of the set-up in {', '.join(refused)} is not rewritten (its finding says why)"
    return Split(set_up, module, qname, halves)


def _steps_rewritten(tree: ast.Module | None, module: str) -> bool:
    """The step half as this run rewrites it (its file may have been written before this one is planned): the scaler
    imported from the set-up module in a function, and no apex.amp left (the caller checks the project's uses)."""
    return tree is not None and not _imports_apex(tree) and any(
        isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == module
        and [(a.name, a.asname) for a in node.names] == [(SCALER, None)] and node not in tree.body
        for node in ast.walk(tree))


def _set_up_rewritten(tree: ast.Module | None, qname: str) -> bool:
    """The set-up half as this run rewrites it: the module's `scaler = ...(..., enabled=False)` at its top, and the
    set-up function rebinding it (`global scaler`)."""
    name = qname.rpartition(".")[2]
    if tree is None or _imports_apex(tree):
        return False
    placeholder = any(isinstance(s, ast.Assign) and [ast.unparse(t) for t in s.targets] == [SCALER]
                      and isinstance(s.value, ast.Call) and any(k.arg == "enabled" and isinstance(k.value, ast.Constant)
                                                                and k.value.value is False for k in s.value.keywords)
                      for s in tree.body)
    function = next((s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == name), None)
    return placeholder and function is not None and any(
        isinstance(s, ast.Global) and SCALER in s.names for s in function.body)


def _imports_apex(tree: ast.Module) -> bool:
    return any(isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "apex"
               or isinstance(node, ast.Import) and any(a.name.split(".")[0] == "apex" for a in node.names)
               for node in ast.walk(tree))


def _function_of(uses: list[ChainRef]) -> str | None:
    """The name of the module-level function holding initialize (the shape checks the rest)."""
    scope: Scope | None = uses[0].scope
    if scope is None or scope.kind != "function" or scope.parent is None or scope.parent.kind != "module":
        return None
    node = scope.node
    return node.name if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def _set_up_function(uses: list[ChainRef], resolve: ResolveValue) -> str | None:
    """What the call binding scale_loss's optimizer (`model, optimizer = F(...)` in its function) resolves to."""
    call = uses[0].parent
    if not (isinstance(call, ast.Call) and len(call.args) == 2 and isinstance(call.args[1], ast.Name)):
        return None
    name = call.args[1].id
    scope = uses[0].scope
    node = getattr(scope, "node", None)
    if node is None:
        return None
    for statement in ast.walk(node):
        if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call) and any(
                isinstance(n, ast.Name) and n.id == name for t in statement.targets for n in ast.walk(t)):
            return resolve(statement.value.func, scope)
    return None


def _file(place: str) -> str:
    head, _, line = place.rpartition(":")
    return head if head and line.isdigit() else place


def _files(places: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(_file(place) for place in places))


def _shown(places: list[str] | tuple[str, ...]) -> str:
    return ", ".join(places[:3]) + (f" and {len(places) - 3} more" if len(places) > 3 else "")
