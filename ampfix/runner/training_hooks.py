"""Optimizer steps, the losses given to backward, and the --max-steps stop.

Runs in the child. A *step boundary* is a place where the next training step begins: entering
an autocast region the script asked for, ``scaler.scale``, ``backward`` and the optimizer's
pre-step hook. Once the script has taken ``--max-steps`` optimizer steps, the next boundary
ends it with exit status 0, so the counts of one step's calls stay whole (N steps, N updates).
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from ampfix.runner.observe import Recorder
from ampfix.runner.sites import find_site

_Tensor = torch.Tensor
# Set on the tensor GradScaler.scale returns, so backward records the loss the script computed.
_UNSCALED_LOSS = "_ampfix_unscaled_loss"


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


def install_optimizer_hooks(recorder: Recorder, limit: StepLimit) -> None:
    register_optimizer_step_pre_hook(lambda optimizer, args, kwargs: limit.at_boundary())
    register_optimizer_step_post_hook(lambda optimizer, args, kwargs: recorder.optimizer_stepped())


def record_scaled_loss(outputs: Any, scaled: Any) -> None:
    if isinstance(outputs, _Tensor) and isinstance(scaled, _Tensor) and outputs.numel() == 1:
        setattr(scaled, _UNSCALED_LOSS, float(outputs.detach()))


def _loss_value(tensor: _Tensor) -> float:
    unscaled = getattr(tensor, _UNSCALED_LOSS, None)
    return unscaled if unscaled is not None else float(tensor.detach())


def install_backward_hook(recorder: Recorder, limit: StepLimit) -> None:
    original_backward = torch.autograd.backward

    @functools.wraps(original_backward)
    def backward(tensors, *args, **kwargs):
        site = find_site()
        if site.origin == "script":  # not torch's own (checkpointing calls backward internally)
            limit.at_boundary()
            for tensor in tensors if isinstance(tensors, (tuple, list)) else (tensors,):
                if isinstance(tensor, _Tensor) and tensor.numel() == 1:
                    recorder.loss(_loss_value(tensor), site)
        return original_backward(tensors, *args, **kwargs)

    torch.autograd.backward = backward
