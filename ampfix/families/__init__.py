"""The migrations, one module each, listed here explicitly (no registry filled by imports)."""

from __future__ import annotations

from ampfix.core.rules import CallShape, Example, Family, Rule, Target
from ampfix.families.apex.rules import APEX_RULES
from ampfix.families.torch_amp import (autocast, cast, custom_bwd, custom_fwd, device_literal, grad_scaler,
                                      module_paths, no_twin)

# torch's own deprecated names (the TORCH_AMP family).
TORCH_RULES: tuple[Rule, ...] = (
    autocast.RULE,
    grad_scaler.RULE,
    custom_fwd.RULE,
    custom_bwd.RULE,
    cast.RULE,
    device_literal.RULE,
    module_paths.RULE,
    no_twin.RULE,
)

# Every code `ampfix rules` lists and --select/--ignore accept: torch's, then NVIDIA apex's (reported
# by `ampfix.families.apex.detect`).
ALL_RULES: tuple[Rule, ...] = (*TORCH_RULES, *APEX_RULES)

TORCH_AMP = Family(
    package="torch",
    # A qualified name below one of these with no entry in a rule is reported, never guessed.
    roots={"torch.cuda.amp": "torch.amp", "torch.cpu.amp": "torch.amp"},
    # `torch.amp.autocast(device_type=...)`, `torch.amp.GradScaler(device=...)`
    device_keywords=("device_type", "device"),
    rules=TORCH_RULES,
    # torch's own version; `torch.version.cuda` / `.hip` describe the build, not the API.
    version_names=("torch.__version__", "torch.version.__version__", "torch.version.git_version"),
    release_names=("torch.__version__", "torch.version.__version__"),
    distribution="torch",
    new_api=("torch.amp", "torch.autocast"),
    # CPU float16 autocast runs, but far slower than bfloat16, and some CPU ops refuse it.
    cpu_dtypes={"torch.float16": "torch.bfloat16", "torch.half": "torch.bfloat16"},
    cuda_available="torch.cuda.is_available",
    device_class="torch.device",
)

FAMILIES: tuple[Family, ...] = (TORCH_AMP,)

# The deprecated namespaces of every family (the pre-filter's argument rests on them).
DEPRECATED_ROOTS = tuple(root for family in FAMILIES for root in family.roots)


__all__ = ["ALL_RULES", "DEPRECATED_ROOTS", "FAMILIES", "TORCH_AMP", "TORCH_RULES", "CallShape", "Example", "Family", "Rule",
           "Target"]
