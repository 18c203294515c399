"""The pure engine: source text in, result (new text, findings, diff) out. Never prints."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Options:
    unsafe_fixes: bool = False
    # Source text of the device expression given to rules that target CUDA.
    cuda_device: str = '"cuda"'
    # The oldest torch the code must keep running on; rules needing newer torch are held back.
    target_torch: tuple[int, int] | None = None


@dataclass(frozen=True)
class Finding:
    line: int  # 1-based
    col: int  # 1-based, in characters
    code: str
    message: str
    fixable: bool  # a fix exists (safe, or unsafe when `unsafe` is set)
    unsafe: bool = False
    fixed: bool = False  # the fix is applied in SourceResult.new_source
    suggestion: str | None = None


@dataclass(frozen=True)
class SourceResult:
    source: str
    new_source: str
    findings: tuple[Finding, ...] = ()
    error: str | None = None  # set when the source could not be processed; new_source == source then

    @property
    def changed(self) -> bool:
        return self.new_source != self.source

    def diff(self, path: str = "<string>") -> str:
        return "".join(
            difflib.unified_diff(
                self.source.splitlines(keepends=True),
                self.new_source.splitlines(keepends=True),
                fromfile=f"a/{path}",
                tofile=f"b/{path}",
            )
        )


def fix_source(source: str, options: Options = Options()) -> SourceResult:
    """Rewrite every deprecated AMP use that can be rewritten safely; report the rest."""
    raise NotImplementedError
