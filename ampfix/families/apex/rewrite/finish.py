"""What follows the sub-rewrites: their splices checked together, and initialize's message (what became of it,
what the autocast covers and what it does not)."""

from __future__ import annotations

import ast

from ampfix.families.apex import rules
from ampfix.families.apex.rewrite.sub_rewrite import _Rewrite
from ampfix.families.apex.rewrite.tree import _chain, _last_line
from ampfix.families.apex.rewrite.vocabulary import NotMechanical, _NATIVE, _lines


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


def _calls_left_outside(rw: _Rewrite, holders: tuple, models: list[str],
                        covered: list[tuple[int, int]]) -> tuple[list[int], list[str]]:
    """The lines, after initialize and outside the autocast added, of the calls of the models and of their methods
    that may run them (any but nn.Module's own that run no forward pass: flair's `self.model.evaluate(dev)` in
    `train`), with those methods: O1 ran each in float16, the rewrite leaves it in float32."""
    lines: set[int] = set()
    methods: dict[str, int] = {}  # each method, at its first line
    for holder in holders:
        for node in ast.walk(holder):
            if not (isinstance(node, ast.Call) and _chain(node.func) and node.lineno > _last_line(rw.shape.init)
                    and not any(a <= node.lineno <= b for a, b in covered)
                    and rw.tree.function_of(node) in holders):
                continue
            callee = ast.unparse(node.func)
            if callee in models:
                lines.add(node.lineno)
            elif (isinstance(node.func, ast.Attribute) and ast.unparse(node.func.value) in models
                  and node.func.attr not in rules.MODULE_METHODS_WITHOUT_FORWARD):
                lines.add(node.lineno)
                methods[callee] = min(node.lineno, methods.get(callee, node.lineno))
    return sorted(lines), sorted(methods, key=methods.__getitem__)


def _initialize_message(rw: _Rewrite) -> None:
    """What became of initialize, with what the autocast covers and what it does not."""
    shape, tree = rw.shape, rw.tree
    covered = rw.regions + [(b.lineno, _last_line(b)) for b in rw.evaluation]
    holders = (shape.function, *shape.methods)
    models = shape.models
    outside, methods = _calls_left_outside(rw, holders, models, covered)
    passes = "the forward passes" + (f" and the `no_grad`/`inference_mode` blocks on "
                                     f"{_lines([b.lineno for b in rw.evaluation])}"
                                     if rw.evaluation else "")
    note = (f"; O1 put every call after initialize in mixed precision, the autocast added covers {passes}: "
            f"the calls of {', '.join(f'`{m}`' for m in models)} on {_lines(outside)}"
            + (f" ({', '.join(f'`{m}`' for m in methods)}: "
               f"{'a method' if len(methods) == 1 else 'methods'} of the model, which may run it)" if methods else "")
            + f", and any call outside "
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
        f"`{rw.shape.scaler} = {shape.spell(_NATIVE.grad_scaler)}({rw.scaler_args})`"
        + (f", made after the `if` on line {shape.init_statement.lineno}, where `{tree.text(shape.branch_flag)}` says "
           "whether initialize ran" if shape.branch_flag is not None else "")
        + (f", made once in place of the loop on line {shape.item_loop.loop.lineno} that gave initialize each item of "
           f"`{shape.item_loop.optimizers}` (apex's last loss scaler served every optimizer; O1 returned the objects "
           f"it was given); every `{opt_name}` stepped is one of them" if shape.item_loop is not None else "")
        + (f", handed to {', '.join(f'`{m.name}`' for m in shape.methods)} as the last parameter (each call given "
           f"`{shape.scaler}`)" if shape.handed else "")
        + (_returned_note(rw) if shape.returned is not None else "")
        + f"; {steps}"
        + (f"; `{shape.scaler}.unscale_({opt_name})` before the gradients are read on {_lines(rw.unscaled_at)} "
           "(apex had unscaled them when scale_loss exited)" if rw.unscaled_at else "")
        + (f"; {shape.opt_level.note}" if shape.opt_level.note else "") + note)
    if shape.companion is not None:
        _companion_message(rw, covered)


