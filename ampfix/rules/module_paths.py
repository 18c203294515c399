"""AMP010: the deprecated modules and their submodules -> torch.amp (imports and plain references).

These are renames: the objects behind the new paths are the ones the old paths re-exported,
or the modules that hold the new classes. `torch.amp.grad_scaler` appeared in torch 2.3.
"""

from ampfix.rules.base import Example, Rule, Target

RULE = Rule(
    code="AMP010",
    title="module path",
    min_torch=(2, 3),
    symbols={
        "torch.cuda.amp": Target("torch.amp", module=True),
        "torch.cpu.amp": Target("torch.amp", module=True),
        "torch.cuda.amp.autocast_mode": Target("torch.amp.autocast_mode", module=True),
        "torch.cpu.amp.autocast_mode": Target("torch.amp.autocast_mode", module=True),
        "torch.cuda.amp.grad_scaler": Target("torch.amp.grad_scaler", module=True),
        "torch.cpu.amp.grad_scaler": Target("torch.amp.grad_scaler", module=True),
        "torch.cuda.amp.grad_scaler.OptState": Target("torch.amp.grad_scaler.OptState"),
    },
    examples=(
        Example(
            "from torch.cuda.amp import autocast as ac\nwith ac():\n    pass\n",
            'from torch.amp import autocast as ac\nwith ac("cuda"):\n    pass\n',
        ),
        Example(
            "from torch.cuda import amp\nscaler = amp.GradScaler()\n",
            'from torch import amp\nscaler = amp.GradScaler("cuda")\n',
        ),
    ),
)
