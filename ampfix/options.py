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