def _returned_note(rw: _Rewrite) -> str:
    """Where the scaler of a set-up function returning to its caller lives, and what initialize's names become."""
    shape, tree = rw.shape, rw.tree
    returned = shape.returned
    assert returned is not None
    target = returned.init.targets[0]
    set_up, caller = returned.set_up.name, returned.caller.name
    bound = (f"; `{tree.text(target)}` is bound as apex returned it (given no optimizer, the model alone)"
             if isinstance(target, ast.Name) else "")
    condition = (f"; the `if {tree.text(returned.condition)}:` around scale_loss in `{caller}` tests what `{set_up}` "
                 f"is given for the condition of initialize" if returned.condition is not None else "")
    return (f", the module's (`global {shape.scaler}` in `{set_up}`, bound disabled at the module's top until "
            f"initialize's place runs), read by `{caller}`, which steps the optimizer `{set_up}` returns on line "
            f"{shape.init.lineno}{bound}{condition}")


def _companion_message(rw: _Rewrite, covered: list[tuple[int, int]]) -> None:
    """What became of the evaluation model's initialize, and its calls left outside the autocast."""
    shape = rw.shape
    assert shape.companion is not None
    call = shape.companion.ref.parent
    assert isinstance(call, ast.Call)  # _beside_initialize
    model = ast.unparse(call.args[0])
    outside, _ = _calls_left_outside(rw, (shape.function,), [model], covered)
    rw.messages[id(shape.companion.ref)] = (
        f"`{shape.amp}.initialize` of `{model}` alone (an evaluation model) is removed: apex's second call made fresh "
        f"loss scalers before any loss was scaled and patched torch as the first did; its calls after it run under "
        f"the autocast added with the rest" + (f", but for those on {_lines(outside)} (float32 unless under an "
                                               "autocast of their own)" if outside else ""))


def _split_messages(rw: _Rewrite) -> None:
    """What became of each half of a set-up split across modules, and what changes for the set-up's callers."""
    shape = rw.shape
    split = shape.split
    assert split is not None
    others = ", ".join(split.others)
    function = split.function.rsplit(".", 1)[-1]
    if split.set_up:
        rw.messages[id(shape.init_use.ref)] = (
            f"`{shape.amp}.initialize` ({shape.opt_level.level}) -> `global {shape.scaler}`, `{shape.scaler} = "
            f"{shape.spell(_NATIVE.grad_scaler)}({rw.scaler_args})`, the module's one scaler (bound disabled at its "
            f"top until `{function}` runs), shared with the other half of the set-up, rewritten in this run "
            f"({others}): apex's loss scaler was one for the process; `{function}` now returns a plain optimizer, so "
            f"a caller that steps it must go through `{split.module}.{shape.scaler}` (scale, step, update), and "
            f"autocast covers the forward passes before each scale_loss there, not every call after initialize"
            + (f"; {shape.opt_level.note}" if shape.opt_level.note else ""))
        return
    steps = f"`{shape.opt_name}.step()` on {_lines([s.lineno for s in rw.steps])}"
    note = (f"; the scaler is the set-up's (`from {split.module} import {shape.scaler}` after `{function}(...)` on "
            f"line {shape.init.lineno}, whose initialize is rewritten in this run: {others}), {steps} -> "
            f"`{shape.scaler}.step({shape.opt_name})` and `{shape.scaler}.update()`"
            + (f", `{shape.scaler}.unscale_({shape.opt_name})` before the gradients are read on "
               f"{_lines(rw.unscaled_at)}" if rw.unscaled_at else ""))
    for use in shape.scale_losses:
        rw.messages[id(use.ref)] = rw.messages.get(id(use.ref), "") + note
