"""AMP006: code already on torch.amp with a literal "cuda" device, moved by a device target.

Only under `--device cpu|auto` or `--device-expr`: the default target leaves such code as it is,
since it is not deprecated. The literal is the device argument: the first positional argument
(autocast, GradScaler) or the keyword that gives the device (`device_type=`, `device=`).
"""

from ampfix.core.rules import CallShape, Example, Rule, Target

_NAMES = (
    "torch.autocast",
    "torch.amp.autocast",
    "torch.amp.autocast_mode.autocast",
    "torch.amp.GradScaler",
    "torch.amp.grad_scaler.GradScaler",
    "torch.amp.custom_fwd",
    "torch.amp.autocast_mode.custom_fwd",
    "torch.amp.custom_bwd",
    "torch.amp.autocast_mode.custom_bwd",
)

RULE = Rule(
    code="AMP006",
    title='torch.amp with a literal "cuda" (device targets only)',
    min_torch=(1, 10),  # the code already runs these names: nothing newer is needed
    symbols={name: Target(name, "cuda") for name in _NAMES},
    # No positional is renamed; the dtype arguments follow the device to the CPU.
    shape=CallShape(old_params=(), cuda_dtype_params=("dtype", "cast_inputs")),
    device_target_only=True,
    examples=(
        Example(
            'import torch\nwith torch.autocast(device_type="cuda"):\n    pass\n',
            'import torch\nwith torch.autocast(device_type="cpu"):\n    pass\n',
            device="cpu",
        ),
        Example(
            "from torch.amp import GradScaler\nscaler = GradScaler('cuda', enabled=True)\n",
            "from torch.amp import GradScaler\nscaler = GradScaler('cpu', enabled=True)\n",
            device="cpu",
        ),
        # The default target never touches code that is not deprecated.
        Example('import torch\nscaler = torch.amp.GradScaler("cuda")\n'),
    ),
)
