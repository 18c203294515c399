"""AMP007: the per-device autocast state functions -> the device-generic ones.

Facts, checked on torch 2.13.0 (torch/_C/__init__.pyi; each old function called with warnings as errors):
- Each old function below warns `DeprecationWarning: torch.get_autocast_gpu_dtype() is deprecated. Please use
  torch.get_autocast_dtype('cuda') instead.` (from C++, torch/csrc/autograd/init.cpp), and for every sibling
  `torch.<old>(...) is deprecated. Please use torch.<new>('<device>', ...) instead.`; "gpu" means "cuda".
- There is no `is_autocast_gpu_enabled` / `set_autocast_gpu_enabled`: `torch.is_autocast_enabled()` and
  `torch.set_autocast_enabled(b)` without a device mean CUDA and do not warn (overloads in the .pyi);
  AMP008/AMP009 give them the device target under `--device cpu|auto|EXPR`.
- The replacements `torch.get_autocast_dtype(device)`, `torch.set_autocast_dtype(device, dtype)`,
  `torch.is_autocast_enabled(device)`, `torch.set_autocast_enabled(device, enabled)` came with the deprecation
  in torch 2.4 (pytorch/pytorch#124359, "Refactor autocast C++ APIs to be device-agnostic"): min torch 2.4.
- The device goes first in every new signature, before the old arguments, which keep their order.
"""

from ampfix.core.rules import CallShape, Example, Rule, Target

_DEVICES = {"gpu": "cuda", "cpu": "cpu", "xla": "xla", "ipu": "ipu"}


def _symbols(old: str, new: str, devices: tuple[str, ...]) -> dict[str, Target | None]:
    return {f"torch.{old.format(d)}": Target(f"torch.{new}", _DEVICES[d]) for d in devices}


RULE = Rule(
    code="AMP007",
    title="autocast state functions (get/set_autocast_<device>_dtype, is/set_autocast_<device>_enabled)",
    min_torch=(2, 4),
    symbols={
        **_symbols("get_autocast_{}_dtype", "get_autocast_dtype", ("gpu", "cpu", "xla", "ipu")),
        **_symbols("set_autocast_{}_dtype", "set_autocast_dtype", ("gpu", "cpu", "xla", "ipu")),
        **_symbols("is_autocast_{}_enabled", "is_autocast_enabled", ("cpu", "xla", "ipu")),
        **_symbols("set_autocast_{}_enabled", "set_autocast_enabled", ("cpu", "xla", "ipu")),
    },
    # (dtype) / (enabled) / (): the device is inserted first; `partial(new, device)` is the old function. The
    # CUDA names take nothing or a dtype (`set_autocast_gpu_dtype(d)`), which follows the call to the CPU.
    shape=CallShape(old_params=("dtype",), device_position=0, partial_keeps_meaning=True,
                    cuda_dtype_params=("dtype",)),
    examples=(
        Example(
            "import torch\nx = x.to(torch.get_autocast_gpu_dtype())\n",
            'import torch\nx = x.to(torch.get_autocast_dtype("cuda"))\n',
        ),
        Example(
            "import torch as th\nth.set_autocast_cpu_dtype(th.bfloat16)\non = th.is_autocast_cpu_enabled()\n",
            'import torch as th\nth.set_autocast_dtype("cpu", th.bfloat16)\non = th.is_autocast_enabled("cpu")\n',
        ),
        Example(
            "import torch\ntorch.set_autocast_xla_enabled(False)\n",
            'import torch\ntorch.set_autocast_enabled("xla", False)\n',
        ),
        # Under --device cpu the CUDA state is the CPU's.
        Example(
            "import torch\nd = torch.get_autocast_gpu_dtype()\n",
            'import torch\nd = torch.get_autocast_dtype("cpu")\n',
            device="cpu",
        ),
        # A reference: a functools.partial under --unsafe-fixes.
        Example("import torch\nfn = torch.get_autocast_gpu_dtype\n", reported="AMP007"),
        # A string naming one: reported, never rewritten (the twin serves every device; a patch of it would too).
        Example('from unittest import mock\np = mock.patch("torch.get_autocast_gpu_dtype")\n', reported="AMP007"),
        # ... and so does its attribute name given with the torch module (`getattr`, `mock.patch.object`).
        Example('import torch\nfrom unittest import mock\np = mock.patch.object(torch, "set_autocast_gpu_dtype")\n',
                reported="AMP007"),
        # Not deprecated: the default target leaves them.
        Example("import torch\non = torch.is_autocast_enabled()\ntorch.set_autocast_enabled(on)\n"),
    ),
)

# Not deprecated (they mean CUDA), moved only by a device target like the rest of the CUDA code: the device is
# inserted first. Each name its own rule: whether a call already gives the device is its number of positionals.
IS_ENABLED_RULE = Rule(
    code="AMP008",
    title="torch.is_autocast_enabled() without a device (device targets only)",
    min_torch=(2, 4),
    symbols={"torch.is_autocast_enabled": Target("torch.is_autocast_enabled", "cuda")},
    shape=CallShape(old_params=(), device_position=0),
    device_target_only=True,
    examples=(
        Example(
            "import torch\non = torch.is_autocast_enabled()\n",
            'import torch\non = torch.is_autocast_enabled("cpu")\n',
            device="cpu",
        ),
        Example("import torch\non = torch.is_autocast_enabled()\n"),
    ),
)

SET_ENABLED_RULE = Rule(
    code="AMP009",
    title="torch.set_autocast_enabled(b) without a device (device targets only)",
    min_torch=(2, 4),
    symbols={"torch.set_autocast_enabled": Target("torch.set_autocast_enabled", "cuda")},
    shape=CallShape(old_params=("enabled",), device_position=0),
    device_target_only=True,
    examples=(
        Example(
            "from torch import set_autocast_enabled as sae\nsae(False)\n",
            'from torch import set_autocast_enabled as sae\nsae("cpu", False)\n',
            device="cpu",
        ),
        Example("import torch\ntorch.set_autocast_enabled(False)\n"),
    ),
)
