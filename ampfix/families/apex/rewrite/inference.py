"""initialize for inference only: `model = amp.initialize(model, opt_level="O1")`, given the model alone, with no
scale_loss in the module nor in the project (GPUNet's validate.py in DeepLearningExamples). Nothing is scaled, so no
GradScaler is made: initialize goes (with its `if` where that is all the `if` holds), and the `with torch.no_grad():`
(or inference_mode) blocks after it get the autocast, enabled as initialize's `if` was. O1 had patched torch for the
whole process; the rewrite proves that every read of the model after initialize in its function is a call inside one
of those blocks, a method of nn.Module's own that runs no forward pass (`model.eval()`, `model.to(...)`), or the
model wrapped by torch's DataParallel/DistributedDataParallel under its own name. Under --unsafe-fixes, the model
may also be handed as an argument to calls that are each a whole simple statement of the function
(TimeSeriesPredictionPlatform's `predictions_dict = evaluator.predict(model)`): each such statement goes under the
autocast, the note saying what that changes (every op the callee runs is under autocast, and what it keeps of the
model runs later outside it, unseen). Anything else (the model returned, kept, handed on in a condition or a loop
header, read in a nested function) holds the rewrite back, with the line."""

from __future__ import annotations

import ast

from ampfix.core.locations import first_line
from ampfix.families.apex import rules
from ampfix.families.apex.optional import OptionalImport
from ampfix.families.apex.rewrite.conditions import _ApexChecks, _branch_flag, _stable, conditional_import
from ampfix.families.apex.rewrite.evaluation import _rewrite_evaluation
from ampfix.families.apex.rewrite.imports import _rewrite_availability_tests, _rewrite_import
from ampfix.families.apex.rewrite.opt_level import _opt_level
from ampfix.families.apex.rewrite.scale_loss import _put_under_autocast
from ampfix.families.apex.rewrite.shape import (_Shape, _availability_tests, _call_of, _comment_lines,
                                                _device_and_dtype, _guard, _initialize_holder, _line_ending,
                                                _names_usable, _torch_importable, model_alone)
from ampfix.families.apex.rewrite.statements import _whole_lines_only
from ampfix.families.apex.rewrite.sub_rewrite import _Rewrite
from ampfix.families.apex.rewrite.tree import _last_line, _Tree
from ampfix.syntax.bindings import Scope
from ampfix.families.apex.rewrite.vocabulary import AmpUse, NotMechanical, _NATIVE, _lines

# the name made to say whether initialize ran, where its `if` is inside another (`_outermost_if`)
_RAN_FLAG = "autocast_enabled"
# what initialize for inference may be given beside the model: nothing that scales a loss or keeps master weights
_KEYWORDS = frozenset({"opt_level", "verbosity"})
# the wrappers a model may go through under its own name: their calls run the model's forward pass
_WRAPPERS = frozenset({"torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
                       "torch.nn.parallel.DistributedDataParallel"})


def for_inference_only(uses: list[AmpUse]) -> bool:
    """The module's apex.amp uses are one initialize given no optimizer, and `amp is (not) None` tests at most."""
    codes = [rule.code if (rule := rules.rule_of(use.full)) is not None else "" for use in uses]
    inits = [use for use, code in zip(uses, codes) if code == rules.INITIALIZE.code]
    if len(inits) != 1 or any(code not in (rules.INITIALIZE.code, rules.OPTIONAL_IMPORT.code) for code in codes):
        return False
    return model_alone(inits[0].ref.parent)


