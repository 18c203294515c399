"""The precondition stage: `_shape` checks the conditions that hold for the module as a whole and returns the
O1 pattern found (`_Shape`), or raises `NotMechanical` with the first condition that fails. Here too: initialize's
call, its arguments and the names it binds, and whether the names the rewrite writes mean what it means."""

from __future__ import annotations

import ast
import tokenize
from dataclasses import dataclass, field

from ampfix.core.locations import tokens
from ampfix.families.apex import rules
from ampfix.families.apex.optional import OptionalImport, is_availability_test
from ampfix.families.apex.tried import raising_try
from ampfix.families.apex.rewrite.callees import _functions_reached, _module_function
from ampfix.families.apex.rewrite.conditions import (_ApexChecks, _branch_flag, _flag_assignments, _initialize_guard,
                                                     _local_guard, _local_import_statement, _stable,
                                                     _stable_in_callees,
                                                     _stable_key, conditional_import)
from ampfix.families.apex.rewrite.engine import _Engine
from ampfix.families.apex.rewrite.loops import _initialize_loop, _ItemLoop
from ampfix.families.apex.rewrite.loss_scale import (ScalerSettings, initialize_per_loss_scale,
                                                     settings_beside_initialize)
from ampfix.families.apex.rewrite.opt_level import _OptLevel, _opt_level, _several_losses
from ampfix.families.apex.rewrite.returned import _Returned, returned_set_up
from ampfix.families.apex.rewrite.trainers import (_method_condition, _methods_reached, _other_methods, _self_name,
                                                   _self_of, _set_up_call, _sibling_method, _trainer_methods)
from ampfix.families.apex.rewrite.tree import _Tree, _binds_otherwise, _chain, _chains, _last_line, _name_stores
from ampfix.families.apex.rewrite.vocabulary import (AmpUse, NotMechanical, SCALER, Split, _FUNCTIONS, _NATIVE,
                                                     _lines)
from ampfix.syntax.bindings import Scope


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
    # `if TEST: initialize; FLAG = True` (FLAG False before the `if`): the flag, the scaler made after the `if`
    branch_flag: ast.expr | None = None
    # initialize in a loop over list items (`_initialize_loop`): the loop, the list, the name the steps go through
    item_loop: _ItemLoop | None = None
    # `if COND: initialize(...)` beside a module-level import (issue 29's single-file shape): apex.amp is bound
    # where COND is false too, and apex's scale_loss raised there, so every scale_loss must be under `if COND:`
    conditional_beside_import: bool = False
    split: Split | None = None  # one half of a set-up split across modules (`_split_shape`)
    # a second initialize given an evaluation model alone, beside initialize before any loss is scaled
    # (`_evaluation_initialize`): removed
    companion: AmpUse | None = None
    handed: bool = False  # `methods` are module-level functions initialize's function calls, handed the scaler
    # initialize in a set-up function that returns its optimizer to its one caller, which steps it (`returned`):
    # `function` is the caller, `init` the call; the scaler is the module's
    returned: _Returned | None = None
    # apex's loss scaler set through `_amp_state` right after initialize: the GradScaler's arguments
    scaler_settings: ScalerSettings | None = None
    # `import apex.amp._amp_state` beside the module's `from apex import amp`, read only for apex's loss scalers:
    # removed with it
    state_import: ast.Import | None = None
    # inference, initialize's `if` inside another `if` (TimeSeriesPredictionPlatform): the name made to say whether
    # initialize ran (False before the outermost `if`, True in initialize's place), the autocast's `enabled=`
    ran_flag: str = ""

    @property
    def step_holders(self) -> tuple[ast.AST, ...]:
        """Where the optimizer's steps are: initialize's function, or a trainer's methods (set up in __init__)."""
        return self.methods if self.in_init else (self.function, *self.methods) if self.handed else (self.function,)

    @property
    def scope(self) -> Scope:
        return self.init_use.ref.scope if self.returned is None else self.returned.scope

    @property
    def models(self) -> list[str]:
        """The model names initialize bound, each of a list (`[g, d], [og, od] = amp.initialize(...)`)."""
        target = self.init.targets[0]
        bound = target.elts[0] if isinstance(target, (ast.Tuple, ast.List)) else target
        return [ast.unparse(e) for e in bound.elts] if isinstance(bound, (ast.Tuple, ast.List)) else [self.model_name]

    @property
    def where(self) -> str:
        if self.in_init or self.handed:
            holders = ([self.function] if isinstance(self.function, _FUNCTIONS) and self.handed else []) + [
                *self.methods]
            return ", ".join(f"`{m.name}`" for m in holders)
        return f"`{self.function.name}`" if isinstance(self.function, _FUNCTIONS) else "the script's top level"

    def spell(self, qname: str) -> str:
        """A qualified torch name as the rewrite writes it."""
        return self.torch_name + qname[len(_NATIVE.package):]


