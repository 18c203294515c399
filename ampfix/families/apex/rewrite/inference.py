"""initialize for inference only: `model = amp.initialize(model, opt_level="O1")`, given the model alone, with no
scale_loss in the module nor in the project (GPUNet's validate.py in DeepLearningExamples). Nothing is scaled, so no
GradScaler is made: initialize goes (with its `if` where that is all the `if` holds), and the `with torch.no_grad():`
(or inference_mode) blocks after it get the autocast, enabled as initialize's `if` was. O1 had patched torch for the
whole process; the rewrite proves that every read of the model after initialize in its function is a call inside one
of those blocks, a method of nn.Module's own that runs no forward pass (`model.eval()`, `model.to(...)`), or the
model wrapped by torch's DataParallel/DistributedDataParallel under its own name; anything else (the model handed to
an evaluator, returned, read in a nested function) holds the rewrite back, with the line."""

from __future__ import annotations

import ast

from ampfix.families.apex import rules
from ampfix.families.apex.optional import OptionalImport
from ampfix.families.apex.rewrite.conditions import _ApexChecks, _branch_flag, _stable, conditional_import
from ampfix.families.apex.rewrite.evaluation import _rewrite_evaluation
from ampfix.families.apex.rewrite.imports import _rewrite_availability_tests, _rewrite_import
from ampfix.families.apex.rewrite.opt_level import _opt_level
from ampfix.families.apex.rewrite.shape import (_Shape, _availability_tests, _call_of, _comment_lines,
                                                _device_and_dtype, _guard, _initialize_holder, _line_ending,
                                                _names_usable, _torch_importable, model_alone)
from ampfix.families.apex.rewrite.statements import _whole_lines_only
from ampfix.families.apex.rewrite.sub_rewrite import _Rewrite
from ampfix.families.apex.rewrite.tree import _last_line, _Tree
from ampfix.syntax.bindings import Scope
from ampfix.families.apex.rewrite.vocabulary import AmpUse, NotMechanical, _NATIVE, _lines

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
    _model_calls(tree, tree.function_of(init), model.id, _last_line(init), init_use.ref.scope)
    conditional = conditional_import(tree.engine.tree, import_node) if optional is None else None
    if optional is None and conditional is None and import_node not in tree.engine.tree.body:
        raise NotMechanical("initialize for inference with a local `from apex import amp`")
    import_statement = optional.statement if optional is not None else conditional or import_node
    checks = _ApexChecks(tree, conditional, optional, init_use.ref.scope)
    init_statement, enabled, flags, condition, import_kept, _ = _guard(
        tree, init, init, init_use, import_statement, None, optional, checks, conditional is not None, False)
    if isinstance(init_statement, ast.If) and (_branch_flag(init_statement, init) is not None
                                               or init_statement.body != [init] or init_statement.orelse):
        raise NotMechanical("initialize for inference is not alone in its `if`")
    function, block_end = _initialize_holder(tree, init_statement)
    torch_bound = _names_usable(tree, init_use.ref.scope, init, (), "")
    if not torch_bound:
        _torch_importable(tree, False)
    if condition is not None:
        _stable(condition, function, condition.lineno)
    device, dtype = _device_and_dtype(tree.engine)
    return _Shape(amp, init_use, init, init_statement, function, model.id, "", model.id, "", enabled, flags, [], [],
                  [], _availability_tests(availability, amp, optional), torch_bound, _NATIVE.package,
                  _comment_lines(tree.index.text), device, dtype, _line_ending(tree, init), import_node, optional,
                  import_kept, condition, _opt_level(tree, call), block_end=block_end)


def _remove_initialize(rw: _Rewrite) -> None:
    """initialize goes, with its `if` where it guarded it (nothing is left to guard: the autocast takes the test)."""
    statement, index = rw.shape.init_statement, rw.tree.index
    _whole_lines_only(rw, statement)
    rw.splices.append((*index.removal(statement.lineno, _last_line(statement)), ""))


