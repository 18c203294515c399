"""Find every use of NVIDIA apex's removed mixed precision (`apex.amp`, `apex.fp16_utils`, `apex.parallel`) and
the framework settings that select it; report each with its reason and the native pattern
(`ampfix.families.apex.rules`).

Names are resolved through the file's own imports, scope by scope, on the walk the engine already made:
`import apex; apex.amp.initialize(...)`, `from apex import amp as a; a.scale_loss(...)` and
`from apex.parallel import DistributedDataParallel as DDP; DDP(m)` are found, a local `amp` is not. apex's
other packages (optimizers, normalization) still exist and are left alone.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from ampfix.families.apex.fp16_utils import Fp16Plan, plan_fp16_utils, star_import
from ampfix.families.apex.handover import handover
from ampfix.families.apex.tried import plan_tried, raising_try
from ampfix.families.apex.module import ApexModule
from ampfix.families.apex.parallel import UnsafeFix, plan_parallel
from ampfix.families.apex import class_split
from ampfix.families.apex.split import split_half
from ampfix.families.apex.optional import (OptionalImport, imports_amp_alone, imports_parallel, optional_holding,
                                           optional_import)
from ampfix.families.apex.rewrite import enum_switch
from ampfix.families.apex.rewrite.enum_switch import Planned
from ampfix.families.apex.scaler_settings import loss_scaler_settings, settings_note
from ampfix.families.apex.scaling_class import set_up_class_note, step_class_note
from ampfix.families.apex.rewrite import (AmpUse, Rewritten, UnsafeOnly, commit_rewrites, conditional_import,
                                         engine_of, float16_function, plan_rewrite)
from ampfix.syntax.bindings import Binding, ChainRef, Guards, Scope, dynamic_import, resolve
from ampfix.syntax.context import ModuleContext, Sink
from ampfix.syntax.prefilter import mentions_apex
from ampfix.families.apex import rules
from ampfix.core.locations import SourceIndex
from ampfix.core.rules import Rule, longest_prefix

# The engine, as apex's detection reaches it (through `ApexModule`, its view of the planner context and sink):
# the calls that are not reads of the walk, and the binding lookup.
def _report(analysis: ApexModule, node: ast.AST, rule: Rule, advice: rules.Advice, detail: str = "",
            unsafe_fix: bool = False) -> None:
    message = advice.reason + (f"; {detail}" if detail else "")
    analysis.add_finding(node, rule.code, message, fixable=unsafe_fix, unsafe=unsafe_fix, suggestion=advice.native)


def _report_fixed(analysis: ApexModule, node: ast.AST, rule: Rule, message: str, unsafe: bool = False) -> None:
    analysis.add_finding(node, rule.code, message, fixable=True, unsafe=unsafe, will_fix=True)


def _held_back(analysis: ApexModule, reported: list[tuple[int, Rule, Guards]]) -> str | None:
    """Why the rewrite, one decision for all of these (line, rule, branches around it), must not happen, or None: a
    suppression comment on one of them; else what `ModuleContext.hold_back` says of each (the rule selection, the rule's
    minimum torch against --target-torch, version guards), each reason once, in the order of the lines."""
    suppressed = sorted({line for line, rule, _ in reported if analysis.suppressions.covers(line, rule.code)})
    if suppressed:
        return f"a suppression comment holds the use on line {', '.join(map(str, suppressed))}"
    reasons = [analysis.hold_back(rule, guards) for _, rule, guards in sorted(reported, key=lambda r: r[0])]
    return "; ".join(dict.fromkeys(r for r in reasons if r is not None)) or None


def _apex_binding(ref: ChainRef) -> Binding | None:
    """The apex import the head of `ref` is bound by in its scope, or None."""
    found = resolve(ref.node, ref.scope, within=_owned)
    return None if found is None else found.binding


# The uses --------------------------------------------------------------------------------------------------
def _owned(qname: str | None) -> bool:
    return qname is not None and any(qname == p or qname.startswith(p + ".") for p in rules.PACKAGES)


def _advice(qname: str) -> rules.Advice:
    name = longest_prefix(rules.ADVICE, qname)
    assert name is not None, qname  # every rule's symbol lies below an advised name
    return rules.ADVICE[name]


def plan_apex(context: ModuleContext, sink: Sink) -> None:
    """Add a finding for every apex use in the module the context walked."""
    analysis = ApexModule(context, sink)
    walker = analysis.walker
    used: set[int] = set()  # id() of the import bindings some reported use goes through
    apex_imported = False
    for imp in walker.imports:
        apex_imported |= any(_owned(q) for q in _import_qnames(imp.node))
    apex_imported = apex_imported or (mentions_apex(analysis.index.text) and _imported_dynamically(walker.chains))
    if apex_imported:
        uses: list[tuple[ChainRef, Binding, str, Rule]] = []
        for ref in walker.chains:
            binding = _apex_binding(ref)
            if binding is not None:
                full = ".".join((binding.qname or "", *ref.parts[1:]))
                rule = rules.rule_of(full)
                if rule is not None:
                    used.add(id(binding))
                    uses.append((ref, binding, full, rule))
            elif rules.AMP_STASH in ref.parts[1:]:
                _report(analysis, ref.node, rules.INTERNALS, rules.AMP_STASH_ADVICE)
        rewritten = _plan_rewrite(analysis, uses)
        scaling = _plan_scaling_class(analysis, uses) if type(rewritten) is str else None
        if isinstance(scaling, (Rewritten, UnsafeOnly)):
            rewritten = scaling
        elif type(rewritten) is str:
            across = _plan_split(analysis, uses)
            switch = _plan_enum_switch(analysis, uses) if not isinstance(across, Rewritten) else None
            if isinstance(across, Rewritten):
                rewritten = across
            elif isinstance(switch, (Rewritten, UnsafeOnly)):
                rewritten = switch
            else:
                rewritten += _other_half(analysis, uses) + across + (f"; {switch}" if switch else "") + (scaling or "")
        parallel = _plan_parallel(analysis, uses, rewritten.torch_imported_at if isinstance(rewritten, Rewritten)
                                  else None)
        fp16, imports_gone = _plan_imports(analysis, rewritten, parallel)
        # why not rewritten goes on initialize's finding, or on scale_loss's where the module has no initialize
        says_why = rules.INITIALIZE if any(rule is rules.INITIALIZE for *_, rule in uses) else rules.SCALE_LOSS
        settings = loss_scaler_settings([ref for ref, _, full, _ in uses if full == rules.LOSS_SCALERS],
                                        analysis.context.parents.of, _text_of(analysis))
        left: set[int] = set()  # id() of the import bindings some use left (not rewritten) goes through
        for ref, binding, full, rule in uses:
            if isinstance(rewritten, Rewritten) and id(ref) in rewritten.messages:
                _report_fixed(analysis, ref.node, rule, rewritten.messages[id(ref)], rewritten.unsafe)
            elif isinstance(parallel, dict) and id(ref) in parallel:
                _report_fixed(analysis, ref.node, rule, parallel[id(ref)], isinstance(parallel[id(ref)], UnsafeFix))
            else:  # not rewritten, or not apex.amp (apex.parallel, apex.fp16_utils beside a rewritten pattern)
                left.add(id(binding))
                not_rewritten = rewritten if isinstance(rewritten, str) and rule is says_why else ""
                if rule in (rules.DISTRIBUTED, rules.SYNC_BATCH_NORM) and isinstance(parallel, str):
                    not_rewritten = parallel
                unsafe_fix = isinstance(rewritten, UnsafeOnly) and full.startswith(rules.AMP_MODULE + ".")
                said = settings_note(settings) if settings and full == rules.LOSS_SCALERS else ""
                _report_use(analysis, ref, rule, full, not_rewritten, unsafe_fix, said)
        if isinstance(fp16, Fp16Plan):
            for node in ast.walk(analysis.tree):
                if id(node) in fp16.calls:
                    _report_fixed(analysis, node, rules.FP16_UTILS, fp16.calls[id(node)], True)
        done = rewritten if isinstance(rewritten, Rewritten) else Rewritten({}, False)
        _report_imports(analysis, used, left, Rewritten({**done.messages, **imports_gone},
                                                        done.unsafe or isinstance(fp16, Fp16Plan)),
                        {id(star_import(analysis.tree)): fp16} if isinstance(fp16, str) else {})
    elif analysis.options.unsafe_fixes and analysis.context.project is not None:
        _plan_enum_switch_reader(analysis)
    _report_named_modules(analysis)
    if _may_hold_settings(analysis):
        _report_settings(analysis)


def _other_half(analysis: ApexModule, uses: list[tuple[ChainRef, Binding, str, Rule]]) -> str:
    """Where a module holds half of apex's set-up (scale_loss and no initialize, or initialize and no scale_loss),
    the other half's places in the project's other modules, or that none names it: apex's loss scaler was
    process-wide, so the two halves were one set-up (docs/apex.md, *Set-ups split across modules*); then the class
    of the other module the half builds or is, where the loss is scaled in a method of one, and the loss scaler's
    settings written through `_amp_state` (`scaling_class`). "" where the module holds both or neither, or no
    project can be read."""
    project = analysis.context.project
    used = {rule.code for *_, rule in uses}
    if project is None or (rules.INITIALIZE.code in used) == (rules.SCALE_LOSS.code in used):
        return ""
    missing = rules.SCALE_LOSS if rules.INITIALIZE.code in used else rules.INITIALIZE
    places = project.uses(missing.title)
    if not places:
        return (f"; no other module of the project names {missing.title} through its imports: the rest of the set-up "
                "is reached otherwise (an `amp` handed in as an argument, as Lightning's `configure_apex(amp, ...)`) "
                "or is its callers', outside the project")
    shown = ", ".join(places[:_PLACES]) + (f" and {len(places) - _PLACES} more" if len(places) > _PLACES else "")
    parent = analysis.context.parents.of
    if missing is rules.SCALE_LOSS:
        init = next(ref for ref, *_, rule in uses if rule is rules.INITIALIZE)
        owner = set_up_class_note(project, init, parent, analysis.resolve_value)
        settings = None
    else:
        owner = step_class_note(project, [ref for ref, *_, rule in uses if rule is rules.SCALE_LOSS], parent,
                                analysis.tree)
        settings = loss_scaler_settings([ref for ref, _, full, _ in uses if full == rules.LOSS_SCALERS], parent,
                                        _text_of(analysis))
    return (f"; the other half of the set-up is in the project: {missing.title} at {shown} (apex's loss scaler was "
            "one for the process, so the halves are one set-up; one torch.amp.GradScaler the modules share is not "
            "made, docs/apex.md: rewriting one module would leave the other calling apex)" + owner
            + (f"; {settings_note(settings)}" if settings else ""))


_PLACES = 3  # the other half's places named, at most


def _plan_split(analysis: ApexModule, uses: list[tuple[ChainRef, Binding, str, Rule]]) -> Rewritten | str:
    """Under --unsafe-fixes, this module's half of a set-up split across modules, rewritten where the set-up is whole
    in the project and every half is in this run (`ampfix.families.apex.split`); else why not, as a note for the
    finding ("" where the module holds no half, or in the default mode, which reports as before)."""
    project = analysis.context.project
    codes = {rule.code for *_, rule in uses}
    if project is None or not analysis.options.unsafe_fixes \
            or (rules.INITIALIZE.code in codes) == (rules.SCALE_LOSS.code in codes):
        return ""
    amp_uses = [(ref, binding, full) for ref, binding, full, _ in uses
                if rules.under_amp(full)]
    state = _state_import(analysis, amp_uses)
    found = _amp_import(analysis, [(ref, binding) for ref, binding, _ in amp_uses
                                   if state is None or binding is not state[1]])
    held = _held_back(analysis, [(ref.node.lineno, rule, ref.guards) for ref, _, _, rule in uses])
    if held is not None or not isinstance(found, ast.ImportFrom) or len(amp_uses) != len(uses):
        return ""  # the one-file reason stands
    half = rules.INITIALIZE.code in codes
    split = split_half(project, half, [ref for ref, _, _ in amp_uses], analysis.resolve_value)
    if isinstance(split, str):
        return f"; under --unsafe-fixes, not rewritten across modules: {split}"
    planned = plan_rewrite(analysis, [AmpUse(ref, full) for ref, _, full in amp_uses], found, None, commit=False,
                           split=split, state_import=state[0] if state is not None else None)
    if isinstance(planned, str):
        return f"; under --unsafe-fixes, not rewritten across modules: {planned}"
    committed = commit_rewrites(analysis, [planned])
    return committed if isinstance(committed, Rewritten) else f"; {committed}"


def _plan_scaling_class(analysis: ApexModule,
                        uses: list[tuple[ChainRef, Binding, str, Rule]]) -> Rewritten | UnsafeOnly | str | None:
    """A set-up split across modules whose set-up builds, after initialize, the other module's class that scales the
    loss (`ampfix.families.apex.class_split`, GNMT): this half rewritten under --unsafe-fixes, reported as an
    unsafe fix in the default mode; under --unsafe-fixes, why not, as a note for the finding; None where the module
    is no such half (or, in the default mode, where it is not rewritten)."""
    project = analysis.context.project
    codes = {rule.code for *_, rule in uses}
    if project is None or (rules.INITIALIZE.code in codes) == (rules.SCALE_LOSS.code in codes):
        return None
    unsafe = analysis.options.unsafe_fixes
    half = class_split.plan_half(project, analysis.tree, analysis.index, rules.INITIALIZE.code in codes, unsafe)
    if half is None or isinstance(half, str):
        return f"; under --unsafe-fixes, not rewritten as a class that scales the loss: {half}" \
            if half is not None and unsafe else None
    amp_uses = [ref for ref, _, full, _ in uses if rules.under_amp(full)]
    if not unsafe:
        return UnsafeOnly(f"{half.said}; {half.note} (an unsafe fix exists: --unsafe-fixes)")
    engine_of(analysis).add_splices(list(half.splices))
    return Rewritten({id(ref): f"{half.said}; {half.note}" for ref in amp_uses}, True, half.splices)


def _plan_enum_switch(analysis: ApexModule,
                      uses: list[tuple[ChainRef, Binding, str, Rule]]) -> Rewritten | UnsafeOnly | str | None:
    """A switch between apex.amp and the project's native path on an enum's members, across the project's modules
    (`ampfix.families.apex.rewrite.enum_switch`): rewritten under --unsafe-fixes, reported as an unsafe fix in the
    default mode; or why not; None where the module's apex.amp uses are no such switch."""
    project = analysis.context.project
    if project is None or not all(full.startswith(rules.AMP_MODULE + ".") for *_, full, _ in uses):
        return None
    if _held_back(analysis, [(ref.node.lineno, rule, ref.guards) for ref, _, _, rule in uses]) is not None:
        return None  # the one-file reason says it
    planned = _switch_part(analysis)
    if planned is None or isinstance(planned, str):
        return planned
    if not analysis.options.unsafe_fixes:
        return UnsafeOnly(f"{planned.note} (an unsafe fix exists: --unsafe-fixes)")
    switched = planned.switched
    messages = {id(ref): switched.messages.get(id(ref.node), f"{planned.said}; {planned.lost}") for ref, *_ in uses}
    engine_of(analysis).add_splices(switched.splices)
    return Rewritten(messages, True, tuple(switched.splices))