def _shape(tree: _Tree, uses: list[AmpUse], import_node: ast.ImportFrom, optional: OptionalImport | None,
           method_imports: tuple[ast.ImportFrom, ...] = (), split: Split | None = None,
           state_import: ast.Import | None = None) -> _Shape:
    """The O1 pattern in the module, or NotMechanical with the first condition that fails."""
    if split is not None:
        return _split_shape(tree, uses, import_node, optional, split)
    companion = _evaluation_initialize(tree, uses)
    inits, scale_losses, clips, states, availability, scale_reads = _uses_by_rule(
        tree, [u for u in uses if u is not companion], optional)
    init_use = inits[0]
    amp = init_use.ref.parts[0]
    init_call = _call_of(init_use)
    init = tree.parent(init_call)
    if not (isinstance(init, ast.Assign) and init.value is init_call and len(init.targets) == 1):
        raise NotMechanical("the initialize call is not a plain assignment")
    if (returned := _returned_shape(tree, init_use, init, (scale_losses, clips, states, scale_reads), import_node,
                                    optional, companion)) is not None:
        return returned
    item_loop = _initialize_loop(tree, init)  # one call per list item: the loop becomes the scaler
    site = init if item_loop is None else item_loop.loop
    model, optimizer, enabled = _initialize_arguments(init_call, item_loop is not None)
    opt_level = _several_losses(_opt_level(tree, init_call), init_call, scale_losses)
    tried = raising_try(tree.engine.tree, import_node, tree.index)  # one of several apex imports in a `try` that raises
    conditional = conditional_import(tree.engine.tree, import_node) if optional is None and tried is None else None
    local = optional is None and import_node not in tree.engine.tree.body and conditional is None and tried is None
    import_statement = _local_import_statement(tree, import_node) if local else (
        optional.statement if optional is not None else conditional or tried or import_node)
    checks = _ApexChecks(tree, conditional, optional, init_use.ref.scope)
    init_statement, enabled, flags, condition, import_statement_kept, conditional_beside_import = _guard(
        tree, site, init, init_use, import_statement, enabled, optional, checks, conditional is not None, local)
    function, block_end = _initialize_holder(tree, init_statement)  # a function, or the module of a script
    settings, scale_reads = settings_beside_initialize(tree, scale_reads, init_statement, init_statement is init
                                                       and enabled is None and not item_loop, opt_level.scaler_keywords)
    set_up_call = _set_up_call(tree, function)  # initialize in a set-up method that `__init__` calls
    self_name = _self_of(tree, function) if getattr(function, "name", "") == "__init__" or set_up_call else None
    branch_flag = _branch_flag(init_statement, init) if isinstance(init_statement, ast.If) else None
    _branch_flag_checks(tree, branch_flag, self_name, init_statement, function, set_up_call)
    if self_name is None:
        _not_binding_self(tree, init, function)
    model_name, opt_name, optimizers = _bound_targets(init, model, optimizer, function, self_name, item_loop)
    tests = _availability_tests(availability, amp, optional)
    own_uses = [u for u in uses if not any(u is a for a in availability)]
    method_condition = None
    in_init = self_name is not None and opt_name.startswith(f"{self_name}.")
    if in_init:  # a trainer set up in __init__
        methods = _trainer_methods(tree, own_uses, function, init, opt_name, set_up_call)
        method_condition = branch_flag or _method_condition(tree, function, init_statement, condition, set_up_call)
    elif method_imports:
        raise NotMechanical("apex.amp is imported in several methods of a class, and initialize is not in `__init__` "
                            "binding `self.<optimizer>`")
    elif _module_function(tree, function):  # a module-level function it calls is handed the scaler (`callees`)
        methods = _functions_reached(tree, own_uses, function, (init.lineno, block_end), opt_name)
    else:
        methods = _methods_reached(tree, own_uses, function, (init.lineno, block_end), opt_name)
    handed = bool(methods) and _module_function(tree, function)
    scaler = SCALER if not methods or handed else f"{_self_name(function)}.{SCALER}"
    if (optimizers or item_loop) and methods:
        raise NotMechanical("initialize is given several optimizers, and other methods of its class use apex.amp")
    torch_bound = _names_usable(tree, init_use.ref.scope, init, optimizers or (() if item_loop else (opt_name,)),
                                scaler)
    if tried is not None:  # `tried` removes the import, in the detection's last step
        import_statement_kept = None
        if not torch_bound:
            raise NotMechanical("apex.amp is imported with other apex modules in a `try`, and torch is not imported")
    if not torch_bound:
        _torch_importable(tree, local)
    if branch_flag is None:  # the flag's assignments are checked above
        _condition_stable(tree, condition, function)
    device, dtype = _device_and_dtype(tree.engine)
    if companion is not None:
        _beside_initialize(tree, companion, init_statement, init_call, function, scale_losses, enabled)
    return _Shape(amp, init_use, init, init_statement, function, ast.unparse(model), ast.unparse(optimizer), model_name,
                  opt_name, enabled, flags, scale_losses, clips, states, tests, torch_bound, _NATIVE.package,
                  _comment_lines(tree.index.text), device, dtype, _line_ending(tree, init), import_node, optional,
                  import_statement_kept, condition, opt_level, scale_reads, block_end, scaler, tuple(methods),
                  method_imports, method_condition, in_init, optimizers, branch_flag, item_loop,
                  conditional_beside_import, None, companion, handed, scaler_settings=settings,
                  state_import=state_import)