def _model_reads_covered(rw: _Rewrite) -> None:
    """Every read of the model after initialize in its function is a call in an evaluation block given the autocast,
    a method that runs no forward pass, or torch's wrapper bound to the model's name (`_model_calls`)."""
    shape = rw.shape
    covered = [(block.lineno, _last_line(block)) for block in rw.evaluation]
    calls = _model_calls(rw.tree, shape.function, shape.model_name, _last_line(shape.init_statement), shape.scope)
    for node in calls:
        if not any(a <= node.lineno <= b for a, b in covered):
            raise NotMechanical(f"the model `{node.id}` is called on line {node.lineno} outside a `no_grad`/"
                                "`inference_mode` block after initialize (O1 ran it in float16; no autocast is "
                                "added there)")
    if not calls:
        raise NotMechanical("initialize for inference, and no call of the model in a `no_grad`/`inference_mode` block "
                            "after it")


def _model_calls(tree: _Tree, function: ast.AST, model: str, after: int, scope: Scope) -> list[ast.Name]:
    """The calls of the model after line `after` in `function`, where every other read of it there is a method that
    runs no forward pass or torch's wrapper bound to its name; and no function, lambda or generator inside `function`
    reads the name, wherever it is defined (one defined before initialize may run after it: in a script, a function
    of the module reading the global). Else NotMechanical naming the line: what runs the model there (an evaluator
    it is handed to) is not put under autocast."""
    calls = []
    for node in ast.walk(function):
        if not (isinstance(node, ast.Name) and node.id == model and isinstance(node.ctx, ast.Load)):
            continue
        if _deferred(tree, node, function):
            raise NotMechanical(f"the model's name `{node.id}` is read on line {node.lineno} in a function, lambda or "
                                f"generator inside {_where(function)}, which may run outside the autocast added")
        parent = tree.parent(node)
        assert parent is not None  # a name read is inside its statement
        if node.lineno <= after:
            continue
        if isinstance(parent, ast.Call) and parent.func is node:
            calls.append(node)
        elif isinstance(parent, ast.Attribute) and isinstance(method := tree.parent(parent), ast.Call) \
                and method.func is parent and parent.attr in rules.MODULE_METHODS_WITHOUT_FORWARD:
            continue
        elif not _wrapped_under_its_name(tree, scope, node, parent):
            raise NotMechanical(f"the model `{node.id}` is handed on or kept on line {node.lineno} (`"
                                f"{tree.text(parent)}`): what runs it there is not put under autocast")
    return calls


def _where(function: ast.AST) -> str:
    return f"`{function.name}`" if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) else \
        "the script's top level"


def _no_losses_scaled_in_the_project(rw: _Rewrite) -> None:
    """No other module of the project scales a loss (apex's loss scalers were the process's: an initialize for
    inference made new ones). Asked after the model's reads, which a person must migrate by hand first where they
    fail (TimeSeriesPredictionPlatform's inference.py hands its model to an evaluator; its training module, another
    entry point, scales losses)."""
    if rw.tree.engine.project_uses(rules.SCALE_LOSS.title):
        raise NotMechanical("initialize is given no optimizer (inference), and other modules of the project scale "
                            "losses")


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
    blocks = _lines([b.lineno for b in rw.evaluation])
    rw.messages[id(shape.init_use.ref)] = (
        f"`{shape.amp}.initialize` ({shape.opt_level.level}, the model alone: inference) is removed, no scaler made "
        f"(nothing is scaled); the `no_grad`/`inference_mode` blocks on {blocks}, which hold every call of "
        f"`{shape.model_name}` after it, run under `{rw.autocast}`; O1 put every call after initialize in mixed "
        f"precision: calls outside {shape.where} are outside the autocast (float32 unless under one of their own)"
        + (f"; {shape.opt_level.note}" if shape.opt_level.note else ""))


# In this order: the model's reads are checked against the blocks the evaluation sub-rewrite found, and before the
# project's other modules (the reason a person meets first).
INFERENCE_SUB_REWRITES = (_rewrite_availability_tests, _remove_initialize, _rewrite_evaluation, _model_reads_covered,
                          _no_losses_scaled_in_the_project, _rewrite_import)
