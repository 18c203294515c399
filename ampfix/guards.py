"""Version guards, recognised by structure: does a branch exist for a torch that lacks the new names?

A guard is
- an `if` whose test involves the torch version: `torch.__version__`, `torch.version.*`,
  `importlib.metadata.version("torch")`, anything computed from them (`packaging.version.parse(...)`,
  `LooseVersion(...)`, `.split(".")`, a comparison), a name assigned from such a value
  (`TORCH_GE_1_10 = ...`), a function whose return value is one (`def is_torch_ge(...)`), or a
  `hasattr`/`getattr` on something in torch (`hasattr(torch, "autocast")`) other than a deprecated
  module (that check is migrated with the code it guards);
- the handlers of a `try` that imports or uses the new API and catches ImportError,
  ModuleNotFoundError or AttributeError (the old API is the fallback there).

Names resolve through the file's bindings: `hasattr(args, "use_amp")` tests an argparse namespace and
`conversion_enabled` is a flag; neither is a guard, whatever its spelling.
"""

from __future__ import annotations

import ast

from ampfix.bindings import Guard, Guards, Scope, dotted_parts
from ampfix.rules import Family

IF_REASON = "inside a branch that tests the {package} version; the new name may not exist there"
FALLBACK_REASON = "in the fallback of a `try` that imports the new API; the old name is what it falls back to"

_INTROSPECTION = frozenset({"hasattr", "getattr"})
_METADATA_VERSION = frozenset({"importlib.metadata.version", "importlib_metadata.version"})


def qualify(node: ast.expr, scope: Scope) -> str | None:
    """The qualified name a dotted name refers to through an import, or None."""
    parts = dotted_parts(node)
    if parts is None:
        return None
    _, bindings = scope.lookup(parts[0])
    imported = next((b.qname for b in bindings if b.kind == "import" and b.qname), None)
    return None if imported is None else ".".join((imported, *parts[1:]))


class GuardJudge:
    def __init__(self, family: Family) -> None:
        self.family = family
        self.verdicts: dict[int, str | None] = {}

    def reason(self, guards: Guards) -> str | None:
        """Why code under these branches must keep the old names, or None."""
        for guard in guards:
            verdict = self.verdicts.get(id(guard), ...)
            if verdict is ...:
                verdict = self.verdicts[id(guard)] = self._judge(guard)
            if verdict is not None:
                return verdict
        return None

    def _judge(self, guard: Guard) -> str | None:
        if guard.kind == "if":
            return IF_REASON.format(package=self.family.package) if self.involves_version(guard.node, guard.scope, set()) else None  # type: ignore[arg-type]
        return FALLBACK_REASON if self.tries_new_api(guard.node, guard.scope) else None  # type: ignore[arg-type]

    def involves_version(self, expr: ast.AST, scope: Scope, seen: set[int]) -> bool:
        for node in ast.walk(expr):
            if isinstance(node, ast.Call) and self.call_is_version_test(node, scope, seen):
                return True
            if isinstance(node, (ast.Name, ast.Attribute)):
                if self.family.is_version(qualify(node, scope)):
                    return True
                if isinstance(node, ast.Name) and self.name_holds_version(node.id, scope, seen, call=False):
                    return True
        return False

    def call_is_version_test(self, call: ast.Call, scope: Scope, seen: set[int]) -> bool:
        func = call.func
        if isinstance(func, ast.Name) and func.id in _INTROSPECTION and call.args:
            shadowed = scope.lookup(func.id)[1]
            asked = qualify(call.args[0], scope)
            # A check on a deprecated module is itself migrated (`hasattr(torch.cuda.amp, "autocast")`
            # becomes `hasattr(torch.amp, "autocast")`): its branch is for the old names' twins.
            if not shadowed and self.family.owns(asked) and self.family.deprecated_root(asked or "") is None:
                return True
        if (qualify(func, scope) in _METADATA_VERSION and call.args and isinstance(call.args[0], ast.Constant)
                and call.args[0].value == self.family.distribution):
            return True
        return isinstance(func, ast.Name) and self.name_holds_version(func.id, scope, seen, call=True)

    def name_holds_version(self, name: str, scope: Scope, seen: set[int], call: bool) -> bool:
        """Is `name` assigned a version value (or, called, a function returning one)?"""
        found_in, bindings = scope.lookup(name)
        for binding in bindings:
            value = binding.value
            if value is None or id(binding) in seen or found_in is None:
                continue
            seen.add(id(binding))
            if isinstance(value, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if call and any(isinstance(node, ast.Return) and node.value is not None
                                and self.involves_version(node.value, found_in, seen) for node in ast.walk(value)):
                    return True
            elif not call and self.involves_version(value, found_in, seen):
                return True
        return False

    def tries_new_api(self, node: ast.Try, scope: Scope) -> bool:
        for stmt in node.body:
            for inner in ast.walk(stmt):
                if isinstance(inner, ast.ImportFrom) and inner.level == 0 and inner.module:
                    if any(self.family.is_new_api(f"{inner.module}.{alias.name}") for alias in inner.names):
                        return True
                elif isinstance(inner, ast.Import):
                    if any(self.family.is_new_api(alias.name) for alias in inner.names):
                        return True
                elif isinstance(inner, ast.Attribute) and self.family.is_new_api(qualify(inner, scope)):
                    return True
        return False