def _branch_flag_checks(tree: _Tree, branch_flag: ast.expr | None, self_name: str | None, init_statement: ast.stmt,
                        function: ast.AST, set_up_call: ast.stmt | None) -> None:
    """A flag set in initialize's branch (`_branch_flag`): in scope where it is read, and assigned only as allowed."""
    if branch_flag is not None:
        _flag_in_scope(branch_flag, self_name)
        _flag_assignments(tree, branch_flag, init_statement, function, set_up_call)


def _condition_stable(tree: _Tree, condition: ast.expr | None, function: ast.AST) -> None:
    """initialize's condition, read again where the loss is scaled: unchanged in its function and the class's other
    methods (a subscript's key too)."""
    if condition is None:
        return
    _stable(condition, function, condition.lineno)
    if isinstance(condition, ast.Subscript):
        _stable_key(tree, condition, function)
    for method in _other_methods(tree, function, condition):
        _stable(condition, method, 0)

def _guard(tree: _Tree, site: ast.stmt, init: ast.Assign, init_use: AmpUse, import_statement: ast.stmt,
           enabled: ast.expr | None, optional: OptionalImport | None, checks: _ApexChecks, conditional: bool,
           local: bool) -> tuple[ast.stmt, ast.expr | None, tuple[str, ...], ast.expr | None, ast.stmt | None, bool]:
    """The statement initialize's rewrite replaces and what guards it: (that statement, `enabled=`, the optional
    import's flags, the condition, the import statement that stays, whether it is an `if COND:` beside the module's
    import)."""
    condition = None
    flags: tuple[str, ...] = ()
    conditional_beside_import = False
    import_statement_kept: ast.stmt | None = import_statement
    if conditional:
        init_statement, enabled, condition = _local_guard(tree, site, import_statement, enabled, checks)
    elif local:
        init_statement, enabled, condition = _local_guard(tree, site, import_statement, enabled, checks)
        if tree.parent(import_statement) is init_statement:
            import_statement_kept = None  # it goes with initialize's `if`
        elif tree.parent(import_statement) is tree.parent(init_statement) and import_statement.lineno < init.lineno:
            import_statement_kept = import_statement
        else:
            raise NotMechanical("the local `from apex import amp` is neither in initialize's function body before it "
                                "nor in the `if` that guards initialize")
    else:
        init_statement, enabled, flags, condition = _initialize_guard(tree, site, init_use, enabled, optional,
                                                                      checks)
        import_statement_kept = import_statement
        conditional_beside_import = optional is None and condition is not None and not (
            isinstance(init_statement, ast.If) and _branch_flag(init_statement, init) is not None)
        if conditional_beside_import:  # `if args.fp16: initialize` beside the module's import
            assert condition is not None
            _stable_in_callees(tree, condition, tree.function_of(init_statement))
    return init_statement, enabled, flags, condition, import_statement_kept, conditional_beside_import


def _split_shape(tree: _Tree, uses: list[AmpUse], import_node: ast.ImportFrom, optional: OptionalImport | None,
                 split: Split) -> _Shape:
    """One half of a set-up split across modules, in the narrow shape the halves agree on (docs/apex.md): the
    set-up half, `def F(...): ...; model, optimizer = amp.initialize(model, optimizer[, enabled=...]); return model,
    optimizer` (a module-level function, initialize under no `if`, nothing else of apex.amp in the module); or the
    step half, one function that binds `model, optimizer = F(...)` once in its own body and scales its losses and
    steps that optimizer after it, as one file's set-up does from initialize on (scale_loss under no `if`: whether
    an `if` there tests what enabled the scaler cannot be told from here)."""
    amp = uses[0].ref.parts[0]
    wanted = rules.INITIALIZE if split.set_up else rules.SCALE_LOSS
    if optional is not None or import_node not in tree.engine.tree.body \
            or any(rules.rule_of(use.full) is not wanted for use in uses):
        raise NotMechanical(f"the {'set-up' if split.set_up else 'step'} half is not the shape rewritten across "
                            f"modules: one plain module-level `from apex import amp`, and only "
                            f"{wanted.title} through it")
    if split.set_up:
        if len(uses) != 1:
            raise NotMechanical(_several_initializes(tree, uses))
        return _set_up_half(tree, uses[0], import_node, split, amp)
    return _step_half(tree, uses, import_node, split, amp)


