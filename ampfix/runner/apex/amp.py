"""apex.amp's O1, emulated, for scripts written against NVIDIA apex (deleted from apex in 2025).

Runs in the child, when the script imports ``apex.amp`` and no installed apex provides it (see
:mod:`provider`). What apex defines for O1, and how it is emulated:

* ``amp.initialize(models, optimizers, opt_level="O1", ...)`` patches torch's functions for the
  rest of the process: here an autocast region for "cuda" in float16 is entered at the call and
  never left (the runner runs it in its chosen dtype with CUDA's op policy), in this thread and in
  every thread started later. Apex's casts never reach backward (autograd runs C++ kernels), so
  autocast is suspended while backward runs. Models and optimizers come back in the shapes given.
  Each call makes new loss scalers; an optimizer given a second time raises apex's RuntimeError.
* Dynamic loss scaling as apex's ``LossScaler``: 2**16 (at most ``max_loss_scale``), x2 after
  2000 clean updates, /2 and the next ``optimizer.step()`` skipped on inf/NaN gradients; a number
  for ``loss_scale`` is apex's static scale (no skipping).
* ``with amp.scale_loss(loss, optimizer[, delay_unscale=...]) as scaled:`` yields
  ``loss.float() * scale``; on exit the gradients are unscaled (adding the unscaled gradients
  stashed from earlier micro-steps, as apex does), checked, and the scale updated, once per
  ``scale_loss`` unless ``delay_unscale`` keeps them scaled for a later one.
* ``amp.master_params(optimizer)`` iterates the optimizer's ``param_groups``; ``amp.state_dict()``
  / ``amp.load_state_dict()`` use apex's format ``{'loss_scaler0': {'loss_scale', 'unskipped'}}``.
* O0 runs in float32 with a loss scale of 1 (as apex does); ``enabled=False`` does nothing.

Not emulated, recorded as such and refused as a missing feature (``NotImplementedError``): O2 and
O3 (a float16 model with float32 master weights has no native twin), and every other apex.amp name
(``float_function``, ``register_*_function``, ``disable_casts``, ``_amp_state``, ...), which raises
``AttributeError`` as an apex without it would. apex's own checks for O1 (``cast_model_type``,
``keep_batchnorm_fp32``, ``master_weights``) raise its errors.

Every use is recorded in the run's trace in the native vocabulary (``grad_scaler``,
``scaler.scale``, the loss, skipped steps, the scaler's state), so that ``verify`` can hold a
native rewrite to it (see :mod:`compare`).
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch

from ampfix.runner.gpu import amp_patches, harness
from ampfix.runner.trace import training_hooks
from ampfix.runner.gpu.boundaries import FailsOnTheGpuToo
from ampfix.runner.trace.observe import Recorder
from ampfix.runner.trace.patching import replace, run_every_new_thread_through
from ampfix.runner.trace.sites import find_site

OPT_LEVELS = ("O0", "O1", "O2", "O3")
NOT_EMULATED_LEVELS = ("O2", "O3")
EMULATED_NAMES = ("initialize", "scale_loss", "master_params", "state_dict", "load_state_dict")
# apex's LossScaler defaults, and what they are as a GradScaler (the native twin verify compares).
INIT_SCALE, SCALE_FACTOR, SCALE_WINDOW, MAX_LOSS_SCALE = 2.0**16, 2.0, 2000, 2.0**24
DISABLED_TWIN = {
    "init_scale": INIT_SCALE, "growth_factor": SCALE_FACTOR, "backoff_factor": 0.5, "growth_interval": SCALE_WINDOW,
    "enabled": False,
}  # fmt: skip


class LossScaler:
    """apex/amp/scaler.py's LossScaler, the bookkeeping part (unscaling is done by :class:`AmpState`)."""

    def __init__(self, loss_scale: Any, min_loss_scale: float | None, max_loss_scale: float) -> None:
        self.dynamic = loss_scale == "dynamic"
        self._loss_scale = min(max_loss_scale, INIT_SCALE) if self.dynamic else float(loss_scale)
        self._min_loss_scale = min_loss_scale
        self._max_loss_scale = max_loss_scale
        self._unskipped = 0
        self.has_overflow = False

    def loss_scale(self) -> float:
        return self._loss_scale

    def update_scale(self) -> bool:
        """apex's update_scale: returns whether the next optimizer step must be skipped."""
        if self.has_overflow and self.dynamic:
            should_skip = True
            halved = self._loss_scale / 2.0
            self._loss_scale = max(self._min_loss_scale, halved) if self._min_loss_scale else halved
            self._unskipped = 0
        else:
            should_skip = False
            self._unskipped += 1
        if self._unskipped == SCALE_WINDOW and self.dynamic:
            self._loss_scale = min(self._max_loss_scale, self._loss_scale * SCALE_FACTOR)
            self._unskipped = 0
        return should_skip


