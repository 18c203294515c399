"""The sub-rewrites of initialize and of the optimizer's steps: initialize -> the scaler (the names rebound
where the left side differs), every `optimizer.step()` -> `scaler.step(optimizer)` and `scaler.update()`."""

from __future__ import annotations

import ast

from ampfix.core.locations import first_line
from ampfix.families.apex.rewrite.statements import (_ends_its_line, _is_optimizer, _is_step, _other_steps,
                                                     _whole_lines_only)
from ampfix.families.apex.rewrite.sub_rewrite import _Rewrite
from ampfix.families.apex.rewrite.tree import _chain, _last_line
from ampfix.families.apex.rewrite.vocabulary import NotMechanical, _NATIVE


def _rewrite_initialize(rw: _Rewrite) -> None:
    """initialize -> the scaler (and the names rebound when the left side differs); an evaluation model's initialize
    beside it goes (`shape._beside_initialize`)."""
    shape, index = rw.shape, rw.tree.index
    statement = shape.init_statement
    if shape.companion is not None:
        companion = rw.tree.parent(shape.companion.ref.parent)
        assert isinstance(companion, ast.Assign)  # _beside_initialize
        _whole_lines_only(rw, companion)
        rw.splices.append((*index.removal(companion.lineno, _last_line(companion)), ""))
    if shape.split is not None:
        _rewrite_split_half(rw)
        return
    if shape.returned is not None:
        _rewrite_returned_set_up(rw)
        return
    if shape.branch_flag is not None:
        _scaler_after_the_flag(rw)
        return
    _whole_lines_only(rw, statement)
    indent = rw.tree.indent(statement.lineno)
    created = f"{indent}{rw.shape.scaler} = {shape.spell(_NATIVE.grad_scaler)}({rw.scaler_args}){shape.newline}"
    # a loop over list items goes whole: what it bound is dead after it (`_initialize_loop`)
    if shape.item_loop is None and (shape.model_name, shape.opt_name) != (shape.model, shape.optimizer):
        rebound = f"{rw.tree.text(shape.init.targets[0])} = {shape.model}, {shape.optimizer}{shape.newline}"
        if shape.condition is not None and statement is not shape.init:  # bound where initialize bound them
            created += f"{indent}if {rw.tree.text(shape.condition)}:{shape.newline}{indent}    {rebound}"
        else:
            created = f"{indent}{rebound}" + created
    rw.splices.append((index.line_start(statement.lineno), index.line_end(_last_line(statement)), created))


def _rewrite_split_half(rw: _Rewrite) -> None:
    """A set-up split across modules (docs/apex.md): the set-up half binds the one scaler at its module's top level,
    disabled until initialize's place rebinds it (`global`); the step half reads it from there once the set-up's
    function has returned (a local import, run after that call: the scaler it made, not the placeholder)."""
    shape, tree, index = rw.shape, rw.tree, rw.tree.index
    split, statement, newline = shape.split, shape.init_statement, shape.newline
    assert split is not None
    _ends_its_line(rw, statement)
    indent = tree.indent(statement.lineno)
    if not split.set_up:
        at = index.line_end(_last_line(statement))
        rw.splices.append((at, at, f"{indent}from {split.module} import {shape.scaler}{newline}"))
        return
    _whole_lines_only(rw, statement)
    scaler = f"{shape.scaler} = {shape.spell(_NATIVE.grad_scaler)}"
    created = f"{indent}global {shape.scaler}{newline}{indent}{scaler}({rw.scaler_args}){newline}"
    if (shape.model_name, shape.opt_name) != (shape.model, shape.optimizer):
        created = f"{indent}{tree.text(shape.init.targets[0])} = {shape.model}, {shape.optimizer}{newline}" + created
    rw.splices.append((index.line_start(statement.lineno), index.line_end(_last_line(statement)), created))
    assert isinstance(shape.function, ast.FunctionDef)  # _set_up_half
    at = index.line_start(first_line(shape.function))
    rw.splices.append((at, at, f"{scaler}({shape.device}, enabled=False){newline * 3}"))