def inference_shape(tree: _Tree, uses: list[AmpUse], import_node: ast.ImportFrom,
                    optional: OptionalImport | None) -> _Shape:
    """The shape above, its module-wide conditions checked (the model's reads are checked by the sub-rewrite, once
    the evaluation blocks are known), or NotMechanical with the first that fails."""
    init_use = next(u for u in uses if rules.rule_of(u.full) is rules.INITIALIZE)
    availability = [u for u in uses if u is not init_use]
    amp = init_use.ref.parts[0]
    call = _call_of(init_use)
    init = tree.parent(call)
    model = call.args[0]
    if not (isinstance(init, ast.Assign) and init.value is call and len(init.targets) == 1
            and isinstance(model, ast.Name) and isinstance(init.targets[0], ast.Name)
            and init.targets[0].id == model.id):
        raise NotMechanical("initialize for inference (given no optimizer) is not `model = amp.initialize(model, "
                            "...)`, the model's own name bound again")
    if any(k.arg not in _KEYWORDS for k in call.keywords):
        raise NotMechanical("initialize for inference has a keyword beyond opt_level and verbosity")
    # what a person must migrate by hand (the model handed to an evaluator) is named before the set-up's details
    _model_reads(tree, tree.function_of(init), model.id, init, init_use.ref.scope)
    conditional = conditional_import(tree.engine.tree, import_node) if optional is None else None
    if optional is None and conditional is None and import_node not in tree.engine.tree.body:
        raise NotMechanical("initialize for inference with a local `from apex import amp`")
    import_statement = optional.statement if optional is not None else conditional or import_node
    checks = _ApexChecks(tree, conditional, optional, init_use.ref.scope)
    guard = tree.parent(init)
    guarded: tuple[ast.stmt, ast.expr | None, tuple[str, ...], ast.expr | None, ast.stmt | None]
    if optional is not None and isinstance(guard, ast.If) and _local_test(tree, guard.test, init_use.ref.scope):
        guarded = guard, guard.test, (), guard.test, import_statement
    else:
        guarded = _guard(tree, init, init, init_use, import_statement, None, optional, checks,
                         conditional is not None, False)[:5]
    init_statement, enabled, flags, condition, import_kept = guarded
    if isinstance(init_statement, ast.If) and (_branch_flag(init_statement, init) is not None
                                               or init_statement.body != [init] or init_statement.orelse):
        raise NotMechanical("initialize for inference is not alone in its `if`")
    ran_flag, outermost = "", init_statement
    if isinstance(init_statement, ast.If) and condition is not None and tree.parent(init_statement) is not \
            tree.function_of(init_statement):
        outermost = _outermost_if(tree, init_statement)
        ran_flag = tree.engine.free_name(_RAN_FLAG)
    function, block_end = _initialize_holder(tree, outermost)
    torch_bound = _names_usable(tree, init_use.ref.scope, init, (), "")
    if not torch_bound:
        _torch_importable(tree, False)
    if condition is not None:
        for read in [condition, *(n for n in ast.walk(condition) if isinstance(n, ast.Name))]:
            _stable(read, function, condition.lineno)
    device, dtype = _device_and_dtype(tree.engine)
    return _Shape(amp, init_use, init, init_statement, function, model.id, "", model.id, "", enabled, flags, [], [],
                  [], _availability_tests(availability, amp, optional), torch_bound, _NATIVE.package,
                  _comment_lines(tree.index.text), device, dtype, _line_ending(tree, init), import_node, optional,
                  import_kept, condition, _opt_level(tree, call), block_end=block_end, ran_flag=ran_flag)


def _outermost_if(tree: _Tree, guard: ast.If) -> ast.If:
    """The `if` of the function's own body that holds initialize's `if` through `if`s alone (TimeSeriesPrediction-
    Platform's `if not (xgb or stat):`): the names its test reads may be unbound after it, where a branch that does
    not hold initialize ran, so the autocast reads a flag made before it instead. Any other statement between (a
    loop, a `try`, a `with`) holds the rewrite back."""
    node: ast.AST = guard
    while isinstance(parent := tree.parent(node), ast.If):
        node = parent
    if not isinstance(node, ast.If) or tree.parent(node) is not tree.function_of(guard):
        raise NotMechanical("initialize for inference is under a statement other than an `if` in its function")
    return node


def _local_test(tree: _Tree, test: ast.expr, scope: Scope) -> bool:
    """`if precision == "fp16" and importlib.util.find_spec("apex"):` beside the optional import
    (TimeSeriesPredictionPlatform's inference): an `and` (or one operand alone) of the function's local names, their
    comparisons with constants and with each other, and `importlib.util.find_spec("...")`. Read again at the
    autocast, it says what it said at initialize where nothing assigns those names after it (`_stable`, asked for
    each): find_spec asks the same of the same import system; a global name, an attribute or another call could be
    changed by code not seen."""
    def local(node: ast.expr) -> bool:
        return isinstance(node, ast.Name) and scope.kind == "function" and scope.lookup(node.id)[0] is scope

    def operand(node: ast.expr) -> bool:
        if isinstance(node, ast.Compare):
            return all(local(n) or isinstance(n, ast.Constant) for n in [node.left, *node.comparators]) \
                and any(local(n) for n in [node.left, *node.comparators])
        if isinstance(node, ast.Call):
            return (tree.engine.resolve(node.func, scope) == "importlib.util.find_spec" and not node.keywords
                    and len(node.args) == 1 and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str))
        return local(node)

    operands = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    return all(operand(o) for o in operands)


