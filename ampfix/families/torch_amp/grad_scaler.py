"""AMP002: torch.cuda.amp.GradScaler / torch.cpu.amp.GradScaler -> torch.amp.GradScaler(device, ...).

After the inserted device the positional order is the same, so positionals stay positional.
"""

from ampfix.core.rules import CallShape, Example, Rule, Target

RULE = Rule(
    code="AMP002",
    title="GradScaler",
    min_torch=(2, 3),
    symbols={
        "torch.cuda.amp.GradScaler": Target("torch.amp.GradScaler", "cuda"),
        "torch.cuda.amp.grad_scaler.GradScaler": Target("torch.amp.GradScaler", "cuda"),
        "torch.cpu.amp.GradScaler": Target("torch.amp.GradScaler", "cpu"),
        "torch.cpu.amp.grad_scaler.GradScaler": Target("torch.amp.GradScaler", "cpu"),
    },
    shape=CallShape(
        old_params=("init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled"),
        device_position=0,
        partial_keeps_meaning=True,
        device_default="cuda",
    ),
    examples=(
        Example(
            "import torch\nscaler = torch.cuda.amp.GradScaler(2.0**10, enabled=use_amp)\n",
            'import torch\nscaler = torch.amp.GradScaler("cuda", 2.0**10, enabled=use_amp)\n',
        ),
        # A subclass may be constructed positionally elsewhere, which would bind to `device`.
        Example("import torch\nclass S(torch.cuda.amp.GradScaler):\n    pass\n", reported="AMP002"),
        # torch.amp.GradScaler's device defaults to "cuda": a CPU scaler's subclass would build on CUDA.
        Example("import torch\nclass S(torch.cpu.amp.GradScaler):\n    pass\n", reported="AMP002", unsafe_fixes=True),
    ),
)
