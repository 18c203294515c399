"""The sub-rewrites of gradient reads: clipping over master_params directly before a step -> `unscale_`, then
clipping over the optimizer's param_groups; `unscale_` before any other read of the gradients before a step (apex
had unscaled them when scale_loss exited)."""

from __future__ import annotations

import ast

from ampfix.families.apex import rules
from ampfix.families.apex.rewrite.shape import _call_of
from ampfix.families.apex.rewrite.statements import (_is_optimizer, _module_function, _reads_gradients, _resolved,
                                                     _starts_its_line, _tests_condition)
from ampfix.families.apex.rewrite.tree import _last_line
from ampfix.families.apex.rewrite.sub_rewrite import _Rewrite
from ampfix.families.apex.rewrite.vocabulary import NotMechanical


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
            _clipped_in_every_micro_step(rw, statement, block, position)
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


def _clipped_in_every_micro_step(rw: _Rewrite, statement: ast.stmt, block: list[ast.stmt], position: int) -> None:
    """Clipping over master_params after the backward of every micro-step, the step under a later `if` of the same
    block (an accumulation boundary; BERT's run_squad.py, `gradClipper.step(amp.master_params(optimizer))`): apex
    had unscaled the gradients when each scale_loss exited, so it clipped the unscaled sum so far, and the next
    micro-step added to the clipped one. A GradScaler keeps them scaled until its step and unscales once per step: no
    scaler call gives that clipping unscaled gradients. Said exactly, with what a person may write instead."""
    before, after = block[:position], block[position + 1:]
    boundary = next((s for s in after if isinstance(s, ast.If) and any(
        node is step for node in ast.walk(s) for step in rw.steps)), None)
    if boundary is None or not any(_holds_a_backward(rw, s) for s in before):
        return
    opt_name = rw.shape.opt_name
    raise NotMechanical(
        f"clipping over master_params on line {statement.lineno} runs after every micro-step's backward, before the "
        f"`if` on line {boundary.lineno} that steps: apex had unscaled the gradients when each scale_loss exited, so "
        "it clipped the unscaled sum so far, and the next micro-step added to the clipped one; a GradScaler keeps "
        "them scaled until its step and unscales them once per step (a second `unscale_` before `update()` raises), "
        "so no scaler call gives that clipping unscaled gradients there (by hand: `scaler.unscale_("
        f"{opt_name})` and the clipping right before `scaler.step({opt_name})`, the same where every micro-step "
        "steps, one accumulation step; with more, the accumulated gradients are clipped once)")


def _holds_a_backward(rw: _Rewrite, statement: ast.stmt) -> bool:
    """Is (or holds) `statement` one of the backwards, or does it call the function of this module that holds one
    (a trainer's `self._training_step(...)`)? The gradients are complete, and read, only after the last of them."""
    backwards = {id(b) for b in rw.backward_statements}
    for node in ast.walk(statement):
        if id(node) in backwards:
            return True
        callee = _module_function(rw, node.func) if isinstance(node, ast.Call) else None
        if callee is not None and any(id(inner) in backwards for inner in ast.walk(callee)):
            return True
    return False


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
        backwards = [i for i, s in enumerate(block[:position]) if _holds_a_backward(rw, s)]
        begin = backwards[-1] + 1 if backwards else 0
        between = [s for s in block[backwards[0] + 1:begin - 1] if not _holds_a_backward(rw, s)] if backwards else []
        read_between = next((s for s in between if _reads_gradients(rw, s)), None)
        if read_between is not None:
            # apex had unscaled the first loss's gradients there; a scaler unscales once per step, after the last
            raise NotMechanical(f"gradients are read on line {read_between.lineno}, between two backwards of one step, "
                                "where a scaler keeps them scaled (apex had unscaled them; a scaler unscales once per "
                                "step, after the last backward)")
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
            held = [node for node in ast.walk(later) if isinstance(node, ast.Expr) and node in steps]
            if not held and _reads_gradients(rw, later):
                raise NotMechanical(f"gradients are read on line {later.lineno}, between a backward and the step of "
                                    "an accumulation, where a scaler keeps them scaled (apex had unscaled them)")
            condition = next((test for step in held for test in _conditions_around(rw, step, later)
                              if _reads_gradients(rw, test)), None)
            if condition is not None:
                # an unscale_ before the condition would run where no step follows: the next one raises
                raise NotMechanical(f"gradients are read on line {condition.lineno}, in a condition the step on line "
                                    f"{held[0].lineno} depends on, where a scaler keeps them scaled (apex had "
                                    "unscaled them)")


def _conditions_around(rw: _Rewrite, step: ast.stmt, outer: ast.stmt) -> list[ast.expr]:
    """What decides whether `step`, inside `outer`, runs: the tests of the `if`s and `while`s between them."""
    conditions: list[ast.expr] = []
    node: ast.AST | None = step
    while node is not None and node is not outer:
        node = rw.tree.parent(node)
        if isinstance(node, (ast.If, ast.While)):
            conditions.append(node.test)
    return conditions


def _no_plain_backward(rw: _Rewrite) -> None:
    """No backward but the scale_losses' after initialize where the rewrite works, nor in a function of the module
    (or method of the trainer) called there (adapter-transformers 1.0.1's `fusion_reg_loss.backward()` between the
    training step and the step): apex had unscaled the gradients when scale_loss exited, and kept those of an
    earlier backward aside, unscaled; a GradScaler keeps them scaled until its step, so a plain backward's gradients
    would be added to scaled ones and divided by the scale at the step."""
    shape, tree = rw.shape, rw.tree
    holders = (shape.function, *shape.methods)
    rewritten = {id(node) for statement in rw.backward_statements for node in ast.walk(statement)}
    seen: set[int] = set()
    for holder in holders:
        calls = [node for node in ast.walk(holder) if isinstance(node, ast.Call) and id(node) not in rewritten
                 and tree.function_of(node) in holders
                 and not (holder is shape.function and node.lineno <= _last_line(shape.init))]
        while calls:
            call = calls.pop()
            func = call.func
            if (isinstance(func, ast.Attribute) and func.attr == rules.BACKWARD_METHOD) \
                    or _resolved(rw, func) in rules.PLAIN_BACKWARD:
                raise NotMechanical(
                    f"`{ast.unparse(func)}(...)` on line {call.lineno} is a backward not through scale_loss: apex "
                    "had unscaled the gradients when scale_loss exited (and kept those of an earlier backward aside, "
                    "unscaled), a GradScaler keeps them scaled until its step, so that backward's gradients would be "
                    "added to scaled ones and divided by the scale (by hand: `scaler.scale(...).backward()` for it "
                    "too)")
            callee = _module_function(rw, func)
            if callee is not None and callee not in holders and id(callee) not in seen:
                seen.add(id(callee))  # a helper called there: its own backwards run there too
                calls += [node for node in ast.walk(callee) if isinstance(node, ast.Call) and id(node) not in rewritten]
