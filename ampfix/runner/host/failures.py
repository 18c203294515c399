"""Why a script failed under the runner: inside the runner's emulation, or the script's own. Parent side; pure.

The child records the exception the script died of and where it was raised (``child.process._failure``);
this turns it into the sentence ``run`` and ``verify`` print, with the option that changes the
emulation involved.
"""

from __future__ import annotations

import posixpath
from typing import Any

from ampfix.runner.config import PASS_THROUGH

# A runner module (its path below ampfix/runner, without .py) an exception can be raised from while it emulates,
# what it emulates there, and the option that runs it otherwise (None: none does).
EMULATING_MODULES: dict[str, tuple[str, str | None]] = {
    "gpu/cuda_autocast": (
        "CUDA's autocast op policy, run on the CPU",
        "--autocast-policy cpu (CPU autocast's own op lists)",
    ),
    "gpu/boundaries": (
        "an op the CPU lacks in low precision, run in float32, or the bfloat16 stand-in",
        "--amp-dtype keep (the dtype the script asks for; the CPU lacks some float16 kernels too)",
    ),
    "gpu/amp_patches": ("autocast or GradScaler, moved to the CPU", "--amp-dtype keep (the dtype the script asks for)"),
    "apex/amp": ("apex.amp, emulated with torch.amp", None),
    "gpu/fake_cuda": ("torch.cuda, answered by a fake CUDA device", None),
}
STAND_IN_NAMES = ("BFloat16", "bfloat16")
# What the script dies of when the environment ampfix runs in has no torch (installed without the runner's extra).
NO_TORCH = ("ModuleNotFoundError", "No module named 'torch'")
NO_TORCH_HINT = 'torch is not installed where ampfix runs: pip install "ampfix[runner]"'


def explain(failure: dict[str, Any] | None) -> str | None:
    """A sentence on whether the failure is inside the runner's emulation, or None when nothing was recorded."""
    if failure is None:
        return None
    if (failure.get("type"), failure.get("message")) == NO_TORCH:
        return NO_TORCH_HINT
    if failure.get("gpu_too"):
        return "the runner reproduces a GPU's own refusal here: the script fails the same way on CUDA"
    module, function = failure.get("runner_module"), failure.get("runner_function")
    if module is not None and (module, function) not in PASS_THROUGH:
        what, option = EMULATING_MODULES.get(module, ("its own code", None))
        fix = f"; {option} changes that" if option else "; no option changes that: please report it"
        where = posixpath.normpath(f"ampfix/runner/{module}.py")  # "../families/x": another of ampfix's modules
        return f"the failure is inside the runner's emulation ({what}, raised in {where}){fix}"
    if failure.get("reached_real_cuda"):
        return (
            "the failure is the runner's: a call went past its emulated GPU into torch's own CUDA initialisation "
            "(torch.cuda._lazy_init), which fails on a machine without one; no option changes that: please report it"
        )
    if failure.get("stand_in") and any(name in failure.get("message", "") for name in STAND_IN_NAMES):
        return (
            "the failure is the runner's: a bfloat16 tensor (the CPU's stand-in for the float16 the script asked "
            "for) reached code that refuses it; --amp-dtype keep runs float16 as asked"
        )
    return (
        "no sign of the runner's emulation in the failure (raised outside ampfix, no bfloat16 stand-in named): "
        "the script's own"
    )
