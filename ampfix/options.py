"""What a run may change; shared by the engine, the analysis and the CLI."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Options:
    unsafe_fixes: bool = False
    # Source text of the device expression given to rules that target CUDA.
    cuda_device: str = '"cuda"'
    # The oldest torch the code must keep running on; rules needing newer torch are held back.
    target_torch: tuple[int, int] | None = None
    # The rule codes to apply and report (`select` / `ignore`); None: every rule. A rule left out
    # is held back like a rule newer than the target, so its names and their imports stay together.
    rules: frozenset[str] | None = None

    def reports(self, rule_code: str) -> bool:
        """Whether a rule's findings are reported (errors, AMP9xx, are not rules: always reported)."""
        return self.rules is None or rule_code in self.rules
