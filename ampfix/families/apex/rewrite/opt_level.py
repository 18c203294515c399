"""The precondition stage: what initialize's opt_level (and the keywords that belong to O2/O3) means for the
rewrite: a literal O1, an argparse option or a parameter whose default is O1 (rewritten, the note saying what a run
with O2/O3 loses), anything else under --unsafe-fixes only."""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace

from ampfix.families.apex import rules
from ampfix.families.apex.rewrite.tree import _Tree, _name_stores
from ampfix.families.apex.rewrite.vocabulary import AmpUse, NotMechanical, _FUNCTIONS


@dataclass(frozen=True)
class _OptLevel:
    """What initialize's opt_level (and the keywords that belong to O2/O3) means for the rewrite."""

    level: str  # for the message: "O1", "O2", or the expression's text
    note: str  # what the finding adds: what O2/O3 users lose ("" for O1)
    unsafe: bool  # the rewrite changes the numerics where the level is not O1: --unsafe-fixes only
    scaler_keywords: str = ""  # what the GradScaler is given beyond its device (a static loss scale's twin)


def _opt_level(tree: _Tree, call: ast.Call) -> _OptLevel:
    """The level (`_level`), and a static `loss_scale`: its nearest native twin under --unsafe-fixes."""
    return _static_loss_scale(_level(tree, call), call, tree)


def _static_loss_scale(opt_level: _OptLevel, call: ast.Call, tree: _Tree) -> _OptLevel:
    """`loss_scale=128.0` (a positive number literal): apex multiplied every loss by it, never changed it and
    stepped on whatever the gradients held. The nearest GradScaler starts at that scale and never grows
    (`growth_interval` the largest its int32 tracker holds), under --unsafe-fixes, the note saying what differs: on
    inf/NaN gradients it skips the step and halves the scale, which apex's static scale never did. An argparse
    option whose default is None or "dynamic" (apex's ImageNet example's `loss_scale=args.loss_scale`): the dynamic
    scale its default runs, under --unsafe-fixes (a run that gives a number got apex's static scale). Any other
    value but "dynamic" is not rewritten."""
    value = next((k.value for k in call.keywords if k.arg == "loss_scale"), None)
    if value is None or isinstance(value, ast.Constant) and value.value == rules.DYNAMIC_LOSS_SCALE:
        return opt_level
    option = _argparse_option(tree, value, defaults=(str, type(None)))
    if option is not None and option[1] in (None, rules.DYNAMIC_LOSS_SCALE):
        note = (f"loss_scale `{tree.text(value)}` is the option {option[0]} (default {option[1]!r}): "
                f"{rules.OPTION_LOSS_SCALE}")
        return replace(opt_level, note="; ".join(n for n in (opt_level.note, note) if n), unsafe=True)
    number = value.value if isinstance(value, ast.Constant) else None
    if not (isinstance(number, (int, float)) and not isinstance(number, bool) and number > 0):
        raise NotMechanical(f'loss_scale is neither "{rules.DYNAMIC_LOSS_SCALE}" nor a positive number literal')
    note = f"loss_scale {ast.unparse(value)}: {rules.STATIC_LOSS_SCALE}"
    keywords = f"init_scale={float(number)!r}, growth_interval={rules.NEVER_GROWS}"
    return replace(opt_level, note="; ".join(n for n in (opt_level.note, note) if n), unsafe=True,
                   scaler_keywords=keywords)


def _level(tree: _Tree, call: ast.Call) -> _OptLevel:
    """A literal O1 (or none) as before; an argparse option in the module whose default is O1: rewritten, the note
    saying what a run with O2/O3 loses; a literal O2/O3, an option with another default, or a value that cannot be
    read: rewritten under --unsafe-fixes only, with the note."""
    value = next((k.value for k in call.keywords if k.arg == "opt_level"), None)
    if value is None and len(call.args) > 3:
        raise NotMechanical("opt_level is passed by position")
    extras = [rules.INITIALIZE_KEYWORDS[k.arg] for k in call.keywords if k.arg in rules.UNSAFE_KEYWORDS]
    if value is None or (isinstance(value, ast.Constant) and value.value == rules.NATIVE_OPT_LEVEL):
        if extras:
            raise NotMechanical("keep_batchnorm_fp32/master_weights are given with O1")
        return _OptLevel(rules.NATIVE_OPT_LEVEL, "", False)
    if isinstance(value, ast.Constant):
        if value.value not in rules.UNSAFE_OPT_LEVELS:
            raise NotMechanical(f"opt_level is {value.value!r} (O1 is rewritten; O2 and O3 under --unsafe-fixes)")
        return _unsafe_level(tree, value.value, [rules.UNSAFE_OPT_LEVELS[value.value], *extras])
    text = tree.text(value)
    option = _argparse_option(tree, value) or _parameter_default(tree, value)
    declared = tree.engine.options.apex_opt_level
    if declared is not None:
        return _declared_level(text, declared, call, option)
    if option is None:
        return _unsafe_level(tree, text, [f"opt_level `{text}` cannot be read here: {rules.OPT_LEVEL_LOSS}",
                                          rules.O0_LOSS, *extras, rules.DECLARE_THE_LEVEL])
    flag, default, choices = option
    kind = "option" if flag.startswith("-") else "parameter"
    said = f"opt_level `{text}` is the {kind} {flag} (default {default!r}" + (
        f", choices {', '.join(choices)})" if choices else ")")
    o0 = [rules.O0_LOSS] if not choices or "O0" in choices else []  # any string may be given where none are listed
    if default == rules.NATIVE_OPT_LEVEL and not extras:
        return _OptLevel(text, "; ".join([f"{said}; where a run sets O2/O3: {rules.OPT_LEVEL_LOSS}", *o0]), False)
    return _unsafe_level(tree, text, [f"{said}: {rules.OPT_LEVEL_LOSS}", *o0, *extras, rules.DECLARE_THE_LEVEL])


