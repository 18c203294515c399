"""The sub-rewrite of the module-level functions initialize's function calls that scale losses (`callees`, apex's
ImageNet example's `train`): the scaler handed to them as their last parameter."""

from __future__ import annotations

from ampfix.families.apex.rewrite.callees import _mentions
from ampfix.families.apex.rewrite.sub_rewrite import _Rewrite


def _hand_the_scaler(rw: _Rewrite) -> None:
    """`def train(..., optimizer, epoch)` -> `def train(..., optimizer, epoch, scaler)`, and each call of it (in
    initialize's function, after initialize: `callees`) given `scaler` last."""
    shape, index = rw.shape, rw.tree.index
    if not shape.handed:
        return
    for callee in shape.methods:
        at = index.span(callee.args.args[-1])[1]
        rw.splices.append((at, at, f", {shape.scaler}"))
        for call, _ in _mentions(rw.tree, callee.name):
            assert call is not None  # callees._handed_the_optimizer
            last = [*call.args, *call.keywords]
            end = max(index.span(node)[1] for node in last)
            rw.splices.append((end, end, f", {shape.scaler}"))