@dataclass
class _Stash:
    """apex's ``optimizer._amp_stash`` for O1: gradients kept aside while a scaled backward runs."""

    params_have_scaled_gradients: bool = False
    grads: list[Any] = field(default_factory=list)


class AmpState:
    """apex's ``_amp_state``: one per process, created by the module's first use."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.installed = harness.current  # set when torch was imported, before this module
        self.initialized = False
        self.enabled = True
        self.loss_scalers: list[LossScaler] = []
        self._stashes: dict[int, _Stash] = {}
        self._processed: weakref.WeakSet[Any] = weakref.WeakSet()  # the optimizers initialize was given
        self._region: Any = None
        self._backward_wrapped = False

    # -- amp.initialize ------------------------------------------------------------------------

    def initialize(
        self, models, optimizers=None, enabled=True, opt_level="O1", cast_model_type=None,
        patch_torch_functions=None, keep_batchnorm_fp32=None, master_weights=None, loss_scale=None,
        cast_model_outputs=None, num_losses=1, verbosity=1, min_loss_scale=None, max_loss_scale=MAX_LOSS_SCALE,
    ):  # fmt: skip
        site = find_site()
        self.initialized = True
        self.enabled = bool(enabled)
        if not enabled:
            self.recorder.emulated_use("apex.amp.initialize(enabled=False): mixed precision off", site)
            self._record_scaler(DISABLED_TWIN, site)
            return models if optimizers is None else (models, optimizers)
        if opt_level not in OPT_LEVELS:
            raise RuntimeError(
                f"Unexpected optimization level {opt_level}. Options are 'O0', 'O1', 'O2', 'O3'.  Note that in "
                "`O0`, `O1`, etc., the prefix O is the letter O, not the number zero."
            )
        if opt_level in NOT_EMULATED_LEVELS:
            feature = f"apex.amp opt_level {opt_level} (only O1 and O0 are emulated)"
            self.recorder.unemulated_use(feature, site)
            raise NotImplementedError(
                f"ampfix run: apex.amp opt_level={opt_level!r} is not emulated: it casts the model to float16 "
                "and keeps float32 master weights, which torch.amp has no twin for; only O1 (torch.autocast + "
                "GradScaler) and O0 are"
            )
        if opt_level == "O1":
            _refuse_o1_options(cast_model_type, keep_batchnorm_fp32, master_weights)
        if cast_model_outputs is not None:
            self.recorder.unemulated_use("apex.amp.initialize(cast_model_outputs=...) (ignored)", site)
        patch = patch_torch_functions if patch_torch_functions is not None else opt_level == "O1"
        if loss_scale is None:
            loss_scale = "dynamic" if opt_level == "O1" else 1.0
        models_out, optimizers_out = _shapes(models, optimizers)
        self._process(optimizers_out)
        if self.loss_scalers:
            self.recorder.apex_loss_scalers_replaced()
        self.loss_scalers = [LossScaler(loss_scale, min_loss_scale, max_loss_scale) for _ in range(num_losses)]
        self._record_loss_scales()
        description = "float16 autocast from initialize on" if patch else "float32"
        scaling = "dynamic loss scaling from 2**16" if loss_scale == "dynamic" else f"static loss scale {loss_scale!r}"
        self.recorder.emulated_use(f"apex.amp {opt_level} ({description}, {scaling})", site)
        for scaler in self.loss_scalers:
            self._record_scaler(_grad_scaler_twin(scaler, loss_scale, min_loss_scale, max_loss_scale), site)
        for optimizer in optimizers_out if isinstance(optimizers_out, list) else [optimizers_out]:
            if optimizer is not None:
                self._stashes.setdefault(id(optimizer), _Stash())
        if patch:
            self._enter_global_region()
        return models_out if optimizers is None else (models_out, optimizers_out)

    def _process(self, optimizers) -> None:
        """apex's ``_process_optimizer``, before the loss scalers are replaced: an optimizer goes through initialize
        once (allennlp 1.0's trainer initialized again to restore a checkpoint, which raised with apex too)."""
        for optimizer in optimizers if isinstance(optimizers, list) else [optimizers]:
            if optimizer is None:
                continue
            if optimizer in self._processed:
                raise FailsOnTheGpuToo("A given optimizer should only be passed through amp.initialize once.")
            self._processed.add(optimizer)

    def _record_loss_scales(self) -> None:
        self.recorder.apex_loss_scales_now([scaler.loss_scale() for scaler in self.loss_scalers])

    def _record_scaler(self, arguments: dict[str, Any], site) -> None:
        self.recorder.scaler_created({"device": "cuda", **arguments}, site, emulating="apex.amp loss scaler")

    def _enter_global_region(self) -> None:
        if self._region is not None:
            return  # initialize called again: apex's patches are already in place
        region = torch.autocast("cuda", dtype=torch.float16)
        region.__enter__()  # never left: apex's patches stay for the rest of the process
        self._region = region
        key = getattr(region, "_ampfix_region", None)
        # What runs the region, whatever the script reads of the CPU state.
        running = amp_patches.CpuAutocastState(True, amp_patches.CpuAutocastState.now().dtype)
        installed = self.installed
        policy_on = installed is not None and installed.plan.runs_cuda_policy(key) if key is not None else False

        def in_mixed_precision(run: Callable[[], None]) -> None:
            """apex's patches are process-wide; autocast is per thread: each new thread enters it, and
            keeps the CPU state the script sees there apart, as the region does."""
            if installed is not None:
                installed.active_regions.entered(amp_patches.CpuAutocastState.now())
            running.make_real()
            if policy_on and installed is not None:
                installed.plan.cuda_policy.switch(True)
            if installed is not None and key is not None:
                installed.active_regions.stack().append(key)
            run()

        run_every_new_thread_through(in_mixed_precision)
        self._suspend_during_backward()

    def _suspend_during_backward(self) -> None:
        if self._backward_wrapped or self.installed is None:
            return
        plan, original_backward = self.installed.plan, torch.autograd.backward

        @functools.wraps(original_backward)
        def backward(*args, **kwargs):
            with amp_patches.autocast_suspended(plan):
                return original_backward(*args, **kwargs)

        torch.autograd.backward = backward
        self._backward_wrapped = True

    # -- amp.scale_loss ------------------------------------------------------------------------

    @contextlib.contextmanager
    def scale_loss(self, loss, optimizers, loss_id=0, model=None, delay_unscale=False, delay_overflow_check=False):
        if not self.initialized:
            raise RuntimeError(
                "Invoked 'with amp.scale_loss`, but internal Amp state has not been initialized.  "
                "model, optimizer = amp.initialize(model, optimizer, opt_level=...) must be called "
                "before `with amp.scale_loss`."
            )
        if self.installed is not None:
            self.installed.limit.at_boundary()
        self.recorder.apex_loss_scalers_used()  # a disabled one too: the rewrite's GradScaler(enabled=False) is called
        if not self.enabled:
            self.recorder.scaler_called("scale", "disabled")
            yield loss
            return
        optimizers = [optimizers] if isinstance(optimizers, torch.optim.Optimizer) else list(optimizers)
        scaler = self.loss_scalers[loss_id]
        scale = scaler.loss_scale()
        if not scaler.dynamic and scale == 1.0:
            self.recorder.scaler_called("scale", "disabled")
            yield loss.float()
            torch.clear_autocast_cache()
            return
        self.recorder.scaler_called("scale", repr(scale))
        if not delay_unscale:
            for optimizer in optimizers:
                stash = self._stash(optimizer)
                if not stash.params_have_scaled_gradients:
                    _stash_gradients(optimizer, stash)
        scaled = loss.float() * scale
        training_hooks.record_scaled_loss(loss, scaled, scale)
        yield scaled
        if delay_unscale:
            for optimizer in optimizers:
                self._stash(optimizer).params_have_scaled_gradients = True
        else:
            scaler.has_overflow = False
            for optimizer in optimizers:
                stash = self._stash(optimizer)
                scaler.has_overflow |= _unscale_into_stash(optimizer, stash, scale)
                stash.params_have_scaled_gradients = False
            if self.installed is not None:
                self.installed.scaling.unscaled()
            should_skip = False if delay_overflow_check else scaler.update_scale()
            self.recorder.scaler_called("update")
            self._record_loss_scales()
            if should_skip:
                for optimizer in optimizers:
                    self._skip_next_step(optimizer)
        torch.clear_autocast_cache()  # apex drops its cast cache here: the weights are about to change

    def _stash(self, optimizer) -> _Stash:
        return self._stashes.setdefault(id(optimizer), _Stash())

    def _skip_next_step(self, optimizer) -> None:
        if "step" in vars(optimizer):
            return  # already patched for this overflow
        recorder = self.recorder

        def skip_step(closure=None):
            if closure is not None:
                raise RuntimeError("Currently, Amp does not support closure use with optimizers.")
            del optimizer.step  # the class's step again
            recorder.scaler_step_skipped()

        optimizer.step = skip_step

    # -- the rest of the API -------------------------------------------------------------------

    @staticmethod
    def master_params(optimizer) -> Iterator[Any]:
        """apex: the parameters the optimizer updates (with O1, the model's own)."""
        for group in optimizer.param_groups:
            yield from group["params"]

    def state_dict(self, destination=None):
        destination = OrderedDict() if destination is None else destination
        for index, scaler in enumerate(self.loss_scalers):
            destination[f"loss_scaler{index}"] = {"loss_scale": scaler.loss_scale(), "unskipped": scaler._unskipped}
            self.recorder.scaler_state("state_dict", scaler.loss_scale(), find_site())
        return destination

    def load_state_dict(self, state_dict) -> None:
        if len(state_dict) != len(self.loss_scalers):
            print(
                f"Warning: state_dict contains {len(state_dict)} entries, while {len(self.loss_scalers)} "
                "loss_scalers are used"
            )
        unexpected = []
        index = 0
        for key, value in dict(state_dict).items():
            if "loss_scaler" not in key:
                unexpected.append(key)
                continue
            if index > len(self.loss_scalers) - 1:
                print(f"Skipping loss_scaler[{index}], since num_losses was set to {len(self.loss_scalers)}")
                break
            self.loss_scalers[index]._loss_scale = value["loss_scale"]
            self.loss_scalers[index]._unskipped = value["unskipped"]
            self.recorder.scaler_state("load_state_dict", value["loss_scale"], find_site())
            index += 1
        self._record_loss_scales()
        if unexpected:
            keys = ", ".join(f'"{key}"' for key in unexpected)
            raise RuntimeError(f"Error(s) in loading state_dict. Unexpected key(s) in state_dict: {keys}. ")


def _refuse_o1_options(cast_model_type, keep_batchnorm_fp32, master_weights) -> None:
    """apex's Properties refuse these for O1 (its warn_or_err, without hard_override)."""
    if cast_model_type is not None:
        raise RuntimeError(
            "O1 inserts casts around Torch functions rather than model weights, so with O1, the model weights "
            "themselves should remain FP32. If you wish to cast the model to a different type, use opt_level='O2' "
            "or 'O3'. cast_model_type was " + str(cast_model_type)
        )
    if keep_batchnorm_fp32 is not None:
        raise RuntimeError(
            "With opt_level O1, batchnorm functions are automatically patched to run in FP32, so "
            "keep_batchnorm_fp32 should be None. keep_batchnorm_fp32 was " + str(keep_batchnorm_fp32)
        )
    if master_weights:
        raise RuntimeError(
            "It doesn't make sense to use master_weights with O1. "
            "With O1, your model weights themselves should be FP32."
        )


def _grad_scaler_twin(scaler: LossScaler, loss_scale, min_loss_scale, max_loss_scale) -> dict[str, Any]:
    """The loss scaler as GradScaler arguments; what a GradScaler cannot express stays visible."""
    if not scaler.dynamic:
        # A static scale of 1 scales nothing (a disabled GradScaler); any other has no twin.
        if scaler.loss_scale() == 1.0:
            return DISABLED_TWIN
        return {"static_loss_scale": float(loss_scale), "enabled": True}
    arguments: dict[str, Any] = {**DISABLED_TWIN, "init_scale": scaler.loss_scale(), "enabled": True}
    if min_loss_scale:
        arguments["min_loss_scale"] = float(min_loss_scale)
    if max_loss_scale != MAX_LOSS_SCALE:
        arguments["max_loss_scale"] = float(max_loss_scale)
    return arguments


def _shapes(models, optimizers) -> tuple[Any, Any]:
    """apex checks the shapes (one or a list) and returns them as given."""
    if not isinstance(models, (torch.nn.Module, list)):
        raise TypeError("models must be either a single model or a list of models.")
    if optimizers is not None and not isinstance(optimizers, (torch.optim.Optimizer, list)):
        raise TypeError("optimizers must be either a single optimizer or a list of optimizers.")
    return models, optimizers


def _params(optimizer) -> list[Any]:
    return [param for group in optimizer.param_groups for param in group["params"]]


def _stash_gradients(optimizer, stash: _Stash) -> None:
    """apex's prepare_backward_no_master_weights: keep the gradients aside; backward writes fresh ones."""
    params = _params(optimizer)
    stash.grads = [param.grad for param in params]
    for param in params:
        param.grad = None


def _unscale_into_stash(optimizer, stash: _Stash, scale: float) -> bool:
    """apex's post_backward_models_are_masters: gradient / scale (+ the stashed one); True on inf/NaN."""
    params = _params(optimizer)
    stashed = stash.grads or [None] * len(params)
    fresh = [param.grad for param in params if param.grad is not None]
    found_inf = torch.zeros(())
    if fresh:
        inverse = torch.full((), scale, dtype=torch.float64).reciprocal().float()
        torch._amp_foreach_non_finite_check_and_unscale_(fresh, found_inf, inverse)
    for param, kept in zip(params, stashed):
        if kept is None:
            continue
        if param.grad is None:
            param.grad = kept
        else:
            param.grad.add_(kept)
    stash.grads = []
    return bool(found_inf.item())


def populate(module: ModuleType, recorder: Recorder) -> None:
    """Fill the ``apex.amp`` module the provider created."""
    state = AmpState(recorder)
    module.__doc__ = "apex.amp's O1, emulated by ampfix run (apex.amp is not installed)."
    for name in EMULATED_NAMES:
        setattr(module, name, getattr(state, name))

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        recorder.unemulated_use(f"apex.amp.{name} (not emulated; only {', '.join(EMULATED_NAMES)} are)", find_site())
        raise AttributeError(f"module 'apex.amp' has no attribute {name!r} (ampfix emulates only O1's API)")

    replace(module, "__getattr__", __getattr__)
