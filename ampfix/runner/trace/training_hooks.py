"""Optimizer steps, the losses given to backward, gradient clipping, and the --max-steps stop.

Runs in the child. Whether the gradients are still multiplied by a loss scale is followed per
process (:class:`GradientScaling`): a scaled loss's backward scales them, ``unscale_`` (inside
``scaler.step`` too) or apex's ``scale_loss`` exit unscales them. Clipping them or stepping the
optimizer while they are scaled is recorded, as the classic mistakes of a migration are. A *step
boundary* is a place where the next training step begins: entering an autocast region the script
asked for, ``scaler.scale``, ``backward`` and the optimizer's pre-step hook. Once the script has
taken ``--max-steps`` optimizer steps, the next boundary ends it with exit status 0, so the counts
of one step's calls stay whole (N steps, N updates).
"""

from __future__ import annotations

import functools
import sys
import threading
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from ampfix.runner.trace.observe import Recorder
from ampfix.runner.trace.patching import with_arguments_adjusted
from ampfix.runner.trace.sites import find_site

_Tensor = torch.Tensor
# Set on the tensor GradScaler.scale returns, so backward records the loss the script computed.
_UNSCALED_LOSS = "_ampfix_unscaled_loss"
_LOSS_SCALE = "_ampfix_loss_scale"


class GradientScaling:
    """The loss scale the process's gradients still carry, or None once they are unscaled.

    One value per process, not per optimizer: a script with two optimizers and one scaler is
    followed as one (the usual case); separate scalers per optimizer are not told apart."""

    def __init__(self) -> None:
        self.scale: float | None = None

    def unscaled(self) -> None:
        self.scale = None


class MaxStepsReached(SystemExit):
    """A SystemExit with status 0: ``finally`` blocks run, ``except Exception`` does not catch it."""

    def __init__(self, steps: int) -> None:
        super().__init__(0)
        self.steps = steps


class StepLimit:
    def __init__(self, recorder: Recorder, max_steps: int | None) -> None:
        self._recorder = recorder
        self._max_steps = max_steps

    def at_boundary(self) -> None:
        if self._max_steps is None or self._recorder.optimizer_steps < self._max_steps:
            return
        if not self._recorder.stopped_at_max_steps:
            self._recorder.stopped_at_max_steps = True
            print(f"ampfix run: stopping after {self._max_steps} optimizer steps (--max-steps)", file=sys.stderr)
        raise MaxStepsReached(self._max_steps)


def install_optimizer_hooks(recorder: Recorder, limit: StepLimit, scaling: GradientScaling) -> None:
    def before_step(optimizer, args, kwargs) -> None:
        limit.at_boundary()
        if scaling.scale is not None:  # scaler.step() would have unscaled them first
            recorder.stepped_on_scaled_gradients(scaling.scale, find_site())

    def after_step(optimizer, args, kwargs) -> None:
        scaling.unscaled()  # reported once; the next backward starts over
        recorder.optimizer_stepped()

    register_optimizer_step_pre_hook(before_step)
    register_optimizer_step_post_hook(after_step)


def record_scaled_loss(outputs: Any, scaled: Any, scale: float | None = None) -> None:
    """Mark the tensor a loss scaler returned: backward then records the loss the script computed
    and, given ``scale``, that the gradients it produces carry that scale."""
    if isinstance(outputs, _Tensor) and isinstance(scaled, _Tensor) and outputs.numel() == 1:
        setattr(scaled, _UNSCALED_LOSS, float(outputs.detach()))
        if scale is not None:
            setattr(scaled, _LOSS_SCALE, scale)


def _loss_value(tensor: _Tensor) -> float:
    unscaled = getattr(tensor, _UNSCALED_LOSS, None)
    return unscaled if unscaled is not None else float(tensor.detach())


def install_backward_hook(recorder: Recorder, limit: StepLimit, scaling: GradientScaling) -> None:
    original_backward = torch.autograd.backward

    @functools.wraps(original_backward)
    def backward(tensors, *args, **kwargs):
        site = find_site()
        if site.origin == "script":  # not torch's own (checkpointing calls backward internally)
            limit.at_boundary()
            for tensor in tensors if isinstance(tensors, (tuple, list)) else (tensors,):
                if isinstance(tensor, _Tensor) and tensor.numel() == 1:
                    recorder.loss(_loss_value(tensor), site)
                    scale = getattr(tensor, _LOSS_SCALE, None)
                    if scale is not None:
                        scaling.scale = scale
        return original_backward(tensors, *args, **kwargs)

    torch.autograd.backward = backward


def install_clipping_hooks(recorder: Recorder, scaling: GradientScaling) -> None:
    """clip_grad_norm_ / clip_grad_value_ recorded with their limit and whether the gradients they
    clip are still scaled (a migration that forgot ``scaler.unscale_`` clips 65536 times too much)."""
    clip_module = torch.nn.utils.clip_grad
    for name, limit_name in (("clip_grad_norm_", "max_norm"), ("clip_grad_value_", "clip_value")):
        original = getattr(clip_module, name)
        wrapper = _recorded_clipping(original, name, limit_name, recorder, scaling)
        for module in (clip_module, torch.nn.utils):
            setattr(module, name, wrapper)


def _recorded_clipping(original, name: str, limit_name: str, recorder: Recorder, scaling: GradientScaling):
    def record(arguments: dict[str, Any]) -> None:
        limit = arguments[limit_name]
        numeric = isinstance(limit, (int, float)) and not isinstance(limit, bool)
        limit_text = repr(float(limit)) if numeric else repr(limit)
        what = f"{name} {limit_name}={limit_text}"
        if scaling.scale is not None:
            what += f" on gradients still scaled by {scaling.scale!r}"
        recorder.gradients_clipped(what, find_site())

    return with_arguments_adjusted(original, record)


class ModelCalls:
    """Records each top-level module call the script makes (not torch's, not a submodule's) with
    the mixed precision it ran under: what verify compares of autocast's extent when the two sides
    open their regions differently (apex's global O1 against a scoped ``torch.autocast``)."""

    def __init__(self, recorder: Recorder, innermost_region) -> None:
        self._recorder = recorder
        self._innermost_region = innermost_region
        self._depth = threading.local()

    def install(self) -> None:
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        register_module_forward_pre_hook(self._before)
        register_module_forward_hook(self._after, always_call=True)

    def _before(self, module, args) -> None:
        depth = getattr(self._depth, "value", 0)
        self._depth.value = depth + 1
        if depth == 0:
            site = find_site()
            if site.origin == "script":
                self._recorder.model_called(type(module).__qualname__, self._innermost_region(), site)

    def _after(self, module, args, output) -> None:
        self._depth.value = max(0, getattr(self._depth, "value", 1) - 1)
