"""Every use of a deprecated name: resolved, decided, settled by group, recorded.

Uses that go through one deprecated import binding move together or not at all: one use that cannot
be rewritten (or that a comment suppresses) holds the others and the import back. The settlement is a
fact of the module (`ModuleContext.fact`): the import planner reads it before the uses are recorded.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ampfix.core.plan import ChainEdit, Edit
from ampfix.engine.planners.decide import Decision, Use, decide
from ampfix.engine.planners.suppressed import suppress_uses
from ampfix.families import UNRESOLVED_CODE
from ampfix.families.torch_amp.device import module_device
from ampfix.syntax.bindings import Binding, ChainRef, dotted_parts, import_bindings, module_scope, spelled_imports
from ampfix.syntax.context import ModuleContext, Sink

FUNCTOOLS = "functools"
MODULE_DEVICE = "module_device"


def resolve_use(context: ModuleContext, ref: ChainRef) -> Use | None:
    """The deprecated name `ref` spells through an import, or None."""
    family = context.family
    # A binding in a branch the target torch never runs does not reach a use it runs.
    live = context.judge.dead(ref.guards) is None
    found = context.resolve(ref.node, ref.scope, within=family.owns, live=live, star=True)
    if found is None or family.deprecated_root(found.qname) is None:
        return None
    binding = found.binding
    through_binding = family.deprecated_root(binding.qname or "") is not None
    if through_binding and (binding.inferred is not None or binding.reexported is not None):
        # `m = import_module("torch.cuda.amp")`: no import statement moves with its uses; `from .utils import
        # autocast`: they move with another module's import, not this file's. Reported (`record_reexported`).
        return None
    if through_binding:
        imported = family.symbol(binding.qname or "")
        if imported is not None and imported[2] is None:
            return None  # a name with no twin stays imported as it is; its import line is reported
    imports = [b for b in found.bindings if b.kind == "import" and family.owns(b.qname)]
    conflicting = len({b.qname for b in imports}) > 1 or any(
        b.kind == "other" or (b.kind == "import" and not family.owns(b.qname)) for b in found.bindings
    )
    group = (id(found.scope), ref.parts[0]) if through_binding else None
    return Use(ref, found.qname, binding, group, conflicting)


@dataclass
class Settlement:
    decided: list[tuple[Use, Decision]]
    # The groups held back: by a use that cannot be rewritten (that use), or by a suppression comment (why).
    blocked: dict[tuple[int, str], Use] = field(default_factory=dict)
    suppressed: dict[tuple[int, str], str] = field(default_factory=dict)


def settled_uses(context: ModuleContext) -> Settlement:
    """Every use decided, the suppressed ones taken out, each group moved whole or held whole.

    A use may be in several groups: the deprecated import binding it goes through, and the feature check
    that guards it (`_feature_check_groups`). A use held back holds every group it is in, and so every use
    of those groups, until nothing more is held."""
    heads = context.heads | star_heads(context)
    may_be_deprecated = _may_be_deprecated(context)
    uses = [use for ref in context.walker.chains if ref.parts[0] in heads and may_be_deprecated(ref.parts)
            if (use := resolve_use(context, ref)) is not None]
    settlement = _settled(context, uses, package_added=False)
    if any(decision.edit is not None and decision.module_device for _, decision in settlement.decided):
        device = context.fact(module_device)
        if not isinstance(device, str) and device.add_torch_import:
            # This run binds the package itself: decided as the next run would decide them (a fixed point).
            settlement = _settled(context, uses, package_added=True)
    return settlement


def _settled(context: ModuleContext, uses: list[Use], package_added: bool) -> Settlement:
    decided = [(use, _inferred(use, decide(context, use, package_added))) for use in uses]
    decided, suppressed = suppress_uses(context, decided)
    settlement = Settlement([], suppressed=suppressed)
    checks = _feature_check_groups(decided)
    groups = {id(use): [g for g in (use.group, *checks.get(id(use), ())) if g is not None] for use, _ in decided}
    held = [use for use, decision in decided if decision.edit is None]
    for use in held:  # in order, growing: a group's blocker is its first use held, in the file's order
        for group in groups[id(use)]:
            if group in settlement.blocked:
                continue
            settlement.blocked[group] = use
            held += [other for other, decision in decided if decision.edit is not None and group in groups[id(other)]]
    for use, decision in decided:
        settlement.decided.append((use, _settle(settlement, groups[id(use)], use, decision)))
    return settlement


def _may_be_deprecated(context: ModuleContext) -> Callable[[tuple[str, ...]], bool]:
    """Whether a chain spells a deprecated name through one of the imports that bind its head anywhere in the
    file (or the star import's reading): what `resolve_use` needs before it resolves. Most chains under a
    family's package (`torch.nn.Linear`) fail it, once per spelling."""
    family, modules = context.family, dict(context.head_modules)
    for name in star_heads(context):
        modules[name] = modules.get(name, frozenset()) | {name}
    answers: dict[tuple[str, ...], bool] = {}

    def may_be(parts: tuple[str, ...]) -> bool:
        answer = answers.get(parts)
        if answer is None:
            rest = parts[1:]
            answer = answers[parts] = any(family.deprecated_root(".".join((qname, *rest))) is not None
                                          for qname in modules.get(parts[0], ()))
        return answer

    return may_be


def star_heads(context: ModuleContext) -> frozenset[str]:
    """The package's own name where a star import may bind it (read only where no binding explains it)."""
    return frozenset({context.family.package}) if context.walker.module_scope.star_lines else frozenset()


def _inferred(use: Use, decision: Decision) -> Decision:
    """A use whose head no import statement binds says how its head was read."""
    how = use.binding.inferred
    if how is None:
        return decision
    return replace(decision, message=f"{decision.message} (`{use.ref.parts[0]}` {how})")


FEATURE_CHECK = "feature check"


def _feature_check_groups(decided: list[tuple[Use, Decision]]) -> dict[int, list[tuple[int, str]]]:
    """id(use) -> the feature-check groups it is in: `hasattr(torch.cuda.amp, "autocast")` in the test of an
    `if`, with the uses of names under `torch.cuda.amp` in either branch of that `if` (a check and what it
    guards move together or not at all: else the guard no longer tests what it protects)."""
    checks = [use for use, _ in decided if use.ref.role == "feature_check"]
    if not checks:
        return {}
    tests = {id(guard.node): guard.node for use, _ in decided for guard in use.ref.guards if guard.kind == "if"}
    found: dict[int, list[tuple[int, str]]] = {}
    for check in checks:
        test = next((t for t in tests.values() if any(n is check.ref.parent for n in ast.walk(t))), None)
        if test is None:
            continue
        group = (id(test), FEATURE_CHECK)
        guarded = [use for use, _ in decided if use is not check
                   and (use.full == check.full or use.full.startswith(check.full + "."))
                   and any(guard.kind == "if" and guard.node is test for guard in use.ref.guards)]
        if guarded:
            for use in (check, *guarded):
                found.setdefault(id(use), []).append(group)
    return found


def _settle(settlement: Settlement, groups: list[tuple[int, str]], use: Use, decision: Decision) -> Decision:
    blocked = next(((g, settlement.blocked[g]) for g in groups if g in settlement.blocked), None)
    suppressed = settlement.suppressed.get(use.group) if use.group else None
    if blocked is not None and decision.edit is not None:
        group, blocker = blocked
        if group[1] != FEATURE_CHECK:
            why = (f"`{use.ref.parts[0]}` is also used on line {blocker.ref.node.lineno} in a way that cannot be "
                   "rewritten")
        else:
            why = (f"a feature check moves with the uses it guards, and `{'.'.join(blocker.ref.parts)}` on line "
                   f"{blocker.ref.node.lineno} stays")
        return replace(decision, edit=None, fixable=False, unsafe=False, dtype_edits=(),
                       message=f"`{use.full}` left: {why}")
    if suppressed is not None and decision.edit is not None:
        return replace(decision, edit=None, fixable=False, unsafe=False,
                       message=f"`{use.full}` left: `{use.ref.parts[0]}` is {suppressed}")
    return decision


def record_uses(context: ModuleContext, sink: Sink) -> None:
    """The settled uses' findings, each with its edits and the head statements it needs."""
    for use, decision in context.fact(settled_uses).decided:
        edit = decision.edit
        edits: tuple[Edit, ...] = ()
        needs: set[str] = set()
        if edit is not None and edit.changes_text:
            node = use.ref.node
            edits = (sink.edit(node, type(node).__name__, ".".join(use.ref.parts), edit),
                     *dtype_edits(sink, decision.dtype_edits))
            if edit.partial_args is not None:
                needs.add(FUNCTOOLS)
            if decision.module_device:
                needs.add(MODULE_DEVICE)
        finding = sink.finding(use.ref.node, decision.code, decision.message, fixable=decision.fixable,
                               unsafe=decision.unsafe, will_fix=edit is not None, suggestion=decision.suggestion,
                               follows=edit is not None and not edit.changes_text)
        sink.add((finding,), edits, frozenset(needs))
    record_unresolved(context, sink)
    record_reexported(context, sink)
    record_module_attributes(context, sink)


def record_reexported(context: ModuleContext, sink: Sink) -> None:
    """`from .utils import autocast`, where `.utils` binds `autocast` by `from torch.cuda.amp import autocast`: the
    uses here mean what that import binds, and move with it, in another file; this file cannot rewrite them alone
    (`autocast("cuda")` would reach the old class while that import stays). Reported at the import, once."""
    family = context.family
    for name, binding in import_bindings(context.walker):
        symbol = family.symbol(binding.qname or "")
        if binding.reexported is None or family.deprecated_root(binding.qname or "") is None or binding.imported_by \
                is None or not any(ref.parts[0] == name and ref.role != "store" for ref in context.walker.chains):
            continue
        new = symbol[2].new if symbol is not None and symbol[2] is not None else None
        code = symbol[1].code if symbol is not None else UNRESOLVED_CODE
        sink.add_finding(binding.imported_by.node, code,
                         f"`{name}` is the deprecated `{binding.qname}`: {binding.reexported}; its uses here move "
                         "with that import, so migrate the two modules together", fixable=False, suggestion=new)


def record_module_attributes(context: ModuleContext, sink: Sink) -> None:
    """`from pkg import utils`, then `utils.autocast(...)`, where pkg/utils.py binds `autocast` by `from torch.cuda.amp
    import autocast`: the attribute is that import's, read through the project's module (`ProjectModules.exported`,
    as `from pkg.utils import autocast` is), and moves with it, in another file. Reported at each use, never rewritten
    here; the other file keeps its import for this one (`ProjectModules.importers`). A chain that spells `cuda.amp`
    below the attribute is `record_unresolved`'s."""
    project, family = context.project, context.family
    if project is None:
        return
    parts_asked = family.name_parts
    for ref in context.walker.chains:
        if len(ref.parts) < 2 or ref.role == "store" or ref.in_string or parts_asked.isdisjoint(ref.parts[1:]):
            continue
        bindings = ref.scope.lookup(ref.parts[0])[1]
        imports = {id(b.imported_by): b.imported_by for b in bindings if b.imported_by is not None}
        if len(imports) != 1 or len(bindings) != len([b for b in bindings if b.kind == "import"]):
            continue
        imp = next(iter(imports.values()))
        node = imp.node
        if family.owns(node.module if isinstance(node, ast.ImportFrom) and not node.level else
                       next((a.name for a in node.names if (a.asname or a.name.partition(".")[0]) == ref.parts[0]),
                            None)):
            continue
        for level, module, name, count in spelled_imports(node, ref.parts):
            if count < 2 or name not in parts_asked:
                continue
            export = project.exported(level, module, name)
            full = ".".join((export.qname, *ref.parts[count:])) if export is not None else ""
            if export is None or family.deprecated_root(full) is None:
                continue
            if _deprecated_tail(context, ref) is not None:
                break
            symbol = family.symbol(full)
            new = symbol[2].new if symbol is not None and symbol[2] is not None else None
            spelled = "." * level + module
            sink.add_finding(ref.node, symbol[1].code if symbol is not None else UNRESOLVED_CODE,
                             f"`{'.'.join(ref.parts)}` is the deprecated `{full}`: `{name}` is read from the project's "
                             f"module `{spelled}`, which binds it to `{export.qname}` ({export.where}); it moves "
                             "with that import, so migrate the two modules together", fixable=False, suggestion=new)
            break


def record_unresolved(context: ModuleContext, sink: Sink) -> None:
    """Every `<expr>.cuda.amp.<name>` / `<expr>.cpu.amp.<name>` chain (a name torch defines there) whose root
    no binding explains: reported with the reason (AMP013), never skipped, never rewritten."""
    roots = _root_components(tuple(context.family.roots))
    below = frozenset(components[-1] for _, components in roots)  # a chain without one has no deprecated tail
    bound_deprecated = {name for name, qnames in context.head_modules.items()
                        if any(context.family.deprecated_root(qname) is not None for qname in qnames)}
    named = [(ref, False) for ref in context.walker.chains if ref.role != "store" and not ref.in_string
             and (ref.parts[0] in bound_deprecated or not below.isdisjoint(ref.parts))]
    for ref, opaque in (*named, *((ref, True) for ref in context.walker.opaque_chains)):
        if not opaque and ref.parts[0] in bound_deprecated and _record_dynamic_module(context, sink, ref):
            continue
        spelled = _deprecated_tail(context, ref)
        if spelled is None:
            continue
        index, qname = spelled
        if not opaque and _resolved(context, ref):
            continue
        package = context.family.package
        spelled_chain = ".".join(ref.parts[index:index + 3])
        if index == 0 and not opaque:  # `cuda.amp.autocast`, `cuda` unbound: the root is `torch.cuda` itself
            text, module = ref.parts[0], f"{package}.{ref.parts[0]}"
        else:
            prefix: ast.expr = ref.node
            for _ in range(len(ref.parts) - index):
                assert isinstance(prefix, ast.Attribute)
                prefix = prefix.value
            text, module = ast.unparse(prefix), package
            spelled_chain = f"{text}.{spelled_chain}"
        reason = f"`{text}` is an expression the check cannot follow" if opaque else _why_unresolved(ref, index)
        symbol = context.family.symbol(qname)
        new = symbol[2].new if symbol is not None and symbol[2] is not None else None
        instead = f" (`{new}` instead)" if new else ""
        sink.add_finding(ref.node, UNRESOLVED_CODE,
                         f"`{spelled_chain}`: {reason}; if `{text}` is the `{module}` module, this is the "
                         f"deprecated `{qname}`{instead}", fixable=False, suggestion=new)


def _record_dynamic_module(context: ModuleContext, sink: Sink, ref: ChainRef) -> bool:
    """`m = importlib.import_module("torch.cuda.amp")`, then `m.autocast`: a deprecated module bound without an
    import statement, which no rewrite can move with its uses; reported (AMP013). True where `ref` is one."""
    found = context.resolve(ref.node, ref.scope, within=context.family.owns)
    binding = found.binding if found is not None else None
    if found is None or binding is None or binding.inferred is None or \
            context.family.deprecated_root(binding.qname or "") is None:
        return False
    symbol = context.family.symbol(found.qname)
    new = symbol[2].new if symbol is not None and symbol[2] is not None else None
    sink.add_finding(ref.node, UNRESOLVED_CODE,
                     f"`{'.'.join(ref.parts)}` is the deprecated `{found.qname}`: `{ref.parts[0]}` {binding.inferred}, "
                     "which no rewrite moves with its uses; migrate by hand", fixable=False, suggestion=new)
    return True


def _deprecated_tail(context: ModuleContext, ref: ChainRef) -> tuple[int, str] | None:
    """Where `ref` spells a deprecated root's components (`cuda`, `amp`) followed by a name torch defines
    there: (the index of the root's first component, the qualified name it would be)."""
    family, parts = context.family, ref.parts
    for root, components in _root_components(tuple(family.roots)):
        width = len(components)
        if components[-1] not in parts:  # most chains: a tuple search in C, before the slices
            continue
        for i in range(len(parts) - width):
            if parts[i:i + width] == components:
                qname = ".".join((root, parts[i + width]))
                if family.exists(qname):
                    return i, qname
    return None


@functools.cache
def _root_components(roots: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each root with its components below the package: `torch.cuda.amp` -> ("cuda", "amp")."""
    return tuple((root, tuple(root.split(".")[1:])) for root in roots)


def _resolved(context: ModuleContext, ref: ChainRef) -> bool:
    """Does an import explain the chain's root: one of the file's own (torch's uses are recorded above;
    another package's module is its own), or a star import read as the package, where the chain is deprecated?
    A name taken from another module (`from thinc.compat import torch`) explains nothing: it may be the package
    itself, re-exported."""
    found = context.resolve(ref.node, ref.scope)
    if found is not None:
        return not _taken_from_another_module(context, found.binding)
    found = context.resolve(ref.node, ref.scope, within=context.family.owns, star=True)
    return found is not None and context.family.deprecated_root(found.qname) is not None


def _taken_from_another_module(context: ModuleContext, binding: Binding | None) -> bool:
    """A name a `from` import takes out of a module outside the family's package (a relative import included),
    unless the project's module was read and binds it to a name of the package (`Binding.reexported`)."""
    if binding is not None and binding.reexported is not None:
        return False
    imported = binding.imported_by if binding is not None else None
    return (imported is not None and isinstance(imported.node, ast.ImportFrom)
            and not (imported.node.level == 0 and context.family.owns(imported.node.module)))


def _why_unresolved(ref: ChainRef, index: int) -> str:
    head = ref.parts[0]
    if index > 1:
        return f"`{'.'.join(ref.parts[:index])}` is an attribute of `{head}`, which the check cannot follow"
    found_in, bindings = ref.scope.lookup(head)
    if not bindings:
        stars = module_scope(ref.scope).star_lines
        where = f" (the star import on line {stars[0]} may provide it)" if stars else ""
        return f"`{head}` is not bound in this file{where}"
    imported = next((b.imported_by.node for b in bindings
                     if b.imported_by is not None and isinstance(b.imported_by.node, ast.ImportFrom)), None)
    if imported is not None:
        module = "." * imported.level + (imported.module or "")
        return f"`{head}` is imported from `{module}` on line {imported.lineno}, which the check cannot follow"
    node = found_in.node if found_in is not None else None
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = node.args
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs, *(a for a in (args.vararg, args.kwarg) if a)]
        if any(a.arg == head for a in every):
            return f"`{head}` is a parameter of `{node.name}`"
    lines = ", ".join(str(line) for line in sorted({b.line for b in bindings}))
    return f"`{head}` is bound on line {lines} to a value the check cannot follow"



def dtype_edits(sink: Sink, respelled: tuple[tuple[ast.expr, str], ...]) -> tuple[Edit, ...]:
    """The dtype arguments respelled with a call moved to the CPU (`torch.float16` -> `torch.bfloat16`)."""
    return tuple(sink.edit(value, type(value).__name__, ".".join(dotted_parts(value) or ()),
                           ChainEdit(new_dotted=spelled)) for value, spelled in respelled)
