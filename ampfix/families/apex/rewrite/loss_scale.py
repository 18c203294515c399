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
from ampfix.families.apex.rewrite.vocabulary import NotMechanical

# What the value may be made of: names, attributes, constants, comparisons and choices, nothing that runs code.
_PURE = (ast.Name, ast.Attribute, ast.Constant, ast.Compare, ast.BoolOp, ast.UnaryOp, ast.IfExp, ast.Load, ast.cmpop,
         ast.boolop, ast.unaryop)
# The values apex read as its dynamic scale (None: the default of O1, O2 and O3).
_DYNAMIC = f'(None, "{rules.DYNAMIC_LOSS_SCALE}")'


def computed_loss_scale(value: ast.expr, text_of: Callable[[ast.AST], str]) -> tuple[str, str]:
    """The GradScaler's keywords for the computed `loss_scale=<value>` and the note saying what they do, or
    NotMechanical. `"dynamic" if T else V` is read as T, else V's value (the two branches apex would have read)."""
    text = text_of(value)
    if not all(isinstance(node, _PURE) for node in ast.walk(value)) or "\n" in text:
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


def _operand(node: ast.expr, text_of: Callable[[ast.AST], str]) -> str:
    """The test, as an operand of `or` (a choice or an `or`/`and` of its own in parentheses)."""
    text = text_of(node)
    return text if isinstance(node, (ast.Name, ast.Attribute, ast.Constant, ast.Compare, ast.UnaryOp)) else f"({text})"
