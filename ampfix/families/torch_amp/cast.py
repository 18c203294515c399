"""AMP005: the private torch.cuda.amp.autocast_mode._cast(value, dtype) -> _cast(value, "cuda", dtype)."""

from ampfix.core.rules import CallShape, Example, Rule, Target

RULE = Rule(
    code="AMP005",
    title="autocast_mode._cast",
    min_torch=(2, 4),
    symbols={
        "torch.cuda.amp.autocast_mode._cast": Target("torch.amp.autocast_mode._cast", "cuda"),
    },
    shape=CallShape(old_params=("value", "dtype"), device_position=1),
    examples=(
        Example(
            "import torch\ny = torch.cuda.amp.autocast_mode._cast(x, torch.float16)\n",
            'import torch\ny = torch.amp.autocast_mode._cast(x, "cuda", torch.float16)\n',
        ),
    ),
)