def _switch_part(analysis: ApexModule) -> Planned | str | None:
    """This module's part of an enum switch (`enum_switch.project_switch`), or why not: also where its edits would
    meet another planner's."""
    project = analysis.context.project
    assert project is not None  # the callers'
    module = enum_switch.module_of(analysis.tree, analysis.walker.chains)
    planned = enum_switch.project_switch(module, analysis.index, project, analysis.options.unsafe_fixes)
    if planned is None or isinstance(planned, str):
        return planned
    edited = engine_of(analysis).edit_spans()
    met = [s for s in planned.switched.splices if any(s[0] < b and a < s[1] or a == b == s[0] for a, b in edited)]
    if met:
        line = analysis.index.text.count("\n", 0, met[0][0]) + 1
        return f"{planned.members.where}: its edit on line {line} meets another rewrite's"
    return planned


def _plan_enum_switch_reader(analysis: ApexModule) -> None:
    """Under --unsafe-fixes, a module without apex that compares an enum switch's members (vissl's gradient clipping
    hook, `task.amp_type == AmpType.PYTORCH`): its comparisons widened with the modules that use apex.amp, each
    reported there (a framework setting that selected apex); or, where its part is not rewritten, why."""
    project = analysis.context.project
    assert project is not None  # the caller's
    if not any(isinstance(ref.parent, ast.Compare) for ref in analysis.walker.chains) or not project.switch_reader():
        return
    planned = _switch_part(analysis)
    if planned is None:
        return
    if isinstance(planned, str):
        module = enum_switch.module_of(analysis.tree, analysis.walker.chains)
        found = enum_switch.switch_of(module, project)
        reads = module.reads_below(found[0].enum) if isinstance(found, tuple) else []
        if reads:
            analysis.add_finding(reads[0][0].node, rules.FRAMEWORK_CONFIG.code, f"not rewritten: {planned}",
                                 fixable=False)
        return
    engine_of(analysis).add_splices(planned.switched.splices)
    for compare in planned.switched.widened:
        _report_fixed(analysis, compare, rules.FRAMEWORK_CONFIG, f"{planned.said}; {planned.lost}", True)


