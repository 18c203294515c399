"""The mechanical apex.amp -> native torch.amp rewrite, planned only where the code proves it right.

The shape (a single training function, as in yolov5's or transformers' scripts, or a script's top level):

    from apex import amp                                  (alone, at module level, not optional)
    def train(...):
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")    (F's own body)
        for ...:
            out = model(x)                                (the statements before the scale_loss
            loss = criterion(out, y)                       in its block: the forward pass and loss)
            with amp.scale_loss(loss, optimizer) as scaled:
                scaled.backward()
            torch.nn.utils.clip_grad_norm_(amp.master_params(optimizer), n)    (directly before a step)
            optimizer.step()
        torch.save(amp.state_dict(), path)

becomes a `scaler = torch.amp.GradScaler(<device>)` where initialize was (the names rebound when the left side
differs), the statements before each scale_loss in its block under `torch.autocast(<device>, dtype=torch.float16)`,
`scaler.scale(loss).backward()`, `scaler.unscale_(optimizer)` before clipping over the optimizer's param_groups,
`scaler.step(optimizer)` and `scaler.update()` for every step, the scaler's state_dict for apex's.

Two stages: `_shape` checks the conditions that hold for the module as a whole and returns the shape found; the
sub-rewrites (`_SUB_REWRITES`, in order) each rewrite one part of it and check what only that part shows. When a
condition fails (`NotMechanical`), nothing is rewritten and `ampfix.families.apex.detect` reports each use with the
reason. Statements are rebuilt as text (`ampfix.core.plan.Splice`): no comment may sit on a line that is
rebuilt, and no string may span the lines that are re-indented. torch's names come from `rules.NATIVE`.
"""

from __future__ import annotations

import ast
import tokenize
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ampfix.core.locations import SourceIndex, first_line, tokens
from ampfix.core.rules import Target
from ampfix.families.apex import rules
from ampfix.families.apex.optional import OptionalImport, flag_reason, is_availability_test
from ampfix.syntax.bindings import ChainRef, Scope

# The engine, as this rewrite reaches it: these imports and `_Engine` are the only places that touch it.
from ampfix.core.plan import Edit, Splice, free_name
from ampfix.families.apex.module import ApexModule

if TYPE_CHECKING:
    from ampfix.core.options import Options


class _Engine:
    """What the rewrite reads from the engine's analysis of the module, and where it hands over its splices."""

    def __init__(self, analysis: ApexModule) -> None:
        self._analysis = analysis
        self.tree: ast.Module = analysis.tree
        self.index: SourceIndex = analysis.index
        self.options: Options = analysis.options
        self.module_scope: Scope = analysis.walker.module_scope

    def device(self) -> str:
        """The device the scaler and autocast get: `--device`, `--device-expr`, as for torch's own CUDA names."""
        return self._analysis.device_text(Target(rules.NATIVE.grad_scaler, "cuda"))

    def cpu_dtype(self, dtype: str) -> str | None:
        """What `dtype` chosen for CUDA becomes on the CPU (as AMP002's rewrites do), or None."""
        return self._analysis.family.cpu_dtypes.get(dtype)

    def resolve(self, node: ast.expr, scope: Scope) -> str | None:
        return self._analysis.resolve_value(node, scope)

    def free_name(self, base: str) -> str:
        return free_name(self.tree, base)

    def edit_spans(self) -> list[tuple[int, int]]:
        """The spans the other planners edit (they run before this one)."""
        return [(edit.start, edit.end) for edit in self._analysis.edits]

    def add_splices(self, splices: list[tuple[int, int, str]]) -> None:
        for start, end, text in splices:
            line = self.index.text.count("\n", 0, start) + 1
            self._analysis.add_edit(Edit(start, end, line, "Splice", "", Splice(text)))


Engine = _Engine  # the adapter's type, for the family's other rewrites


def engine_of(analysis: ApexModule) -> _Engine:
    """The adapter, for the apex family's other rewrites (`ampfix.families.apex.parallel`)."""
    return _Engine(analysis)


_NATIVE = rules.NATIVE
SCALER = _NATIVE.scaler
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp, ast.SetComp,
           ast.DictComp, ast.GeneratorExp)
Splices = list[tuple[int, int, str]]


@dataclass(frozen=True)
class AmpUse:
    ref: ChainRef
    full: str


@dataclass(frozen=True)
class Rewritten:
    """The message of each use rewritten, by id() of its ChainRef (and, for the optional import, of the import);
    `unsafe`: the rewrite changes the numerics where opt_level is not O1 (--unsafe-fixes)."""

    messages: dict[int, str]
    unsafe: bool
    splices: tuple[tuple[int, int, str], ...] = ()  # what it edits, where the caller commits it (commit_rewrites)


class UnsafeOnly(str):
    """Why the rewrite is not made, where --unsafe-fixes makes it (the uses are reported fixable, unsafe)."""


class NotMechanical(Exception):
    """A condition of the rewrite fails: every use is reported instead."""


def plan_rewrite(analysis: ApexModule, uses: list[AmpUse], import_node: ast.ImportFrom,
                 optional: OptionalImport | None = None, commit: bool = True,
                 method_imports: tuple[ast.ImportFrom, ...] = ()) -> Rewritten | UnsafeOnly | str:
    """Plan the rewrite of every use of apex.amp in the module (or, with a local import, in its function), or none
    of them: the message for each use by id() of its ChainRef (and, for the optional import, of the import), or
    why the code is not the mechanical shape. `commit`: hand the edits to the engine (else `commit_rewrites`).
    `method_imports`: the local imports of the other methods of a trainer set up in `__init__` (`import_node`'s)."""
    engine = _Engine(analysis)
    tree = _Tree(engine)
    try:
        rewrite = _Rewrite(tree, _shape(tree, uses, import_node, optional, method_imports))
        for sub_rewrite in _SUB_REWRITES:
            sub_rewrite(rewrite)
        _check_splices(rewrite)
    except NotMechanical as reason:
        return str(reason)
    opt_level = rewrite.shape.opt_level
    unsafe = opt_level.unsafe or bool(rewrite.unsafe_notes)
    if unsafe and not engine.options.unsafe_fixes:
        notes = ([opt_level.note] if opt_level.note else []) + rewrite.unsafe_notes
        return UnsafeOnly(f"{'; '.join(notes)} (an unsafe fix exists: --unsafe-fixes)")
    _initialize_message(rewrite)
    if commit:
        engine.add_splices(rewrite.splices)
    return Rewritten(rewrite.messages, unsafe, tuple(rewrite.splices))


def commit_rewrites(analysis: ApexModule, rewrites: list[Rewritten]) -> Rewritten | str:
    """The rewrites of several functions, each with its own local `from apex import amp` (espnet's, catalyst's),
    handed to the engine together, or why not: their edits must not meet (a function inside another's)."""
    splices = [s for rewrite in rewrites for s in rewrite.splices]  # each rewrite's own order (headers, indents)
    spans = sorted((min(s[0] for s in r.splices), max(s[1] for s in r.splices)) for r in rewrites if r.splices)
    if any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:])):
        return "the rewrites of two functions that import apex.amp each would edit the same lines"
    _Engine(analysis).add_splices(splices)
    messages = {key: message for rewrite in rewrites for key, message in rewrite.messages.items()}
    return Rewritten(messages, any(rewrite.unsafe for rewrite in rewrites), tuple(splices))


# The module's tree, with what the stages ask of it ------------------------------------------------------------
class _Tree:
    """The module's statements as the rewrite walks them: each node's parent, blocks, text and indentation."""

    def __init__(self, engine: _Engine) -> None:
        self.engine = engine
        self.index = engine.index
        self.lines = engine.index.lines
        self.parents: dict[int, ast.AST] = {}
        for node in ast.walk(engine.tree):
            for child in ast.iter_child_nodes(node):
                self.parents[id(child)] = node

    def parent(self, node: ast.AST | None) -> ast.AST | None:
        return self.parents.get(id(node))

    def function_of(self, node: ast.AST) -> ast.AST:
        """The innermost function (or other scope) holding `node`, or the module."""
        parent = self.parent(node)
        while parent is not None and not isinstance(parent, _SCOPES):
            parent = self.parent(parent)
        return self.engine.tree if parent is None else parent

    def block_of(self, statement: ast.stmt) -> tuple[list[ast.stmt], int]:
        parent = self.parent(statement)
        for name in ("body", "orelse", "finalbody"):
            block = getattr(parent, name, None)
            if isinstance(block, list) and statement in block:
                return block, block.index(statement)
        raise NotMechanical("a statement is not in a plain block")

    def text(self, node: ast.AST) -> str:
        start, end = self.index.span(node)
        return self.index.text[start:end]

    def indent(self, line: int) -> str:
        text = self.lines[line - 1]
        return text[: len(text) - len(text.lstrip(" \t"))]


def _last_line(node: ast.stmt | ast.expr) -> int:
    return node.end_lineno if node.end_lineno is not None else node.lineno


# The precondition stage ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Shape:
    """The O1 pattern as found in the module, its module-wide conditions checked."""

    amp: str  # how the file spells apex.amp, for messages
    init_use: AmpUse
    init: ast.Assign  # `model, optimizer = amp.initialize(model, optimizer, ...)`
    init_statement: ast.stmt  # `init`, or the `if flag:` around it
    function: ast.FunctionDef | ast.AsyncFunctionDef | ast.Module  # a function, or the module of a script
    model: str  # the model and optimizer initialize is given
    optimizer: str
    model_name: str  # the names it binds
    opt_name: str
    enabled: ast.expr | None  # initialize's `enabled=`, or the flag guarding it
    flags: tuple[str, ...]  # the flags that guard initialize
    scale_losses: list[AmpUse]
    clips: list[AmpUse]
    states: list[AmpUse]
    availability: list[tuple[AmpUse, ast.Compare]]  # `amp is not None`: the use, and the test
    torch_bound: bool  # the package's name is bound to it in initialize's scope (else an import is added)
    # The name torch's names are spelled through: the package's own, bound to it alone or imported (as the engine
    # spells a new name, where no binding of the old one leads to it; not a file's `import torch as th`).
    torch_name: str
    comments: dict[int, str]
    device: str
    dtype: str  # autocast's, qualified
    newline: str
    import_node: ast.ImportFrom
    optional: OptionalImport | None
    # what removing the import removes: the import, the optional import's `try`, or a local import's `try` whose
    # handlers only raise; None where it goes with initialize's `if` (a local import in it)
    import_statement: ast.stmt | None = None
    condition: ast.expr | None = None  # the stable `if COND:` around initialize (a local import's shape)
    opt_level: _OptLevel = field(default_factory=lambda: _OptLevel(rules.NATIVE_OPT_LEVEL, "", False))
    scale_reads: list[AmpUse] = field(default_factory=list)  # `amp._amp_state.loss_scalers[0]...`
    block_end: int = 0  # the last line where the scaler is bound for sure (the end of initialize's `try` body)
    scaler: str = SCALER  # how the scaler is spelled: a local, or `self.scaler` in a trainer's methods
    # a trainer set up in `__init__` (`self.model, self.optimizer = amp.initialize(...)`): the methods holding the
    # other uses, their local imports, and the condition as they test it (`self.use_amp`, where __init__ tests
    # `use_amp` and assigns `self.use_amp = use_amp`)
    methods: tuple[ast.FunctionDef, ...] = ()
    method_imports: tuple[ast.ImportFrom, ...] = ()
    method_condition: ast.expr | None = None
    in_init: bool = False  # initialize in `__init__`, binding `self.<optimizer>`: the steps are in `methods`
    # initialize given a list of optimizers: their names as bound after it (`opt_name` is then the left side's
    # text); () for one optimizer
    optimizers: tuple[str, ...] = ()

    @property
    def step_holders(self) -> tuple[ast.AST, ...]:
        """Where the optimizer's steps are: initialize's function, or a trainer's methods (set up in __init__)."""
        return self.methods if self.in_init else (self.function,)

    @property
    def scope(self) -> Scope:
        return self.init_use.ref.scope

    @property
    def where(self) -> str:
        if self.in_init:
            return ", ".join(f"`{m.name}`" for m in self.methods)
        return f"`{self.function.name}`" if isinstance(self.function, _FUNCTIONS) else "the script's top level"

    def spell(self, qname: str) -> str:
        """A qualified torch name as the rewrite writes it."""
        return self.torch_name + qname[len(_NATIVE.package):]