def _remove_initialize(rw: _Rewrite) -> None:
    """initialize goes, with its `if` where it guarded it (nothing is left to guard: the autocast takes the test).
    Where that `if` is inside another (`ran_flag`), the `if` stays, and initialize becomes `FLAG = True`, FLAG set
    False before the outermost `if`: where the other branch ran, the test's names may be unbound."""
    shape, index = rw.shape, rw.tree.index
    if shape.ran_flag:
        _whole_lines_only(rw, shape.init)
        rw.splices.append((index.line_start(first_line(shape.init)), index.line_end(_last_line(shape.init)),
                           f"{rw.tree.indent(shape.init.lineno)}{shape.ran_flag} = True{shape.newline}"))
        assert isinstance(shape.init_statement, ast.If)  # inference_shape: a flag only for an `if` inside another
        rw.line_splice(_outermost_if(rw.tree, shape.init_statement), f"{shape.ran_flag} = False")
        return
    statement = shape.init_statement
    _whole_lines_only(rw, statement)
    rw.splices.append((*index.removal(statement.lineno, _last_line(statement)), ""))


def _model_reads_covered(rw: _Rewrite) -> None:
    """Every read of the model after initialize in its function is a call in an evaluation block given the autocast,
    a method that runs no forward pass, torch's wrapper bound to the model's name, or the model handed as an argument
    in a whole simple statement (`_model_reads`), which goes under the autocast where no such block holds it: an
    unsafe fix, its note saying what changes."""
    shape = rw.shape
    covered = [(block.lineno, _last_line(block)) for block in rw.evaluation]
    calls, hand_offs = _model_reads(rw.tree, shape.function, shape.model_name, shape.init, shape.scope)
    for node in calls:
        if not any(a <= node.lineno <= b for a, b in covered):
            raise NotMechanical(f"the model `{node.id}` is called on line {node.lineno} outside a `no_grad`/"
                                "`inference_mode` block after initialize (O1 ran it in float16; no autocast is "
                                "added there)")
    if not calls and not hand_offs:
        raise NotMechanical("initialize for inference, and no call of the model in a `no_grad`/`inference_mode` block "
                            "after it")
    runs: list[list[ast.stmt]] = []  # the statements left outside the blocks, one `with` for those next to each other
    for statement in hand_offs:
        if any(a <= statement.lineno <= b for a, b in covered):
            continue
        if runs and _next_to(rw.tree, runs[-1][-1], statement):
            runs[-1].append(statement)
        else:
            runs.append([statement])
    for run in runs:
        _put_under_autocast(rw, run)
    rw.hand_offs = hand_offs
    if hand_offs:
        rw.unsafe_notes.append(_hand_off_note(rw, hand_offs))


def _next_to(tree: _Tree, statement: ast.stmt, following: ast.stmt) -> bool:
    block, position = tree.block_of(statement)
    return position + 1 < len(block) and block[position + 1] is following