def _declared_level(text: str, declared: str, call: ast.Call,
                    option: tuple[str, str | None, list[str]] | None) -> _OptLevel:
    """A level the code does not say (not a literal), decided by the project's declaration: O1 is rewritten as O1
    (a safe fix: the person said which level runs), O2 under --unsafe-fixes with what changes. An option whose
    choices leave the declared level out cannot run it: not rewritten. Under a declared O1, the O2 keywords
    (`keep_batchnorm_fp32`, `master_weights`) must be None, the only value apex's O1 accepted."""
    if option is not None and option[2] and declared not in option[2]:
        raise NotMechanical(f"opt_level `{text}` is the option {option[0]}, whose choices ({', '.join(option[2])}) do "
                            f"not hold the declared {declared} (--apex-opt-level)")
    said = f"opt_level `{text}`" + (f" (the {'option' if option[0].startswith('-') else 'parameter'} {option[0]}, "
                                     f"default {option[1]!r})" if option is not None else "")
    extras = [k for k in call.keywords if k.arg in rules.UNSAFE_KEYWORDS]
    if declared == rules.NATIVE_OPT_LEVEL:
        given = [k.arg for k in extras if not (isinstance(k.value, ast.Constant) and k.value.value is None)]
        return _OptLevel(text, f"{said}: {rules.DECLARED_O1}" + (
            f"; {', '.join(map(str, given))} must be None under O1 (apex refused any other value), so nothing is "
            "mapped" if given else ""), False)
    return _OptLevel(text, "; ".join([f"{said}: {rules.DECLARED_O2}",
                                      *(rules.INITIALIZE_KEYWORDS[str(k.arg)] for k in extras)]), True)


def _several_losses(opt_level: _OptLevel, init_call: ast.Call, scale_losses: list[AmpUse]) -> _OptLevel:
    """`num_losses=N` and `scale_loss(..., loss_id=i)`: one GradScaler for every loss (what PyTorch recommends:
    scale() each loss, one step per optimizer, one update per iteration), under --unsafe-fixes, the note saying
    what changes: apex kept a scale per loss, one scale is bounded by the loss whose gradients overflow first."""
    calls = [use.ref.parent for use in scale_losses if isinstance(use.ref.parent, ast.Call)]
    if not (any(k.arg == "num_losses" for k in init_call.keywords)
            or any(len(c.args) > 2 or any(k.arg == "loss_id" for k in c.keywords) for c in calls)):
        return opt_level
    notes = [opt_level.note] if opt_level.note else []
    return replace(opt_level, note="; ".join([*notes, rules.SEVERAL_LOSSES]), unsafe=True)


def _unsafe_level(tree: _Tree, level: str, notes: list[str]) -> _OptLevel:
    return _OptLevel(level, "; ".join(notes), True)


def _parameter_default(tree: _Tree, value: ast.expr) -> tuple[str, str, list[str]] | None:
    """`name`, a parameter of initialize's function with a literal string default (flair's `amp_opt_level="O1"`)
    that nothing in the function rebinds: its name, its default, no choices; else None."""
    function = tree.function_of(value)
    if not (isinstance(value, ast.Name) and isinstance(function, _FUNCTIONS)):
        return None
    arguments = function.args
    positional = [*arguments.posonlyargs, *arguments.args]
    defaults = dict(zip([a.arg for a in positional[len(positional) - len(arguments.defaults):]], arguments.defaults))
    defaults.update((a.arg, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None)
    default = defaults.get(value.id)
    if not (isinstance(default, ast.Constant) and isinstance(default.value, str)) or _name_stores(function, value.id):
        return None
    return value.id, default.value, []


def _argparse_option(tree: _Tree, value: ast.expr,
                     defaults: tuple[type, ...] = (str,)) -> tuple[str, str | None, list[str]] | None:
    """`X.name` read from the one `add_argument("--name", default="O1", choices=[...])` of the module whose
    destination is `name`: the flag, its literal default (of one of `defaults`' types), its literal choices; else
    None."""
    if not isinstance(value, ast.Attribute):
        return None
    found = []
    for node in ast.walk(tree.engine.tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        keywords = {k.arg: k.value for k in node.keywords if k.arg is not None}
        longs = [f for f in flags if f.startswith("--")]
        dest = keywords.get("dest")
        name = dest.value if isinstance(dest, ast.Constant) else (longs[0][2:].replace("-", "_") if longs else None)
        if name == value.attr:
            found.append((longs[0] if longs else name, keywords))
    if len(found) != 1:
        return None
    flag, keywords = found[0]
    default = keywords.get("default")
    choices = keywords.get("choices")
    if not (isinstance(default, ast.Constant) and isinstance(default.value, defaults)) \
            and not (default is None and type(None) in defaults):
        return None
    listed = [c.value for c in choices.elts if isinstance(c, ast.Constant) and isinstance(c.value, str)] \
        if isinstance(choices, (ast.List, ast.Tuple)) else []
    if choices is not None and (len(listed) != len(getattr(choices, "elts", [])) or not listed):
        return None
    return str(flag), default.value if isinstance(default, ast.Constant) and isinstance(default.value, str) else None, \
        listed
