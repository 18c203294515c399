"""AMP001: torch.cuda.amp.autocast / torch.cpu.amp.autocast -> torch.amp.autocast(device, ...).

The old classes take (enabled, dtype, cache_enabled); torch.amp.autocast takes
(device_type, dtype, enabled, cache_enabled). Inserting the device and keeping the positionals
would move `enabled` into `dtype`, so every positional argument is given its keyword.
"""

from ampfix.core.rules import CallShape, Example, Rule, Target

# torch.amp.autocast takes dtype/cache_enabled from the state in force; the old classes pass these.
CUDA_DEFAULTS = (("dtype", "torch.float16"), ("cache_enabled", "True"))
CPU_DEFAULTS = (("dtype", "torch.bfloat16"), ("cache_enabled", "True"))

RULE = Rule(
    code="AMP001",
    title="autocast",
    min_torch=(1, 10),
    symbols={
        "torch.cuda.amp.autocast": Target("torch.amp.autocast", "cuda", old_defaults=CUDA_DEFAULTS),
        "torch.cuda.amp.autocast_mode.autocast": Target("torch.amp.autocast", "cuda", old_defaults=CUDA_DEFAULTS),
        "torch.cpu.amp.autocast": Target("torch.amp.autocast", "cpu", old_defaults=CPU_DEFAULTS),
        "torch.cpu.amp.autocast_mode.autocast": Target("torch.amp.autocast", "cpu", old_defaults=CPU_DEFAULTS),
    },
    shape=CallShape(
        old_params=("enabled", "dtype", "cache_enabled"),
        device_position=0,
        positionals_to_keywords=True,
        cuda_dtype_params=("dtype",),
    ),
    examples=(
        Example(
            "import torch\nwith torch.cuda.amp.autocast():\n    pass\n",
            'import torch\nwith torch.amp.autocast("cuda"):\n    pass\n',
        ),
        Example(
            "import torch\nctx = torch.cuda.amp.autocast(use_amp, torch.bfloat16)\n",
            'import torch\nctx = torch.amp.autocast("cuda", enabled=use_amp, dtype=torch.bfloat16)\n',
        ),
        Example(
            "import torch\nctx = torch.cpu.amp.autocast(dtype=torch.bfloat16)\n",
            'import torch\nctx = torch.amp.autocast("cpu", dtype=torch.bfloat16)\n',
        ),
        # A bare decorator would pass the function as `enabled`: reported, not rewritten.
        Example("import torch\n@torch.cuda.amp.autocast\ndef f(): ...\n", reported="AMP001"),
        # A feature check asks the same of torch.amp.
        Example(
            'import torch\nok = hasattr(torch.cuda.amp, "autocast")\n',
            'import torch\nok = hasattr(torch.amp, "autocast")\n',
        ),
        # Already migrated.
        Example('import torch\nwith torch.amp.autocast("cuda"):\n    pass\n'),
    ),
)
