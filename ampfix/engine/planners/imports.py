"""Import planning: which deprecated imports move to the new namespace, and how.

An import binding moves only if every use of the name it binds can follow (the uses' settlement,
`ampfix.engine.planners.uses.settled_uses`, says which groups are held); a `from` import whose names
cannot all move is split.
"""

from __future__ import annotations

import ast

from ampfix.core.plan import ImportEdit
from ampfix.engine.planners.decide import renamed_twin_blocker
from ampfix.engine.planners.probes import probes
from ampfix.engine.planners.suppressed import deprecated_aliases, import_suppressed
from ampfix.engine.planners.uses import settled_uses
from ampfix.families import MODULE_PATH_CODE, NO_TWIN_CODE
from ampfix.syntax.bindings import ImportRef, Scope
from ampfix.syntax.context import ModuleContext, Sink


def plan_imports(context: ModuleContext, sink: Sink) -> None:
    plain_imports: dict[int, set[str]] = {}
    for imp in context.walker.imports:
        if isinstance(imp.node, ast.ImportFrom):
            _plan_import_from(context, sink, imp)
        else:
            _plan_import(context, sink, imp, plain_imports)


def try_imports_move(context: ModuleContext, node: ast.Try) -> bool:
    """Is the body of this `try` only imports of deprecated names that all move to their twins?"""
    imports = [imp for imp in context.walker.imports if imp.tried is node]
    return len(imports) == len(node.body) and all(moves_by_rules(context, imp) for imp in imports)


def moves_by_rules(context: ModuleContext, imp: ImportRef) -> bool:
    """Does every name `imp` imports move to a twin the target has, as far as the rules, the options, the
    branches around it and its comments say (its uses are not asked)?"""
    aliases = list(deprecated_aliases(context, imp))
    return len(aliases) == len(imp.node.names) and all(
        not import_suppressed(context, alias, qname)
        and (_twin_blocker(context, imp, qname, bound) if bound is not None
             else _package_import_blocker(context, imp, qname)) is None
        for alias, qname, bound in aliases)


def _unmovable(context: ModuleContext, imp: ImportRef, qname: str) -> str | None:
    """Why an import of `qname` cannot move whatever the rules say: a probe, or no twin; else None."""
    probe = context.fact(probes).get(id(imp.node))
    if probe is not None:
        return probe
    missing = context.family.missing_twin(qname, exact=True)
    return None if missing is None else missing[1]


def _twin_blocker(context: ModuleContext, imp: ImportRef, qname: str, bound: str) -> str | None:
    """Why the rules and options do not move the imported `qname`, bound as `bound`, to its twin (or the import
    is a probe), or None."""
    family = context.family
    unmovable = _unmovable(context, imp, qname)
    if unmovable is not None:
        return unmovable
    symbol = family.symbol(qname)
    assert symbol is not None  # missing_twin said it has a twin
    renamed = renamed_twin_blocker(family, qname, bound)
    if renamed is not None:
        return renamed
    return context.hold_back(symbol[1], imp.guards) or context.imported_elsewhere(imp, bound)


def _package_import_blocker(context: ModuleContext, imp: ImportRef, qname: str) -> str | None:
    """Why `import torch.cuda.amp` (binding the package itself) does not become `import torch.amp`, or None."""
    family = context.family
    unmovable = _unmovable(context, imp, qname)
    if unmovable is not None:
        return unmovable
    module_rule = family.symbol(next(iter(family.roots)))
    return context.hold_back(module_rule[1] if module_rule else None, imp.guards)


def _blocker(context: ModuleContext, imp: ImportRef, name: str, qname: str) -> str | None:
    """Why the import binding `name` cannot move to its twin, or None."""
    held_back = _twin_blocker(context, imp, qname, name)
    if held_back is not None:
        return held_back
    settlement = context.fact(settled_uses)
    blocker = settlement.blocked.get((id(imp.scope), name))
    if blocker is not None:
        return f"`{name}` is used on line {blocker.ref.node.lineno} in a way that cannot be rewritten"
    suppressed = settlement.suppressed.get((id(imp.scope), name))
    if suppressed is not None:
        return f"`{name}` is {suppressed}"
    _, bindings = imp.scope.lookup(name)
    if any(b.kind != "none" and b.qname != qname for b in context.judge.live(bindings)):
        return f"`{name}` is bound to several things"
    return None


def _dead_twins(context: ModuleContext, imp: ImportRef, name: str, qname: str) -> str:
    """What the finding of a moved import says of the other things its name is bound to in branches
    the target never runs: they stay as they are, and no longer match the rewritten uses."""
    notes = []
    for binding in imp.scope.lookup(name)[1]:
        dead = context.judge.dead(binding.guards) if binding.kind != "none" and binding.qname != qname else None
        if dead is not None:
            notes.append(f"; the `{name}` bound on line {binding.line}, {dead}, is left as it is and no longer "
                         "matches the rewritten uses")
    return "".join(notes)


