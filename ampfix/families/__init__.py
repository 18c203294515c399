"""The migrations, one module each, listed here explicitly (no registry filled by imports)."""

from __future__ import annotations

from ampfix.core.rules import CallShape, Example, Family, Rule, Target
from ampfix.families.apex import rules as apex_rules
from ampfix.families.apex.rules import APEX_RULES
from ampfix.families.torch_amp import (autocast, autocast_state, cast, custom_bwd, custom_fwd, device_literal,
                                      grad_scaler, module_paths, no_twin, unresolved, version_branch)
from ampfix.syntax.prefilter import SpelledNames, Spellings

# torch's own deprecated names (the TORCH_AMP family).
TORCH_RULES: tuple[Rule, ...] = (
    autocast.RULE,
    grad_scaler.RULE,
    custom_fwd.RULE,
    custom_bwd.RULE,
    cast.RULE,
    device_literal.RULE,
    autocast_state.RULE,
    autocast_state.IS_ENABLED_RULE,
    autocast_state.SET_ENABLED_RULE,
    module_paths.RULE,
    no_twin.RULE,
    unresolved.RULE,
    version_branch.RULE,
)

# Every code `ampfix rules` lists and --select/--ignore accept: torch's, then NVIDIA apex's (reported
# by `ampfix.families.apex.detect`).
ALL_RULES: tuple[Rule, ...] = (*TORCH_RULES, *APEX_RULES)

TORCH_AMP = Family(
    package="torch",
    # A qualified name below one of these with no entry in a rule is reported, never guessed.
    # Deprecated names outside them (`torch.get_autocast_gpu_dtype`) are the rules' own: `Family.deprecated_names`.
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
)

# The pre-filter's words (`ampfix.syntax.prefilter`), from the rules: the deprecated names no deprecated root
# spells, and the names a device target looks at that no `amp` spells.
SPELLED_NAMES = SpelledNames(TORCH_AMP.spelled_names())
RETARGET_NAMES = SpelledNames(TORCH_AMP.spelled_names(device_target_only=True))
SPELLINGS = Spellings(SPELLED_NAMES, RETARGET_NAMES, apex_rules.SPELLINGS)

# The codes the planners report under where no rule of a name says more: a name with no twin, an import path.
NO_TWIN_CODE = no_twin.RULE.code
MODULE_PATH_CODE = module_paths.RULE.code
UNRESOLVED_CODE = unresolved.RULE.code
VERSION_BRANCH_CODE = version_branch.RULE.code


__all__ = ["ALL_RULES", "MODULE_PATH_CODE", "NO_TWIN_CODE", "RETARGET_NAMES", "SPELLED_NAMES", "SPELLINGS", "TORCH_AMP",
           "TORCH_RULES", "UNRESOLVED_CODE", "VERSION_BRANCH_CODE", "CallShape", "Example", "Family", "Rule", "Target"]
