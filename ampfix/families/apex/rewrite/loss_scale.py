"""A `loss_scale` computed at run time (`args.loss_scale`, BERT's `"dynamic" if loss_scale == 0 else loss_scale` in
DeepLearningExamples): the person chose it on the command line, and apex read the value it got as it read a literal:
None (the opt level's default) and "dynamic" were its dynamic scale, anything else `float(value)`, a static scale
(`apex.amp.frontend.Properties`). The GradScaler is given the same choice, made at the same point on the same value:
its defaults where the value is None or "dynamic" (apex's dynamic scale: 2**16, doubled after 2000 clean steps,
halved on inf/NaN), else the static twin a literal gets (`opt_level._static_loss_scale`). That twin differs from
apex's static scale, so this is an unsafe fix, as for a literal. The value is written twice (the test and the
scale): only an expression with no effect of its own, on one line, is rewritten."""

from __future__ import annotations

import ast
from collections.abc import Callable

from ampfix.families.apex import rules
from ampfix.families.apex.rewrite.tree import _Tree
from ampfix.families.apex.rewrite.vocabulary import NotMechanical

# What the value may be made of: names, attributes, constants, comparisons and choices, nothing that runs code.
_PURE = (ast.Name, ast.Attribute, ast.Constant, ast.Compare, ast.BoolOp, ast.UnaryOp, ast.IfExp, ast.Load, ast.cmpop,
         ast.boolop, ast.unaryop, ast.Tuple, ast.List)
# The values apex read as its dynamic scale (None: the default of O1, O2 and O3).
_DYNAMIC = f'(None, "{rules.DYNAMIC_LOSS_SCALE}")'


def computed_loss_scale(value: ast.expr, text_of: Callable[[ast.AST], str]) -> tuple[str, str]:
    """The GradScaler's keywords for the computed `loss_scale=<value>` and the note saying what they do, or
    NotMechanical. `"dynamic" if T else V` is read as T, else V's value (the two branches apex would have read)."""
    text = text_of(value)
    if not runs_nothing(value) or "\n" in text:
        raise NotMechanical(f'loss_scale is neither "{rules.DYNAMIC_LOSS_SCALE}", a positive number literal, nor a '
                            "value read at run time with no effect of its own, on one line (a name, an attribute, a "
                            "comparison or a choice of those)")
    choice = value if isinstance(value, ast.IfExp) and isinstance(value.body, ast.Constant) \
        and value.body.value == rules.DYNAMIC_LOSS_SCALE else None  # `"dynamic" if T else V`
    read = choice.orelse if choice is not None else value
    scale = text_of(read)
    test = f"{_operand(choice.test, text_of)} or " if choice is not None else ""
    scale_operand = scale if isinstance(read, (ast.Name, ast.Attribute, ast.Constant)) else f"({scale})"
    keywords = (f'**({{}} if {test}{scale_operand} in {_DYNAMIC} else {{"init_scale": float({scale}), '
                f'"growth_interval": {rules.NEVER_GROWS}}})')
    where = f"`{text_of(choice.test)}` or " if choice is not None else ""
    note = (f"loss_scale `{text}` is read at run time, as apex read it: where {where}`{scale}` is None or "
            f'"{rules.DYNAMIC_LOSS_SCALE}" the GradScaler keeps its defaults (apex\'s dynamic scale), else it is a '
            f"static scale: {rules.STATIC_LOSS_SCALE}")
    return keywords, note


def runs_nothing(value: ast.expr) -> bool:
    """Is `value` made of names, attributes, constants, comparisons and choices only: evaluated again, or not at all,
    it changes nothing?"""
    return all(isinstance(node, _PURE) for node in ast.walk(value))


def _operand(node: ast.expr, text_of: Callable[[ast.AST], str]) -> str:
    """The test, as an operand of `or` (a choice or an `or`/`and` of its own in parentheses)."""
    text = text_of(node)
    return text if isinstance(node, (ast.Name, ast.Attribute, ast.Constant, ast.Compare, ast.UnaryOp)) else f"({text})"


def initialize_per_loss_scale(tree: _Tree, calls: list[ast.Call]) -> str | None:
    """Two initialize calls that are the two branches of one `if` (BERT's run_squad.py: `if args.loss_scale == 0:`),
    each the branch's one statement, binding the same targets, alike but for loss_scale, one of them "dynamic": why
    they are not rewritten, naming the one call that says the same (a loss_scale read at run time, above); else None."""
    if len(calls) != 2:
        return None
    statements = [tree.parent(call) for call in calls]
    branch = tree.parent(statements[0])
    if not (isinstance(branch, ast.If) and branch.body == statements[:1] and branch.orelse == statements[1:]
            and all(isinstance(s, ast.Assign) for s in statements)):
        return None
    first, second = (s for s in statements if isinstance(s, ast.Assign))
    scales = [next((k.value for k in call.keywords if k.arg == "loss_scale"), None) for call in calls]
    dynamic = [isinstance(s, ast.Constant) and s.value == rules.DYNAMIC_LOSS_SCALE for s in scales]
    if not (ast.dump(ast.Tuple(first.targets)) == ast.dump(ast.Tuple(second.targets)) and sum(dynamic) == 1
            and None not in scales and _without_loss_scale(calls[0]) == _without_loss_scale(calls[1])):
        return None
    other_scale = scales[dynamic.index(False)]
    assert other_scale is not None  # both calls give loss_scale (above)
    test, other = tree.text(branch.test), tree.text(other_scale)
    merged = f'"{rules.DYNAMIC_LOSS_SCALE}" if {test} else {other}' if dynamic[0] else \
        f'{other} if {test} else "{rules.DYNAMIC_LOSS_SCALE}"'
    return (f"initialize is called in both branches of `if {test}:` on line {branch.lineno}, alike but for loss_scale: "
            f"they are one call given `loss_scale={merged}` (not merged here: written so by hand, that call's "
            "loss_scale is read at run time, under --unsafe-fixes)")


def _without_loss_scale(call: ast.Call) -> str:
    return ast.dump(ast.Call(call.func, call.args, [k for k in call.keywords if k.arg != "loss_scale"]))