def _plan_rewrite(analysis: ApexModule,
                  uses: list[tuple[ChainRef, Binding, str, Rule]]) -> Rewritten | UnsafeOnly | str:
    """The mechanical rewrite (`ampfix.families.apex.rewrite`) where every apex.amp use goes through one plain
    `from apex import amp` at module level: the message of each use by id() of its ref, or why not."""
    amp_uses = [(ref, binding, full) for ref, binding, full, _ in uses
                if rules.under_amp(full)]
    state = _state_import(analysis, amp_uses)
    found = _amp_import(analysis, [(ref, binding) for ref, binding, _ in amp_uses
                                   if state is None or binding is not state[1]])
    if state is not None and not isinstance(found, ast.ImportFrom):
        found = _amp_import(analysis, [(ref, binding) for ref, binding, _ in amp_uses])  # the reason names both
    # what the rewrite changes: the uses, and the optional import it removes (reported as fixed)
    reported = [(ref.node.lineno, rule, ref.guards) for ref, _, _, rule in uses]
    if isinstance(found, OptionalImport):
        reported.append((found.import_node.lineno, rules.OPTIONAL_IMPORT, amp_uses[0][1].guards))
    held = _held_back(analysis, reported)
    if held is not None:
        return held
    if isinstance(found, str):
        groups = _local_groups(analysis, amp_uses)
        return found if groups is None else _plan_groups(analysis, groups)
    statement, optional = (found.import_node, found) if isinstance(found, OptionalImport) else (found, None)
    return plan_rewrite(analysis, [AmpUse(ref, full) for ref, _, full in amp_uses], statement, optional,
                        state_import=state[0] if state is not None else None)