def _plan_import_from(context: ModuleContext, sink: Sink, imp: ImportRef) -> None:
    family = context.family
    node = imp.node
    assert isinstance(node, ast.ImportFrom)
    if node.level or not node.module or not family.owns(node.module):
        return
    migrated: list[int] = []
    notes: list[str] = []
    kept: list[int] = []
    new_modules: set[str] = set()
    renamed_names: dict[int, str] = {}
    for i, alias in enumerate(node.names):
        qname = f"{node.module}.{alias.name}"
        if alias.name == "*":
            if family.deprecated_root(node.module) is not None:
                sink.add_finding(node, MODULE_PATH_CODE, f"`from {node.module} import *`: the names it "
                                     "binds cannot be resolved; import them by name", fixable=False)
            kept.append(i)
            continue
        if family.deprecated_root(qname) is None or import_suppressed(context, alias, qname):
            kept.append(i)
            continue
        reason = _blocker(context, imp, alias.asname or alias.name, qname)
        if reason is not None:
            symbol = family.symbol(qname)
            if symbol is None or not family.exists(qname):
                code = NO_TWIN_CODE
            else:
                code = symbol[1].code if symbol[2] is None else MODULE_PATH_CODE
            sink.add_finding(alias, code, f"`{qname}` import left: {reason}", fixable=False)
            kept.append(i)
            continue
        migrated.append(i)
        new_name = family.imported_twin_name(qname)
        if new_name is not None:
            renamed_names[i] = new_name
        new_modules.add(family.renamed(qname).rpartition(".")[0])
        notes.append(_dead_twins(context, imp, alias.asname or alias.name, qname))
    if not migrated or len(new_modules) != 1:  # several new modules cannot happen with today's rules; never guess
        return
    (new_module,) = new_modules
    if new_module == node.module:
        kept = []  # only names change (`get_autocast_gpu_dtype as g`): nothing to split off
    sink.add_edit(sink.edit(node, "ImportFrom", "", ImportEdit(new_module=new_module, kept_aliases=tuple(kept),
                                                               renamed_names=renamed_names)))
    names = ", ".join(node.names[i].name for i in migrated)
    new_names = ", ".join(renamed_names.get(i, node.names[i].name) for i in migrated)
    sink.add_finding(node, MODULE_PATH_CODE, f"`from {node.module} import {names}` -> "
                         f"`from {new_module} import {new_names}`{''.join(notes)}", fixable=True, will_fix=True)


def _plan_import(context: ModuleContext, sink: Sink, imp: ImportRef, plain_imports: dict[int, set[str]]) -> None:
    family = context.family
    node = imp.node
    renamed: dict[int, str] = {}
    removed: list[int] = []
    for i, alias in enumerate(node.names):
        if family.deprecated_root(alias.name) is None or import_suppressed(context, alias, alias.name):
            continue
        if alias.asname:
            reason = _blocker(context, imp, alias.asname, alias.name)
        else:  # binds the package itself; `import torch` already loads both paths
            reason = _package_import_blocker(context, imp, alias.name)
        if reason is not None:
            sink.add_finding(alias, MODULE_PATH_CODE, f"`import {alias.name}` left: {reason}", fixable=False)
            continue
        new_name = family.renamed(alias.name)
        plain = plain_imports.setdefault(id(imp.scope), _existing_plain_imports(context, imp.scope))
        if not alias.asname and new_name in plain:
            # `import torch.amp` is already there: the renamed line would repeat it.
            removed.append(i)
            sink.add_finding(alias, MODULE_PATH_CODE, f"`import {alias.name}` removed: `import {new_name}` "
                                 "is already there", fixable=True, will_fix=True)
            continue
        if not alias.asname:
            plain.add(new_name)
        renamed[i] = new_name
        sink.add_finding(alias, MODULE_PATH_CODE, f"`import {alias.name}` -> `import {new_name}`",
                             fixable=True, will_fix=True)
    if renamed or removed:
        change = ImportEdit(renamed_aliases=renamed, removed_aliases=tuple(removed))
        sink.add_edit(sink.edit(node, "Import", "", change))


def _existing_plain_imports(context: ModuleContext, scope: Scope) -> set[str]:
    return {
        alias.name
        for imp in context.walker.imports
        if imp.scope is scope and isinstance(imp.node, ast.Import)
        for alias in imp.node.names
        if not alias.asname
    }
