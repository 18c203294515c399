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

An initialize given the model alone, for inference, with no scale_loss anywhere (`inference`), is its own shape:
no scaler, the evaluation blocks under autocast (`INFERENCE_SUB_REWRITES`).

This module is the public API and the order of the sub-rewrites. Its modules, each importing only from those after
it (a layers contract in pyproject.toml): the inference shape, which reuses the sub-rewrites below it; the
sub-rewrites, independent of each other (`imports`,
`initialize_and_steps`, `scale_loss`, `clipping`, `scaler_state`, `evaluation`) and what follows them (`finish`);
what they ask of statements (`statements`); what they share (`sub_rewrite`); the precondition stage (`shape`, then
`trainers`, then `conditions` and `opt_level`); the module's tree (`tree`); the engine's facade (`engine`, the only
module that touches the engine) and the rewrite's vocabulary (`vocabulary`).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

from ampfix.families.apex.module import ApexModule
from ampfix.families.apex.optional import OptionalImport
from ampfix.families.apex.rewrite.clipping import _no_plain_backward, _rewrite_clipping, _unscale_before_gradient_reads
from ampfix.families.apex.rewrite.conditions import conditional_import
from ampfix.families.apex.rewrite.engine import Engine, _Engine, engine_of
from ampfix.families.apex.rewrite.evaluation import _rewrite_evaluation
from ampfix.families.apex.rewrite.handed import _hand_the_scaler
from ampfix.families.apex.rewrite.finish import _check_splices, _initialize_message, _split_messages
from ampfix.families.apex.rewrite.inference import (INFERENCE_SUB_REWRITES, _inference_message, for_inference_only,
                                                    inference_shape)
from ampfix.families.apex.rewrite.imports import _rewrite_availability_tests, _rewrite_import, _rewrite_method_imports
from ampfix.families.apex.rewrite.initialize_and_steps import _rewrite_initialize, _rewrite_steps
from ampfix.families.apex.rewrite.registrations import float16_function, no_op_registrations, remove_registrations
from ampfix.families.apex.rewrite.scale_loss import _rewrite_scale_losses, _steps_after_the_backwards
from ampfix.families.apex.rewrite.scaler_state import _rewrite_scale_reads, _rewrite_scaler_settings, _rewrite_state
from ampfix.families.apex.rewrite.shape import _shape
from ampfix.families.apex.rewrite.sub_rewrite import _Rewrite
from ampfix.families.apex.rewrite.switch import native_switch
from ampfix.families.apex.rewrite.tree import _Tree
from ampfix.families.apex.rewrite.vocabulary import AmpUse, NotMechanical, Split

# What the rest of the apex family uses (`detect`, `parallel`).
__all__ = ["AmpUse", "Engine", "NotMechanical", "Rewritten", "Split", "UnsafeOnly", "commit_rewrites",
           "conditional_import", "engine_of", "float16_function", "plan_rewrite"]


@dataclass(frozen=True)
class Rewritten:
    """The message of each use rewritten, by id() of its ChainRef (and, for the optional import, of the import);
    `unsafe`: the rewrite changes the numerics where opt_level is not O1 (--unsafe-fixes)."""

    messages: dict[int, str]
    unsafe: bool
    splices: tuple[tuple[int, int, str], ...] = ()  # what it edits, where the caller commits it (commit_rewrites)
    torch_imported_at: int | None = None  # the line of the module-level statement that becomes `import torch`


class UnsafeOnly(str):
    """Why the rewrite is not made, where --unsafe-fixes makes it (the uses are reported fixable, unsafe)."""


# In this order: each reads what the ones before it found (the steps, the forward passes, the unscaled steps).
_SUB_REWRITES: tuple[Callable[[_Rewrite], None], ...] = (
    _rewrite_availability_tests, _rewrite_initialize, _rewrite_scaler_settings, _rewrite_steps, _rewrite_scale_losses,
    _steps_after_the_backwards, _no_plain_backward, _rewrite_clipping,
    _unscale_before_gradient_reads, _rewrite_state, _rewrite_scale_reads, _rewrite_evaluation, _rewrite_import,
    _rewrite_method_imports, _hand_the_scaler)


def plan_rewrite(analysis: ApexModule, uses: list[AmpUse], import_node: ast.ImportFrom,
                 optional: OptionalImport | None = None, commit: bool = True,
                 method_imports: tuple[ast.ImportFrom, ...] = (),
                 split: Split | None = None, state_import: ast.Import | None = None) -> Rewritten | UnsafeOnly | str:
    """Plan the rewrite of every use of apex.amp in the module (or, with a local import, in its function), or none
    of them: the message for each use by id() of its ChainRef (and, for the optional import, of the import), or
    why the code is not the mechanical shape. `commit`: hand the edits to the engine (else `commit_rewrites`).
    `method_imports`: the local imports of the other methods of a trainer set up in `__init__` (`import_node`'s).
    `split`: this module's half of a set-up split across modules, found whole in the project (the caller's
    question): planned by the same sub-rewrites, each half from the same facts. `state_import`: `import
    apex.amp._amp_state` beside `import_node`, read only for apex's loss scalers (`detect._state_import`), removed
    with it."""
    engine = _Engine(analysis)
    tree = _Tree(engine)
    registrations, uses = no_op_registrations(tree, uses)  # they go with the rest: autocast does what they did
    inference = split is None and not method_imports and for_inference_only(uses)
    try:
        rewrite = _Rewrite(tree, inference_shape(tree, uses, import_node, optional) if inference
                           else _shape(tree, uses, import_node, optional, method_imports, split, state_import))
        for sub_rewrite in INFERENCE_SUB_REWRITES if inference else _SUB_REWRITES:
            sub_rewrite(rewrite)
        remove_registrations(rewrite, registrations)
        _check_splices(rewrite)
    except NotMechanical as reason:
        switched = None if split is not None or method_imports else native_switch(tree, uses, registrations,
                                                                                 import_node, optional)
        if switched is None or isinstance(switched, str):
            return str(reason) if switched is None else f"{reason}; {switched}"
        if not engine.options.unsafe_fixes:
            return UnsafeOnly(f"{switched.note} (an unsafe fix exists: --unsafe-fixes)")
        if commit:
            engine.add_splices(switched.splices)
        return Rewritten(switched.messages, True, tuple(switched.splices))
    opt_level = rewrite.shape.opt_level
    unsafe = opt_level.unsafe or bool(rewrite.unsafe_notes) or split is not None
    if unsafe and not engine.options.unsafe_fixes:
        notes = ([opt_level.note] if opt_level.note else []) + rewrite.unsafe_notes
        return UnsafeOnly(f"{'; '.join(notes)} (an unsafe fix exists: --unsafe-fixes)")
    (_inference_message if inference else _initialize_message if split is None else _split_messages)(rewrite)
    if commit:
        engine.add_splices(rewrite.splices)
    return Rewritten(rewrite.messages, unsafe, tuple(rewrite.splices), rewrite.torch_imported_at)


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