def _local_groups(analysis: ApexModule, amp_uses: list[tuple[ChainRef, Binding, str]]
                  ) -> list[tuple[ast.ImportFrom, list[AmpUse]]] | None:
    """The uses grouped by the local `from apex import amp` each goes through, where there are several and each is
    the one import of its function (each function imports its own: espnet's), or None."""
    by_binding: dict[int, list[tuple[ChainRef, Binding, str]]] = {}
    for use in amp_uses:
        by_binding.setdefault(id(use[1]), []).append(use)
    groups = []
    for group in by_binding.values():
        node = _amp_import(analysis, [(ref, binding) for ref, binding, _ in group])
        if not isinstance(node, ast.ImportFrom) or node in analysis.tree.body:
            return None
        groups.append((node, [AmpUse(ref, full) for ref, _, full in group]))
    return groups if len(groups) > 1 else None


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _holds(outer: ast.stmt, node: ast.stmt) -> bool:
    """Does `outer` hold the statement `node`? A statement lies inside another exactly where its lines do (even
    `def f(): pass; import x`, whose import is in the body); a position comparison, not a walk of `outer`."""
    return outer.lineno <= node.lineno and (node.end_lineno or 0) <= (outer.end_lineno or 0)


def _class_of(classes: list[ast.ClassDef], node: ast.stmt) -> ast.ClassDef | None:
    """The first of `classes` (the module's, in `ast.walk` order) whose method (directly) holds `node`, or None."""
    for klass in classes:
        if any(isinstance(method, _FUNCTIONS) and _holds(method, node) for method in klass.body):
            return klass
    return None


def _plan_groups(analysis: ApexModule,
                 groups: list[tuple[ast.ImportFrom, list[AmpUse]]]) -> Rewritten | UnsafeOnly | str:
    """Each function with its own local import rewritten on its own, all of them or none: why not names the
    function whose shape fails."""
    if sum(any(use.full == rules.LOAD_STATE for use in uses) for _, uses in groups) > 1:
        return "several functions load apex's state: the helper the rewrite adds for each would be added twice"

    nodes = list(ast.walk(analysis.tree))
    functions = [f for f in nodes if isinstance(f, _FUNCTIONS)]
    classes = [c for c in nodes if isinstance(c, ast.ClassDef)]

    def where(node: ast.ImportFrom) -> str:
        holders = [f for f in functions if _holds(f, node)]
        return max(holders, key=lambda f: f.lineno).name if holders else "?"

    initializers = [node for node, uses in groups if any(rules.rule_of(use.full) is rules.INITIALIZE for use in uses)]
    initializing = [where(node) for node in initializers]
    klass = _class_of(classes, initializers[0]) if initializing == ["__init__"] else None
    if klass is not None and all(_class_of(classes, node) is klass for node, _ in groups):
        # a trainer set up in `__init__`, its other methods each importing apex.amp (the first example):
        # one rewrite, the scaler in `self.scaler`
        return plan_rewrite(analysis, [use for _, uses in groups for use in uses], initializers[0], None,
                            method_imports=tuple(node for node, _ in groups if node is not initializers[0]))
    for node, _ in groups:
        klass = _class_of(classes, node)
        if where(node) not in initializing and klass is not None \
                and any(_class_of(classes, other) is klass for other in initializers):
            return (f"apex.amp is imported by `{where(node)}` and by {', '.join(f'`{n}`' for n in initializing)}, "
                    "methods of one class: a class whose methods each import it is rewritten where initialize is in "
                    "`__init__` (the scaler is then there before any other method runs), not here (by hand: "
                    "`self.scaler = torch.amp.GradScaler(...)` where initialize was, used in the other methods)")
        if where(node) not in initializing:
            link = _handover(analysis, node, groups, initializers, functions)
            if link is not None:
                return link
            elsewhere = (f"initialize is in {', '.join(f'`{name}`' for name in initializing)}" if initializing
                         else "nor anywhere in the module: mixed precision is switched on elsewhere")
            return (f"in `{where(node)}`: apex.amp is used with no initialize in that function ({elsewhere}): the "
                    "scaler it becomes cannot reach these uses")
    rewrites = []
    for node, uses in groups:
        result = plan_rewrite(analysis, uses, node, None, commit=False)
        if isinstance(result, str):
            return type(result)(f"in `{where(node)}`: {result}")
        rewrites.append(result)
    return commit_rewrites(analysis, rewrites)


