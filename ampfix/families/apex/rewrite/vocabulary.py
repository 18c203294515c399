"""The apex O1 rewrite's vocabulary: an apex.amp use (`AmpUse`), why the code is not the mechanical shape
(`NotMechanical`), the splices a rewrite plans, the node types it walks, torch's names (they come from
`rules.NATIVE`), and how its messages spell line numbers."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ampfix.families.apex import rules
from ampfix.syntax.bindings import ChainRef

_NATIVE = rules.NATIVE
SCALER = _NATIVE.scaler
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp, ast.SetComp,
           ast.DictComp, ast.GeneratorExp)
Splices = list[tuple[int, int, str]]


@dataclass(frozen=True)
class AmpUse:
    ref: ChainRef
    full: str


class NotMechanical(Exception):
    """A condition of the rewrite fails: every use is reported instead."""


def _lines(numbers: list[int]) -> str:
    return ("line " if len(numbers) == 1 else "lines ") + ", ".join(map(str, numbers))


@dataclass(frozen=True)
class Split:
    """One half of an apex set-up split across modules (docs/apex.md, *Set-ups split across modules*), found whole
    in the project: `set_up` holds initialize in `function` (`pkg.setup.build`), whose module keeps the one scaler
    the halves share; else this module holds scale_loss, stepping the optimizer that function returned."""

    set_up: bool
    module: str  # the set-up module (`pkg.setup`), where the scaler lives
    function: str  # the set-up function's qualified name (`pkg.setup.build`)
    others: tuple[str, ...]  # the other halves' files, for messages