def _shape(tree: _Tree, uses: list[AmpUse], import_node: ast.ImportFrom, optional: OptionalImport | None,
           method_imports: tuple[ast.ImportFrom, ...] = ()) -> _Shape:
    """The O1 pattern in the module, or NotMechanical with the first condition that fails."""
    inits, scale_losses, clips, states, availability, scale_reads = _uses_by_rule(uses, optional)
    init_use = inits[0]
    amp = init_use.ref.parts[0]
    init_call = _call_of(init_use)
    init = tree.parent(init_call)
    if not (isinstance(init, ast.Assign) and init.value is init_call and len(init.targets) == 1):
        raise NotMechanical("the initialize call is not a plain assignment")
    model, optimizer, enabled = _initialize_arguments(init_call)
    opt_level = _several_losses(_opt_level(tree, init_call), init_call, scale_losses)
    conditional = conditional_import(tree.engine.tree, import_node) if optional is None else None
    local = optional is None and import_node not in tree.engine.tree.body and conditional is None
    import_statement = _local_import_statement(tree, import_node) if local else (
        optional.statement if optional is not None else conditional or import_node)
    condition = None
    checks = _ApexChecks(tree, conditional, optional, init_use.ref.scope)
    flags: tuple[str, ...] = ()
    import_statement_kept: ast.stmt | None = import_statement
    if conditional is not None:
        init_statement, enabled, condition = _local_guard(tree, init, import_statement, enabled, checks)
    elif local:
        init_statement, enabled, condition = _local_guard(tree, init, import_statement, enabled, checks)
        if tree.parent(import_statement) is init_statement:
            import_statement_kept = None  # it goes with initialize's `if`
        elif tree.parent(import_statement) is tree.parent(init_statement) and import_statement.lineno < init.lineno:
            import_statement_kept = import_statement
        else:
            raise NotMechanical("the local `from apex import amp` is neither in initialize's function body before it "
                                "nor in the `if` that guards initialize")
    else:
        init_statement, enabled, flags, condition = _initialize_guard(tree, init, init_use, enabled, optional,
                                                                      checks)
        import_statement_kept = import_statement
    function, block_end = _initialize_holder(tree, init_statement)  # a function, or the module of a script
    self_name = _self_of(tree, function) if getattr(function, "name", "") == "__init__" else None
    model_name, opt_name, optimizers = _bound_targets(init, model, optimizer, function, self_name)
    tests = _availability_tests(availability, amp, optional)
    own_uses = [u for u in uses if not any(u is a for a in availability)]
    method_condition = None
    in_init = self_name is not None and opt_name.startswith(f"{self_name}.")
    if in_init:  # a trainer set up in __init__
        methods = _trainer_methods(tree, own_uses, function, init, opt_name)
        method_condition = _method_condition(tree, function, init_statement, condition)
    elif method_imports:
        raise NotMechanical("apex.amp is imported in several methods of a class, and initialize is not in `__init__` "
                            "binding `self.<optimizer>`")
    else:
        methods = _methods_reached(tree, own_uses, function, (init.lineno, block_end), opt_name)
    scaler = SCALER if not methods else f"{_self_name(function)}.{SCALER}"
    if optimizers and methods:
        raise NotMechanical("initialize is given several optimizers, and other methods of its class use apex.amp")
    torch_bound = _names_usable(init_use.ref.scope, init, optimizers or (opt_name,), scaler)
    if local and not torch_bound:
        raise NotMechanical("torch is not imported where the local `from apex import amp` is")
    if condition is not None:
        _stable(condition, function, condition.lineno)
        for method in _other_methods(tree, function, condition):
            _stable(condition, method, 0)
    comments = _comment_lines(tree.index.text)
    device, dtype = _device_and_dtype(tree.engine)
    ending = tree.lines[init.lineno - 1]
    newline = ending[len(ending.rstrip("\r\n")):] or "\n"  # the file's own line ending (CRLF, CR, LF)
    return _Shape(amp, init_use, init, init_statement, function, ast.unparse(model), ast.unparse(optimizer), model_name,
                  opt_name,
                  enabled, flags, scale_losses, clips, states, tests, torch_bound, _NATIVE.package, comments,
                  device, dtype, newline, import_node, optional, import_statement_kept, condition, opt_level,
                  scale_reads, block_end, scaler, tuple(methods), method_imports, method_condition, in_init,
                  optimizers)


def _self_of(tree: _Tree, function: ast.AST) -> str | None:
    """The first parameter of a plain method (undecorated, directly in a class), or None."""
    if isinstance(function, ast.FunctionDef) and function.args.args and not function.decorator_list \
            and isinstance(tree.parent(function), ast.ClassDef):
        return function.args.args[0].arg
    return None


def _self_name(function: ast.AST) -> str:
    assert isinstance(function, _FUNCTIONS)  # _methods_reached: a method
    return function.args.args[0].arg


def _methods_reached(tree: _Tree, uses: list[AmpUse], function: ast.AST, lines: tuple[int, int],
                     opt_name: str) -> list[ast.FunctionDef]:
    """The other methods of initialize's class that hold apex.amp uses (a trainer's step method: the scaler then
    lives in `self.scaler`); each use lies in initialize's function between initialize and `lines[1]`, or in such a
    method. Such a method takes the same `self`, is called only as `self.method(...)` from initialize's function
    where the scaler is bound, and is given initialize's optimizer for its parameter of that name (a scale_loss
    there names it): every optimizer whose gradients it scales then steps through the scaler."""
    methods: list[ast.FunctionDef] = []
    for use in uses:
        where = tree.function_of(use.ref.node)
        if where is function and lines[0] <= use.ref.node.lineno <= lines[1]:
            continue
        if not (_sibling_method(tree, function, where) and isinstance(where, ast.FunctionDef)):
            raise NotMechanical("an apex.amp use lies outside the function of initialize (or a method of its class), "
                                "or before it, or after the `try` body that holds it")
        if where not in methods:
            methods.append(where)
    for method in methods:
        _called_from(tree, method, function, lines, opt_name)
    if methods and any(isinstance(node, ast.Attribute) and node.attr == SCALER for node in ast.walk(tree.engine.tree)):
        raise NotMechanical(f"an attribute `{SCALER}` is already used in the module")
    return methods


def _trainer_methods(tree: _Tree, uses: list[AmpUse], function: ast.AST, init: ast.Assign,
                     opt_name: str) -> list[ast.FunctionDef]:
    """initialize in `__init__`, binding `self.<optimizer>` (the issue's first example): `self.scaler` is bound when
    the object is made, before any other method can run, so the uses may lie in any plain method of the class with
    the same `self`. The methods holding them; `self.<optimizer>` is assigned nowhere in the module but in
    `__init__` up to initialize (every step and scale_loss then means initialize's optimizer)."""
    methods: list[ast.FunctionDef] = []
    for use in uses:
        where = tree.function_of(use.ref.node)
        if where is function:
            if use.ref.node.lineno < init.lineno:
                raise NotMechanical("apex.amp is used in `__init__` before initialize")
            continue
        if not (_sibling_method(tree, function, where) and isinstance(where, ast.FunctionDef)):
            raise NotMechanical("an apex.amp use lies outside the methods of initialize's class")
        if where not in methods:
            methods.append(where)
    klass = tree.parent(function)
    assert isinstance(klass, ast.ClassDef)  # _self_of: a method
    if any(isinstance(node, ast.Return) and node.lineno < init.lineno and tree.function_of(node) is function
           for node in ast.walk(function)):
        raise NotMechanical("`__init__` may return before initialize, leaving the object without the scaler")
    if any(isinstance(node, ast.ClassDef) and any(isinstance(b, ast.Name) and b.id == klass.name for b in node.bases)
           and any(isinstance(m, _FUNCTIONS) and m.name == "__init__" for m in node.body)
           for node in ast.walk(tree.engine.tree)):
        raise NotMechanical(f"a subclass of `{klass.name}` has an `__init__` of its own, which may not make the scaler")
    attribute = opt_name.partition(".")[2]
    for node in ast.walk(tree.engine.tree):
        if isinstance(node, ast.Attribute) and node.attr == attribute and not isinstance(node.ctx, ast.Load) \
                and not (tree.function_of(node) is function and node.lineno <= init.lineno):
            raise NotMechanical(f"`{opt_name}` is assigned again on line {node.lineno} (initialize's optimizer must "
                                "be the one every method scales and steps)")
    if any(isinstance(node, ast.Attribute) and node.attr == SCALER for node in ast.walk(tree.engine.tree)):
        raise NotMechanical(f"an attribute `{SCALER}` is already used in the module")
    return methods


def _method_condition(tree: _Tree, function: ast.AST, init_statement: ast.stmt,
                      condition: ast.expr | None) -> ast.expr | None:
    """The condition of initialize as the trainer's other methods test it: itself where it reads `self`
    (`self.use_amp`); for a parameter (`use_amp`), the attribute `__init__` assigns it to in its own body before
    initialize's `if` (`self.use_amp = use_amp`), the parameter rebound nowhere in `__init__`. Either way the
    attribute is assigned nowhere else in the module (nor, for a chain, what it starts with): else NotMechanical."""
    if condition is None:
        return None
    self_name = _self_name(function)
    tested = condition
    if not _reads_self(condition, self_name):
        assert isinstance(function, ast.FunctionDef)  # _self_of: a method
        block, position = tree.block_of(init_statement)
        found = next((s.targets[0] for s in block[:position] if isinstance(s, ast.Assign) and len(s.targets) == 1
                      and isinstance(s.value, ast.Name) and isinstance(condition, ast.Name)
                      and s.value.id == condition.id and _reads_self(s.targets[0], self_name)), None)
        if found is None or block is not function.body or not _parameter_chain(condition, function):
            raise NotMechanical(f"`{tree.text(condition)}`, the condition of initialize in `__init__`, is not a "
                                "parameter assigned to an attribute before it (`self.flag = flag`) for the other "
                                "methods to test")
        tested = found
    assigned = tree.parent(tested) if tested is not condition else None
    attributes = set()
    link = tested
    while isinstance(link, ast.Attribute):
        attributes.add(link.attr)
        link = link.value
    for node in ast.walk(tree.engine.tree):
        if isinstance(node, ast.Attribute) and node.attr in attributes and not isinstance(node.ctx, ast.Load) \
                and tree.parent(node) is not assigned \
                and not (tree.function_of(node) is function and node.lineno < init_statement.lineno):
            raise NotMechanical(f"`{tree.text(tested)}`, the condition of initialize as the methods test it, is "
                                f"assigned on line {node.lineno}")
    return tested


def _reads_self(node: ast.expr, self_name: str) -> bool:
    """`node` is an attribute chain from `self_name` (`self.use_amp`, `self.args.fp16`)."""
    while isinstance(node, ast.Attribute):
        node = node.value
        if isinstance(node, ast.Name):
            return node.id == self_name
    return False