def _set_up_half(tree: _Tree, init_use: AmpUse, import_node: ast.ImportFrom, split: Split, amp: str) -> _Shape:
    init_call = _call_of(init_use)
    init = tree.parent(init_call)
    if not (isinstance(init, ast.Assign) and init.value is init_call and len(init.targets) == 1):
        raise NotMechanical("the initialize call is not a plain assignment")
    function = tree.parent(init)
    module = tree.engine.tree
    if not (isinstance(function, ast.FunctionDef) and function in module.body and init in function.body):
        raise NotMechanical("initialize is not a statement of a module-level function's own body (under no `if`: "
                            "where the `if` was false, apex raised at the other modules' scale_loss)")
    model, optimizer, enabled = _initialize_arguments(init_call)
    opt_level = _several_losses(_opt_level(tree, init_call), init_call, [])
    model_name, opt_name, _ = _bound_targets(init, model, optimizer, function, None)
    returned = function.body[-1]
    if not (function.body.index(init) == len(function.body) - 2 and isinstance(returned, ast.Return)
            and isinstance(returned.value, ast.Tuple) and [ast.unparse(e) for e in returned.value.elts]
            == [model_name, opt_name]
            and sum(isinstance(n, ast.Return) for n in ast.walk(function)) == 1):
        raise NotMechanical(f"`{function.name}` does not end with initialize, then `return {model_name}, {opt_name}` "
                            "(its one return): the other modules' steps must be of the optimizer it returns")
    if any(isinstance(n, ast.Name) and n.id == SCALER or isinstance(n, (ast.Global, ast.Nonlocal)) and SCALER in n.names
           for n in ast.walk(module)):
        raise NotMechanical(f"the name `{SCALER}` is used in the module, where the shared scaler would be bound")
    torch_bound = _names_usable(tree, init_use.ref.scope, init, (opt_name,), SCALER)
    torch_top = tree.engine.module_scope.bindings.get(_NATIVE.package, [])
    if torch_bound and not any(b.line < function.lineno for b in torch_top) \
            or not torch_bound and not import_node.lineno < function.lineno:
        raise NotMechanical(f"`{_NATIVE.package}` is not imported at the top of the module before `{function.name}`, "
                            "where the shared scaler is bound")
    if not torch_bound:
        _torch_importable(tree, False)
    device, dtype = _device_and_dtype(tree.engine)
    return _Shape(amp, init_use, init, init, function, ast.unparse(model), ast.unparse(optimizer), model_name,
                  opt_name, enabled, (), [], [], [], [], torch_bound, _NATIVE.package, _comment_lines(tree.index.text),
                  device, dtype, _line_ending(tree, init), import_node, None, import_node, opt_level=opt_level,
                  block_end=_last_line(function), split=split)