def _hand_off_note(rw: _Rewrite, hand_offs: list[ast.stmt]) -> str:
    """What changes where the model is handed on: the callee's own ops come under autocast, what it keeps of the model
    runs unseen, and the `if` that guarded initialize decides the autocast as it decided initialize."""
    shape, tree = rw.shape, rw.tree
    statements = ", ".join(f"on line {s.lineno} (`{tree.text(s)}`)" for s in hand_offs)
    level = shape.opt_level.level
    before = ("O1 ran them in mixed precision too, its patched functions being the whole process's"
              if level == "O1" else
              f"apex's {level} cast the model's weights and inputs to float16 and its outputs to float32, the model's "
              "forward pass alone; autocast keeps float32 weights and picks a dtype per op")
    guard = ""
    if shape.condition is not None:
        test = shape.condition
        by = (f"`{shape.ran_flag}`, made True in initialize's place under its `if`" if shape.ran_flag
              else "the test of initialize's `if`")
        missing = " (apex not installed, for `find_spec`)" if any(
            isinstance(n, ast.Call) and tree.engine.resolve(n.func, shape.scope) == "importlib.util.find_spec"
            for n in ast.walk(test)) else ""
        guard = (f"; the autocast is enabled by {by} (`{tree.text(test)}`): where "
                 f"that test was false{missing}, the call runs in float32, as it did")
    return (f"the model `{shape.model_name}` is handed on, {statements}, now under the autocast: every op that call "
            f"runs is under autocast, not only the model's forward pass ({before}); where the callee keeps the model "
            f"and runs it later, outside that statement, that run is outside the autocast (not seen here){guard}")


def _model_reads(tree: _Tree, function: ast.AST, model: str, init: ast.stmt,
                 scope: Scope) -> tuple[list[ast.Name], list[ast.stmt]]:
    """The calls of the model after initialize (`init`) in `function`, and the statements that hand it on
    (`_handed_on`), where every other read of it there is a method that runs no forward pass or torch's wrapper bound
    to its name; and no function, lambda or generator inside `function` reads the name, wherever it is defined (one
    defined before initialize may run after it: in a script, a function of the module reading the global). A read in
    the other branch of an `if` that holds initialize, with no loop around that `if`, never runs after it
    (TimeSeriesPredictionPlatform's `else: model.load(...)`). Else NotMechanical naming the line: what runs the model
    there (an evaluator it is handed to) is not put under autocast."""
    calls: list[ast.Name] = []
    hand_offs: list[ast.stmt] = []
    after, exclusive = _last_line(init), _other_branches(tree, init, function)
    for node in ast.walk(function):
        if not (isinstance(node, ast.Name) and node.id == model and isinstance(node.ctx, ast.Load)):
            continue
        if _deferred(tree, node, function):
            raise NotMechanical(f"the model's name `{node.id}` is read on line {node.lineno} in a function, lambda or "
                                f"generator inside {_where(function)}, which may run outside the autocast added")
        parent = tree.parent(node)
        assert parent is not None  # a name read is inside its statement
        if node.lineno <= after or any(a <= node.lineno <= b for a, b in exclusive):
            continue
        if isinstance(parent, ast.Call) and parent.func is node:
            calls.append(node)
        elif isinstance(parent, ast.Attribute) and isinstance(method := tree.parent(parent), ast.Call) \
                and method.func is parent and parent.attr in rules.MODULE_METHODS_WITHOUT_FORWARD:
            continue
        elif (statement := _handed_on(tree, node, parent, function)) is not None:
            if statement not in hand_offs:
                hand_offs.append(statement)
        elif not _wrapped_under_its_name(tree, scope, node, parent):
            raise NotMechanical(f"the model `{node.id}` is handed on or kept on line {node.lineno} (`"
                                f"{tree.text(parent)}`): what runs it there is not put under autocast")
    return calls, sorted(hand_offs, key=lambda s: s.lineno)


def _handed_on(tree: _Tree, node: ast.Name, parent: ast.AST, function: ast.AST) -> ast.stmt | None:
    """The statement, where the model is an argument of a call that is a whole simple statement of `function`
    (`evaluator.predict(model)`, `x = evaluator.predict(model)`, its targets not binding the model's name): the
    statement can go under autocast as it stands. None for any other place (a condition, a loop header, a return,
    a call inside another expression), which no `with` can hold alone."""
    call = tree.parent(parent) if isinstance(parent, ast.keyword) else parent
    if not (isinstance(call, ast.Call) and (any(a is node for a in call.args) or parent in call.keywords)):
        return None
    statement = tree.parent(call)
    if isinstance(statement, ast.Expr) and statement.value is call:
        pass
    elif isinstance(statement, ast.Assign) and statement.value is call:
        if any(isinstance(n, ast.Name) and n.id == node.id for t in statement.targets for n in ast.walk(t)):
            return None
    else:
        return None
    return statement if tree.function_of(statement) is function else None


