"""AMP004: torch.cuda.amp.custom_bwd -> torch.amp.custom_bwd(device_type="cuda")."""

from ampfix.core.rules import CallShape, Example, Rule, Target

RULE = Rule(
    code="AMP004",
    title="custom_bwd",
    min_torch=(2, 4),
    symbols={
        "torch.cuda.amp.custom_bwd": Target("torch.amp.custom_bwd", "cuda"),
        "torch.cuda.amp.autocast_mode.custom_bwd": Target("torch.amp.custom_bwd", "cuda"),
    },
    shape=CallShape(
        old_params=("bwd",),
        device_keyword="device_type",
        bare_decorator_ok=True,
        partial_keeps_meaning=True,
    ),
    examples=(
        Example(
            "from torch.cuda.amp import custom_bwd\n@custom_bwd\ndef backward(ctx, g): ...\n",
            'from torch.amp import custom_bwd\n@custom_bwd(device_type="cuda")\ndef backward(ctx, g): ...\n',
        ),
    ),
)
