"""What a run may change; shared by the engine, the analysis and the CLI."""

from __future__ import annotations

from dataclasses import dataclass

# The device targets (`--device`): where code written for CUDA is moved to.
DEVICE_MODES = ("cuda", "cpu", "auto")


@dataclass(frozen=True)
class Options:
    unsafe_fixes: bool = False
    # Where uses that target CUDA are moved to: "cuda" keeps them there (each old name's own device),
    # "cpu" moves them to the CPU, "auto" to a device chosen when the code runs.
    device: str = "cuda"
    # Source text of the user's own device expression (`--device-expr`): when set, it is put at every
    # site that targets CUDA, whatever `device` says.
    device_expr: str | None = None
    # Moving to the CPU keeps an explicit float16 instead of making it bfloat16.
    keep_dtype: bool = False
    # The oldest torch the code must keep running on; rules needing newer torch are held back.
    target_torch: tuple[int, int] | None = None
    # The rule codes to apply and report (`select` / `ignore`); None: every rule. A rule left out
    # is held back like a rule newer than the target, so its names and their imports stay together.
    rules: frozenset[str] | None = None
    # Every autocast rewrite writes the old class's dtype/cache_enabled defaults, not only where the code shows
    # an enclosing region or a changed default (docs/autocast-defaults.md).
    explicit_autocast_defaults: bool = False

    def __post_init__(self) -> None:
        if self.device not in DEVICE_MODES:
            raise ValueError(f"device must be one of {', '.join(DEVICE_MODES)}, not {self.device!r}")

    @property
    def retargets(self) -> bool:
        """Is CUDA code moved elsewhere (a non-default device target)?"""
        return self.device_expr is not None or self.device != "cuda"

    @property
    def to_cpu(self) -> bool:
        return self.device_expr is None and self.device == "cpu"

    def reports(self, rule_code: str) -> bool:
        """Whether a rule's findings are reported (errors, AMP9xx, are not rules: always reported)."""
        return self.rules is None or rule_code in self.rules