def _other_methods(tree: _Tree, function: ast.AST, condition: ast.expr) -> list[ast.FunctionDef]:
    """Where `condition` starts from the `self` of a method, the class's other methods but `__init__` (any of them
    may run between initialize and a step, and rebind what the condition reads)."""
    root = condition
    while isinstance(root, ast.Attribute):
        root = root.value
    holder = tree.parent(function)
    if not (isinstance(holder, ast.ClassDef) and isinstance(function, ast.FunctionDef) and function.args.args
            and isinstance(root, ast.Name) and root.id == _self_name(function)):
        return []
    return [s for s in holder.body if isinstance(s, ast.FunctionDef) and s is not function and s.name != "__init__"]


def _sibling_method(tree: _Tree, function: ast.AST, other: ast.AST) -> bool:
    """`other` is a plain method of the class whose plain method `function` is, with the same first parameter."""
    def plain(node: ast.AST) -> bool:
        return isinstance(node, ast.FunctionDef) and not node.decorator_list and bool(node.args.args)
    return (plain(function) and plain(other) and tree.parent(function) is tree.parent(other)
            and isinstance(tree.parent(function), ast.ClassDef) and _self_name(function) == _self_name(other))


def _called_from(tree: _Tree, method: ast.FunctionDef, function: ast.AST, lines: tuple[int, int],
                 opt_name: str) -> None:
    """Every mention of `method` in the module is a call `self.method(...)` in `function` within `lines`, passing
    `opt_name` itself for the method's parameter `opt_name`."""
    self_name = _self_name(function)
    parameters = [a.arg for a in method.args.args]
    if opt_name not in parameters:
        raise NotMechanical(f"`{method.name}` uses apex.amp but has no parameter `{opt_name}` to be given "
                            "initialize's optimizer")
    position = parameters.index(opt_name) - 1  # the call's arguments after self
    for node in ast.walk(tree.engine.tree):
        if not ((isinstance(node, ast.Attribute) and node.attr == method.name)
                or (isinstance(node, ast.Name) and node.id == method.name)):
            continue
        call = tree.parent(node)
        given = None
        if isinstance(call, ast.Call) and call.func is node and not any(isinstance(a, ast.Starred) for a in call.args):
            keyword = next((k.value for k in call.keywords if k.arg == opt_name), None)
            given = keyword or (call.args[position] if position < len(call.args) else None)
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == self_name
                and tree.function_of(node) is function and lines[0] <= node.lineno <= lines[1]
                and isinstance(given, ast.Name) and given.id == opt_name):
            raise NotMechanical(f"`{method.name}` is used otherwise than called from `{getattr(function, 'name', '')}` "
                                f"after initialize with its optimizer")


def _initialize_holder(tree: _Tree, init_statement: ast.stmt) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef
                                                                       | ast.Module, int]:
    """The function (or the module of a script) whose own body holds initialize's statement, directly or inside the
    bodies of `try` statements (flair's trainers); and the last line where the scaler is sure to be bound: the end
    of the innermost such `try` body (a handler, or what follows the `try`, may run without it), else of the
    function."""
    node: ast.AST = init_statement
    parent = tree.parent(node)
    block_end = None
    while isinstance(parent, ast.Try) and node in parent.body:
        block_end = block_end or _last_line(parent.body[-1])
        node, parent = parent, tree.parent(parent)
    if not isinstance(parent, (*_FUNCTIONS, ast.Module)) or node not in parent.body:
        raise NotMechanical("initialize is not a statement of its function's own body (a conditional scaler would be "
                            "undefined elsewhere)")
    return parent, block_end or max(_last_line(s) for s in parent.body)


def _uses_by_rule(uses: list[AmpUse], optional: OptionalImport | None) -> tuple[list[AmpUse], ...]:
    """The uses of initialize, scale_loss, master_params, the state and (with the optional import) of apex.amp
    itself; one initialize, at least one scale_loss, nothing else."""
    by_rule: dict[str, list[AmpUse]] = {}
    for use in uses:
        rule = rules.rule_of(use.full)
        by_rule.setdefault(rule.code if rule is not None else "", []).append(use)
    inits = by_rule.pop(rules.INITIALIZE.code, [])
    scale_losses = by_rule.pop(rules.SCALE_LOSS.code, [])
    clips = by_rule.pop(rules.MASTER_PARAMS.code, [])
    states = by_rule.pop(rules.STATE.code, [])
    internals = by_rule.get(rules.INTERNALS.code, [])
    scale_reads = [use for use in internals if use.full == rules.LOSS_SCALERS]
    if len(scale_reads) == len(internals):
        by_rule.pop(rules.INTERNALS.code, None)
    availability = by_rule.pop(rules.OPTIONAL_IMPORT.code, []) if optional is not None else []
    if not inits:
        raise NotMechanical(f"no `{rules.INITIALIZE.title}` in this module: mixed precision is switched on "
                            "elsewhere, where the forward passes to put under autocast and apex's one process-wide "
                            "loss scaler are, so the uses here cannot be rewritten alone (a wrapper class such as "
                            "timm's ApexScaler becomes a class holding a torch.amp.GradScaler by hand)")
    if len(inits) > 1:
        raise NotMechanical(f"initialize is called {len(inits)} times (in two branches, or again to restore a "
                            "checkpoint): a scaler is created once, in one place")
    if not scale_losses:
        raise NotMechanical("initialize with no scale_loss beside it: the backward passes are elsewhere (another "
                            "module, or inference only), where the scaler it becomes cannot reach")
    if by_rule:
        others = sorted({use.full for rule_uses in by_rule.values() for use in rule_uses})
        raise NotMechanical(f"apex.amp is used otherwise too ({', '.join(others)})")
    return inits, scale_losses, clips, states, availability, scale_reads


def _availability_tests(availability: list[AmpUse], amp: str,
                        optional: OptionalImport | None) -> list[tuple[AmpUse, ast.Compare]]:
    """Each use of apex.amp itself with its `amp is not None` (that becomes True: torch.amp, which replaces
    apex.amp, is always there); there is no other use of it."""
    tests = []
    for use in availability:
        test = use.ref.parent
        if not (use.ref.role == "none_test" and isinstance(test, ast.Compare) and use.ref.node is test.left
                and optional is not None and (is_availability_test(test, optional, use.ref.scope)
                                              or is_availability_test(test, optional, use.ref.scope, missing=True))):
            raise NotMechanical(f"`{amp}` is used otherwise than in `{amp} is not None` or `{amp} is None`")
        tests.append((use, test))
    return tests


def _initialize_guard(tree: _Tree, init: ast.Assign, init_use: AmpUse, enabled: ast.expr | None,
                      optional: OptionalImport | None, checks: _ApexChecks
                      ) -> tuple[ast.stmt, ast.expr | None, tuple[str, ...], ast.expr | None]:
    """`if flag: model, optimizer = amp.initialize(...)`: the flag says whether apex imported, so it goes to
    `enabled=` of the scaler and of autocast (True once the optional import is gone). Or, beside the optional
    import, `if COND:` with COND a parameter of the function or an attribute chain from one (flair's `use_amp`, a
    caller's choice): COND goes to `enabled=`, as for a local import's condition. The statement that initialize
    becomes the scaler of, the `enabled` expression, the flag, the condition."""
    guard = tree.parent(init)
    if optional is None or not isinstance(guard, ast.If):
        return init, enabled, (), None
    if checks.strip(guard.body) != [init] or guard.orelse:
        raise NotMechanical("initialize is not alone under its `if`, or the `if` has an `else`")
    if enabled is not None:
        raise NotMechanical("initialize under a flag has an `enabled=` of its own")
    if flag_reason(guard.test, optional, init_use.ref.scope) is not None \
            and _parameter_chain(guard.test, tree.function_of(guard)):
        return guard, guard.test, (), guard.test
    if guard.body != [init]:
        raise NotMechanical("initialize is not alone under its `if`, or the `if` has an `else`")
    _availability_guard(guard, optional, init_use.ref.scope, "initialize")
    assert isinstance(guard.test, ast.Name)  # flag_reason: a flag is a single name
    return guard, guard.test, (guard.test.id,), None


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
    stored = any(isinstance(node, ast.Name) and node.id == root.id and not isinstance(node.ctx, ast.Load)
                 for node in ast.walk(function))
    return root.id in parameters and not stored


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


def _local_guard(tree: _Tree, init: ast.Assign, import_statement: ast.stmt, enabled: ast.expr | None,
                 checks: _ApexChecks) -> tuple[ast.stmt, ast.expr | None, ast.expr | None]:
    """`if COND: [from apex import amp]; model, optimizer = amp.initialize(...)` (COND a name or an attribute
    chain; checks that apex is there may come first, `checks`): COND goes to `enabled=` of the scaler and of
    autocast. The statement initialize becomes the scaler of, the `enabled` expression, the condition."""
    guard = tree.parent(init)
    if not isinstance(guard, ast.If):
        return init, enabled, None
    if checks.strip(guard.body) not in ([init], [import_statement, init]) or guard.orelse:
        raise NotMechanical("initialize is not alone under its `if` (with the import), or the `if` has an `else`")
    if not _chain(guard.test):
        raise NotMechanical("the `if` around initialize tests more than a flag (a name or an attribute)")
    if enabled is not None:
        raise NotMechanical("initialize under a condition has an `enabled=` of its own")
    return guard, guard.test, guard.test


def _chains(node: ast.expr, names: bool = False) -> bool:
    """A list (or tuple) of names or attribute chains (`names`: of plain names only), not empty."""
    return isinstance(node, (ast.List, ast.Tuple)) and bool(node.elts) and all(
        isinstance(e, ast.Name) if names else _chain(e) for e in node.elts)


def _chain(node: ast.expr) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _stable(condition: ast.expr, function: ast.AST, after: int) -> None:
    """The condition means the same at the scaler and at every autocast: nothing in the function assigns it after
    line `after` (nor, for an attribute chain, any chain it starts with)."""
    dumps = set()
    link: ast.expr = condition
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


def _bound_names(target: ast.expr, self_name: str | None = None) -> tuple[str, str]:
    """The model's name (or attribute chain, `self.model`) and the optimizer's, as initialize binds them; in a
    trainer's `__init__` (`self_name` its first parameter) the optimizer may be an attribute `self.optimizer`."""
    if not (isinstance(target, (ast.Tuple, ast.List)) and len(target.elts) == 2 and _chain(target.elts[0])):
        raise NotMechanical("the left side of initialize is not two names (model, optimizer)")
    optimizer = target.elts[1]
    if not (isinstance(optimizer, ast.Name) or (isinstance(optimizer, ast.Attribute) and self_name is not None
                                                and isinstance(optimizer.value, ast.Name)
                                                and optimizer.value.id == self_name)):
        raise NotMechanical("the left side of initialize is not two names (model, optimizer)")
    return ast.unparse(target.elts[0]), ast.unparse(optimizer)


def _bound_targets(init: ast.Assign, model: ast.expr, optimizer: ast.expr, function: ast.AST,
                   self_name: str | None) -> tuple[str, str, tuple[str, ...]]:
    """The model's and the optimizer's targets as initialize binds them (texts), and the optimizers' names where
    it is given a list of them."""
    if not any(isinstance(given, (ast.List, ast.Tuple)) for given in (model, optimizer)):
        return (*_bound_names(init.targets[0], self_name), ())
    if self_name is not None:
        raise NotMechanical("initialize is given lists in `__init__` (a trainer's set-up takes one model and one "
                            "optimizer)")
    optimizers = _several_optimizers(init, model, optimizer, function)
    target = init.targets[0]
    assert isinstance(target, (ast.Tuple, ast.List))  # _several_optimizers
    if not optimizers and not isinstance(target.elts[1], ast.Name):
        raise NotMechanical("the left side of initialize is not two names (model, optimizer)")
    return ast.unparse(target.elts[0]), ast.unparse(target.elts[1]), optimizers


