"""AMP003: torch.cuda.amp.custom_fwd -> torch.amp.custom_fwd(device_type="cuda", ...).

In the new function device_type is keyword-only and required, so a bare decorator gets a call.
"""

from ampfix.core.rules import CallShape, Example, Rule, Target

RULE = Rule(
    code="AMP003",
    title="custom_fwd",
    min_torch=(2, 4),
    symbols={
        "torch.cuda.amp.custom_fwd": Target("torch.amp.custom_fwd", "cuda"),
        "torch.cuda.amp.autocast_mode.custom_fwd": Target("torch.amp.custom_fwd", "cuda"),
    },
    shape=CallShape(
        old_params=("fwd",),
        device_keyword="device_type",
        bare_decorator_ok=True,
        partial_keeps_meaning=True,
        cuda_dtype_params=("cast_inputs",),
    ),
    examples=(
        Example(
            "import torch\n@torch.cuda.amp.custom_fwd\ndef forward(ctx, x): ...\n",
            'import torch\n@torch.amp.custom_fwd(device_type="cuda")\ndef forward(ctx, x): ...\n',
        ),
        Example(
            "import torch\n@torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)\ndef forward(ctx, x): ...\n",
            'import torch\n@torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)\n'
            "def forward(ctx, x): ...\n",
        ),
    ),
)