def _handover(analysis: ApexModule, node: ast.ImportFrom, groups: list[tuple[ast.ImportFrom, list[AmpUse]]],
              initializers: list[ast.ImportFrom],
              functions: list[ast.FunctionDef | ast.AsyncFunctionDef]) -> str | None:
    """Why a method whose class is handed its flag by initialize's function is not rewritten (`handover`), or
    None where the uses of `node` are not that shape."""
    def holder(statement: ast.stmt) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        return max((f for f in functions if _holds(f, statement)), key=lambda f: f.lineno, default=None)

    method = holder(node)
    initializing = [f for f in map(holder, initializers) if f is not None]
    scopes = {id(ref.node): ref.scope for ref in analysis.walker.chains}

    def names_class(name: ast.Name, klass: ast.ClassDef) -> bool:
        scope = scopes.get(id(name))
        found, bindings = scope.lookup(name.id) if scope is not None else (None, [])
        return found is analysis.walker.module_scope and [(b.kind, b.line) for b in bindings] == [("other",
                                                                                                  klass.lineno)]

    link = handover(analysis.context.parents.of, method, node, initializing, names_class) if method is not None \
        else None
    if link is None:
        return None

    def calls(rule: Rule, uses: list[AmpUse]) -> list[ast.Call]:
        return [u.ref.parent for u in uses if rules.rule_of(u.full) is rule and isinstance(u.ref.parent, ast.Call)]

    opt_level = next((k.value for _, uses in groups for call in calls(rules.INITIALIZE, uses) for k in call.keywords
                      if k.arg == "opt_level"), None)
    scale_loss = next((c for n, uses in groups if n is node for c in calls(rules.SCALE_LOSS, uses)
                       if len(c.args) >= 2), None)
    loss, optimizer = (ast.unparse(a) for a in scale_loss.args[:2]) if scale_loss is not None else ("loss", "optimizer")
    return link.reason(opt_level, loss, optimizer)


def _plan_parallel(analysis: ApexModule, uses: list[tuple[ChainRef, Binding, str, Rule]],
                   torch_imported_at: int | None) -> dict[int, str] | str:
    """AMP110/AMP111 (`ampfix.families.apex.parallel`), where every apex.parallel use is one of theirs: the message
    of each use by id() of its ref, or why nothing is rewritten (each use is then reported, with it).
    `torch_imported_at`: the line where the apex.amp rewrite, made beside it, imports torch."""
    parallel = [(ref, rule, full) for ref, _, full, rule in uses
                if full == "apex.parallel" or full.startswith("apex.parallel.")]
    if not parallel:
        return {}
    held = _held_back(analysis, [(ref.node.lineno, rule, ref.guards) for ref, rule, _ in parallel])
    return held or plan_parallel(analysis, [(ref, full) for ref, _, full in parallel], torch_imported_at)


def _plan_imports(analysis: ApexModule, rewritten: Rewritten | str,
                  parallel: dict[int, str] | str) -> tuple[Fp16Plan | str | None, dict[int, str]]:
    """After the rewrites of apex.amp and apex.parallel: `from apex.fp16_utils import *` (`fp16_utils`), then the
    imports they made unused in a `try` of several apex imports whose handlers only raise (`tried`). The star
    import's plan (or why not, or None where there is none), and the message of each import removed, by id()."""
    tree, index = analysis.tree, analysis.index
    engine = engine_of(analysis)
    bound = bool(analysis.walker.module_scope.bindings.get(rules.TO_PYTHON_FLOAT_NAME))
    fp16 = plan_fp16_utils(tree, index, bound)
    star = star_import(tree)
    held = raising_try(tree, star, index) if star is not None else None
    if isinstance(fp16, Fp16Plan) and not analysis.options.unsafe_fixes:
        fp16 = UnsafeOnly(f"{rules.TO_PYTHON_FLOAT} (an unsafe fix exists: --unsafe-fixes)")
    if isinstance(fp16, Fp16Plan):
        spans = [(a, b) for a, b, _ in fp16.splices]
        if any(s < b and a < e for s, e in engine.edit_spans() for a, b in spans) or held is None:
            fp16 = "another rewrite edits a call of to_python_float" if held is not None else \
                "the star import is not in a `try` of apex imports whose handlers only raise"
        else:
            engine.add_splices(list(fp16.splices))
    messages: dict[int, str] = {}
    for top in tree.body:
        if not (isinstance(top, ast.Try) and top.body and raising_try(tree, top.body[0], index) is top):
            continue
        gone: dict[int, set[str]] = {}
        for node in top.body:
            if isinstance(fp16, Fp16Plan) and node is fp16.statement:
                gone[id(node)] = {"*"}
            elif isinstance(node, ast.ImportFrom) and f"{node.module}.amp" == rules.AMP_MODULE \
                    and isinstance(rewritten, Rewritten):
                gone[id(node)] = {a.asname or a.name for a in node.names if a.name == "amp"}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("apex.parallel") \
                    and isinstance(parallel, dict) and parallel:
                gone[id(node)] = {a.asname or a.name for a in node.names}
        splices, said = plan_tried(tree, index, top, gone)
        engine.add_splices(splices)
        messages.update(said)
    for top in tree.body:
        first = next((s for s in top.body[1:] if imports_parallel(s)), None) if isinstance(top, ast.Try) else None
        optional = optional_holding(tree, first, analysis.walker.module_scope) if first is not None else None
        if optional is not None:
            splices, said = _optional_imports_gone(analysis, optional, rewritten, parallel)
            engine.add_splices(splices)
            messages.update(said)
    return fp16, messages