def _several_optimizers(init: ast.Assign, models: ast.expr, optimizers: ast.expr,
                        function: ast.AST) -> tuple[str, ...]:
    """Lists of models and/or optimizers (`[m1, m2], [o1, o2] = amp.initialize([m1, m2], [o1, o2], ...)`): apex
    returns them in the shapes it was given, the same objects (O1 patches them in place). The names of the
    optimizers as bound after initialize: each name of a list on the left side, or, where one name takes the
    list (`models, optimizers = ...`), the names given (that name must not be used again: a step through
    `optimizers[i]` is not tied to a name); () for a single optimizer."""
    target = init.targets[0]
    if not (isinstance(target, (ast.Tuple, ast.List)) and len(target.elts) == 2):
        raise NotMechanical("the left side of initialize is not two targets (models, optimizers)")
    for given, bound in zip((models, optimizers), target.elts):
        if isinstance(given, (ast.List, ast.Tuple)) and not (
                isinstance(bound, ast.Name) or (isinstance(bound, (ast.List, ast.Tuple)) and len(bound.elts)
                                                 == len(given.elts) and _chains(bound, bound is target.elts[1]))):
            raise NotMechanical("the left side of initialize does not keep the shapes of its lists (a name, or a "
                                "list of names as long as the one given)")
        if not isinstance(given, (ast.List, ast.Tuple)) and not _chain(bound):
            raise NotMechanical("the left side of initialize is not two names (model, optimizer)")
    if not isinstance(optimizers, (ast.List, ast.Tuple)):
        return ()
    bound = target.elts[1]
    if isinstance(bound, (ast.List, ast.Tuple)):
        names = tuple(ast.unparse(e) for e in bound.elts)
    else:
        assert isinstance(bound, ast.Name)
        used = sorted({n.lineno for n in ast.walk(function) if isinstance(n, ast.Name) and n.id == bound.id
                       and n.lineno > _last_line(init)})
        if used:
            raise NotMechanical(f"the list of optimizers `{bound.id}` is used on {_lines(used)}: a step through it is "
                                "not tied to an optimizer's name (bind them one by one: `[o1, o2] = ...`)")
        names = tuple(ast.unparse(e) for e in optimizers.elts)
    if len(set(names)) != len(names):
        raise NotMechanical("the same optimizer is given to initialize twice")
    return names


def _names_usable(scope: Scope, init: ast.Assign, opt_names: tuple[str, ...], scaler: str) -> bool:
    """The names the rewrite writes mean what it means where initialize is: the scaler's is free (a local's; an
    attribute's is checked with the methods), the package's is torch's (or unbound: then it is imported), the
    optimizer is not rebound. Whether torch's is bound."""
    if scaler == SCALER and scope.lookup(SCALER)[1]:
        raise NotMechanical(f"the name `{SCALER}` is already bound")
    found, torch_bindings = scope.lookup(_NATIVE.package)
    if not all(b.kind == "import" and b.qname == _NATIVE.package for b in torch_bindings):
        raise NotMechanical(f"`{_NATIVE.package}` is bound to something else")
    # torch imported where initialize runs (its function, or a script's top level) must come before it: the scaler
    # that replaces initialize is created there
    if torch_bindings and found is scope and not all(b.line < init.lineno for b in torch_bindings):
        raise NotMechanical(f"the {'script' if scope.kind == 'module' else 'function'} imports torch after initialize")
    for opt_name in opt_names:
        for binding in scope.bindings.get(opt_name, []):
            if binding.line > init.lineno:
                raise NotMechanical("the optimizer is rebound after initialize")
    return bool(torch_bindings)


def _device_and_dtype(engine: _Engine) -> tuple[str, str]:
    """The device the scaler and autocast get (`--device`, `--device-expr`, as for torch's own names) and
    autocast's dtype: float16 as O1's, bfloat16 on the CPU unless --keep-dtype (as AMP002's rewrites do)."""
    options = engine.options
    if options.device == "auto" and options.device_expr is None:
        raise NotMechanical("--device auto needs a module-level device name, which this rewrite does not add")
    device = engine.device()
    cpu_dtype = engine.cpu_dtype(_NATIVE.dtype)
    if options.to_cpu and not options.keep_dtype and cpu_dtype is not None:
        return device, cpu_dtype
    return device, _NATIVE.dtype


def _call_of(use: AmpUse) -> ast.Call:
    call = use.ref.parent
    if use.ref.role != "call" or not isinstance(call, ast.Call) or call.func is not use.ref.node:
        raise NotMechanical("an apex.amp name is not called directly")
    return call


def _initialize_arguments(call: ast.Call) -> tuple[ast.expr, ast.expr, ast.expr | None]:
    """The model (a name, or an attribute chain: a trainer's `self.model`), the optimizer, `enabled=`."""
    model, optimizer = call.args if len(call.args) == 2 else (None, None)
    if not (model is not None and (_chain(model) or _chains(model))
            and optimizer is not None and (_chain(optimizer) or _chains(optimizer, names=True))):
        raise NotMechanical("initialize is not given its models and optimizers by name (one each, or a list of "
                            "names)")
    enabled = None
    for keyword in call.keywords:
        if keyword.arg not in rules.PATTERN_KEYWORDS and keyword.arg not in rules.UNSAFE_KEYWORDS \
                and keyword.arg != "num_losses":
            raise NotMechanical("initialize has a keyword beyond opt_level, enabled, verbosity, loss_scale, "
                                "keep_batchnorm_fp32, master_weights and num_losses")
        value = keyword.value
        if keyword.arg == "loss_scale" and not (isinstance(value, ast.Constant)
                                                and value.value == rules.DYNAMIC_LOSS_SCALE):
            raise NotMechanical(f'loss_scale is not "{rules.DYNAMIC_LOSS_SCALE}"')
        if keyword.arg == "enabled":
            # evaluated once by initialize, then by the scaler and by each autocast: no side effects
            if not isinstance(value, (ast.Name, ast.Attribute, ast.Constant)):
                raise NotMechanical("enabled is not a name, attribute or constant (it would be evaluated again)")
            enabled = value
    return model, optimizer, enabled


@dataclass(frozen=True)
class _OptLevel:
    """What initialize's opt_level (and the keywords that belong to O2/O3) means for the rewrite."""

    level: str  # for the message: "O1", "O2", or the expression's text
    note: str  # what the finding adds: what O2/O3 users lose ("" for O1)
    unsafe: bool  # the rewrite changes the numerics where the level is not O1: --unsafe-fixes only


def _opt_level(tree: _Tree, call: ast.Call) -> _OptLevel:
    """A literal O1 (or none) as before; an argparse option in the module whose default is O1: rewritten, the note
    saying what a run with O2/O3 loses; a literal O2/O3, an option with another default, or a value that cannot be
    read: rewritten under --unsafe-fixes only, with the note."""
    value = next((k.value for k in call.keywords if k.arg == "opt_level"), None)
    if value is None and len(call.args) > 3:
        raise NotMechanical("opt_level is passed by position")
    extras = [rules.INITIALIZE_KEYWORDS[k.arg] for k in call.keywords if k.arg in rules.UNSAFE_KEYWORDS]
    if value is None or (isinstance(value, ast.Constant) and value.value == rules.NATIVE_OPT_LEVEL):
        if extras:
            raise NotMechanical("keep_batchnorm_fp32/master_weights are given with O1")
        return _OptLevel(rules.NATIVE_OPT_LEVEL, "", False)
    if isinstance(value, ast.Constant):
        if value.value not in rules.UNSAFE_OPT_LEVELS:
            raise NotMechanical(f"opt_level is {value.value!r} (O1 is rewritten; O2 and O3 under --unsafe-fixes)")
        return _unsafe_level(tree, value.value, [rules.UNSAFE_OPT_LEVELS[value.value], *extras])
    text = tree.text(value)
    option = _argparse_option(tree, value) or _parameter_default(tree, value)
    if option is None:
        return _unsafe_level(tree, text, [f"opt_level `{text}` cannot be read here: {rules.OPT_LEVEL_LOSS}", *extras])
    flag, default, choices = option
    kind = "option" if flag.startswith("-") else "parameter"
    said = f"opt_level `{text}` is the {kind} {flag} (default {default!r}" + (
        f", choices {', '.join(choices)})" if choices else ")")
    if default == rules.NATIVE_OPT_LEVEL and not extras:
        return _OptLevel(text, f"{said}; where a run sets O2/O3: {rules.OPT_LEVEL_LOSS}", False)
    return _unsafe_level(tree, text, [f"{said}: {rules.OPT_LEVEL_LOSS}", *extras])


def _several_losses(opt_level: _OptLevel, init_call: ast.Call, scale_losses: list[AmpUse]) -> _OptLevel:
    """`num_losses=N` and `scale_loss(..., loss_id=i)`: one GradScaler for every loss (what PyTorch recommends:
    scale() each loss, one step per optimizer, one update per iteration), under --unsafe-fixes, the note saying
    what changes: apex kept a scale per loss, one scale is bounded by the loss whose gradients overflow first."""
    calls = [use.ref.parent for use in scale_losses if isinstance(use.ref.parent, ast.Call)]
    if not (any(k.arg == "num_losses" for k in init_call.keywords)
            or any(len(c.args) > 2 or any(k.arg == "loss_id" for k in c.keywords) for c in calls)):
        return opt_level
    notes = [opt_level.note] if opt_level.note else []
    return _OptLevel(opt_level.level, "; ".join([*notes, rules.SEVERAL_LOSSES]), True)


def _unsafe_level(tree: _Tree, level: str, notes: list[str]) -> _OptLevel:
    return _OptLevel(level, "; ".join(notes), True)