def _step_half(tree: _Tree, uses: list[AmpUse], import_node: ast.ImportFrom, split: Split, amp: str) -> _Shape:
    functions = {id(tree.function_of(use.ref.node)) for use in uses}
    function = tree.function_of(uses[0].ref.node)
    if len(functions) != 1 or not isinstance(function, _FUNCTIONS):
        raise NotMechanical("the scale_loss calls are not all in one function")
    optimizers = set()
    for use in uses:
        call = _call_of(use)
        if len(call.args) != 2 or call.keywords or not isinstance(call.args[1], ast.Name):
            raise NotMechanical(f"the scale_loss on line {call.lineno} is not given a loss and an optimizer's name")
        with_node = tree.parent(tree.parent(call))
        if isinstance(tree.parent(with_node), ast.If):
            raise NotMechanical(f"the scale_loss on line {call.lineno} is under an `if`: whether it tests what "
                                "enabled the scaler, in the set-up's module, cannot be told here")
        optimizers.add(call.args[1].id)
    if len(optimizers) != 1:
        raise NotMechanical("the scale_loss calls are given several optimizers")
    (opt_name,) = optimizers
    stores = _name_stores(function, opt_name)
    bound = tree.parent(stores[0]) if len(stores) == 1 else None
    init = tree.parent(bound) if isinstance(bound, ast.Tuple) else None
    if not (isinstance(bound, ast.Tuple) and isinstance(init, ast.Assign) and len(init.targets) == 1
            and init.targets[0] is bound
            and len(bound.elts) == 2 and bound.elts[1] is stores[0] and isinstance(bound.elts[0], ast.Name)
            and isinstance(init.value, ast.Call) and init in function.body
            and tree.engine.resolve(init.value.func, uses[0].ref.scope) == split.function
            and opt_name not in {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
            and not any(_binds_otherwise(n, opt_name) for n in ast.walk(function))):
        raise NotMechanical(f"`{opt_name}` is not bound once in `{function.name}`'s own body, as `model, {opt_name} = "
                            f"{split.function.rsplit('.', 1)[-1]}(...)` (the set-up's function, which returns the "
                            "optimizer initialize returned)")
    early = [use.ref.node.lineno for use in uses if use.ref.node.lineno <= _last_line(init)]
    if early:
        raise NotMechanical(f"a scale_loss comes before `{tree.text(bound)} = ...` on {_lines(early)}: the scaler "
                            "is read after that call")
    model_name = ast.unparse(bound.elts[0])
    if any(isinstance(n, ast.Name) and n.id == SCALER for n in ast.walk(function)):
        raise NotMechanical(f"the name `{SCALER}` is used in `{function.name}`")
    torch_bound = _names_usable(tree, uses[0].ref.scope, init, (opt_name,), SCALER)
    if not torch_bound:
        _torch_importable(tree, False)
    device, dtype = _device_and_dtype(tree.engine)
    return _Shape(amp, uses[0], init, init, function, model_name, opt_name, model_name, opt_name, None, (), uses, [],
                  [], [], torch_bound, _NATIVE.package, _comment_lines(tree.index.text), device, dtype,
                  _line_ending(tree, init), import_node, None, import_node, block_end=_last_line(function),
                  split=split)


def _returned_shape(tree: _Tree, init_use: AmpUse, init: ast.Assign, others: tuple[list[AmpUse], ...],
                    import_node: ast.ImportFrom, optional: OptionalImport | None,
                    companion: AmpUse | None) -> _Shape | None:
    """initialize in a set-up function returning its optimizer to its one caller (`returned`): the caller is the
    function the sub-rewrites work in, from the call on; initialize's statement becomes the module's scaler. None
    where initialize is not in such a function. `others`: the scale_loss, master_params, state and scale read uses."""
    init_call = _call_of(init_use)
    scale_losses, clips, states, scale_reads = others
    returned = returned_set_up(tree, init, lambda: _initialize_arguments(init_call)[:2],
                               [use for uses in others for use in uses])
    if returned is None:
        return None
    amp = init_use.ref.parts[0]
    if optional is not None or import_node not in tree.engine.tree.body:
        raise NotMechanical(f"`{returned.set_up.name}` returns initialize's optimizer to `{returned.caller.name}`, "
                            "and apex.amp is not imported by one plain module-level `from apex import amp` (the "
                            "only import this shape removes)")
    if companion is not None:
        raise NotMechanical(f"`{returned.set_up.name}` returns initialize's optimizer to `{returned.caller.name}`, and "
                            "initialize is called again for a model alone")
    model, optimizer, enabled = _initialize_arguments(init_call)
    if enabled is not None:
        raise NotMechanical(f"initialize in `{returned.set_up.name}`, which returns its optimizer to "
                            f"`{returned.caller.name}`, has an `enabled=` (the scaler there would be enabled by a "
                            "name of the set-up's)")
    target = returned.init.targets[0]
    if not (isinstance(target, ast.Name) or isinstance(target, ast.Tuple) and len(target.elts) == 2
            and all(_chain(e) for e in target.elts)):
        raise NotMechanical("the left side of initialize is neither one name nor two (model, optimizer)")
    opt_level = _several_losses(_opt_level(tree, init_call), init_call, scale_losses)
    call = returned.call
    _names_usable(tree, init_use.ref.scope, returned.init, (), SCALER)  # torch means torch where the scaler is made
    torch_bound = _names_usable(tree, returned.scope, call, (returned.opt_name,), SCALER)
    torch_top = tree.engine.module_scope.bindings.get(_NATIVE.package, [])
    if torch_bound and not any(b.line < returned.set_up.lineno for b in torch_top) \
            or not torch_bound and not import_node.lineno < returned.set_up.lineno:
        raise NotMechanical(f"`{_NATIVE.package}` is not imported at the top of the module before "
                            f"`{returned.set_up.name}`, where the module's scaler is bound")
    if not torch_bound:
        _torch_importable(tree, False)
    device, dtype = _device_and_dtype(tree.engine)
    caller = returned.caller
    return _Shape(amp, init_use, call, call, caller, ast.unparse(model), ast.unparse(optimizer), returned.model_name,
                  returned.opt_name, None, (), scale_losses, clips, states, [], torch_bound, _NATIVE.package,
                  _comment_lines(tree.index.text), device, dtype, _line_ending(tree, returned.init), import_node, None,
                  import_node, returned.condition, opt_level, scale_reads, _last_line(caller),
                  conditional_beside_import=returned.condition is not None, returned=returned)


def _line_ending(tree: _Tree, init: ast.Assign) -> str:
    """The file's own line ending (CRLF, CR, LF), as initialize's line has it."""
    ending = tree.lines[init.lineno - 1]
    return ending[len(ending.rstrip("\r\n")):] or "\n"


def _not_binding_self(tree: _Tree, init: ast.Assign, function: ast.AST) -> None:
    """In a method neither `__init__` nor a set-up it calls, initialize does not bind the optimizer as an attribute
    of the method's `self` (`self.model, self.optimizer = ...`): the object's other methods may run first."""
    self_name = _self_of(tree, function)
    target = init.targets[0]
    bound = target.elts[1] if isinstance(target, (ast.Tuple, ast.List)) and len(target.elts) == 2 else None
    if self_name is not None and isinstance(bound, ast.Attribute) and isinstance(bound.value, ast.Name) \
            and bound.value.id == self_name:
        raise NotMechanical(f"initialize binds attributes of `{self_name}` in `{getattr(function, 'name', '')}`, "
                            "which `__init__` does not call as a statement of its own body (no `return` before it): "
                            "the object's other methods may run without the scaler")


def _flag_in_scope(flag: ast.expr, self_name: str | None) -> None:
    """A flag attribute is the trainer's own (`self.X`, set up in `__init__` or in a method it calls)."""
    if isinstance(flag, ast.Attribute) and not (isinstance(flag.value, ast.Name) and flag.value.id == self_name):
        raise NotMechanical(f"the flag `{ast.unparse(flag)}` set True after initialize is not an attribute of the "
                            "trainer set up in `__init__` (or in a method `__init__` calls)")


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


def _uses_by_rule(tree: _Tree, uses: list[AmpUse], optional: OptionalImport | None) -> tuple[list[AmpUse], ...]:
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
        raise NotMechanical(_several_initializes(tree, inits))
    if not scale_losses:
        raise NotMechanical("initialize with no scale_loss beside it: the backward passes are elsewhere (another "
                            "module, or inference only), where the scaler it becomes cannot reach")
    if by_rule:
        others = sorted({use.full for rule_uses in by_rule.values() for use in rule_uses})
        raise NotMechanical(f"apex.amp is used otherwise too ({', '.join(others)})")
    return inits, scale_losses, clips, states, availability, scale_reads


def model_alone(call: ast.AST | None) -> bool:
    """initialize given a model and no optimizer (`amp.initialize(model, opt_level=...)`): for inference."""
    return isinstance(call, ast.Call) and len(call.args) == 1 and not any(k.arg in ("optimizers", "models")
                                                                          for k in call.keywords)


def _evaluation_initialize(tree: _Tree, uses: list[AmpUse]) -> AmpUse | None:
    """Of two initialize calls, the one given a model alone where the other is given an optimizer (the train and the
    evaluation models), checked beside the other by `_beside_initialize`; else None."""
    inits = [use for use in uses if rules.rule_of(use.full) is rules.INITIALIZE]
    alone = [use for use in inits if model_alone(use.ref.parent)]
    return alone[0] if len(inits) == 2 and len(alone) == 1 else None


def _beside_initialize(tree: _Tree, companion: AmpUse, init_statement: ast.stmt, init_call: ast.Call,
                       function: ast.AST, scale_losses: list[AmpUse], enabled: ast.expr | None) -> None:
    """The evaluation model's initialize goes where it is `model = amp.initialize(model[, opt_level=<initialize's>])`,
    a statement of the same body as the training initialize, unconditional as that one is, before every scale_loss:
    apex's second call made fresh loss scalers (its `_initialize` resets them) before any loss was scaled, and patched
    torch with the same level, so only the evaluation model's calls, under the autocast of the evaluation blocks,
    remain of it."""
    call = _call_of(companion)
    statement = tree.parent(call)
    model = call.args[0]
    if not (isinstance(statement, ast.Assign) and statement.value is call and len(statement.targets) == 1
            and isinstance(model, ast.Name) and ast.unparse(statement.targets[0]) == model.id):
        raise NotMechanical(f"the second initialize (line {call.lineno}, the model alone) is not `model = "
                            "amp.initialize(model, ...)`, the model's own name bound again")
    level = [ast.dump(k.value) for c in (call, init_call) for k in c.keywords if k.arg == "opt_level"]
    if any(k.arg not in ("opt_level", "verbosity") for k in call.keywords) or len(level) not in (0, 2) \
            or len(set(level)) > 1:
        raise NotMechanical(f"the second initialize (line {call.lineno}, the model alone) is not given the same "
                            "opt_level as the first, and nothing else")
    body = getattr(tree.parent(init_statement), "body", [])
    first_scaled = min(use.ref.node.lineno for use in scale_losses)
    if enabled is not None or tree.parent(statement) is not function or statement not in body \
            or init_statement not in body or statement.lineno > first_scaled:
        raise NotMechanical(f"initialize is called again on line {call.lineno} for a model alone, not as a "
                            "statement beside the unconditional first before any loss is scaled: apex's second call "
                            "made fresh loss scalers there (the scale back to its start), which one GradScaler does "
                            "not do")


def _several_initializes(tree: _Tree, inits: list[AmpUse]) -> str:
    """Why several initialize calls are not rewritten: a scaler is created once. Where a later call is given the
    optimizer an earlier one bound (allennlp's trainer initializes again before `amp.load_state_dict`, as apex's
    docs advise for a checkpoint), the reason says what apex did there: `_process_optimizer` raised RuntimeError
    for an optimizer it had processed, so that path never ran with apex and a rewrite would make it run."""
    generic = (f"initialize is called {len(inits)} times (in two branches, or again to restore a checkpoint): a "
               "scaler is created once, in one place")
    calls = sorted((c for c in map(_direct_call, inits) if c is not None), key=lambda c: c.lineno)
    by_loss_scale = initialize_per_loss_scale(tree, calls)
    if by_loss_scale is not None:
        return by_loss_scale
    for first in calls:
        bound = _optimizer_bound(tree, first)
        for again in calls:
            given = _optimizer_given(again)
            if bound is None or given is None or again.lineno <= first.lineno \
                    or not _same_object(tree, first, bound, again, given):
                continue
            return (f"initialize is called again on line {again.lineno} with `{tree.text(given)}`, the optimizer "
                    f"initialize on line {first.lineno} was given and bound: where both run, apex raised RuntimeError "
                    "there (\"A given optimizer should only be passed through amp.initialize once\"), so that path "
                    "never ran with apex, and a rewrite would make it run (by hand: drop the second call; the scaler "
                    "made where the first was loads the state)")
    return generic


def _direct_call(use: AmpUse) -> ast.Call | None:
    call = use.ref.parent
    return call if use.ref.role == "call" and isinstance(call, ast.Call) and call.func is use.ref.node else None


def _optimizer_given(call: ast.Call) -> ast.expr | None:
    """initialize's optimizer argument, where it is one name or attribute chain."""
    given = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "optimizers"),
                                                         None)
    return given if given is not None and _chain(given) else None


