"""apex's registrations that the autocast the rewrite adds makes no-ops: `amp.register_half_function(torch, "einsum")`
(DeepLearningExamples' Transformer-XL). apex's O1 ran einsum in its "promote" mode unless it was registered as a
half function; CUDA autocast runs einsum in float16 already: it is on autocast's float16 list
(`ampfix.runner.gpu.cuda_autocast.LOWER_PRECISION_FP`, the list the runner declares). Under that autocast the
registration has nothing left to do, so it goes with the rest of apex.amp (only then: where apex stays, it still
casts). The call must name a function of torch itself on that list, by a string literal (apex raised where the module
had no such function); any other registration keeps its AMP105. A statement that is only the call goes, and an `if`
that held only such calls, whose test has no effect of its own (`if 'apex' in sys.modules:`), goes with it."""

from __future__ import annotations

import ast
from collections.abc import Callable

from ampfix.families.apex import rules
from ampfix.families.apex.rewrite.loss_scale import runs_nothing
from ampfix.families.apex.rewrite.statements import _whole_lines_only
from ampfix.families.apex.rewrite.sub_rewrite import _Rewrite
from ampfix.families.apex.rewrite.tree import _last_line, _Tree
from ampfix.families.apex.rewrite.vocabulary import AmpUse, NotMechanical
from ampfix.syntax.bindings import Scope

# The functions of the `torch` module whose op is on CUDA autocast's float16 list (the runner's LOWER_PRECISION_FP,
# which the check path cannot import: it imports torch): tests/test_apex_registrations.py holds each to that list
# and to the installed torch. A name on the list that torch does not have as a function (`linear`) is not here.
TORCH_FLOAT16_FUNCTIONS = frozenset({
    "addbmm", "addmm", "addmv", "addr", "baddbmm", "bmm", "chain_matmul", "conv1d", "conv2d", "conv3d", "conv_tbc",
    "conv_transpose1d", "einsum", "matmul", "mm", "mv", "prelu",
})  # fmt: skip


def no_op_registrations(tree: _Tree, uses: list[AmpUse]) -> tuple[list[AmpUse], list[AmpUse]]:
    """The uses that are registrations of a torch function autocast runs in float16, and the others."""
    twins = [use for use in uses if use.full == rules.REGISTER_HALF and _float16_function(tree, use) is not None]
    return twins, [use for use in uses if not any(use is twin for twin in twins)]


def _float16_function(tree: _Tree, use: AmpUse) -> str | None:
    """`amp.register_half_function(torch, "einsum")`, a statement of its own: the function's name, else None."""
    call = use.ref.parent
    if not (isinstance(call, ast.Call) and call.func is use.ref.node and isinstance(tree.parent(call), ast.Expr)):
        return None
    return float16_function(call, use.ref.scope, tree.engine.resolve)


def float16_function(call: ast.Call, scope: Scope, resolve: Callable[[ast.expr, Scope], str | None]) -> str | None:
    """The torch function a `register_half_function(torch, "<name>")` call registers, where it is one autocast runs
    in float16 (`resolve`: the qualified name an argument spells), else None."""
    if len(call.args) != 2 or call.keywords:
        return None
    module, name = call.args
    if not (isinstance(name, ast.Constant) and isinstance(name.value, str) and name.value in TORCH_FLOAT16_FUNCTIONS
            and resolve(module, scope) == "torch"):
        return None
    return name.value


def remove_registrations(rw: _Rewrite, twins: list[AmpUse]) -> None:
    """Each registration's statement goes, or the `if` it is alone in (with others like it) where its test does
    nothing else; the message says why it has no twin to keep."""
    statements = {id(stmt): stmt for use in twins if isinstance(stmt := rw.tree.parent(use.ref.parent), ast.stmt)}
    removed: dict[int, ast.stmt] = {}
    for statement in statements.values():
        holder = rw.tree.parent(statement)
        if isinstance(holder, ast.If) and statement in holder.body and all(id(s) in statements for s in holder.body):
            if holder.orelse or not runs_nothing(holder.test):
                raise NotMechanical(f"the `if` on line {holder.lineno} holds only registrations that autocast makes "
                                    "no-ops, and its test or its `else` does more")
            removed[id(holder)] = holder
        else:
            removed[id(statement)] = statement
    for statement in removed.values():
        block, _ = rw.tree.block_of(statement)
        if all(id(s) in removed for s in block):
            raise NotMechanical(f"removing the registration on line {statement.lineno} (or the `if` holding only "
                                "registrations) would leave its block empty")
    for statement in sorted(removed.values(), key=lambda s: s.lineno):
        _whole_lines_only(rw, statement)
        rw.splices.append((*rw.tree.index.removal(statement.lineno, _last_line(statement)), ""))
    for use in twins:
        name, call = _float16_function(rw.tree, use), use.ref.parent
        assert call is not None  # a call, as `no_op_registrations` found it
        rw.messages[id(use.ref)] = (
            f"`{rw.tree.text(call)}` is removed: CUDA autocast runs torch.{name} in float16 already (it is "
            f"on autocast's float16 list), so under the autocast the rewrite adds the registration has nothing to do "
            "(apex also cast float64 inputs to float16, autocast leaves them)")