def _rewrite_returned_set_up(rw: _Rewrite) -> None:
    """A set-up function returning initialize's optimizer to its caller (`returned`): initialize's statement binds
    the module's scaler (`global`), disabled at the module's top until then, and the names initialize bound, as apex
    returned them (given no optimizer, the model alone); the caller reads the module's scaler."""
    shape, tree, index = rw.shape, rw.tree, rw.tree.index
    returned, newline = shape.returned, shape.newline
    assert returned is not None
    init = returned.init
    _whole_lines_only(rw, init)
    indent = tree.indent(init.lineno)
    scaler = f"{shape.scaler} = {shape.spell(_NATIVE.grad_scaler)}"
    created = f"{indent}global {shape.scaler}{newline}{indent}{scaler}({rw.scaler_args}){newline}"
    target = init.targets[0]
    if isinstance(target, ast.Name):
        created += (f"{indent}{target.id} = {shape.model} if {shape.optimizer} is None else ({shape.model}, "
                    f"{shape.optimizer}){newline}")
    elif isinstance(target, ast.Tuple) and [tree.text(e) for e in target.elts] != [shape.model, shape.optimizer]:
        created += f"{indent}{tree.text(target)} = {shape.model}, {shape.optimizer}{newline}"
    rw.splices.append((index.line_start(init.lineno), index.line_end(_last_line(init)), created))
    at = index.line_start(first_line(returned.set_up))
    rw.splices.append((at, at, f"{scaler}({shape.device}, enabled=False){newline * 3}"))


def _scaler_after_the_flag(rw: _Rewrite) -> None:
    """`if TEST: ...; initialize; FLAG = True`: initialize goes (the names rebound in its place where the left side
    differs), and the scaler, `enabled=` the flag, is made right after the `if`, the flag then known."""
    shape, index, tree = rw.shape, rw.tree.index, rw.tree
    init, statement = shape.init, shape.init_statement
    _whole_lines_only(rw, init)
    _ends_its_line(rw, statement)
    rebound = ""
    if (shape.model_name, shape.opt_name) != (shape.model, shape.optimizer):
        rebound = f"{tree.indent(init.lineno)}{tree.text(init.targets[0])} = {shape.model}, {shape.optimizer}"
        rebound += shape.newline
    rw.splices.append((index.line_start(init.lineno), index.line_end(_last_line(init)), rebound))
    at = index.line_end(_last_line(statement))
    created = f"{tree.indent(statement.lineno)}{shape.scaler} = {shape.spell(_NATIVE.grad_scaler)}({rw.scaler_args})"
    rw.splices.append((at, at, created + shape.newline))


def _rewrite_steps(rw: _Rewrite) -> None:
    """Every `optimizer.step()` -> `scaler.step(optimizer)`; `scaler.update()`."""
    shape, tree = rw.shape, rw.tree
    if shape.optimizers:
        _rewrite_several_steps(rw)
        return
    opt_name = shape.opt_name
    holders = shape.step_holders
    if shape.split is not None and shape.split.set_up:  # the steps are the other modules'
        if any(isinstance(node, ast.Attribute) and node.attr == "step" and _chain(node.value)
               and ast.unparse(node.value) == opt_name for node in ast.walk(shape.function)):
            raise NotMechanical(f"`{opt_name}` is stepped in `{getattr(shape.function, 'name', '')}` too")
        return
    # a trainer's class; the module, where module-level functions are handed the scaler
    everywhere = tree.parent(shape.function) if shape.in_init else tree.engine.tree if shape.handed else shape.function
    assert everywhere is not None
    steps = [node for node in ast.walk(everywhere) if isinstance(node, ast.Expr) and _is_step(node.value, opt_name)]
    if not steps or any(tree.function_of(s) not in holders or (
            not shape.in_init and tree.function_of(s) is shape.function
            and not shape.init.lineno <= s.lineno <= shape.block_end) for s in steps) \
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
