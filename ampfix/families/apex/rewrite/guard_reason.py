"""The reason given where initialize's `if` holds more than the rewrite replaces: which statements, and whether the
`if` has an `else` (BERT's run_glue.py: the optimizer's set-up beside initialize under `if use_fp16:`, the float32
optimizer in the `else`). Said exactly, not as "this or that": what a person must move by hand is named by its lines.
"""

from __future__ import annotations

import ast

from ampfix.families.apex.rewrite.vocabulary import NotMechanical

_LINES_NAMED = 6  # more are counted, not listed


def _not_alone(guard: ast.If, init: ast.stmt, others: list[ast.stmt], with_import: bool) -> NotMechanical:
    """The reason for `if COND: <others>; initialize` (and an `else`): `others` are the statements under the `if`
    other than initialize (and the import, `with_import`), in order. Or for initialize in the `else` itself."""
    if any(s is init for s in guard.orelse):
        return NotMechanical(f"initialize is in the `else` of the `if` on line {guard.lineno}")
    where = "its `if` (with the import)" if with_import else "its `if`"
    parts = []
    if others:
        lines = [str(s.lineno) for s in others]
        listed = ", ".join(lines[:_LINES_NAMED]) + (", ..." if len(lines) > _LINES_NAMED else "")
        plural = "s" if len(others) > 1 else ""
        parts.append(f"initialize is not alone under {where}: {len(others)} other statement{plural} there (line"
                     f"{plural} {listed})")
    if guard.orelse:
        holder = "the `if`" if others else f"initialize is under {where}, which"
        parts.append(f"{holder} has an `else` (its block from line {guard.orelse[0].lineno})")
    return NotMechanical(", and ".join(parts) if parts else f"initialize is not alone under {where}")
