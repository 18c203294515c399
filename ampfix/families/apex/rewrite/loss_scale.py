"""A `loss_scale` computed at run time (`args.loss_scale`, BERT's `"dynamic" if loss_scale == 0 else loss_scale` in
DeepLearningExamples): the person chose it on the command line, and apex read the value it got as it read a literal:
None (the opt level's default) and "dynamic" were its dynamic scale, anything else `float(value)`, a static scale
(`apex.amp.frontend.Properties`). The GradScaler is given the same choice, made at the same point on the same value:
its defaults where the value is None or "dynamic" (apex's dynamic scale: 2**16, doubled after 2000 clean steps,
halved on inf/NaN), else the static twin a literal gets (`opt_level._static_loss_scale`). That twin differs from
apex's static scale, so this is an unsafe fix, as for a literal. The value is written twice (the test and the
scale): only an expression with no effect of its own, on one line, is rewritten.

Also here: apex's dynamic loss scaler set through its private state right after initialize
(`amp._amp_state.loss_scalers[0]._loss_scale = v`, `._scale_seq_len = n`; `scaler_settings`), which the GradScaler
made in initialize's place is given as `init_scale=v, growth_interval=n` (`settings_beside_initialize`)."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

from ampfix.families.apex import rules
from ampfix.families.apex.rewrite.tree import _Tree
from ampfix.families.apex.rewrite.vocabulary import AmpUse, NotMechanical
from ampfix.families.apex.scaler_settings import Setting, Written, written_by

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


@dataclass(frozen=True)
class ScalerSettings:
    """apex's loss scaler settings written right after initialize, as the GradScaler's arguments."""

    keywords: str  # `init_scale=v, growth_interval=n`, in the code's order
    statements: tuple[ast.stmt, ...]  # what writes them (and binds a name to the scaler), removed
    uses: tuple[AmpUse, ...]  # the uses of `loss_scalers` that write them
    settings: tuple[Setting, ...]


def settings_beside_initialize(tree: _Tree, uses: list[AmpUse], init_statement: ast.stmt, plain: bool,
                               scaler_keywords: str) -> tuple[ScalerSettings | None, list[AmpUse]]:
    """The settings the uses of `loss_scalers` write (`scaler_settings.written_by`), or None where none writes; and
    the other uses (reads of the scale, `scaler_state`)."""
    found = [(use, written) for use in uses if (written := written_by(use.ref, tree.parent, tree.text)) is not None]
    others = [use for use in uses if not any(use is written for written, _ in found)]
    return (_mapped(tree, found, init_statement, plain, scaler_keywords) if found else None), others


def _mapped(tree: _Tree, found: list[tuple[AmpUse, Written]], init_statement: ast.stmt, plain: bool,
            scaler_keywords: str) -> ScalerSettings:
    """The settings written, as the GradScaler's arguments: given to it only where they are exactly the statements
    after initialize in its block (set before the first loss is scaled, the scale apex starts from: a GradScaler's
    `init_scale`; set later, they change a scale in use, which no argument does), initialize `plain` (under no `if`,
    no `enabled=`, no loop: where initialize did not run, apex had no loss scaler and the write raised), given no
    loss_scale of its own, each setting mapped (`rules.LOSS_SCALER_SETTINGS`) and set once."""
    if not plain:
        raise NotMechanical("apex's loss scaler is set through `_amp_state` beside an initialize under an `if`, an "
                            "`enabled=` or a loop (where it did not run, apex had no loss scaler and the write raised)")
    statements = sorted({id(s): s for _, w in found for s in w.statements}.values(),
                        key=lambda s: (s.lineno, s.col_offset))
    block, position = tree.block_of(init_statement)
    if block[position + 1:position + 1 + len(statements)] != statements:
        raise NotMechanical("apex's loss scaler is set through `_amp_state` elsewhere than in the statements directly "
                            "after initialize (set later, it changes a scale already in use, which a GradScaler's "
                            "arguments do not)")
    settings = sorted((s for _, w in found for s in w.settings), key=lambda s: s.line)
    attributes = [s.attribute for s in settings]
    unmapped = [a for a in attributes if a not in rules.LOSS_SCALER_SETTINGS]
    if unmapped:
        raise NotMechanical(f"apex's loss scaler's `{unmapped[0]}` is set through `_amp_state`: it has no GradScaler "
                            "twin")
    if len(set(attributes)) != len(attributes):
        raise NotMechanical("a setting of apex's loss scaler is written twice through `_amp_state`")
    if scaler_keywords:
        raise NotMechanical("initialize is given a loss_scale, and apex's loss scaler is set through `_amp_state` too")
    keywords = ", ".join(f"{rules.LOSS_SCALER_SETTINGS[s.attribute]}={s.value}" for s in settings)
    return ScalerSettings(keywords, tuple(statements), tuple(use for use, _ in found), tuple(settings))
