"""Installs the CPU emulation of CUDA into torch, inside the child, right after torch is imported.

The child process (see :mod:`ampfix.runner.child`) calls :func:`install` once torch has finished
importing, before the script's first use of it. Order matters only at the end: the device mode is
entered last, so the patches above are installed without it watching.
"""

from __future__ import annotations

import os
from types import ModuleType

from ampfix.runner import sites
from ampfix.runner.config import RunnerConfig
from ampfix.runner.observe import Recorder


def install(torch: ModuleType, recorder: Recorder, config: RunnerConfig) -> None:
    sites.configure(os.path.dirname(torch.__file__))
    _fix_seed_and_threads(torch, config)

    from ampfix.runner import amp_patches, device_mode, fake_cuda, process_patches, training_hooks

    limit = training_hooks.StepLimit(recorder, config.max_steps)
    fake_cuda.install(recorder)
    amp_patches.install_autocast(recorder, amp_patches.AmpPlan(config.amp_dtype), limit.at_boundary)
    amp_patches.install_autocast_state_queries()
    amp_patches.install_custom_fwd_bwd(recorder)
    amp_patches.install_grad_scaler(recorder, limit.at_boundary, training_hooks.record_scaled_loss)
    training_hooks.install_optimizer_hooks(recorder, limit)
    training_hooks.install_backward_hook(recorder, limit)
    process_patches.install(recorder)
    device_mode.install(device_mode.CudaOnCpuMode(recorder))


def _fix_seed_and_threads(torch: ModuleType, config: RunnerConfig) -> None:
    torch.manual_seed(config.seed)
    torch.set_num_threads(config.threads)
    try:
        torch.set_num_interop_threads(config.threads)
    except RuntimeError:  # only settable before the first parallel work; then it already is
        pass