def _optimizer_bound(tree: _Tree, call: ast.Call) -> ast.expr | None:
    """What `model, optimizer = amp.initialize(model, optimizer, ...)` binds the optimizer it was given to."""
    statement = tree.parent(call)
    if not (isinstance(statement, ast.Assign) and statement.value is call and len(statement.targets) == 1):
        return None
    target = statement.targets[0]
    if not (isinstance(target, (ast.Tuple, ast.List)) and len(target.elts) == 2 and _chain(target.elts[1])):
        return None
    return target.elts[1]


def _same_object(tree: _Tree, first: ast.Call, bound: ast.expr, again: ast.Call, given: ast.expr) -> bool:
    """`given` (at the later call) is the object `bound` holds after the first call: the same name in one function,
    bound nowhere between them, the later call not in a branch that excludes the first; or the same attribute of
    `self` in two plain methods of one class, the first `__init__`, the attribute assigned nowhere in the module
    but in `__init__` up to the first call."""
    function, other = tree.function_of(first), tree.function_of(again)
    statement = tree.parent(first)
    assert isinstance(statement, ast.Assign)  # _optimizer_bound
    if isinstance(bound, ast.Name) and isinstance(given, ast.Name) and bound.id == given.id and function is other:
        block, position = tree.block_of(statement)
        later = block[position + 1:]  # the later call lies in one of them (not in another branch)
        node: ast.AST | None = again
        while node is not None and not any(node is s for s in later):
            node = tree.parent(node)
        return node is not None and not any(first.lineno < n.lineno < again.lineno and tree.function_of(n) is function
                                            for n in _name_stores(function, bound.id))
    self_name = _self_of(tree, function)
    if not (getattr(function, "name", "") == "__init__" and self_name is not None and _sibling_method(tree, function,
                                                                                                      other)
            and isinstance(bound, ast.Attribute) and isinstance(given, ast.Attribute) and bound.attr == given.attr
            and isinstance(bound.value, ast.Name) and bound.value.id == self_name
            and isinstance(given.value, ast.Name) and given.value.id == self_name):
        return False
    first_end = _last_line(statement)
    again_statement = tree.parent(again)  # its own left side binds the attribute after the call is given it
    rebinding = {id(n) for t in getattr(again_statement, "targets", []) for n in ast.walk(t)}
    return not any(not (tree.function_of(n) is function and n.lineno <= first_end) and id(n) not in rebinding
                   for n in tree.attribute_stores(bound.attr))


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
                   self_name: str | None, item_loop: _ItemLoop | None = None) -> tuple[str, str, tuple[str, ...]]:
    """The model's and the optimizer's targets as initialize binds them (texts), and the optimizers' names where
    it is given a list of them; in a loop over list items, the optimizer is the name the steps go through."""
    if item_loop is not None:
        return _bound_names(init.targets[0])[0], item_loop.opt_name, ()
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


