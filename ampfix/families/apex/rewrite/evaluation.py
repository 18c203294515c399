"""The sub-rewrite of evaluation: the `with torch.no_grad():` blocks after initialize get the autocast too (O1
ran them in mixed precision), in its function and in the module-level functions it calls after it (`callees`)."""

from __future__ import annotations

import ast

from ampfix.families.apex import rules
from ampfix.families.apex.rewrite.callees import _called_after, _module_function
from ampfix.families.apex.rewrite.sub_rewrite import _Rewrite
from ampfix.families.apex.rewrite.tree import _last_line


def _rewrite_evaluation(rw: _Rewrite) -> None:
    """Evaluation after initialize in the function: its `with torch.no_grad():` blocks get the autocast too; so do
    those of the module-level functions that initialize's function calls after it and nothing else names (apex's
    ImageNet `validate(val_loader, model, criterion)`), where the autocast needs no condition (no `if` around
    initialize, no `enabled=`: they are not handed the scaler to read it from)."""
    rw.evaluation = _evaluation_blocks(rw, rw.shape.function, _last_line(rw.shape.init_statement))
    shape, tree = rw.shape, rw.tree
    if shape.enabled is None and not shape.in_init and _module_function(tree, shape.function):
        for callee in tree.engine.tree.body:
            if isinstance(callee, ast.FunctionDef) and callee is not shape.function \
                    and _called_after(tree, callee, shape.function, (shape.init.lineno, shape.block_end)):
                rw.evaluation += _evaluation_blocks(rw, callee, 0)
    for block_node in rw.evaluation:
        at = rw.tree.index.span(block_node.items[-1].optional_vars or block_node.items[-1].context_expr)[1]
        rw.splices.append((at, at, f", {rw.autocast}"))


def _evaluation_blocks(rw: _Rewrite, function: ast.AST, after: int) -> list[ast.With]:
    """The outermost `with torch.no_grad():` (or inference_mode) blocks of `function` after line `after` and
    outside the forward passes, not already under an autocast of their own: O1 ran them in mixed precision."""
    shape, tree = rw.shape, rw.tree

    def resolved(item: ast.withitem) -> str | None:
        call = item.context_expr
        return tree.engine.resolve(call.func, shape.scope) if isinstance(call, ast.Call) else None

    found: list[ast.With] = []
    for node in ast.walk(function):  # breadth first: an outer block comes before the blocks inside it
        if not (isinstance(node, ast.With) and node.lineno > after and tree.function_of(node) is function):
            continue
        names = [resolved(item) for item in node.items]
        if any(name in rules.EVALUATION_CONTEXTS for name in names) \
                and not any(name in rules.AUTOCAST_CONTEXTS for name in names) \
                and not any(a <= node.lineno <= b for a, b in rw.regions) \
                and not any(b.lineno <= node.lineno <= _last_line(b) for b in found):
            found.append(node)
    return sorted(found, key=lambda b: b.lineno)