def _parameter_default(tree: _Tree, value: ast.expr) -> tuple[str, str, list[str]] | None:
    """`name`, a parameter of initialize's function with a literal string default (flair's `amp_opt_level="O1"`)
    that nothing in the function rebinds: its name, its default, no choices; else None."""
    function = tree.function_of(value)
    if not (isinstance(value, ast.Name) and isinstance(function, _FUNCTIONS)):
        return None
    arguments = function.args
    positional = [*arguments.posonlyargs, *arguments.args]
    defaults = dict(zip([a.arg for a in positional[len(positional) - len(arguments.defaults):]], arguments.defaults))
    defaults.update((a.arg, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None)
    default = defaults.get(value.id)
    if not (isinstance(default, ast.Constant) and isinstance(default.value, str)) or any(
            isinstance(node, ast.Name) and node.id == value.id and not isinstance(node.ctx, ast.Load)
            for node in ast.walk(function)):
        return None
    return value.id, default.value, []


def _argparse_option(tree: _Tree, value: ast.expr) -> tuple[str, str, list[str]] | None:
    """`X.name` read from the one `add_argument("--name", default="O1", choices=[...])` of the module whose
    destination is `name`: the flag, its literal default, its literal choices; else None."""
    if not isinstance(value, ast.Attribute):
        return None
    found = []
    for node in ast.walk(tree.engine.tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        keywords = {k.arg: k.value for k in node.keywords if k.arg is not None}
        longs = [f for f in flags if f.startswith("--")]
        dest = keywords.get("dest")
        name = dest.value if isinstance(dest, ast.Constant) else (longs[0][2:].replace("-", "_") if longs else None)
        if name == value.attr:
            found.append((longs[0] if longs else name, keywords))
    if len(found) != 1:
        return None
    flag, keywords = found[0]
    default = keywords.get("default")
    choices = keywords.get("choices")
    if not (isinstance(default, ast.Constant) and isinstance(default.value, str)):
        return None
    listed = [c.value for c in choices.elts if isinstance(c, ast.Constant) and isinstance(c.value, str)] \
        if isinstance(choices, (ast.List, ast.Tuple)) else []
    if choices is not None and (len(listed) != len(getattr(choices, "elts", [])) or not listed):
        return None
    return str(flag), default.value, listed


def _availability_guard(guard: ast.If, optional: OptionalImport, scope: Scope, what: str) -> None:
    reason = flag_reason(guard.test, optional, scope)
    if reason is not None:
        raise NotMechanical(f"{what} is under an `if` whose test is not whether apex imported: {reason}")


def _comment_lines(source: str) -> dict[int, str]:
    """Each line with a comment, and the comment, on the lines `ast` numbers (`locations.tokens`, which
    `suppressions.scan` reads too). Not scan's run reused: scan tokenizes only text that names a directive, and
    a shared run would be a second path for what this planner reaches in every other file."""
    found = {}
    try:
        for token in tokens(source):
            if token.type == tokenize.COMMENT:
                found[token.start[0]] = token.string
    except (tokenize.TokenError, SyntaxError):
        raise NotMechanical("the file does not tokenize") from None
    return found


# The sub-rewrites ----------------------------------------------------------------------------------------------
@dataclass
class _Rewrite:
    """The shape, and what the sub-rewrites have planned so far."""

    tree: _Tree
    shape: _Shape
    splices: Splices = field(default_factory=list)
    region_splices: Splices = field(default_factory=list)  # the forward passes re-indented
    messages: dict[int, str] = field(default_factory=dict)  # id(ref) -> what became of the use
    flags: list[str] = field(default_factory=list)  # the flags that guard apex's calls
    steps: list[ast.Expr] = field(default_factory=list)  # the `optimizer.step()` statements
    branch_steps: list[ast.Expr] = field(default_factory=list)  # steps whose `if` steps otherwise in its other branch
    regions: list[tuple[int, int]] = field(default_factory=list)  # the forward passes' lines, put under autocast
    # id() of the blocks holding a scale_loss, and where the forward pass of the next one there starts
    forward_blocks: dict[int, int] = field(default_factory=dict)
    backward_statements: list[ast.stmt] = field(default_factory=list)  # what each scale_loss became
    unscaled_steps: set[int] = field(default_factory=set)  # the lines of the steps a clip unscales before
    unscaled_at: list[int] = field(default_factory=list)  # the lines gradients are unscaled before
    evaluation: list[ast.With] = field(default_factory=list)  # the `no_grad` blocks given the autocast
    unsafe_notes: list[str] = field(default_factory=list)  # what changes beyond O1's meaning (--unsafe-fixes)
    no_forward: list[str] = field(default_factory=list)  # the methods whose scale_loss has no forward pass before it

    def __post_init__(self) -> None:
        self.flags.extend(self.shape.flags)

    @property
    def enabled(self) -> str | None:
        """The `enabled=` of the scaler and autocast: initialize's own, a flag, or `bool(COND)` for the `if COND:`
        that guarded initialize (an `if` tests truthiness; torch.autocast takes a bool only, not `args.fp16 = 1`)."""
        shape = self.shape
        if shape.enabled is None:
            return None
        text = self.tree.text(shape.enabled)
        return f"bool({text})" if shape.enabled is shape.condition else text

    @property
    def scaler_args(self) -> str:
        return self.shape.device + (f", enabled={self.enabled}" if self.enabled is not None else "")

    @property
    def autocast(self) -> str:
        """autocast as the rewrite writes it; in a trainer's methods, its condition as they test it."""
        shape = self.shape
        condition = shape.method_condition
        enabled_text = self.enabled if condition is None else f"bool({self.tree.text(condition)})"
        enabled = f", enabled={enabled_text})" if enabled_text is not None else ")"
        return f"{shape.spell(_NATIVE.autocast)}({shape.device}, dtype={shape.spell(shape.dtype)}" + enabled

    def line_splice(self, before: ast.stmt | int, text: str) -> None:
        """`text`, indented as `before` (a statement, or a line number), inserted as a line before it."""
        line = before if isinstance(before, int) else before.lineno
        at = self.tree.index.line_start(line if isinstance(before, int) else first_line(before))
        self.splices.append((at, at, f"{self.tree.indent(line)}{text}{self.shape.newline}"))


def _rewrite_availability_tests(rw: _Rewrite) -> None:
    """`amp is not None` -> `True`."""
    amp = rw.shape.amp
    for use, test in rw.shape.availability:
        value = "False" if isinstance(test.ops[0], ast.Is) else "True"
        said = "it said whether apex imported, and torch.amp, which takes apex.amp's place, is always there"
        if value == "False" and _raises_alone(rw, test):
            guard = rw.tree.parent(test)
            assert isinstance(guard, ast.If)
            index = rw.tree.index
            rw.splices.append((index.line_start(guard.lineno), index.line_end(_last_line(guard)), ""))
            rw.messages[id(use.ref)] = f"`if {amp} is None: raise ...` is removed: {said}"
            continue
        start, end = rw.tree.index.span(test)
        rw.splices.append((start, end, value))
        rw.messages[id(use.ref)] = f"`{rw.tree.text(test)}` -> `{value}`: {said}"


def _raises_alone(rw: _Rewrite, test: ast.Compare) -> bool:
    """`if amp is None: raise ...` (apex missing was an error), no `else`, on lines of its own without comments,
    with other statements in its block (removed, the block is not left empty)."""
    guard = rw.tree.parent(test)
    if not (isinstance(guard, ast.If) and guard.test is test and not guard.orelse
            and all(isinstance(s, ast.Raise) for s in guard.body)):
        return False
    block, _ = rw.tree.block_of(guard)
    try:
        _whole_lines_only(rw, guard)
    except NotMechanical:
        return False
    return len(block) > 1


def _rewrite_initialize(rw: _Rewrite) -> None:
    """initialize -> the scaler (and the names rebound when the left side differs)."""
    shape, index = rw.shape, rw.tree.index
    statement = shape.init_statement
    _whole_lines_only(rw, statement)
    indent = rw.tree.indent(statement.lineno)
    created = f"{indent}{rw.shape.scaler} = {shape.spell(_NATIVE.grad_scaler)}({rw.scaler_args}){shape.newline}"
    if (shape.model_name, shape.opt_name) != (shape.model, shape.optimizer):
        rebound = f"{rw.tree.text(shape.init.targets[0])} = {shape.model}, {shape.optimizer}{shape.newline}"
        if shape.condition is not None and statement is not shape.init:  # bound where initialize bound them
            created += f"{indent}if {rw.tree.text(shape.condition)}:{shape.newline}{indent}    {rebound}"
        else:
            created = f"{indent}{rebound}" + created
    rw.splices.append((index.line_start(statement.lineno), index.line_end(_last_line(statement)), created))


def _rewrite_steps(rw: _Rewrite) -> None:
    """Every `optimizer.step()` -> `scaler.step(optimizer)`; `scaler.update()`."""
    shape, tree = rw.shape, rw.tree
    if shape.optimizers:
        _rewrite_several_steps(rw)
        return
    opt_name = shape.opt_name
    holders = shape.step_holders
    everywhere = tree.parent(shape.function) if shape.in_init else shape.function  # a trainer's class
    assert everywhere is not None
    steps = [node for node in ast.walk(everywhere) if isinstance(node, ast.Expr) and _is_step(node.value, opt_name)]
    if not steps or any(tree.function_of(s) not in holders or (
            not shape.in_init and not shape.init.lineno <= s.lineno <= shape.block_end) for s in steps) \
            or _other_steps(everywhere, opt_name, steps):
        if not steps and _used_as_a_list(everywhere, opt_name):
            raise NotMechanical(f"`{opt_name}` is iterated or indexed: a list of optimizers the rewrite cannot see "
                                "into (give initialize a list of names: `[o1, o2]`)")
        raise NotMechanical("no plain `optimizer.step()` statement, or a step used otherwise (a closure, a value)")
    for step in steps:
        start, end = tree.index.span(step.value)
        rw.splices.append((start, end, f"{rw.shape.scaler}.step({opt_name})"))
        _ends_its_line(rw, step)
        holder = tree.parent(step)
        after: ast.stmt = step
        if isinstance(holder, ast.If) and _steps_otherwise(holder, step, opt_name):
            after = holder  # the update after the `if`: the other branch steps too (its unscale_ is checked later)
            _ends_its_line(rw, holder)
            rw.branch_steps.append(step)
        at = tree.index.line_end(_last_line(after))
        rw.splices.append((at, at, f"{tree.indent(after.lineno)}{rw.shape.scaler}.update(){shape.newline}"))
    rw.steps = steps


def _rewrite_several_steps(rw: _Rewrite) -> None:
    """Several optimizers: each `o.step()` -> `scaler.step(o)`, and one `scaler.update()` after the last step
    (the one scale is updated once per iteration, after every optimizer stepped). Each optimizer steps once, in
    one block with the others, so that the place of the update is clear."""
    shape, tree = rw.shape, rw.tree
    function = shape.function
    steps = [node for node in ast.walk(function) if isinstance(node, ast.Expr)
             and any(_is_step(node.value, name) for name in shape.optimizers)]
    if any(_other_steps(function, name, steps) for name in shape.optimizers) \
            or any(not shape.init.lineno <= s.lineno <= shape.block_end or tree.function_of(s) is not function
                   for s in steps):
        raise NotMechanical("a step of one of the optimizers is used otherwise (a closure, a value)")
    stepped = sorted(_stepped(s) for s in steps)
    if stepped != sorted(shape.optimizers):
        raise NotMechanical("the optimizers given to initialize do not each step once (`o.step()`), so the place of "
                            "the scaler's one update per iteration is not clear")
    block, _ = tree.block_of(steps[0])
    if any(step not in block for step in steps):
        raise NotMechanical("the steps of the optimizers are not in one block, so the place of the scaler's one "
                            "update per iteration is not clear")
    steps.sort(key=block.index)
    for step in steps:
        start, end = tree.index.span(step.value)
        rw.splices.append((start, end, f"{shape.scaler}.step({_stepped(step)})"))
        _ends_its_line(rw, step)
    at = tree.index.line_end(_last_line(steps[-1]))
    rw.splices.append((at, at, f"{tree.indent(steps[-1].lineno)}{shape.scaler}.update(){shape.newline}"))
    rw.steps = steps


def _used_as_a_list(function: ast.AST, opt_name: str) -> bool:
    """`for o in optimizers`, `optimizers[i]`: the optimizer's name holds several."""
    return any(isinstance(node, (ast.For, ast.comprehension)) and _chain(node.iter) and ast.unparse(node.iter)
               == opt_name or isinstance(node, ast.Subscript) and _chain(node.value)
               and ast.unparse(node.value) == opt_name for node in ast.walk(function))


def _stepped(step: ast.Expr) -> str:
    """The optimizer an `o.step()` statement steps."""
    call = step.value
    assert isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)  # _is_step
    return ast.unparse(call.func.value)


def _steps_otherwise(holder: ast.If, step: ast.Expr, opt_name: str) -> bool:
    """`if T: other_step(optimizer) else: optimizer.step()` (or the other way round; transformers' TPU branch,
    `xm.optimizer_step(optimizer)`): each branch a single statement, the other a call given the optimizer."""
    branches = [holder.body, holder.orelse]
    if [step] not in branches:
        return False
    other = branches[1] if branches[0] == [step] else branches[0]
    call = other[0].value if len(other) == 1 and isinstance(other[0], ast.Expr) else None
    return isinstance(call, ast.Call) and any(_is_optimizer(a, opt_name) for a in call.args)


def _rewrite_scale_losses(rw: _Rewrite) -> None:
    """scale_loss -> `scaler.scale(loss).backward(...)`, the statements before it in its block under autocast
    (several in one block, one per loss: those between it and the backward before it)."""
    for use in sorted(rw.shape.scale_losses, key=lambda u: (u.ref.node.lineno, u.ref.node.col_offset)):
        _rewrite_scale_loss(rw, use)


def _rewrite_scale_loss(rw: _Rewrite, use: AmpUse) -> None:
    shape, tree, index = rw.shape, rw.tree, rw.tree.index
    call = _call_of(use)
    with_node = tree.parent(tree.parent(call))  # the call's withitem's With
    loss, backward = _scale_loss_arguments(call, with_node, shape.opt_name, shape.optimizers)
    assert isinstance(with_node, ast.With)  # _scale_loss_arguments: the single item of a `with`
    # `if flag: with amp.scale_loss(...) ... else: loss.backward()`: both branches become the scaler's (a
    # disabled scaler's scale() returns the loss as it is)
    guard = _flag_guard(rw, use, with_node, loss, backward)
    statement = guard if guard is not None else with_node
    rw.backward_statements.append(statement)
    block, position = tree.block_of(statement)
    # the forward pass: the statements before it in its block (after initialize, when that is in the block too)
    begin = rw.forward_blocks.get(id(block), block.index(shape.init_statement) + 1
                                  if shape.init_statement in block else 0)
    while begin < position and block[begin] in shape.method_imports:
        begin += 1  # a trainer method's local import: removed (`_rewrite_method_imports`), not a forward pass
    caller_forward = position <= begin and id(block) not in rw.forward_blocks and _loss_from_caller(rw, block, loss)
    if position <= begin and id(block) not in rw.forward_blocks and not caller_forward:
        raise NotMechanical("no forward pass before a scale_loss in its block")
    rw.forward_blocks[id(block)] = position + 1
    kept = _comments_after_the_with(rw, guard, with_node) if guard is not None else ""
    if guard is None:
        _whole_lines_only(rw, statement)
    # `with amp.scale_loss(LOSS, opt) as s:\n s.backward(ARGS)` -> `scaler.scale(LOSS).backward(ARGS)`: the
    # loss and the arguments stay where they are (another rule may edit inside them)
    loss_start, loss_end = index.span(loss)
    rw.splices.append((index.line_start(statement.lineno), loss_start,
                       f"{tree.indent(statement.lineno)}{rw.shape.scaler}.scale("))
    rw.splices.append((loss_end, index.span(backward.func)[1], ").backward"))
    if guard is not None:  # the `else:` and its `loss.backward()` go
        rw.splices.append((index.span(with_node)[1], index.line_end(_last_line(statement)), shape.newline + kept))
    amp = shape.amp
    if caller_forward:
        where = _caller_forward_note(rw, tree.function_of(statement), loss)
    elif position > begin:
        first, last = _put_under_autocast(rw, block[begin:position])
        where = f"; {'line' if first == last else 'lines'} {first}{'' if first == last else f'-{last}'} before it run "
        where += f"under `{rw.autocast}`"
    else:
        where = "; right after the backward of another loss (the scaler scales each loss with its one scale)"
    before = (f"`if {tree.text(guard.test)}: with {amp}.scale_loss(...)` and its `else: ....backward(...)` -> "
              f"`{shape.scaler}.scale(...).backward(...)` (where the scaler is disabled, scale() returns the loss as "
              "it is)" if guard is not None
              else f"`{amp}.scale_loss(...)` -> `{shape.scaler}.scale(...).backward(...)`")
    rw.messages[id(use.ref)] = f"{before}{where}"


def _flag_guard(rw: _Rewrite, use: AmpUse, with_node: ast.With, loss: ast.expr, backward: ast.Call) -> ast.If | None:
    """The `if flag:` around a scale_loss, its `else` the plain backward; None where the `if` is one of its own
    (`if i % k == 0:`), a block like any other."""
    guard = rw.tree.parent(with_node)
    optional = rw.shape.optional
    if _tests_condition(rw, guard):
        assert isinstance(guard, ast.If)  # _tests_condition
        # initialize's own condition (a trainer method's local import may come first: it goes with the `if`)
        _plain_backward_else(guard, with_node, loss, backward, rw.shape.method_imports)
        return guard
    if not (optional is not None and isinstance(guard, ast.If) and isinstance(guard.test, ast.Name)
            and guard.body == [with_node]):
        return None
    _availability_guard(guard, optional, use.ref.scope, "a scale_loss")
    _plain_backward_else(guard, with_node, loss, backward)
    rw.flags.append(guard.test.id)
    return guard


def _loss_from_caller(rw: _Rewrite, block: list[ast.stmt], loss: ast.expr) -> bool:
    """A trainer's method (set up in `__init__`) given the loss by its caller, a parameter, scale_loss first in its
    body (the issue's `def step(self, loss)`): the forward pass is outside the class."""
    method = rw.tree.function_of(block[0])
    return (rw.shape.in_init and method in rw.shape.methods and isinstance(method, ast.FunctionDef)
            and block is method.body and isinstance(loss, ast.Name) and _parameter_chain(loss, method))


def _caller_forward_note(rw: _Rewrite, method: ast.AST, loss: ast.expr) -> str:
    """What changes where the forward pass is the caller's: O1 ran it in float16, it now runs in float32 unless the
    caller puts it under autocast (an unsafe fix: the numerics change)."""
    name = getattr(method, "name", "?")
    note = (f"the forward pass that computes `{rw.tree.text(loss)}` is not in `{name}` but in its callers: O1 ran it "
            f"in mixed precision, it now runs in float32 unless they put it under `{rw.autocast}`")
    if note not in rw.unsafe_notes:
        rw.unsafe_notes.append(note)
    return f"; {note}"


def _tests_condition(rw: _Rewrite, node: ast.AST | None) -> bool:
    """Is `node` an `if` testing the condition that guarded initialize (in a trainer's methods, as they test it)?"""
    condition = rw.shape.method_condition if rw.shape.in_init else rw.shape.condition
    # a name or attribute chain (`_chain`), compared as text: the trainer's is an assignment's target
    return condition is not None and isinstance(node, ast.If) and ast.unparse(node.test) == ast.unparse(condition)


def _comments_after_the_with(rw: _Rewrite, guard: ast.If, with_node: ast.With) -> str:
    """The lines that go with the `else:` of a collapsed `if COND: scale_loss ... else: loss.backward()` may hold
    comments on lines of their own (commented-out clipping, say): those lines are kept as they are, after the
    rebuilt statement. Any other comment in the `if` holds the rewrite back."""
    _ends_its_line(rw, guard)
    lines, comments = rw.tree.lines, rw.shape.comments
    kept = []
    for number in range(first_line(guard), _last_line(guard) + 1):
        if number not in comments:
            continue
        if number <= _last_line(with_node) or not lines[number - 1].lstrip().startswith("#"):
            raise NotMechanical("a comment sits on a line that would be rebuilt")
        kept.append(lines[number - 1])
    return "".join(kept)


def _put_under_autocast(rw: _Rewrite, forward: list[ast.stmt]) -> tuple[int, int]:
    """The forward pass under autocast: a header line, and four spaces at the start of each line; its lines."""
    index, lines = rw.tree.index, rw.tree.lines
    first, last = first_line(forward[0]), _last_line(forward[-1])
    _reindentable(rw, forward, first, last)
    at = index.line_start(first)
    rw.region_splices.append((at, at, f"{rw.tree.indent(first)}with {rw.autocast}:{rw.shape.newline}"))
    for number in range(first, last + 1):
        if lines[number - 1].strip():
            at = index.line_start(number)
            rw.region_splices.append((at, at, "    "))
    rw.regions.append((first, last))
    return first, last


def _scale_loss_arguments(call: ast.Call, with_node: ast.AST | None, opt_name: str,
                          optimizers: tuple[str, ...] = ()) -> tuple[ast.expr, ast.Call]:
    """The loss, and the backward call of the body; where initialize was given several optimizers, scale_loss
    is given them all (a list): apex unscaled the gradients of those it was given, the scaler unscales each
    optimizer's at its step."""
    item = with_node.items[0] if isinstance(with_node, ast.With) and len(with_node.items) == 1 else None
    if not (item is not None and item.context_expr is call and isinstance(item.optional_vars, ast.Name)):
        raise NotMechanical("a scale_loss is not the single item of a `with ... as name`")
    assert isinstance(with_node, ast.With)
    scaled = item.optional_vars.id
    optimizer = call.args[1] if len(call.args) in (2, 3) else None  # (loss, optimizer[, loss_id])
    if optimizers and optimizer is not None and not _all_optimizers(optimizer, optimizers):
        raise NotMechanical(f"a scale_loss is not given every optimizer of initialize ({', '.join(optimizers)}): "
                            "apex unscaled only the gradients of those it was given, the scaler unscales every "
                            "optimizer's")
    if not (optimizer is not None and (_is_optimizer(optimizer, opt_name) or bool(optimizers))
            and all(k.arg in ("delay_unscale", "loss_id") for k in call.keywords)):
        raise NotMechanical("a scale_loss is not given (loss, optimizer) of initialize, or has keywords beyond "
                            "delay_unscale and loss_id")
    body = with_node.body
    backward = body[0].value if len(body) == 1 and isinstance(body[0], ast.Expr) else None
    if not (isinstance(backward, ast.Call) and isinstance(backward.func, ast.Attribute)
            and backward.func.attr == "backward"
            and isinstance(backward.func.value, ast.Name) and backward.func.value.id == scaled):
        raise NotMechanical("a scale_loss body is not a single `.backward(...)` call")
    if any(isinstance(n, ast.Name) and n.id == scaled for a in (*backward.args, *backward.keywords)
           for n in ast.walk(a)):
        raise NotMechanical("the scaled loss is used again in the backward call")
    return call.args[0], backward


def _plain_backward_else(guard: ast.If, with_node: ast.With, loss: ast.expr, backward: ast.Call,
                         imports: tuple[ast.ImportFrom, ...] = ()) -> None:
    """`if flag: with amp.scale_loss(loss, opt) as s: s.backward(ARGS)` / `else: loss.backward(ARGS)`: the
    same loss, the same arguments, in both branches (`imports`: a local import may come first in the `if`)."""
    other = guard.orelse[0] if len(guard.orelse) == 1 else None
    call = other.value if isinstance(other, ast.Expr) else None
    body = guard.body[1:] if len(guard.body) == 2 and guard.body[0] in imports else guard.body
    if not (body == [with_node] and isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr == "backward" and ast.dump(call.func.value) == ast.dump(loss)
            and [ast.dump(a) for a in (*call.args, *call.keywords)]
            == [ast.dump(a) for a in (*backward.args, *backward.keywords)]):
        raise NotMechanical("a scale_loss under a flag is not alone in its `if`, or its `else` is not the same "
                            "loss's `.backward(...)` with the same arguments")


def _steps_after_the_backwards(rw: _Rewrite) -> None:
    """Several optimizers: every backward comes before the first step (the one update after the last step then
    ends the iteration)."""
    if rw.shape.optimizers and any(b.lineno > rw.steps[0].lineno for b in rw.backward_statements):
        raise NotMechanical("a scale_loss comes after a step of one of the optimizers, so the place of the scaler's "
                            "one update per iteration is not clear")


def _rewrite_clipping(rw: _Rewrite) -> None:
    """Clipping over master_params directly before a step -> unscale_, then clipping over param_groups."""
    shape, tree = rw.shape, rw.tree
    step_lines = {s.lineno for s in rw.steps}
    unscaled: set[tuple[int, str]] = set()  # (the step clipped before, the optimizer unscaled)
    for use in shape.clips:
        call = _call_of(use)
        opt_name = next((name for name in shape.optimizers or (shape.opt_name,) if len(call.args) == 1
                         and not call.keywords and _is_optimizer(call.args[0], name)), None)
        if opt_name is None:
            raise NotMechanical("master_params is not given the optimizer alone")
        clip = tree.parent(call)
        statement = tree.parent(clip)
        if not (isinstance(clip, ast.Call) and clip.args and clip.args[0] is call
                and isinstance(statement, (ast.Expr, ast.Assign)) and statement.value is clip):
            raise NotMechanical("master_params is not the first argument of a clipping statement")
        block, position = tree.block_of(statement)
        following = block[position + 1] if position + 1 < len(block) else None
        guard = tree.parent(statement)
        if following is None and _tests_condition(rw, guard) and isinstance(guard, ast.If) \
                and guard.body[-1] is statement:
            # `if COND: clip(master_params(opt)) else: clip(model.parameters())`, then the step: the `if` stays
            # (each branch clips what it clipped), unscale_ goes before the clipping of its first branch
            block, position = tree.block_of(guard)
            following = block[position + 1] if position + 1 < len(block) else None
        while shape.optimizers and following is not None and _clips_master_params(rw, following):
            # several optimizers, each clipped over its master_params, then the steps: each unscale_ before its
            # clipping, every one before the steps
            following = block[block.index(following) + 1] if block.index(following) + 1 < len(block) else None
        branch_step = next((s for s in rw.branch_steps if rw.tree.parent(s) is following), None)
        if branch_step is not None:
            following = branch_step  # `if T: other_step(opt) else: opt.step()` right after the clipping
        if following is None or following.lineno not in step_lines:
            raise NotMechanical("clipping is not directly before the optimizer step (inside micro-steps it would clip "
                                "partial, scaled gradients)")
        _starts_its_line(rw, statement)
        start, end = tree.index.span(call)
        rw.splices.append((start, end, rules.OPTIMIZER_PARAMS_OF.format(optimizer=opt_name)))
        rw.line_splice(statement.lineno, f"{rw.shape.scaler}.unscale_({opt_name})")
        rw.messages[id(use.ref)] = (f"`{shape.amp}.master_params({opt_name})` -> "
                                    f"`{shape.scaler}.unscale_({opt_name})`, then clipping over the optimizer's "
                                    "param_groups (what master_params iterated)")
        if (following.lineno, opt_name) in unscaled:
            raise NotMechanical(f"`{opt_name}` is clipped twice before its step (unscale_ may run once per step)")
        unscaled.add((following.lineno, opt_name))
        rw.unscaled_steps.add(following.lineno)


def _clips_master_params(rw: _Rewrite, statement: ast.stmt) -> bool:
    """Does `statement` hold a master_params use (clipping over it, checked where that use is rewritten)?"""
    uses = {id(use.ref.node) for use in rw.shape.clips}
    return any(id(node) in uses for node in ast.walk(statement))


def _unscale_before_gradient_reads(rw: _Rewrite) -> None:
    """Gradients read between a backward and its step (clipping over any parameters, a `.grad`): apex had
    unscaled them when scale_loss exited, the scaler keeps them scaled until its step. In the step's own
    block, `unscale_` goes before the first statement that reads them (once per step, as the scaler
    allows); read in the micro-steps of an accumulation, they cannot be unscaled yet."""
    tree, steps = rw.tree, rw.steps
    for step in rw.branch_steps:
        if step.lineno not in rw.unscaled_steps:
            # update() after the `if` needs the inf checks unscale_ records where the other branch steps
            raise NotMechanical(f"the step on line {step.lineno} shares its `if` with another step, and no clipping "
                                "unscales before that `if`")
    for step in steps:
        if step.lineno in rw.unscaled_steps:
            continue
        block, position = tree.block_of(step)
        begin = next((block.index(s) + 1 for s in rw.backward_statements if s in block), 0)
        readers = [s for s in block[begin:position] if _reads_gradients(rw, s)]
        if rw.shape.optimizers:
            readers = [s for s in readers if not _clips_master_params(rw, s)]
            if readers:
                raise NotMechanical(f"gradients are read on line {readers[0].lineno}, before the steps of several "
                                    "optimizers, not by clipping over one optimizer's master_params")
        if readers:
            first = readers[0]
            _starts_its_line(rw, first)
            rw.line_splice(first, f"{rw.shape.scaler}.unscale_({rw.shape.opt_name})")
            rw.unscaled_at.append(first.lineno)
    for statement in rw.backward_statements:
        block, position = tree.block_of(statement)
        if any(step in block for step in steps):
            continue  # the step's own block: above
        for later in block[position + 1:]:
            if not any(isinstance(node, ast.Expr) and node in steps for node in ast.walk(later)) \
                    and _reads_gradients(rw, later):
                raise NotMechanical(f"gradients are read on line {later.lineno}, between a backward and the step of "
                                    "an accumulation, where a scaler keeps them scaled (apex had unscaled them)")


def _rewrite_state(rw: _Rewrite) -> None:
    """`amp.state_dict()` / `amp.load_state_dict(...)` -> the scaler's; what is loaded goes through a helper that
    also reads apex's format."""
    amp, index = rw.shape.amp, rw.tree.index
    helper = None
    for use in rw.shape.states:
        if use.ref.role != "call" or len(use.ref.parts) != 2:
            raise NotMechanical("state_dict/load_state_dict is not called directly")
        start, end = index.span(use.ref.node)
        method = use.ref.parts[1]
        if method == "state_dict":
            rw.splices.append((start, end, f"{rw.shape.scaler}.{method}"))
            rw.messages[id(use.ref)] = (
                f"`{amp}.state_dict` -> `{rw.shape.scaler}.state_dict`: checkpoints now hold GradScaler's format "
                f"{rules.SCALER_STATE_KEYS}, not apex's {rules.APEX_STATE_KEYS}")
            continue
        helper = helper or _scaler_state_helper(rw, use.ref.scope)
        call = _call_of(use)
        if len(call.args) != 1 or call.keywords or isinstance(call.args[0], ast.Starred):
            raise NotMechanical("load_state_dict is not given one state")
        state_start, state_end = index.span(call.args[0])
        around = index.text[end:state_start] + index.text[state_end:index.span(call)[1]]
        if "#" in around:
            raise NotMechanical("a comment sits inside the parentheses of load_state_dict")
        rw.splices.append((start, state_start, f"{rw.shape.scaler}.load_state_dict({helper[0]}("))
        rw.splices.append((state_end, index.span(call)[1], "))"))
        rw.messages[id(use.ref)] = (
            f"`{amp}.load_state_dict(state)` -> `{rw.shape.scaler}.load_state_dict({helper[0]}(state))`: `{helper[0]}` "
            f"({'added at module level' if helper[1] else 'already in the module'}) also reads the format "
            f"apex.amp.state_dict() wrote ({rules.APEX_STATE_KEYS}) into GradScaler's, with "
            "apex's dynamic scaling: old apex checkpoints load")


def _scaler_state_helper(rw: _Rewrite, scope: Scope) -> tuple[str, bool]:
    """The name of the module-level helper that turns an apex checkpoint's state into GradScaler's, and whether
    it is added: one already in the module (same code, any name, bound once and seen from `scope`) is reused;
    else it goes before the top-level statement that holds the function, or before initialize's in a script."""
    engine, shape = rw.tree.engine, rw.shape
    for statement in engine.tree.body:
        if isinstance(statement, ast.FunctionDef) and len(scope.lookup(statement.name)[1]) == 1 \
                and scope.lookup(statement.name)[0] is engine.module_scope:
            same = rules.SCALER_STATE_HELPER.format(name=statement.name, nl="\n")
            if ast.dump(statement) == ast.dump(ast.parse(same).body[0]):
                return statement.name, False
    name = engine.free_name(rules.SCALER_STATE_HELPER_NAME)
    text = rules.SCALER_STATE_HELPER.format(name=name, nl=shape.newline) + shape.newline * 2
    index = rw.tree.index
    if isinstance(shape.function, ast.Module):  # a script: with the scaler that replaces initialize (one splice there)
        start, end, created = next(s for s in rw.splices if s[0] == index.line_start(shape.init_statement.lineno))
        rw.splices.remove((start, end, created))
        rw.splices.append((start, end, shape.newline * 2 + text + created))
    else:
        top: ast.AST = shape.function
        while rw.tree.parent(top) is not engine.tree:
            top = rw.tree.parents[id(top)]
        assert isinstance(top, ast.stmt)
        at = index.line_start(first_line(top))
        rw.splices.append((at, at, text))
    return name, True


def _rewrite_scale_reads(rw: _Rewrite) -> None:
    """apex's private loss scale read, `amp._amp_state.loss_scalers[0]._loss_scale` (or `.loss_scale()`), ->
    `scaler.get_scale()`, the GradScaler's twin (one scaler: index 0 only). Anything else of `_amp_state`, a
    write included, holds the rewrite back."""
    tree, index = rw.tree, rw.tree.index
    for use in rw.shape.scale_reads:
        subscript = use.ref.parent
        read = tree.parent(subscript)
        if not (isinstance(subscript, ast.Subscript) and subscript.value is use.ref.node
                and isinstance(subscript.slice, ast.Constant) and subscript.slice.value == 0
                and isinstance(read, ast.Attribute) and isinstance(read.ctx, ast.Load)
                and read.attr in rules.LOSS_SCALE_READS):
            raise NotMechanical("apex's private `_amp_state` is used otherwise than reading loss_scalers[0]'s scale")
        whole: ast.expr = read
        if read.attr == "loss_scale":
            call = tree.parent(read)
            if not (isinstance(call, ast.Call) and call.func is read and not call.args and not call.keywords):
                raise NotMechanical("loss_scalers[0].loss_scale is not called")
            whole = call
        start, end = index.span(whole)
        rw.splices.append((start, end, f"{rw.shape.scaler}.get_scale()"))
        rw.messages[id(use.ref)] = (f"apex's private loss scale `{tree.text(whole)}` -> `{rw.shape.scaler}.get_scale()`"
                                    " "
                                    "(the GradScaler updates its scale in update(), apex did in scale_loss)")


def _rewrite_evaluation(rw: _Rewrite) -> None:
    """Evaluation after initialize in the function: its `with torch.no_grad():` blocks get the autocast too."""
    rw.evaluation = _evaluation_blocks(rw)
    for block_node in rw.evaluation:
        at = rw.tree.index.span(block_node.items[-1].optional_vars or block_node.items[-1].context_expr)[1]
        rw.splices.append((at, at, f", {rw.autocast}"))


def _evaluation_blocks(rw: _Rewrite) -> list[ast.With]:
    """The outermost `with torch.no_grad():` (or inference_mode) blocks of the function after initialize and
    outside the forward passes, not already under an autocast of their own: O1 ran them in mixed precision."""
    shape, tree = rw.shape, rw.tree

    def resolved(item: ast.withitem) -> str | None:
        call = item.context_expr
        return tree.engine.resolve(call.func, shape.scope) if isinstance(call, ast.Call) else None

    found: list[ast.With] = []
    for node in ast.walk(shape.function):  # breadth first: an outer block comes before the blocks inside it
        if not (isinstance(node, ast.With) and node.lineno > _last_line(shape.init_statement)
                and tree.function_of(node) is shape.function):
            continue
        names = [resolved(item) for item in node.items]
        if any(name in rules.EVALUATION_CONTEXTS for name in names) \
                and not any(name in rules.AUTOCAST_CONTEXTS for name in names) \
                and not any(a <= node.lineno <= b for a, b in rw.regions) \
                and not any(b.lineno <= node.lineno <= _last_line(b) for b in found):
            found.append(node)
    return sorted(found, key=lambda b: b.lineno)


def _rewrite_import(rw: _Rewrite) -> None:
    """The import: gone, or `import torch` where the file has none; the optional import's whole `try`, the
    flags it sets True kept, and its comments as lines of their own."""
    shape, index, lines = rw.shape, rw.tree.index, rw.tree.lines
    newline, optional = shape.newline, shape.optional
    replacement = "" if shape.torch_bound else f"import {_NATIVE.package}{newline}"
    if shape.import_statement is None:
        return  # a local import in initialize's `if`: gone with it
    if optional is None:
        _whole_lines_only(rw, shape.import_statement)
        removed: ast.stmt = shape.import_statement
    else:
        removed = optional.statement
        _ends_its_line(rw, removed)
        indent = rw.tree.indent(removed.lineno)
        kept_lines = {flag.lineno for flag in optional.flags_set}  # one line each, with its comment
        kept = [f"{indent}{lines[flag.lineno - 1][index.col(flag.lineno, flag.col_offset):].rstrip()}{newline}"
                for flag in optional.flags_set]
        kept_comments = [f"{indent}{shape.comments[n]}{newline}" for n in range(removed.lineno, _last_line(removed) + 1)
                         if n in shape.comments and n not in kept_lines]
        replacement += "".join(kept + kept_comments)
        rw.messages[id(shape.import_node)] = _optional_import_message(shape.amp, sorted(set(rw.flags)),
                                                                      bool(kept_comments))
    rw.splices.append((index.line_start(removed.lineno), index.line_end(_last_line(removed)), replacement))


def _rewrite_method_imports(rw: _Rewrite) -> None:
    """A trainer's other methods each import apex.amp (the issue's first example): an import first in the `if`
    collapsed around a scale_loss goes with it; one in the method's own body is removed; anywhere else it would
    stay, failing on current apex, and the rewrite is held back."""
    index = rw.tree.index
    for node in rw.shape.method_imports:
        holder = rw.tree.parent(node)
        if isinstance(holder, ast.If) and holder in rw.backward_statements and holder.body[0] is node:
            continue
        if not (holder in rw.shape.methods and isinstance(holder, ast.FunctionDef) and node in holder.body
                and len(holder.body) > 1):
            raise NotMechanical(f"the `from apex import {rw.shape.amp}` on line {node.lineno} is neither in the body "
                                "of a method using it nor first in the `if` around its scale_loss")
        _whole_lines_only(rw, node)
        rw.splices.append((index.line_start(node.lineno), index.line_end(_last_line(node)), ""))


def _check_splices(rw: _Rewrite) -> None:
    """The splices do not overlap, none falls in a forward pass (then those are re-indented), and no other
    rule's edit crosses one: `ampfix.engine.apply` merges the edits between the splices, not across one."""
    index = rw.tree.index
    spans = sorted((s, e) for s, e, _ in rw.splices)
    for (_, end), (start, _) in zip(spans, spans[1:]):
        if start < end:
            raise NotMechanical("edits overlap")
    for first, last in rw.regions:
        lo, hi = index.line_start(first), index.line_end(last)
        if any(lo <= s < hi for s, _, _ in rw.splices):
            raise NotMechanical("a step, a clip or the state is used inside the forward pass")
    rw.splices += rw.region_splices
    for edit_start, edit_end in rw.tree.engine.edit_spans():
        if any(s < edit_end and edit_start < e for s, e, _ in rw.splices if s < e):
            raise NotMechanical("another rule edits a statement this rewrite rebuilds")


def _initialize_message(rw: _Rewrite) -> None:
    """What became of initialize, with what the autocast covers and what it does not."""
    shape, tree = rw.shape, rw.tree
    covered = rw.regions + [(b.lineno, _last_line(b)) for b in rw.evaluation]
    holders = (shape.function, *shape.methods)
    target = shape.init.targets[0]
    bound = target.elts[0] if isinstance(target, (ast.Tuple, ast.List)) else target
    models = [ast.unparse(e) for e in bound.elts] if isinstance(bound, (ast.Tuple, ast.List)) else [shape.model_name]
    outside = sorted({node.lineno for holder in holders for node in ast.walk(holder)
                      if isinstance(node, ast.Call) and _chain(node.func)
                      and ast.unparse(node.func) in models and node.lineno > _last_line(shape.init)
                      and not any(a <= node.lineno <= b for a, b in covered)
                      and tree.function_of(node) in holders})
    passes = "the forward passes" + (f" and the `no_grad`/`inference_mode` blocks on "
                                     f"{_lines([b.lineno for b in rw.evaluation])}"
                                     if rw.evaluation else "")
    note = (f"; O1 put every call after initialize in mixed precision, the autocast added covers {passes}: "
            f"the calls of {', '.join(f'`{m}`' for m in models)} on {_lines(outside)}, and any call outside "
            f"{shape.where}, are outside "
            "it (float32 unless under an autocast of their own)" if outside else
            f"; O1 put every call after initialize in mixed precision, the autocast added covers {passes}: "
            f"calls outside {shape.where} (evaluation elsewhere) are outside it (float32 unless under an autocast "
            "of their own)")
    if not covered and shape.in_init:
        note = ("; O1 put every call after initialize in mixed precision: no forward pass is in the trainer's "
                "methods, so no autocast is added (its callers' forward passes run in float32 unless under one)")
    opt_name = shape.opt_name
    steps = (f"`{opt_name}.step()` on {_lines([s.lineno for s in rw.steps])} -> `{rw.shape.scaler}.step({opt_name})` "
             f"and `{rw.shape.scaler}.update()`" if not shape.optimizers else
             f"each optimizer's step ({', '.join(f'`{o}.step()`' for o in shape.optimizers)}) on "
             f"{_lines([s.lineno for s in rw.steps])} -> `{shape.scaler}.step(optimizer)`, and one "
             f"`{shape.scaler}.update()` after the last (one scaler serves every optimizer)")
    rw.messages[id(shape.init_use.ref)] = (
        f"`{shape.amp}.initialize` ({shape.opt_level.level}) -> "
        f"`{rw.shape.scaler} = {shape.spell(_NATIVE.grad_scaler)}({rw.scaler_args})`; {steps}"
        + (f"; `{shape.scaler}.unscale_({opt_name})` before the gradients are read on {_lines(rw.unscaled_at)} "
           "(apex had unscaled them when scale_loss exited)" if rw.unscaled_at else "")
        + (f"; {shape.opt_level.note}" if shape.opt_level.note else "") + note)


# In this order: each reads what the ones before it found (the steps, the forward passes, the unscaled steps).
_SUB_REWRITES: tuple[Callable[[_Rewrite], None], ...] = (
    _rewrite_availability_tests, _rewrite_initialize, _rewrite_steps, _rewrite_scale_losses,
    _steps_after_the_backwards, _rewrite_clipping,
    _unscale_before_gradient_reads, _rewrite_state, _rewrite_scale_reads, _rewrite_evaluation, _rewrite_import,
    _rewrite_method_imports)


# What the stages ask of statements ------------------------------------------------------------------------
def _optional_import_message(amp: str, flags: list[str], comments_kept: bool) -> str:
    said = (f"; {_names(flags)}, True exactly where apex imported, {'is' if len(flags) == 1 else 'are'} now "
            "always True: mixed precision stays on where the author meant it, not silently off" if flags else "")
    kept = "; the comments of the removed `try` are kept as lines of their own" if comments_kept else ""
    return (f"the optional `from apex import {amp}` and its `except` branch are removed (torch.amp, which takes "
            f"its place, is always there){said}{kept}")


def _names(names: list[str]) -> str:
    return ", ".join(f"`{n}`" for n in names)


def _lines(numbers: list[int]) -> str:
    return ("line " if len(numbers) == 1 else "lines ") + ", ".join(map(str, numbers))


def _reads_gradients(rw: _Rewrite, statement: ast.stmt) -> bool:
    """Does `statement` read gradients: a `.grad`, or a call of torch's gradient clipping?"""
    for node in ast.walk(statement):
        if isinstance(node, ast.Attribute) and node.attr == "grad" and isinstance(node.ctx, ast.Load):
            return True
        if isinstance(node, ast.Call) and _resolved(rw, node.func) in rules.GRADIENT_CLIPPING:
            return True
    return False


def _resolved(rw: _Rewrite, node: ast.expr) -> str | None:
    """The qualified name of `node`; a chain from an unbound `torch` (a name a star import may bind, flair's) is
    taken as torch's, as the rewrite takes it where it adds `import torch`."""
    found = rw.tree.engine.resolve(node, rw.shape.scope)
    root = node
    while isinstance(root, ast.Attribute):
        root = root.value
    if found is None and _chain(node) and isinstance(root, ast.Name) and root.id == _NATIVE.package \
            and not rw.shape.scope.lookup(root.id)[1]:
        return ast.unparse(node)
    return found


def _is_optimizer(node: ast.expr, opt_name: str) -> bool:
    """`node` is the optimizer initialize bound: its name, or a trainer's `self.optimizer`."""
    return _chain(node) and ast.unparse(node) == opt_name


def _all_optimizers(node: ast.expr, optimizers: tuple[str, ...]) -> bool:
    """`node` is a list (or tuple) of every optimizer initialize was given, each once, in any order."""
    return isinstance(node, (ast.List, ast.Tuple)) and all(_chain(e) for e in node.elts) \
        and sorted(ast.unparse(e) for e in node.elts) == sorted(optimizers)


def _is_step(node: ast.AST, opt_name: str) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "step"
            and _is_optimizer(node.func.value, opt_name) and not node.args and not node.keywords)


