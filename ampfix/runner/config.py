"""Settings shared by the parent (which launches) and the child (which runs the script).

The parent serialises a :class:`RunnerConfig` into the child's environment; every Python process
started below it (spawned ranks, DataLoader workers) reads the same settings from there.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

# The runner's own folder (every side's modules are below it): a frame whose file is there is the runner's,
# never the script's.
RUNNER_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "")
# Put first on a child's PYTHONPATH: its sitecustomize starts the runner in every process below `ampfix run`.
BOOTSTRAP_DIR = os.path.join(RUNNER_DIR, "child", "bootstrap")

# Runner functions that only pass the script's call on to torch (the device mode runs every torch call; the
# autocast state setters hand torch the script's arguments): an exception raised there is not the emulation's
# doing. (module below runner/ without .py, function)
PASS_THROUGH = frozenset({
    ("gpu/device_mode", "call"), ("gpu/device_mode", "__torch_function__"), ("gpu/amp_patches", "set_state"),
})

CONFIG_ENV = "AMPFIX_RUNNER_CONFIG"
# "main" for the process that runs the script; the harness flips it to "child" in its own
# environment so that every process started below it knows it is not the main one.
ROLE_ENV = "AMPFIX_RUNNER_ROLE"

# The dtype "cuda" autocast runs in on the CPU. "float16" (the default) and "keep": the requested one (CUDA's
# default, float16, when none is given; a bfloat16 request stays bfloat16); "explicit": a dtype the script gives,
# else the CPU's default (bfloat16). float16 is computed as a GPU computes it (gpu/numerics: the matmul family in
# float32 from float16 operands, rounded once), except with "float16-cpu": the requested dtype too, on the CPU's
# own float16 kernels (20-50x slower matmuls; what the default is checked against). "bfloat16": every request
# runs in bfloat16, float16's read as float16 (the stand-in, gpu/boundaries): fast, but float16's overflow and
# underflow do not happen.
AMP_DTYPES = ("float16", "bfloat16", "float16-cpu", "keep", "explicit")
# The run dtypes whose float16 is computed by gpu/numerics.
GPU_FLOAT16_AMP_DTYPES = ("float16", "keep", "explicit")
# Whose op lists "cuda" autocast regions follow on the CPU: CUDA's (the dtypes a GPU would give) or the CPU's.
AUTOCAST_POLICIES = ("cuda", "cpu")


@dataclass(frozen=True)
class RunnerConfig:
    out_dir: str
    seed: int = 0
    threads: int = 1
    amp_dtype: str = "float16"
    autocast_policy: str = "cuda"
    max_steps: int | None = None
    # verify: also record each top-level model call with the autocast it ran under and each gradient
    # clipping (a global module hook slows every module call a little, and with the clipping
    # wrappers installed a Ctrl-C that lands in the first training step was seen to be lost under
    # load, cause not found: plain runs go without both).
    verify_observations: bool = False
    # The emulated GPUs: how many, each one's memory in bytes (None: no limit), and whether what a GPU
    # refuses (two devices in one op, numpy of a GPU's tensor) fails the run as it would there.
    gpus: int = 1
    gpu_memory: int | None = None
    device_checks: bool = True
    cuda_is_cpu: bool = False  # every "cuda" tensor reads as a CPU one (verify --device cpu)

    def to_env_value(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env_value(cls, value: str) -> RunnerConfig:
        return cls(**json.loads(value))
