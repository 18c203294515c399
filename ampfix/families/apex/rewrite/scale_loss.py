"""The sub-rewrite of scale_loss: `scaler.scale(loss).backward(...)`, the statements before it in its block
(the forward pass and loss) under autocast."""

from __future__ import annotations

import ast

from ampfix.core.locations import first_line
from ampfix.families.apex import rules
from ampfix.families.apex.rewrite.conditions import _availability_guard, _config_key, _parameter_chain
from ampfix.families.apex.rewrite.shape import _call_of
from ampfix.families.apex.rewrite.statements import (_all_optimizers, _ends_its_line, _is_optimizer, _reindentable,
                                                     _tests_condition, _whole_lines_only)
from ampfix.families.apex.rewrite.sub_rewrite import _Rewrite
from ampfix.families.apex.rewrite.tree import _chain, _last_line
from ampfix.families.apex.rewrite.vocabulary import AmpUse, NotMechanical


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
    kept_if = _kept_clip_pair(rw, with_node)
    guard = _flag_guard(rw, use, with_node, loss, backward) if kept_if is None else None
    if guard is None and kept_if is None and shape.conditional_beside_import:
        condition = shape.method_condition if shape.in_init else shape.condition
        assert condition is not None  # _shape, _method_condition
        raise NotMechanical(f"the scale_loss on line {with_node.lineno} is not under `if "
                            f"{tree.text(condition)}:`, initialize's condition: where it is false apex raised "
                            "there (\"amp.initialize(...) must be called before `with amp.scale_loss`\"), and a "
                            "disabled scaler would train on")
    statement = guard if guard is not None else with_node
    rw.backward_statements.append(kept_if or statement)
    given = call.args[1] if len(call.args) > 1 else None
    if shape.optimizers and given is not None and _one_of(given, shape.optimizers):
        rw.backward_optimizers[id(kept_if or statement)] = ast.unparse(given)
        if rules.ONE_OF_SEVERAL_OPTIMIZERS not in rw.unsafe_notes:
            rw.unsafe_notes.append(rules.ONE_OF_SEVERAL_OPTIMIZERS)
        if id(kept_if or statement) == id(rw.backward_statements[0]):
            rw.messages[id(use.ref)] = f"; {rules.ONE_OF_SEVERAL_OPTIMIZERS}"  # said once, at the first
    block, position, begin = _forward_pass(rw, kept_if or statement)  # a kept `if`: its forward pass is before it
    # a loss given by the caller: the statements before it (`optimizer.zero_grad()`) are no forward pass
    caller_forward = id(block) not in rw.forward_blocks and _loss_from_caller(rw, block, loss)
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
    if kept_if is not None:
        before += (f" in the `if` on line {kept_if.lineno}, kept with its `else` (where the scaler is disabled): it "
                   "clips right before the step")
    rw.messages[id(use.ref)] = f"{before}{where}{rw.messages.get(id(use.ref), '')}"


def _forward_pass(rw: _Rewrite, statement: ast.stmt) -> tuple[list[ast.stmt], int, int]:
    """Where the forward pass of a backward `statement` is: the block, the backward's position there, and where the
    forward pass starts (the statements between them, after initialize where that is in the block too). A backward
    first in the body of a `with` (a profiler's range: FastSpeech's `with Nvtx("backward"):`) has its forward pass
    before that `with`, in the block around it."""
    shape, tree = rw.shape, rw.tree
    while True:
        block, position = tree.block_of(statement)
        begin = rw.forward_blocks.get(id(block), block.index(shape.init_statement) + 1
                                      if shape.init_statement in block else 0)
        while begin < position and block[begin] in shape.method_imports:
            begin += 1  # a trainer method's local import: removed (`_rewrite_method_imports`), not a forward pass
        # a GAN's alternating steps: the forward pass of the next loss starts after the step before it
        begin = max([begin, *(block.index(step) + 1 for step in rw.steps if step in block[begin:position])])
        holder = tree.parent(statement)
        if position > begin or id(block) in rw.forward_blocks or not isinstance(holder, ast.With) \
                or block is not holder.body or not _plain_context(holder):
            return block, position, begin
        statement = holder


def _plain_context(with_node: ast.With) -> bool:
    """A `with` whose items are calls, none of them apex's or autocast's (a profiler's range, a timer): the forward
    pass before it is the backward's."""
    return all(isinstance(item.context_expr, ast.Call) and "autocast" not in ast.unparse(item.context_expr.func)
               and "amp" not in ast.unparse(item.context_expr.func).split(".") for item in with_node.items)