def _other_steps(function: ast.AST, opt_name: str, steps: list[ast.Expr]) -> bool:
    """A step of the optimizer that is not a statement of its own (a closure, a value used)."""
    counted = {id(s.value) for s in steps}
    for node in ast.walk(function):
        if isinstance(node, ast.Attribute) and node.attr == "step" and _is_optimizer(node.value, opt_name):
            call = next((c for c in ast.walk(function) if isinstance(c, ast.Call) and c.func is node), None)
            if call is None or id(call) not in counted:
                return True
    return False


def _starts_its_line(rw: _Rewrite, statement: ast.stmt) -> None:
    index = rw.tree.index
    line = index.lines[first_line(statement) - 1]
    if line[: index.col(statement.lineno, statement.col_offset)].strip():
        raise NotMechanical("a statement that would be rebuilt shares its line")


def _ends_its_line(rw: _Rewrite, statement: ast.stmt) -> None:
    _starts_its_line(rw, statement)
    index = rw.tree.index
    rest = index.text[index.span(statement)[1]:index.line_end(_last_line(statement))]
    if rest.strip() and not rest.strip().startswith("#"):
        raise NotMechanical("a statement that would be rebuilt shares its line")


def _whole_lines_only(rw: _Rewrite, statement: ast.stmt) -> None:
    """The statement's lines are rebuilt: nothing else may be on them (no comment would survive)."""
    _ends_its_line(rw, statement)
    if any(line in rw.shape.comments for line in range(first_line(statement), _last_line(statement) + 1)):
        raise NotMechanical("a comment sits on a line that would be rebuilt")


def _reindentable(rw: _Rewrite, statements: list[ast.stmt], first: int, last: int) -> None:
    """The lines can take four more spaces: they start with spaces only, and no string spans lines."""
    _starts_its_line(rw, statements[0])
    for line in rw.tree.lines[first - 1:last]:
        if line.strip() and "\t" in line[: len(line) - len(line.lstrip(" \t"))]:
            raise NotMechanical("tabs indent the forward pass that would be re-indented")
    for statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, (ast.Constant, ast.JoinedStr)) and isinstance(getattr(node, "value", ""), (str, list)) \
                    and node.end_lineno != node.lineno:
                raise NotMechanical("a string spans lines in the forward pass that would be re-indented")