def _optional_imports_gone(analysis: ApexModule, optional: OptionalImport, rewritten: Rewritten | str,
                           parallel: dict[int, str] | str) -> tuple[list[tuple[int, int, str]], dict[int, str]]:
    """The optional import's `try` that also imports apex.parallel (timm's), after both rewrites, which left its
    imports here: where every import of it went (apex.amp's and apex.parallel's uses rewritten), the `try` goes, its
    `except` with it, and the flags it set True stay where it was, always True (what took apex's place is always
    there); where some went, those lines go, and the `try` stays for the rest, its flags True where the rest
    imports, as before. The edits, and the message of each import removed, by id()."""
    index = analysis.index
    amp_gone = isinstance(rewritten, Rewritten) and id(optional.import_node) in rewritten.messages
    gone = [optional.import_node] * amp_gone + [s for s in optional.others if isinstance(parallel, dict)
                                                 and id(s) in parallel]
    statement = optional.statement
    if not gone or any(not _own_lines(index, s) for s in gone):
        return [], {}
    flags = [f"`{target.id}`" for flag in optional.flags_set for target in flag.targets if isinstance(target, ast.Name)]
    if len(gone) == 1 + len(optional.others) and _own_lines(index, statement):
        newline = "\r\n" if index.text.count("\r\n") else "\n"
        kept = "".join(f"{index.text[index.span(flag)[0]:index.span(flag)[1]]}{newline}" for flag in optional.flags_set)
        said = (f"; {', '.join(flags)}, True exactly where apex imported, {'is' if len(flags) == 1 else 'are'} now "
                "always True: what took apex's place is always there" if flags else "")
        end = statement.end_lineno or statement.lineno
        splice = (index.line_start(statement.lineno), index.line_end(end), kept) if kept \
            else (*index.removal(statement.lineno, end), "")
        messages = {id(s): "the apex.parallel import is removed with the optional import's `try`: torch's names take "
                    "its place" for s in optional.others}
        messages[id(optional.import_node)] = ("the optional `from apex import amp` and its `except` branch are "
                                              "removed, with the apex.parallel imports of its `try` (torch.amp and "
                                              f"torch's names take their place){said}")
        return [splice], messages
    left = ", ".join(f"`{ast.unparse(s)}`" for s in (optional.import_node, *optional.others) if s not in gone)
    kept_flags = f" ({', '.join(flags)} True where it imports, as before)" if flags else ""
    return ([(*index.removal(s.lineno, s.end_lineno or s.lineno), "") for s in gone],
            {id(s): f"the import is removed from the optional import's `try`: what it imported is rewritten; the `try` "
                    f"stays for {left}{kept_flags}" for s in gone})


def _own_lines(index: SourceIndex, statement: ast.stmt) -> bool:
    """The statement alone on its lines, no comment on them (removing its lines drops nothing else)."""
    start, end = index.span(statement)
    text = index.text[index.line_start(statement.lineno):index.line_end(statement.end_lineno or statement.lineno)]
    return text.strip() == index.text[start:end].strip() and "#" not in text


def _amp_import(analysis: ApexModule, uses: list[tuple[ChainRef, Binding]]) -> ast.ImportFrom | OptionalImport | str:
    """The one `from apex import amp` the uses go through (plain at module level, the optional import, or plain in
    the function that uses it: the rewrite checks where in it), or why there is none."""
    bindings = {id(binding): binding for _, binding in uses}
    binding = next(iter(bindings.values()), None)
    dynamic = next((b for b in bindings.values() if b.inferred is not None), None)
    if dynamic is not None:
        return f"`{dynamic.name}` {dynamic.inferred}, which no rewrite moves with its uses"
    not_plain = ("apex.amp is not reached through one `from apex import amp` (at module level, or in the function "
                 "of its uses), or its name is also bound otherwise")
    if len(bindings) > 1:
        return _several_imports(list(bindings.values()), not_plain)
    if binding is None or binding.qname != rules.AMP_MODULE:
        return not_plain
    scope, found = uses[0][0].scope.lookup(binding.name)
    node = binding.imported_by.node if binding.imported_by is not None else None
    if scope is not None and scope.kind == "function" and found == [binding] \
            and isinstance(node, ast.ImportFrom) and imports_amp_alone(node):
        return node  # a local import (a function body, an `if`/`try` in it)
    module_bindings = analysis.walker.module_scope.bindings.get(binding.name, [])
    if module_bindings == [binding]:
        node = binding.imported_by.node if binding.imported_by is not None else None
        if isinstance(node, ast.ImportFrom) and node in analysis.tree.body and imports_amp_alone(node):
            return node
    if binding not in module_bindings:
        return not_plain
    if module_bindings == [binding] and isinstance(node, ast.ImportFrom) \
            and raising_try(analysis.tree, node, analysis.index):
        return node  # one of several apex imports in a `try` whose handlers only raise (`tried`)
    if module_bindings == [binding] and isinstance(node, ast.ImportFrom) and imports_amp_alone(node) \
            and conditional_import(analysis.tree, node) is not None:
        return node  # `if is_apex_available(): from apex import amp` at module level
    return optional_import(analysis.tree, binding, analysis.walker.module_scope)


def _text_of(analysis: ApexModule) -> Callable[[ast.AST], str]:
    """A node's source text, as the code spells it."""
    index = analysis.index
    return lambda node: index.text[slice(*index.span(node))]


