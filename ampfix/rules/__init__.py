"""The migrations, one module each, listed here explicitly (no registry filled by imports)."""

from __future__ import annotations

from ampfix.rules import autocast, cast, custom_bwd, custom_fwd, grad_scaler, module_paths, no_twin
from ampfix.rules.base import CallShape, Example, Rule, Target

ALL_RULES: tuple[Rule, ...] = (
    autocast.RULE,
    grad_scaler.RULE,
    custom_fwd.RULE,
    custom_bwd.RULE,
    cast.RULE,
    module_paths.RULE,
    no_twin.RULE,
)

# The deprecated namespaces: a qualified name below one of these with no entry in a rule is
# reported as having no known twin.
DEPRECATED_ROOTS = ("torch.cuda.amp", "torch.cpu.amp")


__all__ = ["ALL_RULES", "DEPRECATED_ROOTS", "CallShape", "Example", "Rule", "Target"]
