"""Probes: an import of a deprecated module in a `try` whose `except` installs or replaces that module.

    try:
        import torch.cuda.amp
    except ImportError:
        sys.modules["torch.cuda.amp"] = make_stub()

The import tests whether the module exists, and the handler stands in for it: rewritten to `torch.amp`, the
probe would test another module than the one it stubs. Such an import is left, with its uses, and reported
with the reason (`probes`, a fact of the module): the imports planner and the decision of each use read it.
"""

from __future__ import annotations

import ast

from ampfix.syntax.bindings import ImportRef, Scope, catches_missing_names
from ampfix.syntax.context import ModuleContext

_SYS_MODULES = "sys.modules"


def probes(context: ModuleContext) -> dict[int, str]:
    """id(import statement) -> why it is a probe, for every probe of the module (a `ModuleContext.fact`)."""
    found = {}
    for imp in context.walker.imports:
        reason = probe_reason(context, imp)
        if reason is not None:
            found[id(imp.node)] = reason
    return found


def probe_reason(context: ModuleContext, imp: ImportRef) -> str | None:
    """Why `imp` is a probe (the handler line that installs the module it imports), or None."""
    if imp.tried is None:
        return None
    node = imp.node
    if isinstance(node, ast.ImportFrom):
        paths = [node.module or ""] + [f"{node.module}.{alias.name}" for alias in node.names]
    else:
        paths = [alias.name for alias in node.names]
    for handler in imp.tried.handlers:
        if not catches_missing_names(handler):
            continue
        for statement in handler.body:
            for inner in ast.walk(statement):
                if not isinstance(inner, (ast.stmt, ast.expr)):
                    continue
                installed = _installed_module(context, inner, imp.scope)
                if installed is not None and any(p == installed or p.startswith(installed + ".") for p in paths):
                    return (f"a probe: the `except` on line {handler.lineno} installs `{installed}` (line "
                            f"{inner.lineno}); rewritten, the import would test another module than the one "
                            "the handler stands in for")
    return None


def _installed_module(context: ModuleContext, node: ast.AST, scope: Scope) -> str | None:
    """The module a statement or call installs or replaces: `sys.modules[NAME] = ...`,
    `sys.modules.setdefault(NAME, ...)`, `package.module = ...`, `setattr(package, NAME, ...)`."""
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            if isinstance(target, ast.Subscript) and context.resolve_value(target.value, scope) == _SYS_MODULES:
                return _text(target.slice)
            if isinstance(target, ast.Attribute):
                return context.resolve_value(target, scope)
        return None
    if not isinstance(node, ast.Call) or not node.args:
        return None
    called = context.resolve_value(node.func, scope) if isinstance(node.func, ast.Attribute) else None
    if called in (f"{_SYS_MODULES}.setdefault", f"{_SYS_MODULES}.__setitem__"):
        return _text(node.args[0])
    if isinstance(node.func, ast.Name) and node.func.id == "setattr" and len(node.args) >= 2 \
            and scope.lookup("setattr")[0] is None:
        owner = context.resolve_value(node.args[0], scope)
        attribute = _text(node.args[1])
        return f"{owner}.{attribute}" if owner is not None and attribute is not None else None
    return None


def _text(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
