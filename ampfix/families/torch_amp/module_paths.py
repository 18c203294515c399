"""AMP010: the deprecated modules and their submodules -> torch.amp (imports and plain references).

These are renames: the objects behind the new paths are the ones the old paths re-exported,
or the modules that hold the new classes. `torch.amp.grad_scaler` appeared in torch 2.3.
"""

from ampfix.core.rules import Example, Rule, Target

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
        # Private helpers the old module held until torch 2.3, when they moved to torch.amp.grad_scaler.
        "torch.cuda.amp.grad_scaler._refresh_per_optimizer_state": Target(
            "torch.amp.grad_scaler._refresh_per_optimizer_state", old_removed_in=(2, 3)),
        "torch.cuda.amp.grad_scaler._MultiDeviceReplicator": Target(
            "torch.amp.grad_scaler._MultiDeviceReplicator", old_removed_in=(2, 3)),
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
        Example(
            "import torch\nstates = defaultdict(torch.cuda.amp.grad_scaler._refresh_per_optimizer_state)\n",
            "import torch\nstates = defaultdict(torch.amp.grad_scaler._refresh_per_optimizer_state)\n",
        ),
    ),
)
