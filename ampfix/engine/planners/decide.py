"""The decision for one use of a deprecated name: rewrite it (and how), or report it (and why).

Each use gets one `Decision`, made once from the use, the rule of its name, the options and the branches
around it. The device a moved call gets is the device policy's (`ampfix.families.torch_amp.device`).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, replace

from ampfix.core.plan import CallEdit, ChainEdit
from ampfix.core.rules import Family, Rule, Target, partial_with_defaults
from ampfix.engine.nesting import module_nesting, spelled_defaults, written_defaults
from ampfix.engine.planners.probes import probes
from ampfix.families import NO_TWIN_CODE
from ampfix.families.torch_amp.device import cpu_dtypes, device_text, site_device
from ampfix.syntax.bindings import Binding, ChainRef
from ampfix.syntax.context import ModuleContext
from ampfix.syntax.flow import Flow, ModuleFlows


@dataclass(frozen=True)
class Use:
    """A dotted name in the code that resolves below a deprecated root."""

    ref: ChainRef
    full: str  # the qualified name it resolves to
    binding: Binding  # the import its head goes through
    # (id(scope), name) of a deprecated import binding it goes through: those uses move together
    group: tuple[int, str] | None
    conflicting: bool  # its head is bound to several things


@dataclass(frozen=True)
class Decision:
    code: str
    message: str
    edit: ChainEdit | None = None  # None: left as it is
    fixable: bool = False
    unsafe: bool = False
    suggestion: str | None = None
    # Arguments respelled with the call when it moves to the CPU: (the dotted name, its new spelling).
    dtype_edits: tuple[tuple[ast.expr, str], ...] = ()
    module_device: bool = False  # its device is the module's device name (--device auto)


def decide(context: ModuleContext, use: Use, package_added: bool = False) -> Decision:
    """`package_added`: the run adds `import <package>` at the top (--device auto's device name needs it), so
    a chain no name bound to the package can spell is spelled through the package's own name (the second run
    would, once the import is there)."""
    ref, full, family = use.ref, use.full, context.family
    symbol = family.symbol(full)
    if use.conflicting:
        code = symbol[1].code if symbol else NO_TWIN_CODE
        dead = context.judge.dead(ref.guards)
        if dead is not None:
            return Decision(code, f"`{full}` left: {dead}")
        lines = sorted({b.line for b in ref.scope.lookup(ref.parts[0])[1]})
        return Decision(code, f"`{ref.parts[0]}` is bound to several things (lines {', '.join(map(str, lines))}); "
                        "rewriting one use would break the others")
    missing = family.missing_twin(full)
    if missing is not None:
        listed_by, why = missing
        if listed_by is None:
            return Decision(NO_TWIN_CODE, f"{why}; there is nothing to migrate it to")
        return Decision(listed_by.code, why)
    assert symbol is not None
    name, rule, target = symbol
    assert target is not None
    rest = full[len(name):]
    new_name = target.new + rest
    suggestion = new_name if rest or ref.role in ("type", "none_test") else suggest(context, rule, target, new_name)
    new_dotted = None
    if use.group is None:
        new_dotted = context.spelled_through(ref.parts[0], use.binding, ref.scope, new_name)
        if new_dotted is None and package_added and not ref.scope.lookup(family.package)[1]:
            new_dotted = new_name
        if new_dotted is None:
            return Decision(rule.code, f"`{full}`: no name bound to `{family.package}` here to spell "
                            f"`{new_name}` with",
                            suggestion=new_name)
        start, end = (0, 0) if ref.in_string else context.index.span(ref.node)
        if "#" in context.index.text[start:end]:  # the new name is written afresh: a comment in it would go
            return Decision(rule.code, f"`{full}`: a comment inside the dotted name; migrate by hand",
                            suggestion=new_name)
    if ref.role == "feature_check":
        return decide_feature_check(context, use, target, rest, new_dotted)
    reason = _held_back(context, use, rule)
    if reason is not None:
        return Decision(rule.code, f"`{full}` left: {reason}", suggestion=suggestion)
    return decide_context(context, use, rule, target, rest, new_name, new_dotted, suggestion)


def _held_back(context: ModuleContext, use: Use, rule: Rule) -> str | None:
    """Why the use keeps its old name: its own rule and branches, or those of the deprecated import it
    goes through."""
    imported = context.family.symbol(use.binding.qname or "") if use.group is not None else None
    by = use.binding.imported_by
    if imported is not None and by is not None and id(by.node) in context.fact(probes):
        return f"its import on line {by.node.lineno} is a probe the `except` stands in for"
    renamed = renamed_twin_blocker(context.family, imported[0], use.ref.parts[0]) if imported is not None else None
    if renamed is not None:
        return renamed
    elsewhere = context.imported_elsewhere(by, use.ref.parts[0]) if imported is not None and by is not None else None
    if elsewhere is not None:
        return elsewhere
    return context.hold_back(rule, use.ref.guards) or (
        context.hold_back(imported[1], use.binding.guards) if imported is not None else None)


def renamed_twin_blocker(family: Family, qname: str, bound: str) -> str | None:
    """A twin with another name is imported under the old one's `as` name (`from torch import
    get_autocast_gpu_dtype as g` -> `get_autocast_dtype as g`); bound under the old name itself, the line
    would have to read `import get_autocast_dtype as get_autocast_gpu_dtype`, or every use be renamed: left."""
    new = family.imported_twin_name(qname)
    if new is None or bound != qname.rpartition(".")[2]:
        return None
    return f"its twin `{new}` has another name: import it (`as` a name of your own) and rewrite the uses by hand"


def suggest(context: ModuleContext, rule: Rule, target: Target, new_name: str) -> str:
    """The new call, spelled out for a person to finish by hand."""
    shape = rule.shape
    if shape is None:
        return new_name
    device = device_text(context, target)
    if shape.device_keyword:
        return f"{new_name}(..., {shape.device_keyword}={device})"
    if shape.positionals_to_keywords:
        params = [f"{p}=..." for p in shape.old_params]
    elif shape.device_position:
        params = list(shape.old_params)
    else:
        params = ["..."]
    params.insert(shape.device_position or 0, device)
    return f"{new_name}({', '.join(params)})"


def decide_feature_check(context: ModuleContext, use: Use, target: Target, rest: str,
                         new_dotted: str | None) -> Decision:
    """`hasattr(torch.cuda.amp, "autocast")` asks the same of `torch.amp` when the name has a twin
    there under the same name."""
    full, call, family = use.full, use.ref.parent, context.family
    assert isinstance(call, ast.Call)
    attribute = call.args[1] if len(call.args) == 2 else None
    if not (target.module and not rest and isinstance(attribute, ast.Constant)
            and isinstance(attribute.value, str)):
        return Decision(NO_TWIN_CODE, f"`{full}`: the module object itself has no drop-in twin",
                        suggestion=target.new if target.module else None)
    asked = f"{full}.{attribute.value}"
    twin = family.symbol(asked)
    if twin is None or twin[0] != asked or twin[2] is None or twin[2].new != family.renamed(asked):
        return Decision(NO_TWIN_CODE, f"`hasattr({full}, {attribute.value!r})`: `{target.new}` has no "
                        f"`{attribute.value}` to ask for instead")
    check_rule = twin[1]
    reason = _held_back(context, use, check_rule)
    if reason is not None:
        return Decision(check_rule.code, f"`hasattr({full}, {attribute.value!r})` left: {reason}",
                        suggestion=target.new)
    return Decision(check_rule.code, f"`hasattr({full}, {attribute.value!r})` -> "
                    f"`hasattr({target.new}, {attribute.value!r})`", ChainEdit(new_dotted=new_dotted),
                    fixable=True)


def decide_context(context: ModuleContext, use: Use, rule: Rule, target: Target, rest: str, new_name: str,
                   new_dotted: str | None, suggestion: str) -> Decision:
    """The decision by where the name stands: called, a decorator, a base class, a type, a plain value."""
    ref, full, shape = use.ref, use.full, rule.shape

    def rewrite(message: str, edit: ChainEdit) -> Decision:
        return Decision(rule.code, message, edit, fixable=True, suggestion=suggestion)

    def leave(message: str, code: str = rule.code) -> Decision:
        return Decision(code, message, suggestion=suggestion)

    if ref.role == "none_test":
        return rewrite(f"`{full}` -> `{new_name}` (compared with None: the signature does not matter)",
                       ChainEdit(new_dotted=new_dotted))
    if shape is None:  # a pure rename
        if target.module and not rest and ref.role != "type":
            return leave(f"`{full}`: the module object itself has no drop-in twin", NO_TWIN_CODE)
        return rewrite(f"`{full}` -> `{new_name}`", ChainEdit(new_dotted=new_dotted))
    if rest:
        return leave(f"`{full}`: an attribute of a deprecated object; migrate by hand")
    if ref.role == "type":
        return rewrite(f"`{full}` -> `{new_name}` (type position)", ChainEdit(new_dotted=new_dotted))
    site = site_device(context, ref, target)
    if isinstance(site, str):
        return leave(f"`{full}` left: {site}")
    device, note, module_device = site
    if ref.role == "call":
        decision = decide_call(context, use, rule, target, device, new_name, new_dotted, suggestion)
        if decision.edit is None:
            return decision
        return replace(decision, message=decision.message + note, module_device=module_device)
    if ref.role == "decorator":
        if shape.bare_decorator_ok:
            args = f"{shape.device_keyword}={device}"
            return replace(rewrite(f"`@{full}` -> `@{new_name}({args})`{note}",
                                   ChainEdit(new_dotted=new_dotted, decorator_call=args)),
                           module_device=module_device)
        return leave(f"bare `@{full}` passes the function as `enabled`; add the arguments by hand")
    return _decide_reference(context, use, rule, target, new_name, new_dotted, suggestion,
                             (device, note, module_device))


def _decide_reference(context: ModuleContext, use: Use, rule: Rule, target: Target, new_name: str,
                      new_dotted: str | None, suggestion: str, site: tuple[str, str, bool]) -> Decision:
    """A class or function referenced, not called: a base class, or a value (an unsafe functools.partial)."""
    ref, full, shape = use.ref, use.full, rule.shape
    assert shape is not None
    device, note, module_device = site

    def unsafe(message: str, edit: ChainEdit, suggestion: str = suggestion) -> Decision:
        if context.options.unsafe_fixes:
            return Decision(rule.code, message, edit, fixable=True, unsafe=True, suggestion=suggestion)
        return Decision(rule.code, message + " (an unsafe fix exists: --unsafe-fixes)", None, fixable=True,
                        unsafe=True, suggestion=suggestion)

    if ref.role == "base":
        return _decide_base(context, use, rule, (new_name, new_dotted, device), suggestion, unsafe)
    flows = context.fact(module_flows)
    keyword_partial = _keyword_partial(context, use, rule)
    if keyword_partial is not None:
        call, complete = keyword_partial
        # Without the old first parameter, a positional call of the partial would bind it: every call must be seen.
        if complete or _left(flows.follow(call, ref.scope)) is None:
            return _decide_partial(context, use, rule, new_name, new_dotted, suggestion, site, call, complete)
    message = f"`{full}` is referenced without a call; its calls cannot be given the device here"
    if _identity_matters(ref):
        return Decision(rule.code, message + "; it stands where the class itself is looked up or compared (a dict "
                        "key, a set element, a comparison), which a functools.partial is not", suggestion=suggestion)
    flow = flows.follow(ref.node, ref.scope)
    if shape.partial_keeps_meaning:
        args = f"{shape.device_keyword}={device}" if shape.device_keyword else device
        edit = ChainEdit(new_dotted=new_dotted, partial_args=args)
        if flow.escape is None:  # only called: a partial answers every call as the class did, by position too
            return Decision(rule.code, f"`{full}` is referenced without a call and {_only_called(flow)}: "
                            f"functools.partial({new_name}, {args}) takes the same arguments{note}", edit,
                            fixable=True, suggestion=f"functools.partial({new_name}, {args})",
                            module_device=module_device)
        return replace(unsafe(message + f"; {flow.escape}" + note, edit,
                              suggestion=f"functools.partial({new_name}, {args})"),
                       module_device=module_device)
    if partial_with_defaults(shape, target):
        # autocast: a partial with the device and the old defaults as keywords. Calls without arguments or
        # by keyword mean what they did; a positional call raises TypeError (multiple values for `dtype`)
        # instead of binding `enabled` to `dtype`: it cannot change meaning silently.
        defaults = spelled_defaults(context, ref, use.binding, full, target, target.old_defaults,
                                    "referenced without a call")
        if isinstance(defaults, str):
            return Decision(rule.code, message + f"; {defaults}", suggestion=suggestion)
        written, notes = defaults
        args = ", ".join([device, *(f"{param}={value}" for param, value in written)])
        edit, partial = ChainEdit(new_dotted=new_dotted, partial_args=args), f"functools.partial({new_name}, {args})"
        said = "".join(f"; {n}" for n in notes)
        left = _left(flow)
        if left is None:  # every call seen, none by position: the partial means what the class meant at each
            return Decision(rule.code, f"`{full}` is referenced without a call and "
                            f"{_only_called(flow, ' without positional arguments')}: {partial} keeps the old "
                            f"defaults{said}{note}", edit,
                            fixable=True, suggestion=partial, module_device=module_device)
        said = (f"; {left}; {partial} keeps the old defaults, and a positional call raises TypeError instead of "
                f"shifting its arguments{said}")
        return replace(unsafe(message + said + note, edit, suggestion=partial), module_device=module_device)
    return Decision(rule.code, message, suggestion=suggestion)


def _decide_base(context: ModuleContext, use: Use, rule: Rule, new: tuple[str, str | None, str], suggestion: str,
                 unsafe: Callable[[str, ChainEdit], Decision]) -> Decision:
    """A class deriving from the deprecated class: rebased where no construction of it can bind the new `device`,
    and the new class's default device is the target's (`new`: the new name, its dotted edit, the target device)."""
    ref, full, shape = use.ref, use.full, rule.shape
    new_name, new_dotted, device = new
    assert shape is not None
    symbol = context.family.symbol(full)
    old_device = symbol[2].device if symbol is not None and symbol[2] is not None else None
    if shape.device_default is not None and old_device != shape.device_default:
        return Decision(rule.code, f"class derives from `{full}`: `{new_name}` builds on "
                        f"{shape.device_default!r} by default where `{full}` built on {old_device!r}",
                        suggestion=suggestion)
    if shape.device_default is not None and not _spells(device, shape.device_default):
        # --device cpu, --device-expr: the rebased class would build on its default, not on the target device
        return Decision(rule.code, f"class derives from `{full}`: `{new_name}` builds on {shape.device_default!r} "
                        f"by default, where the target device is `{device}`, and the subclass's constructions "
                        "cannot be given it here", suggestion=suggestion)
    if _keyword_only_init(ref):
        return Decision(rule.code, f"class derives from `{full}` -> `{new_name}`: its `__init__` passes only "
                        "keywords to `super().__init__`, so no construction binds `device`",
                        ChainEdit(new_dotted=new_dotted), fixable=True, suggestion=suggestion)
    said = f"class derives from `{full}`: a positional construction of the subclass would bind to `device` of " \
           f"`{new_name}`"
    seen = _constructions(context, ref)
    if seen is None:
        return unsafe(said, ChainEdit(new_dotted=new_dotted))
    places, positional, escape = seen
    cls = ref.parent
    assert isinstance(cls, ast.ClassDef)
    if positional is not None:  # a construction that would bind `device`: no fix, unsafe or not
        return Decision(rule.code, f"class derives from `{full}`: `{cls.name}(...)` {positional} passes an "
                        f"argument by position, which would bind to `device` of `{new_name}`",
                        suggestion=suggestion)
    if escape is not None:
        return unsafe(f"{said}; {escape}", ChainEdit(new_dotted=new_dotted))
    if not places:
        return unsafe(f"{said}; no construction of `{cls.name}` is seen in the project",
                      ChainEdit(new_dotted=new_dotted))
    shown = ", ".join(places[:3]) + (f" and {len(places) - 3} more" if len(places) > 3 else "")
    return Decision(rule.code, f"class derives from `{full}` -> `{new_name}`: every construction of "
                    f"`{cls.name}` in the project passes keywords only or nothing ({shown}), so none binds "
                    "`device`", ChainEdit(new_dotted=new_dotted), fixable=True, suggestion=suggestion)


def _spells(expression: str, value: str) -> bool:
    """Is the source text `expression` the string literal `value` (`"cuda"`, `'cuda'`)?"""
    try:
        return ast.literal_eval(expression) == value
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False


def module_flows(context: ModuleContext) -> ModuleFlows:
    """Where the module's values go (`ampfix.syntax.flow`): a fact of the module, read by each reference."""
    return ModuleFlows(context.tree, context.walker, context.parents,
                       lambda func, scope: context.resolve_value(func, scope) == "functools.partial", context.project)


def _left(flow: Flow) -> str | None:
    """Why the calls a value reaches may not all mean what they did through a partial: where it escapes, or the
    first call that passes an argument by position; None: every call is seen and passes none."""
    return flow.escape or next((f"the call on line {call.lineno} passes an argument by position"
                                for call in flow.calls if call.args), None) or (
        flow.remote_positional and f"the call at {flow.remote_positional} passes an argument by position")


def _only_called(flow: Flow, how: str = "") -> str:
    """What the message says of a value followed to its calls, each by its line."""
    if not flow.calls and not flow.remote:
        return "its value is never read"
    lines = sorted({call.lineno for call in flow.calls})
    places = [f"{'line' if len(lines) == 1 else 'lines'} {', '.join(map(str, lines))}"] if lines else []
    places += flow.remote[:3] + ((f"{len(flow.remote) - 3} more",) if len(flow.remote) > 3 else ())
    return f"only called{how} ({', '.join(places)})"


def _constructions(context: ModuleContext, ref: ChainRef) -> tuple[list[str], str | None, str | None] | None:
    """Every construction of the class `ref` is the one base of, in this module and the project's others: where each
    is, the first that passes an argument by position (as `on line N` or `at path:line`), and where the class goes
    that cannot be followed. None: not asked (no project to read, or a class whose constructions do not alone
    decide what reaches the base's `__init__`: another base or a metaclass, a decorator, its own `__init__` or
    `__new__`, not bound once at the top of the module)."""
    cls, scope = ref.parent, context.walker.module_scope
    if context.project is None or not (isinstance(cls, ast.ClassDef) and cls in context.tree.body
                                       and cls.bases == [ref.node] and not cls.keywords and not cls.decorator_list
                                       and len(scope.bindings.get(cls.name, ())) == 1):
        return None
    for node in ast.walk(cls):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in ("__init__", "__new__") \
                and node in cls.body:
            return None
        if isinstance(node, ast.Call) and _constructs_itself(node, cls):
            return [], None, f"it is constructed through `{ast.unparse(node.func)}` on line {node.lineno}"
    reads = [(chain, 1) for chain in context.walker.chains if chain.parts[0] == cls.name and chain.role != "store"
             and chain.scope.lookup(cls.name)[0] is scope]
    flow = context.fact(module_flows).constructions(reads, cls.name)
    places = [f"line {call.lineno}" for call in flow.calls] + list(flow.remote)
    positional = next((f"on line {call.lineno}" for call in flow.calls if call.args), None) or (
        flow.remote_positional and f"at {flow.remote_positional}")
    if positional is not None or flow.escape is not None:
        return places, positional, flow.escape
    elsewhere = context.project.constructions(cls.name)
    if elsewhere is None:
        return None
    return places + list(elsewhere.seen), elsewhere.positional and f"at {elsewhere.positional}", elsewhere.escape


def _constructs_itself(call: ast.Call, cls: ast.ClassDef) -> bool:
    """`cls(...)`, `type(self)(...)`, `self.__class__(...)`, `super().__init__(...)` in the class's body: a
    construction, or an `__init__` call, that no read of its name shows."""
    func = call.func
    if isinstance(func, (ast.Call, ast.Subscript)) or (isinstance(func, ast.Attribute)
                                                       and func.attr in ("__class__", "__init__")):
        return True
    if not isinstance(func, ast.Name):
        return False
    return any(isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) and method.args.args
               and method.args.args[0].arg == func.id for method in cls.body)


def _keyword_only_init(ref: ChainRef) -> bool:
    """The class has this one base and defines `__init__` once, at the top of its body; every `.__init__(...)`
    call in it is `super(...).__init__(...)` with keywords only. Every construction of the class (or of a
    subclass that does not define its own `__init__`) then reaches the base's `__init__` by keyword: a
    positional argument cannot land on the new class's `device`, which keeps its default."""
    cls = ref.parent
    if not (isinstance(cls, ast.ClassDef) and len(cls.bases) == 1 and cls.bases[0] is ref.node and not cls.keywords):
        return False
    inits = [stmt for stmt in ast.walk(cls) if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))
             and stmt.name == "__init__"]
    if len(inits) != 1 or inits[0] not in cls.body or isinstance(inits[0], ast.AsyncFunctionDef):
        return False
    for node in ast.walk(inits[0]):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "__init__":
            receiver = node.func.value
            if not (isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name)
                    and receiver.func.id == "super") or node.args:
                return False
    return True


def _keyword_partial(context: ModuleContext, use: Use, rule: Rule) -> tuple[ast.Call, bool] | None:
    """`functools.partial(<name>, k=v, ...)` with keywords only, and whether the old first parameter is among
    them (complete): then the partial cannot be called with a positional argument (it would take that first
    parameter twice, a TypeError in the old code too), so every argument keeps its meaning after a device put
    first. Without it, only where every call of the partial is seen to pass none by position."""
    call, shape = use.ref.parent, rule.shape
    if not (isinstance(call, ast.Call) and len(call.args) == 1 and call.args[0] is use.ref.node and shape is not None
            and shape.device_position == 0 and shape.old_params):
        return None
    keywords = {kw.arg for kw in call.keywords}
    if None in keywords or not keywords <= set(shape.old_params):
        return None
    if context.resolve_value(call.func, use.ref.scope) != "functools.partial":
        return None
    return call, shape.old_params[0] in keywords


def _decide_partial(context: ModuleContext, use: Use, rule: Rule, new_name: str, new_dotted: str | None,
                    suggestion: str, site: tuple[str, str, bool], call: ast.Call, complete: bool) -> Decision:
    """`complete`: the partial gives the old first parameter; else every call of it is seen to pass only keywords,
    and the old defaults it does not give are written into it (where its calls run is not weighed)."""
    full, (device, note, module_device) = use.full, site
    symbol = context.family.symbol(full)
    target = symbol[2] if symbol is not None else None
    given = {kw.arg for kw in call.keywords}
    missing = [(param, value) for param, value in target.old_defaults if param not in given] if target else []
    added: tuple[tuple[str, str], ...] = ()
    if not complete and target is not None:
        spelled = spelled_defaults(context, use.ref, use.binding, full, target, missing, "in a partial")
        if isinstance(spelled, str):
            return Decision(rule.code, spelled, suggestion=suggestion)
        added = spelled[0]
    elif missing and (context.options.explicit_autocast_defaults
                      or context.fact(module_nesting).reason(call) is not None):
        return Decision(rule.code, f"`functools.partial({full}, ...)`: the autocast defaults in force where it "
                        "is called may differ; migrate by hand", suggestion=suggestion)
    dtype_edits, said = cpu_dtypes(context, use.ref, rule, target) if target is not None else ((), [])
    what = "".join(f"; {text}" for text in said)
    if added:
        what += (f"; every call of it passes keywords only, and the old defaults it lacks are written "
                 f"({', '.join(f'{k}={v}' for k, v in added)})")
    return Decision(rule.code, f"`functools.partial({full}, ...)` -> `functools.partial({new_name}, {device}, ...)` "
                    f"(keywords only){what}{note}",
                    ChainEdit(new_dotted=new_dotted, partial_device=device, partial_keywords=added),
                    fixable=True, suggestion=f"functools.partial({new_name}, {device}, ...)",
                    dtype_edits=dtype_edits, module_device=module_device)


def decide_call(context: ModuleContext, use: Use, rule: Rule, target: Target, device: str, new_name: str,
                new_dotted: str | None, suggestion: str) -> Decision:
    full, shape, call = use.full, rule.shape, use.ref.parent
    assert shape is not None and isinstance(call, ast.Call)

    def leave(message: str) -> Decision:
        return Decision(rule.code, message, suggestion=suggestion)

    starred = any(isinstance(arg, ast.Starred) for arg in call.args)
    # `*args` only matters where positions move: named (autocast) or a device among them (_cast).
    if starred and (shape.positionals_to_keywords or shape.device_position not in (None, 0)):
        return leave(f"`{full}(*args)`: the positions of the arguments are unknown")
    positionals = len(call.args)
    if not starred and positionals > len(shape.old_params):
        return leave(f"`{full}` called with {positionals} positional arguments; it takes at most "
                     f"{len(shape.old_params)}")
    keywords = {kw.arg for kw in call.keywords if kw.arg is not None}
    if keywords & {shape.device_keyword, *context.family.device_keywords}:
        return leave(f"`{full}` already given a device argument")
    if shape.device_position is not None and positionals < shape.device_position:
        return leave(f"`{full}`: the arguments before the device are passed by keyword")
    names = shape.old_params[:positionals] if shape.positionals_to_keywords else ()
    edit = CallEdit(device, shape.device_position, shape.device_keyword, tuple(names))
    what = f"device {device}"
    if names:
        what += ", positional arguments named " + ", ".join(names)
    dtype_edits, said = cpu_dtypes(context, use.ref, rule, target)
    what += "".join(f"; {text}" for text in said)
    defaults = written_defaults(context, use.ref, use.binding, full, target, call)
    if isinstance(defaults, str):
        return leave(defaults)
    edit = replace(edit, added_keywords=defaults[0])
    return Decision(rule.code, f"`{full}(...)` -> `{new_name}(...)` with {what}{defaults[1]}",
                    ChainEdit(new_dotted=new_dotted, call=edit), fixable=True, suggestion=suggestion,
                    dtype_edits=dtype_edits)


def _identity_matters(ref: ChainRef) -> bool:
    """Is the reference a dict key, a set element or an operand of a comparison? There the class is
    looked up or compared (`{GradScaler: save_hook}[type(obj)]`), and no stand-in keeps its meaning."""
    parent, node = ref.parent, ref.node
    if isinstance(parent, ast.Dict):
        return any(key is node for key in parent.keys)
    if isinstance(parent, ast.DictComp):
        return parent.key is node
    return isinstance(parent, (ast.Set, ast.Compare))