def _state_import(analysis: ApexModule,
                  amp_uses: list[tuple[ChainRef, Binding, str]]) -> tuple[ast.Import, Binding] | None:
    """`import apex.amp._amp_state` beside the module's `from apex import amp` (GNMT's fp_optimizers.py), read only
    for apex's loss scalers (`apex.amp._amp_state.loss_scalers`): the import and the binding of `apex` it makes,
    which the rewrite removes with the other. Only a module-level import of that one name, no alias, and every read
    of the name it binds in the module one of those uses; else None (the reason names both imports)."""
    bindings = {id(binding): binding for _, binding, _ in amp_uses}
    others = [b for b in bindings.values() if b.qname != rules.AMP_MODULE]
    if len(bindings) != 2 or len(others) != 1:
        return None
    state = others[0]
    node = state.imported_by.node if state.imported_by is not None else None
    if not (isinstance(node, ast.Import) and node in analysis.tree.body and len(node.names) == 1
            and node.names[0].asname is None and node.names[0].name.startswith(rules.AMP_MODULE + ".")
            and analysis.walker.module_scope.bindings.get(state.name, []) == [state]):
        return None
    through = [(ref, full) for ref, binding, full in amp_uses if binding is state]
    roots = {id(_root(ref.node)) for ref, _ in through}
    if any(full != rules.LOSS_SCALERS for _, full in through) or any(
            isinstance(n, ast.Name) and n.id == state.name and id(n) not in roots for n in ast.walk(analysis.tree)):
        return None
    return node, state


def _root(node: ast.expr) -> ast.expr:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node


def _several_imports(bindings: list[Binding], not_plain: str) -> str:
    """Why uses reached through several import statements are not rewritten: each named with its line (GNMT's
    `import apex.amp._amp_state` beside `from apex import amp`)."""
    imports = {id(b.imported_by.node): b.imported_by.node for b in bindings if b.imported_by is not None}
    if len(imports) != len(bindings):
        return not_plain
    shown = ", ".join(f"`{ast.unparse(node)}` on line {node.lineno}"
                      for node in sorted(imports.values(), key=lambda n: (n.lineno, n.col_offset)))
    return (f"apex.amp is reached through {len(imports)} imports ({shown}), where the rewrite takes one `from apex "
            "import amp` (at module level, or in the function of its uses)")


def _imported_dynamically(chains: list[ChainRef]) -> bool:
    """`amp = importlib.import_module("apex.amp")` / `apex = __import__("apex")`: apex bound without an import
    statement (the walk binds the name to the module, as it does torch's)."""
    for ref in chains:
        if ref.role == "store" and isinstance(ref.parent, (ast.Assign, ast.AnnAssign)):
            imported = dynamic_import(ref.parent.value)
            if imported is not None and _owned(imported[0]):
                return True
    return False


def _report_named_modules(analysis: ApexModule) -> None:
    """A string that is exactly a removed apex name (`"apex.amp"`, `"apex.parallel.LARC"`), given to a call:
    `importlib.import_module("apex.amp")` (a dynamic import, whose uses are reported at their lines) or a probe
    (`find_spec("apex.amp")`, `_module_available("apex.amp")`), which answers False on current apex, so the apex path
    it guards goes silently dead. Reported at its line under the name's rule, never rewritten: what the call should
    name instead is the caller's choice (torch.amp is always there). A mention in a docstring or in a longer
    message is not an argument that is exactly the name, and is not reported."""
    for ref in analysis.walker.strings:
        path, call = ref.value, ref.parent
        if not (path.startswith(_APEX_PREFIX) and isinstance(call, ast.Call) and _is_argument(ref.node, call)):
            continue
        rule = rules.rule_of(path)
        if rule is None or not all(part.isidentifier() for part in path.split(".")):
            continue
        alone = len(call.args) == 1 and not call.keywords
        called = ast.unparse(call) if alone else f"{ast.unparse(call.func)}(...)"
        if dynamic_import(call) is not None:
            detail = (f"`{called}` imports it by name, a dynamic import no rewrite moves: it fails on current apex "
                      "(where a handler catches that, what it guards silently stops running); migrate by hand")
        else:
            detail = (f"`{called}` names it: on current apex a probe of this name answers False (an import or a "
                      "patch of it fails), so the apex path it guards silently goes dead; reported, never rewritten")
        _report(analysis, ref.node, rule, _advice(path), detail)


_APEX_PREFIX = "apex."


def _is_argument(node: ast.expr, call: ast.Call) -> bool:
    return any(arg is node for arg in call.args) or any(keyword.value is node for keyword in call.keywords)