def _other_branches(tree: _Tree, init: ast.stmt, function: ast.AST) -> list[tuple[int, int]]:
    """The lines of the branches of the `if`s around initialize that do not hold it, where no loop in `function`
    holds initialize (else a later iteration may run them after it): they never run after initialize."""
    ancestors = []
    node = tree.parent(init)
    while node is not None and node is not function:
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            return []
        ancestors.append(node)
        node = tree.parent(node)
    spans = []
    child: ast.AST = init
    for ancestor in ancestors:
        if isinstance(ancestor, ast.If):
            other = ancestor.orelse if any(s is child for s in ancestor.body) else ancestor.body
            if other and any(s is child for s in ancestor.body + ancestor.orelse):
                spans.append((first_line(other[0]), _last_line(other[-1])))
        child = ancestor
    return spans


def _where(function: ast.AST) -> str:
    return f"`{function.name}`" if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) else \
        "the script's top level"


def _losses_scaled_in_the_project(rw: _Rewrite) -> None:
    """Where another module of the project scales losses, an unsafe fix, its note saying what changes where both run
    in one process: apex's loss scalers were the process's, and an initialize for inference made new ones. Asked
    after the model's reads, which a person must migrate by hand first where they fail (TimeSeriesPredictionPlatform's
    training module is another entry point: its own process)."""
    places = rw.tree.engine.project_uses(rules.SCALE_LOSS.title)
    if places:
        rw.unsafe_notes.append(
            f"other modules of the project scale losses ({rules.SCALE_LOSS.title} at {', '.join(places[:3])}"
            + (f" and {len(places) - 3} more" if len(places) > 3 else "") + "): where one runs in the same process "
            "after this initialize, apex made its loss scalers anew here (the loss scale back to its start); "
            "without this initialize, that module's scale goes on (run as an entry point of its own, nothing "
            "changes)")


def _deferred(tree: _Tree, node: ast.AST, function: ast.AST) -> bool:
    """Is `node` in a scope nested in `function` that may run later, elsewhere (a function, a lambda, a class, a
    generator expression), not in a list, set or dict comprehension, which runs where it stands?"""
    scope = tree.function_of(node)
    while scope is not function and isinstance(scope, (ast.ListComp, ast.SetComp, ast.DictComp)):
        scope = tree.function_of(scope)
    return scope is not function


def _wrapped_under_its_name(tree: _Tree, scope: Scope, node: ast.Name, parent: ast.AST) -> bool:
    """`model = torch.nn.DataParallel(model, ...)`: the wrapper's calls run the model, under the same name."""
    statement = tree.parent(parent)
    return (isinstance(parent, ast.Call) and parent.args[:1] == [node]
            and tree.engine.resolve(parent.func, scope) in _WRAPPERS
            and isinstance(statement, ast.Assign) and statement.value is parent
            and [ast.unparse(t) for t in statement.targets] == [node.id])


def _inference_message(rw: _Rewrite) -> None:
    shape = rw.shape
    held = []
    if rw.evaluation:
        held.append(f"the `no_grad`/`inference_mode` blocks on {_lines([b.lineno for b in rw.evaluation])}, which hold "
                    f"every call of `{shape.model_name}` after it")
    if rw.hand_offs:
        held.append(f"the statements that hand it on ({_lines([s.lineno for s in rw.hand_offs])})")
    notes = ([shape.opt_level.note] if shape.opt_level.note else []) + rw.unsafe_notes
    rw.messages[id(shape.init_use.ref)] = (
        f"`{shape.amp}.initialize` ({shape.opt_level.level}, the model alone: inference) is removed, no scaler made "
        f"(nothing is scaled); {' and '.join(held)} run under `{rw.autocast}`; O1 put every call after initialize in "
        f"mixed precision: calls outside {shape.where} are outside the autocast (float32 unless under one of their "
        "own)" + "".join(f"; {note}" for note in notes))


# In this order: the model's reads are checked against the blocks the evaluation sub-rewrite found, and before the
# project's other modules (the reason a person meets first).
INFERENCE_SUB_REWRITES = (_rewrite_availability_tests, _remove_initialize, _rewrite_evaluation, _model_reads_covered,
                          _losses_scaled_in_the_project, _rewrite_import)