def _names_usable(tree: _Tree, scope: Scope, init: ast.Assign, opt_names: tuple[str, ...], scaler: str) -> bool:
    """The names the rewrite writes mean what it means where initialize is: the scaler's is free (a local's; an
    attribute's is checked with the methods), the package's is torch's at run time (or unbound: then it is
    imported), the optimizer is not rebound. Whether torch's is bound."""
    if scaler == SCALER and scope.lookup(SCALER)[1]:
        raise NotMechanical(f"the name `{SCALER}` is already bound")
    found, torch_bindings = scope.lookup(_NATIVE.package)
    if not all(b.kind == "import" and b.qname == _NATIVE.package for b in torch_bindings):
        raise NotMechanical(f"`{_NATIVE.package}` is bound to something else")
    if torch_bindings and all(_for_type_checkers_only(tree, b.imported_by.node if b.imported_by else None, scope)
                              for b in torch_bindings):
        raise NotMechanical(f"`{_NATIVE.package}` is imported only for type checkers (under `if TYPE_CHECKING:`), "
                            f"and the names this rewrite writes need it at run time (by hand: `import "
                            f"{_NATIVE.package}` at run time, then run ampfix again)")
    # torch imported where initialize runs (its function, or a script's top level) must come before it: the scaler
    # that replaces initialize is created there
    if torch_bindings and found is scope and not all(b.line < init.lineno for b in torch_bindings):
        raise NotMechanical(f"the {'script' if scope.kind == 'module' else 'function'} imports torch after initialize")
    for opt_name in opt_names:
        for binding in scope.bindings.get(opt_name, []):
            if binding.line > init.lineno:
                raise NotMechanical("the optimizer is rebound after initialize")
    return bool(torch_bindings)