def _import_qnames(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level or node.module is None:
        return []
    return [f"{node.module}.{alias.name}" for alias in node.names]


def _report_use(analysis: ApexModule, ref: ChainRef, rule: Rule, full: str, not_rewritten: str = "",
                unsafe_fix: bool = False, said: str = "") -> None:
    notes = [said]
    call = ref.parent if ref.role == "call" and isinstance(ref.parent, ast.Call) else None
    if rule is rules.INITIALIZE and call is not None:
        notes.append(_initialize_detail(call))
    elif rule is rules.SCALE_LOSS and call is not None:
        notes.append(_scale_loss_detail(call))
    if not_rewritten:
        notes.append(f"not rewritten: {not_rewritten}")
    advice = _advice(full)
    twin = float16_function(call, ref.scope, analysis.resolve_value) \
        if call is not None and full == rules.REGISTER_HALF else None
    if twin is not None:  # autocast runs it in float16: nothing to wrap, it goes with the set-up's migration
        advice = rules.Advice(advice.reason, rules.FLOAT16_REGISTRATION.format(name=twin))
    _report(analysis, ref.node, rule, advice, "; ".join(n for n in notes if n), unsafe_fix)


def _argument(call: ast.Call, name: str, params: tuple[str, ...]) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    index = params.index(name)
    positional = [a for a in call.args if not isinstance(a, ast.Starred)]
    if len(positional) == len(call.args) and index < len(positional):
        return positional[index]
    return None


def _initialize_detail(call: ast.Call) -> str:
    """What in this initialize call is more than O1 (named, so a person knows what native AMP drops)."""
    notes = []
    opt_level = _argument(call, "opt_level", rules.INITIALIZE_PARAMS)
    if opt_level is None:
        has_unpacking = any(isinstance(a, ast.Starred) for a in call.args) or any(
            k.arg is None for k in call.keywords)
        level = None if has_unpacking else rules.INITIALIZE_DEFAULT_OPT_LEVEL
    elif isinstance(opt_level, ast.Constant) and isinstance(opt_level.value, str):
        level = opt_level.value
    else:
        level = None
    if level is None:
        notes.append("opt_level is not a literal here: O1 (what native autocast does) cannot be told from O2")
    elif level in rules.OPT_LEVELS:
        notes.append(rules.OPT_LEVELS[level])
    else:
        notes.append(f"opt_level {level!r} is not one apex defines")
    for keyword in call.keywords:
        if keyword.arg in rules.INITIALIZE_KEYWORDS:
            notes.append(rules.INITIALIZE_KEYWORDS[keyword.arg])
    loss_scale = _argument(call, "loss_scale", rules.INITIALIZE_PARAMS)
    if loss_scale is not None and not (isinstance(loss_scale, ast.Constant)
                                       and loss_scale.value == rules.DYNAMIC_LOSS_SCALE):
        notes.append("a static loss_scale never changes and skips no step: GradScaler(init_scale=...) still "
                     "halves its scale and skips the step on overflow")
    return "; ".join(notes)


def _scale_loss_detail(call: ast.Call) -> str:
    notes = []
    keywords = {k.arg for k in call.keywords}
    if "loss_id" in keywords or len(call.args) > 2:
        notes.append("loss_id selects one of several loss scales: one GradScaler serves every loss with one scale")
    if "delay_unscale" in keywords:
        notes.append("delay_unscale has no native twin and needs none: scaled gradients accumulate until "
                     "scaler.step(optimizer) at the accumulation boundary")
    return "; ".join(notes)


def _report_imports(analysis: ApexModule, used: set[int], left: set[int], rewritten: Rewritten,
                    why: dict[int, str]) -> None:
    """Every apex import the rewrite does not remove is reported at its line (it fails on current apex): the
    optional import says its handler silently turns mixed precision off, an import with a use left through it
    (`left`, id() of bindings) says the uses are reported too. Fixed where the rewrite removes the optional import
    (`rewritten` holds its message by id() of the import); a plain one whose every use is rewritten goes silently
    with them. `why`: the reason an import stays, by id() of it (the star import of apex.fp16_utils)."""
    for imp in analysis.walker.imports:
        for qname in _import_qnames(imp.node):
            rule = rules.rule_of(qname) if _owned(qname) else None
            if rule is None:
                continue
            advice = _advice(qname)
            if id(imp.node) in rewritten.messages:
                _report_fixed(analysis, imp.node, rule, rewritten.messages[id(imp.node)], rewritten.unsafe)
            elif id(imp.node) in why:
                _report(analysis, imp.node, rule, advice, f"not rewritten: {why[id(imp.node)]}",
                        unsafe_fix=isinstance(why[id(imp.node)], UnsafeOnly))
            elif imp.optional and rules.under_amp(qname):
                _report(analysis, imp.node, rule, advice,
                        "where the import fails (current apex), the `except` branch runs and training silently "
                        "goes on in float32; torch.amp is always there, so import nothing instead")
            elif imp.optional:  # apex.parallel beside it (timm's): what the `except` turns off is not mixed precision
                _report(analysis, imp.node, rule, advice,
                        "where the import fails (current apex), the `except` branch runs and the code silently goes "
                        "on without it; torch's twin is always there, so import nothing instead")
            elif not _binding_used(imp.scope, imp.node, qname, used):
                _report(analysis, imp.node, rule, advice)
            elif _binding_used(imp.scope, imp.node, qname, left):  # it fails on current apex too
                _report(analysis, imp.node, rule, advice, "the uses of what it imports are reported at their lines")


def _binding_used(scope: Scope, node: ast.Import | ast.ImportFrom, qname: str, used: set[int]) -> bool:
    """Does a reported use go through the name this import binds for `qname`?"""
    for alias in node.names:
        if isinstance(node, ast.Import):
            if alias.name != qname:
                continue
            name = alias.asname or alias.name.partition(".")[0]
        elif f"{node.module}.{alias.name}" == qname:
            name = alias.asname or alias.name
        else:
            continue
        if any(id(b) in used and b.line == node.lineno for b in scope.bindings.get(name, [])):
            return True
    return False


def _may_hold_settings(analysis: ApexModule) -> bool:
    """Whether `_report_settings` can find anything: a setting's value written as a literal, or DeepSpeed's key
    "amp" (a recorded string). Checked before walking the tree, also in a file that imports apex: on real code
    that walk cost as much as the file's parse."""
    text = analysis.index.text
    return any(quoted in text for quoted in rules.SPELLINGS.quoted) or any(
        ref.node.value == rules.DEEPSPEED_AMP_KEY for ref in analysis.walker.strings)


def _report_settings(analysis: ApexModule) -> None:
    """Each setting that selects apex: a keyword or a dict entry whose value is the setting's string, and DeepSpeed's
    "amp" key holding a dict. Read from the strings the walk recorded with their parent (each value spells a part
    the walk records, `STRING_PARTS`), not from a second walk of the tree."""
    for ref in analysis.walker.strings:
        node, parent, value = ref.node, ref.parent, ref.value
        if isinstance(parent, ast.Call):
            for keyword in parent.keywords:
                if keyword.value is node and keyword.arg is not None:
                    _report_setting(analysis, node, rules.CONFIG_SETTINGS.get((keyword.arg, value)))
        elif isinstance(parent, ast.Dict):
            for key, item in zip(parent.keys, parent.values):
                if item is node and isinstance(key, ast.Constant) and isinstance(key.value, str):
                    _report_setting(analysis, key, rules.CONFIG_SETTINGS.get((key.value, value)))
                elif key is node and value == rules.DEEPSPEED_AMP_KEY and isinstance(item, ast.Dict):
                    _report_setting(analysis, key, rules.DEEPSPEED_ADVICE)


def _report_setting(analysis: ApexModule, where: ast.AST, advice: rules.Advice | None) -> None:
    if advice is not None:
        _report(analysis, where, rules.FRAMEWORK_CONFIG, advice)
