"""The sub-rewrite of evaluation: the `with torch.no_grad():` blocks after initialize get the autocast too (O1
ran them in mixed precision)."""

from __future__ import annotations

import ast

from ampfix.families.apex import rules
from ampfix.families.apex.rewrite.sub_rewrite import _Rewrite
from ampfix.families.apex.rewrite.tree import _last_line


def _rewrite_evaluation(rw: _Rewrite) -> None:
    """Evaluation after initialize in the function: its `with torch.no_grad():` blocks get the autocast too."""
    rw.evaluation = _evaluation_blocks(rw)
    for block_node in rw.evaluation:
        at = rw.tree.index.span(block_node.items[-1].optional_vars or block_node.items[-1].context_expr)[1]
        rw.splices.append((at, at, f", {rw.autocast}"))


def _evaluation_blocks(rw: _Rewrite) -> list[ast.With]:
    """The outermost `with torch.no_grad():` (or inference_mode) blocks of the function after initialize and
    outside the forward passes, not already under an autocast of their own: O1 ran them in mixed precision."""
    shape, tree = rw.shape, rw.tree

    def resolved(item: ast.withitem) -> str | None:
        call = item.context_expr
        return tree.engine.resolve(call.func, shape.scope) if isinstance(call, ast.Call) else None

    found: list[ast.With] = []
    for node in ast.walk(shape.function):  # breadth first: an outer block comes before the blocks inside it
        if not (isinstance(node, ast.With) and node.lineno > _last_line(shape.init_statement)
                and tree.function_of(node) is shape.function):
            continue
        names = [resolved(item) for item in node.items]
        if any(name in rules.EVALUATION_CONTEXTS for name in names) \
                and not any(name in rules.AUTOCAST_CONTEXTS for name in names) \
                and not any(a <= node.lineno <= b for a, b in rw.regions) \
                and not any(b.lineno <= node.lineno <= _last_line(b) for b in found):
            found.append(node)
    return sorted(found, key=lambda b: b.lineno)
