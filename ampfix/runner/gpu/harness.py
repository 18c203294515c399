"""Installs the CPU emulation of CUDA into torch, inside the child, right after torch is imported.

The child process (see :mod:`ampfix.runner.child.process`) calls :func:`install` once torch has finished
importing, before the script's first use of it. Order matters only at the end: the device mode is
entered last, so the patches above are installed without it watching.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ampfix.runner.trace import sites
from ampfix.runner.config import GPU_FLOAT16_AMP_DTYPES, RunnerConfig
from ampfix.runner.trace.observe import Recorder


@dataclass(frozen=True)
class Installed:
    """What the harness set up in this process, for the apex.amp emulation, which a script may
    import after torch (see :mod:`ampfix.runner.apex.amp`)."""

    recorder: Recorder
    plan: Any  # amp_patches.AmpPlan
    scaling: Any  # training_hooks.GradientScaling
    active_regions: Any  # amp_patches.ActiveRegions
    limit: Any  # training_hooks.StepLimit


current: Installed | None = None


def install(torch: ModuleType, recorder: Recorder, config: RunnerConfig) -> None:
    sites.configure(os.path.dirname(torch.__file__ or ""))
    _fix_seed_and_threads(torch, config)

    from ampfix.runner.gpu import amp_patches, boundaries, compiler, cuda_autocast, deferred_dynamo, device_mode
    from ampfix.runner.gpu import devices, fake_cuda, numerics, process_patches, unseen
    from ampfix.runner.trace import training_hooks

    global current
    limit = training_hooks.StepLimit(recorder, config.max_steps)
    gpu_float16 = config.amp_dtype in GPU_FLOAT16_AMP_DTYPES and config.autocast_policy == "cuda"
    float16 = numerics.Float16Numerics(recorder) if gpu_float16 else None
    cuda_policy = cuda_autocast.CudaPolicy(float16) if config.autocast_policy == "cuda" else None
    plan = amp_patches.AmpPlan(config.amp_dtype, cuda_policy, "cpu" if config.cuda_is_cpu else "cuda")
    scaling = training_hooks.GradientScaling()
    active = amp_patches.ActiveRegions()
    current = Installed(recorder, plan, scaling, active, limit)
    stand_in, gaps = boundaries.StandIn(recorder, plan), boundaries.CpuGaps(recorder, plan)
    gpus = devices.DeviceModel(recorder, config.gpus, config.gpu_memory, refuse=config.device_checks,
                               ranks_grow=recorder.role != "main", cuda_is_cpu=config.cuda_is_cpu)
    recorder.devices = gpus
    modes: list[Any] = []  # the device mode, once its step has made it (it reads private torch names)

    def install_device_mode() -> None:
        modes.append(device_mode.CudaOnCpuMode(recorder, gpus))
        device_mode.install(modes[0])

    def add_handlers(make: Callable[[Any], dict[Any, Any]]) -> None:
        for mode in modes:  # none when the device mapping could not be installed
            mode.add_handlers(make(mode))

    steps = [
        ("the compiler's import, deferred to its first use", lambda: deferred_dynamo.install(torch)),
        ("torch.cuda", lambda: fake_cuda.install(recorder, gpus)),
        ("torch.accelerator", lambda: fake_cuda.install_accelerator(recorder, gpus)),
        ("other accelerators' availability", lambda: fake_cuda.install_other_backend_queries(recorder)),
        *([("CUDA's autocast op policy", cuda_policy.install)] if cuda_policy is not None else []),
        ("the record of deprecated AMP calls", lambda: amp_patches.record_deprecated_calls(recorder)),
        ("the record of deprecated autocast state calls",
         lambda: amp_patches.record_deprecated_state_functions(recorder)),
        ("autocast", lambda: amp_patches.install_autocast(recorder, plan, limit.at_boundary, active)),
        ("torch.is_autocast_enabled", lambda: amp_patches.install_autocast_state_queries(active)),
        ("custom_fwd/custom_bwd", lambda: amp_patches.install_custom_fwd_bwd(recorder, plan)),
        (
            "GradScaler",
            lambda: amp_patches.install_grad_scaler(recorder, limit.at_boundary, training_hooks.record_scaled_loss,
                                                    scaling, plan.cuda_tensors_read_as),
        ),
        ("optimizer hooks", lambda: training_hooks.install_optimizer_hooks(recorder, limit, scaling)),
        ("backward", lambda: training_hooks.install_backward_hook(recorder, limit, scaling)),
        *(
            [
                ("gradient clipping", lambda: training_hooks.install_clipping_hooks(recorder, scaling)),
                ("model calls", training_hooks.ModelCalls(recorder, active.innermost_enabled).install),
            ]
            if config.verify_observations
            else []
        ),
        *process_patches.installers(recorder, gpus),
        ("gradients' devices", lambda: devices.install_gradient_marks(gpus)),
        ("devices of TorchScript, torch.func and DLPack results", lambda: unseen.install(gpus)),
        ("torch.compile without inductor's GPU kernels", lambda: compiler.install(recorder)),
        ("torch.save of the bfloat16 stand-in", stand_in.install_save),
        # Last: the mode would otherwise watch the installation itself.
        ("device mapping", install_device_mode),
        ("the bfloat16 stand-in at numpy and dtype reads", lambda: add_handlers(lambda mode: stand_in.handlers())),
        ("ops the CPU lacks in low precision", lambda: add_handlers(lambda mode: gaps.handlers(mode.call))),
    ]
    for name, install_step in steps:
        _install_step(torch, name, install_step)


def _install_step(torch: ModuleType, name: str, install_step: Callable[[], None]) -> None:
    """A torch other than the one this was written against may lack a name: say so, carry on."""
    try:
        install_step()
    except (AttributeError, ImportError, TypeError, ValueError) as error:
        print(
            f"ampfix run: could not emulate {name} on torch {torch.__version__} ({type(error).__name__}: {error}); "
            "the script may fail or behave as on a CPU there",
            file=sys.stderr,
        )


def _fix_seed_and_threads(torch: ModuleType, config: RunnerConfig) -> None:
    torch.manual_seed(config.seed)
    torch.set_num_threads(config.threads)
    try:
        torch.set_num_interop_threads(config.threads)
    except RuntimeError:  # only settable before the first parallel work; then it already is
        pass