def _for_type_checkers_only(tree: _Tree, node: ast.AST | None, scope: Scope) -> bool:
    """Does `node` (an import) stand in the body of an `if typing.TYPE_CHECKING:`, which never runs?"""
    while node is not None:
        parent = tree.parent(node)
        if isinstance(parent, ast.If) and any(node is s for s in parent.body) \
                and tree.engine.resolve(parent.test, scope) == rules.TYPE_CHECKING:
            return True
        node = parent
    return False


def _torch_importable(tree: _Tree, local: bool) -> None:
    """Where torch is not bound, the rewrite adds `import torch` (not beside a local apex import), binding no `torch`
    a deprecated name is read through (with no star import to read it as torch's, torch's rules leave it): the next
    run would rewrite that read, and a rewrite is idempotent."""
    if local:
        raise NotMechanical("torch is not imported where the local `from apex import amp` is")
    unbound = tree.engine.unbound_deprecated_read(_NATIVE.package)
    if unbound is not None:
        raise NotMechanical(f"`{_NATIVE.package}` is bound to nothing here, yet `{unbound[1]}` is read through it on "
                            f"line {unbound[0]} (a star import's?): the `import {_NATIVE.package}` this rewrite adds "
                            "would bind it, and the next run would rewrite that too (by hand: import torch, then run "
                            "ampfix again)")


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


_MODELS_AND_OPTIMIZERS = ("models", "optimizers")  # initialize's first two parameters, by position or keyword


def _initialize_arguments(call: ast.Call, items: bool = False) -> tuple[ast.expr, ast.expr, ast.expr | None]:
    """The model (a name, or an attribute chain: a trainer's `self.model`), the optimizer, `enabled=`; `items`:
    list items in a loop, checked there (`_initialize_loop`). Either may be given by its keyword (`optimizers=`, as
    BERT's run_glue.py gives it), which means the same (apex's `initialize(models, optimizers=None, ...)`)."""
    named = {k.arg: k.value for k in call.keywords if k.arg in _MODELS_AND_OPTIMIZERS}
    given = [*call.args, *(named[k] for k in _MODELS_AND_OPTIMIZERS[len(call.args):] if k in named)]
    model, optimizer = given if len(given) == 2 and len(call.args) + len(named) == 2 else (None, None)
    if not (model is not None and (_chain(model) or _chains(model) or items)
            and optimizer is not None and (_chain(optimizer) or _chains(optimizer, names=True) or items)):
        raise NotMechanical("initialize is not given its models and optimizers by name (one each, or a list of "
                            "names)")
    enabled = None
    for keyword in call.keywords:
        if keyword.arg is None:
            raise NotMechanical(f"initialize is given `**{ast.unparse(keyword.value)}`: its keywords, opt_level among "
                                "them, cannot be read here (by hand: the native pattern for the opt_level and loss "
                                "scale it holds)")
        if keyword.arg not in rules.PATTERN_KEYWORDS and keyword.arg not in rules.UNSAFE_KEYWORDS \
                and keyword.arg not in ("num_losses", *_MODELS_AND_OPTIMIZERS):
            raise NotMechanical("initialize has a keyword beyond opt_level, enabled, verbosity, loss_scale, "
                                "keep_batchnorm_fp32, master_weights and num_losses")
        value = keyword.value  # loss_scale: opt_level's `_static_loss_scale`
        if keyword.arg == "enabled":
            # evaluated once by initialize, then by the scaler and by each autocast: no side effects
            if not isinstance(value, (ast.Name, ast.Attribute, ast.Constant)):
                raise NotMechanical("enabled is not a name, attribute or constant (it would be evaluated again)")
            enabled = value
    return model, optimizer, enabled


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