def _flag_guard(rw: _Rewrite, use: AmpUse, with_node: ast.With, loss: ast.expr, backward: ast.Call) -> ast.If | None:
    """The `if flag:` around a scale_loss, its `else` the plain backward; None where the `if` is one of its own
    (`if i % k == 0:`), a block like any other."""
    guard = rw.tree.parent(with_node)
    optional = rw.shape.optional
    if _tests_condition(rw, guard):
        assert isinstance(guard, ast.If)  # _tests_condition
        _no_clip_beside(rw, guard)
        # initialize's own condition (a trainer method's local import may come first: it goes with the `if`)
        _plain_backward_else(guard, with_node, loss, backward, rw.shape.method_imports)
        return guard
    if not (optional is not None and isinstance(guard, ast.If) and isinstance(guard.test, ast.Name)
            and guard.body == [with_node]):
        _other_condition(rw, guard, with_node)
        return None
    _availability_guard(guard, optional, use.ref.scope, "a scale_loss")
    _plain_backward_else(guard, with_node, loss, backward)
    rw.flags.append(guard.test.id)
    return guard


def _other_condition(rw: _Rewrite, guard: ast.AST | None, with_node: ast.With) -> None:
    """`if OTHER: with amp.scale_loss(...) ... else: ...` where initialize was under `if COND:` and OTHER is another
    flag: a scaler enabled by COND would scale where OTHER is false, or not where it is true. Reported, naming both."""
    condition = rw.shape.method_condition if rw.shape.in_init else rw.shape.condition
    if condition is None or not (isinstance(guard, ast.If) and guard.body == [with_node] and guard.orelse
                                 and (_chain(guard.test) or _config_key(guard.test))):
        return
    raise NotMechanical(f"the scale_loss on line {with_node.lineno} is under `if {rw.tree.text(guard.test)}:`, not "
                        f"under initialize's condition `{rw.tree.text(condition)}`: a scaler enabled by that "
                        "condition would not mean the same there")


def _kept_clip_pair(rw: _Rewrite, with_node: ast.With) -> ast.If | None:
    """`if COND: with amp.scale_loss(...) ...; clip(amp.master_params(opt), n)` / `else: ...`, the `if` directly
    followed by the step (sentence-transformers' `fit`): the `if` stays, the scale_loss rewritten in it, its `else`
    as it is (it runs where the scaler is disabled); the clipping comes right before the step of the same
    iteration, so `unscale_` may go before it (`_rewrite_clipping`). In an accumulation (the step under an `if` of
    its own, simpletransformers' experimental model) the clipping is in the micro-steps: None, reported."""
    tree = rw.tree
    guard = tree.parent(with_node)
    clips = {id(use.ref.node) for use in rw.shape.clips}
    if not (_tests_condition(rw, guard) and isinstance(guard, ast.If) and len(guard.body) == 2
            and guard.body[0] is with_node and any(id(n) in clips for n in ast.walk(guard.body[1]))):
        return None
    block, position = tree.block_of(guard)
    following = block[position + 1] if position + 1 < len(block) else None
    return guard if any(following is step for step in rw.steps) else None


def _loss_from_caller(rw: _Rewrite, block: list[ast.stmt], loss: ast.expr) -> bool:
    """A trainer's method (set up in `__init__`) given the loss by its caller, a parameter it never rebinds, the
    scale_loss in its own body (the issue's `def step(self, loss)`): the forward pass is outside the class."""
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
    if optimizers and optimizer is not None and not _all_optimizers(optimizer, optimizers) \
            and not _one_of(optimizer, optimizers):
        raise NotMechanical(f"a scale_loss is given neither every optimizer of initialize ({', '.join(optimizers)}) "
                            "nor one of them")
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


def _no_clip_beside(rw: _Rewrite, guard: ast.If) -> None:
    """Clipping over `amp.master_params` in the scale_loss's own `if` (simpletransformers' experimental model: after
    every micro-step's backward, the step under `if (step + 1) % accumulation == 0:`)."""
    spans = [(first_line(s), _last_line(s)) for s in guard.body[1:]]
    if any(a <= use.ref.node.lineno <= b for use in rw.shape.clips for a, b in spans):
        raise NotMechanical("clipping over master_params shares the scale_loss's `if`, which the optimizer step "
                            "does not directly follow (it must come right before the step: after a micro-step's "
                            "backward it would clip partial, scaled gradients, which a GradScaler cannot unscale "
                            "twice before its update)")


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
    ends the iteration), or, a GAN's alternating steps, a backward after a step is given one optimizer whose step
    comes after it (each optimizer steps on the gradients of the losses it was given; the one update ends the
    iteration after the last step)."""
    if not rw.shape.optimizers:
        return
    stepped = {ast.unparse(step.value.func.value): step.lineno for step in rw.steps  # `o.step()` statements
               if isinstance(step.value, ast.Call) and isinstance(step.value.func, ast.Attribute)}
    for backward in rw.backward_statements:
        if backward.lineno < rw.steps[0].lineno:
            continue
        given = rw.backward_optimizers.get(id(backward))
        if given is None or stepped.get(given, 0) < backward.lineno:
            raise NotMechanical("a scale_loss comes after a step of one of the optimizers, and is not given one "
                                "optimizer that steps after it, so the place of the scaler's one update per "
                                "iteration is not clear")


def _one_of(node: ast.expr, optimizers: tuple[str, ...]) -> bool:
    """`node` names one of the optimizers initialize was given."""
    return _chain(node) and ast.unparse(node) in optimizers
