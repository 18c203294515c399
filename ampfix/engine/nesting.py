"""Where a deprecated autocast would not mean the same as `torch.amp.autocast(device)` without its defaults.

`torch.cuda.amp.autocast()` passes dtype=torch.float16, cache_enabled=True (`torch.cpu.amp.autocast()`:
torch.bfloat16, True); `torch.amp.autocast(device)` takes the values in force when it is built: an enclosing
autocast's, or those `torch.set_autocast_dtype` / `set_autocast_cache_enabled` set. Both are read in
`autocast.__init__` (torch 2.13), so what counts is where the call runs, not where the region is entered:
a decorator `@torch.cuda.amp.autocast()` is built when its `def` runs, not when the function is called.

The facts are read from the tree and the file's own bindings (never from text): a call lexically inside an
autocast region of its function (a `with` item, or an autocast decorating that function), after a setter call
in the same function (or module), or in a function of this file that is itself called where one of these holds.
Calls through attributes (`self.step()`), other modules or values are not followed (docs/autocast-defaults.md).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable

from ampfix.core.rules import Target
from ampfix.families.torch_amp import autocast
from ampfix.syntax.bindings import Binding, ChainRef, Walker, import_bindings, qualified_name
from ampfix.syntax.context import ModuleContext
from ampfix.syntax.parents import Parents

# Every autocast that opens a region: the deprecated names, their twin, and torch's own alias.
REGION_NAMES = frozenset({*autocast.RULE.symbols, *(t.new for t in autocast.RULE.symbols.values() if t),
                          "torch.autocast"})
# What changes the dtype or cache setting a later `torch.amp.autocast(device)` takes (cuda and cpu).
STATE_SETTERS = frozenset({"torch.set_autocast_dtype", "torch.set_autocast_gpu_dtype",
                           "torch.set_autocast_cpu_dtype", "torch.set_autocast_cache_enabled"})
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


class Nesting:
    def __init__(self, tree: ast.Module, walker: Walker, parents: Parents) -> None:
        self.tree = tree
        self.walker = walker
        self.parent_of = parents.of

    @functools.cached_property
    def chains(self) -> dict[int, ChainRef]:
        return {id(ref.node): ref for ref in self.walker.chains if ref.role in ("call", "decorator")}

    def names(self, call: ast.AST) -> str | None:
        """The qualified name the callee of `call` resolves to through the file's bindings, or None."""
        if not isinstance(call, ast.Call):
            return None
        ref = self.chains.get(id(call.func))
        return qualified_name(call.func, ref.scope, unanimous=True) if ref is not None else None

    def is_region(self, node: ast.AST) -> bool:
        return self.names(node) in REGION_NAMES

    @functools.cached_property
    def setters(self) -> list[tuple[ast.Call, str]]:
        found = []
        # A callee resolves only through an import binding of its head.
        imported = {name for name, _ in import_bindings(self.walker)}
        for ref in self.walker.chains:
            if ref.role == "call" and ref.parts[0] in imported and isinstance(ref.parent, ast.Call) \
                    and ref.parent.func is ref.node:
                name = qualified_name(ref.node, ref.scope, unanimous=True)
                if name in STATE_SETTERS:
                    found.append((ref.parent, name))
        return found

    def reason(self, call: ast.Call) -> str | None:
        """Why the defaults at `call` may not be the top level's (for the message), or None."""
        return self._reason(call, set())

    def _reason(self, node: ast.AST, seen: set[int]) -> str | None:
        function, region = self._lexical(node)
        if region is not None:
            return f"inside the autocast region of line {region}"
        here = (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
        for setter, name in self.setters:
            if self._lexical(setter)[0] is function and (setter.lineno, setter.col_offset) < here:
                return f"after `{name}(...)` on line {setter.lineno}"
        if not isinstance(function, _FUNCTIONS) or id(function) in seen:
            return None
        seen.add(id(function))
        for site in self._calls_of(function):
            why = self._reason(site, seen)
            if why is not None:
                return f"in `{function.name}`, called on line {site.lineno} {why}"
        return None

    def _lexical(self, node: ast.AST) -> tuple[ast.AST, int | None]:
        """The function (or module) `node` runs in, and the line of an autocast region around it there."""
        child, parent = node, self.parent_of(node)
        while parent is not None:
            if isinstance(parent, (ast.With, ast.AsyncWith)):
                items = parent.items if any(s is child for s in parent.body) else \
                    parent.items[:next((i for i, item in enumerate(parent.items) if item is child), 0)]
                if any(self.is_region(item.context_expr) for item in items):
                    return self._owner(parent), parent.lineno
            if isinstance(parent, _FUNCTIONS) and any(s is child for s in parent.body):
                decorated = [d for d in parent.decorator_list if self.is_region(d)]
                return parent, (decorated[0].lineno if decorated else None)
            if isinstance(parent, ast.Lambda) and parent.body is child:
                return parent, None
            child, parent = parent, self.parent_of(parent)
        return self.tree, None

    def _owner(self, node: ast.AST) -> ast.AST:
        """The function (or module) `node` runs in."""
        child, parent = node, self.parent_of(node)
        while parent is not None:
            if isinstance(parent, _FUNCTIONS) and any(s is child for s in parent.body):
                return parent
            if isinstance(parent, ast.Lambda) and parent.body is child:
                return parent
            child, parent = parent, self.parent_of(parent)
        return self.tree

    def _calls_of(self, function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.Call]:
        """The calls in this file whose callee is a name bound only to `function`."""
        sites = []
        for ref in self.walker.chains:
            if ref.role != "call" or len(ref.parts) != 1 or not isinstance(ref.parent, ast.Call) \
                    or ref.parent.func is not ref.node:
                continue
            _, bindings = ref.scope.lookup(ref.parts[0])
            if bindings and all(b.value is function for b in bindings):
                sites.append(ref.parent)
        return sites


def module_nesting(context: ModuleContext) -> Nesting:
    """The module's nesting facts, built once (`ModuleContext.fact`)."""
    return Nesting(context.tree, context.walker, context.parents)


def written_defaults(context: ModuleContext, ref: ChainRef, binding: Binding, full: str, target: Target,
                     call: ast.Call) -> tuple[tuple[tuple[str, str], ...], str] | str:
    """The old defaults a rewrite of `call` writes, as (keyword, text), with what the message says of them;
    or why the call must be left (a default that cannot be written)."""
    options, shape = context.options, autocast.RULE.shape
    assert shape is not None
    given = {kw.arg for kw in call.keywords} | set(shape.old_params[:len(call.args)])
    missing = [(param, value) for param, value in target.old_defaults if param not in given]
    if not missing:
        return (), ""
    if options.explicit_autocast_defaults:
        why: str | None = "--explicit-autocast-defaults"
    else:
        why = context.fact(module_nesting).reason(call)
    if why is None:
        return (), ""
    if None in given:
        return f"`{full}(**...)` {why}: its defaults must be written, and `**` may already pass them"
    spelled = spelled_defaults(context, ref, binding, full, target, missing, why)
    if isinstance(spelled, str):
        return spelled
    written, notes = spelled
    said = ", ".join(f"{param}={value}" for param, value in written)
    said = f"; {said} written, the old class's defaults ({why}, where `{target.new}` would take those in force)"
    return written, said + "".join(f"; {note}" for note in notes)


def spelled_defaults(context: ModuleContext, ref: ChainRef, binding: Binding, full: str, target: Target,
                     defaults: Iterable[tuple[str, str]], why: str
                     ) -> tuple[tuple[tuple[str, str], ...], list[str]] | str:
    """The old defaults as (keyword, text), a dtype spelled through the binding the use goes through (and
    CUDA's float16 made bfloat16 where the code moves to the CPU), with notes on them; or why they cannot be."""
    options = context.options
    written, notes = [], []
    for param, value in defaults:
        if "." in value:  # a dtype, spelled through the file's torch binding
            if target.device == "cuda" and options.to_cpu:
                moved = context.family.cpu_dtypes.get(value)
                if moved is not None and not options.keep_dtype:
                    notes.append(f"CUDA's {value} default -> {moved} on the CPU (--keep-dtype keeps float16)")
                    value = moved
            elif target.device == "cuda" and options.retargets:
                notes.append(f"CUDA's {value} default kept on whatever device runs it")
            spelled = context.spelled_through(ref.parts[0], binding, ref.scope, value)
            if spelled is None:
                return f"`{full}` {why}: no name bound to `{context.family.package}` here to spell `{value}` with"
            value = spelled
        written.append((param, value))
    return tuple(written), notes
