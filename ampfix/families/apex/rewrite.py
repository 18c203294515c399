"""The mechanical apex.amp -> native torch.amp rewrite, planned only where the code proves it right.

The shape (a single training function, as in yolov5's or transformers' scripts, or a script's top level):

    from apex import amp                                  (alone, at module level, not optional)
    def train(...):
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")    (F's own body)
        for ...:
            out = model(x)                                (the statements before the scale_loss
            loss = criterion(out, y)                       in its block: the forward pass and loss)
            with amp.scale_loss(loss, optimizer) as scaled:
                scaled.backward()
            torch.nn.utils.clip_grad_norm_(amp.master_params(optimizer), n)    (directly before a step)
            optimizer.step()
        torch.save(amp.state_dict(), path)

becomes a `scaler = torch.amp.GradScaler(<device>)` where initialize was (the names rebound when the left side
differs), the statements before each scale_loss in its block under `torch.autocast(<device>, dtype=torch.float16)`,
`scaler.scale(loss).backward()`, `scaler.unscale_(optimizer)` before clipping over the optimizer's param_groups,
`scaler.step(optimizer)` and `scaler.update()` for every step, the scaler's state_dict for apex's.

Every condition is checked on the code; when one fails, nothing is rewritten and `ampfix.families.apex.detect` reports
each use. Statements are rebuilt as text (`ampfix.core.plan.Splice`): no comment may sit on a line that is
rebuilt, and no string may span the lines that are re-indented.
"""

from __future__ import annotations

import ast
import tokenize
from dataclasses import dataclass, field

from ampfix.core.plan import Edit, Splice, free_name
from ampfix.families.apex.lookup import rule_of
from ampfix.families.apex.module import ApexModule as Analysis
from ampfix.families.apex.optional import OptionalImport, flag_reason, is_availability_test
from ampfix.syntax.bindings import ChainRef
from ampfix.core.locations import first_line, tokens
from ampfix.core.rules import Target
from ampfix.families.apex import rules

SCALER = "scaler"
# initialize keywords the rewrite keeps the meaning of: `enabled` is kept, the others are O1's defaults or logging.
_INITIALIZE_KEYWORDS = frozenset({"opt_level", "enabled", "verbosity", "loss_scale"})
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp, ast.SetComp,
           ast.DictComp, ast.GeneratorExp)


@dataclass(frozen=True)
class AmpUse:
    ref: ChainRef
    full: str


class NotMechanical(Exception):
    """A condition of the rewrite fails: every use is reported instead."""


@dataclass
class _Rewrite:
    analysis: Analysis
    parents: dict[int, ast.AST] = field(default_factory=dict)
    splices: list[tuple[int, int, str]] = field(default_factory=list)
    region_splices: list[tuple[int, int, str]] = field(default_factory=list)  # the forward passes re-indented
    messages: dict[int, str] = field(default_factory=dict)  # id(ref) -> what became of the use


def plan_rewrite(analysis: Analysis, uses: list[AmpUse], import_node: ast.ImportFrom,
                 optional: OptionalImport | None = None) -> dict[int, str] | str:
    """Plan the rewrite of every use of apex.amp in the module, or none of them: the message for each use
    by id() of its ChainRef (and, for the optional import, of the import), or why the code is not the
    mechanical shape."""
    rewrite = _Rewrite(analysis)
    try:
        _plan(rewrite, uses, import_node, optional)
    except NotMechanical as reason:
        return str(reason)
    for start, end, text in rewrite.splices:
        line = analysis.index.text.count("\n", 0, start) + 1
        analysis.add_edit(_edit(start, end, line, text))
    return rewrite.messages


def _edit(start: int, end: int, line: int, text: str) -> Edit:
    return Edit(start, end, line, "Splice", "", Splice(text))


def _plan(rw: _Rewrite, uses: list[AmpUse], import_node: ast.ImportFrom, optional: OptionalImport | None) -> None:
    analysis = rw.analysis
    index, lines = analysis.index, analysis.index.lines
    tree = analysis.tree
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            rw.parents[id(child)] = node
    by_rule: dict[str, list[AmpUse]] = {}
    for use in uses:
        by_rule.setdefault(_rule_code(use.full), []).append(use)
    inits = by_rule.pop(rules.INITIALIZE.code, [])
    scale_losses = by_rule.pop(rules.SCALE_LOSS.code, [])
    clips = by_rule.pop(rules.MASTER_PARAMS.code, [])
    states = by_rule.pop(rules.STATE.code, [])
    availability = by_rule.pop(rules.OPTIONAL_IMPORT.code, []) if optional is not None else []
    if not inits:
        raise NotMechanical(f"no `{rules.INITIALIZE.title}` in this module: mixed precision is switched on "
                            "elsewhere, where the forward passes to put under autocast and apex's one process-wide "
                            "loss scaler are, so the uses here cannot be rewritten alone (a wrapper class such as "
                            "timm's ApexScaler becomes a class holding a torch.amp.GradScaler by hand)")
    if len(inits) > 1 or not scale_losses:
        raise NotMechanical("not one initialize call with at least one scale_loss")
    if by_rule:
        others = sorted({use.full for rule_uses in by_rule.values() for use in rule_uses})
        raise NotMechanical(f"apex.amp is used otherwise too ({', '.join(others)})")
    init_use = inits[0]
    amp = init_use.ref.parts[0]  # how the file spells apex.amp, for messages
    init_call = _call_of(init_use)
    init = rw.parents.get(id(init_call))
    if not (isinstance(init, ast.Assign) and init.value is init_call and len(init.targets) == 1):
        raise NotMechanical("the initialize call is not a plain assignment")
    model, optimizer, enabled = _initialize_arguments(init_call)
    # `if flag: model, optimizer = amp.initialize(...)`: the flag says whether apex imported, so it goes to
    # `enabled=` of the scaler and of autocast (True once the optional import is gone)
    guard = rw.parents.get(id(init))
    flags: list[str] = []  # the names of the flags that guard apex's calls
    if optional is not None and isinstance(guard, ast.If):
        if guard.body != [init] or guard.orelse:
            raise NotMechanical("initialize is not alone under its `if`, or the `if` has an `else`")
        _availability_guard(guard, optional, init_use.ref.scope, "initialize")
        if enabled is not None:
            raise NotMechanical("initialize under a flag has an `enabled=` of its own")
        enabled, init_statement = guard.test, guard
        flags.append(guard.test.id)  # type: ignore[attr-defined]
    else:
        init_statement = init
    function = rw.parents.get(id(init_statement))  # a function, or the module of a script
    if not isinstance(function, (*_FUNCTIONS, ast.Module)) or init_statement not in function.body:
        raise NotMechanical("initialize is not a statement of its function's own body (a conditional scaler would be "
                            "undefined elsewhere)")
    where = f"`{function.name}`" if isinstance(function, _FUNCTIONS) else "the script's top level"
    target = init.targets[0]
    if not (isinstance(target, (ast.Tuple, ast.List)) and len(target.elts) == 2
            and all(isinstance(e, ast.Name) for e in target.elts)):
        raise NotMechanical("the left side of initialize is not two names (model, optimizer)")
    model_name, opt_name = (e.id for e in target.elts)  # type: ignore[attr-defined]
    for use in availability:  # `amp is not None` -> True: torch.amp, which replaces apex.amp, is always there
        if not (use.ref.role == "none_test" and use.ref.parent is not None and use.ref.node is use.ref.parent.left
                and is_availability_test(use.ref.parent, optional, use.ref.scope)):
            raise NotMechanical(f"`{amp}` is used otherwise than in `{amp} is not None`")
        start, end = index.span(use.ref.parent)
        rw.splices.append((start, end, "True"))
        rw.messages[id(use.ref)] = (f"`{amp} is not None` -> `True`: it said whether apex imported, and torch.amp, "
                                    "which takes apex.amp's place, is always there")
    for use in [u for u in uses if not any(u is a for a in availability)]:
        if _function_of(rw, use.ref.node, tree) is not function or use.ref.node.lineno < init.lineno:
            raise NotMechanical("an apex.amp use lies outside the function of initialize, or before it")
    scope = init_use.ref.scope
    if scope.lookup(SCALER)[1]:
        raise NotMechanical("the name `scaler` is already bound")
    torch_bindings = scope.lookup("torch")[1]
    if not all(b.kind == "import" and b.qname == "torch" for b in torch_bindings):
        raise NotMechanical("`torch` is bound to something else")
    if torch_bindings and scope.lookup("torch")[0] is scope and scope.kind != "module" \
            and not all(b.line < init.lineno for b in torch_bindings):
        raise NotMechanical("the function imports torch after initialize")
    for binding in scope.bindings.get(opt_name, []):
        if binding.line > init.lineno:
            raise NotMechanical("the optimizer is rebound after initialize")
    comments = _comment_lines(index.text)
    device, dtype = _device_and_dtype(analysis)
    ending = lines[init.lineno - 1]
    newline = ending[len(ending.rstrip("\r\n")):] or "\n"  # the file's own line ending (CRLF, CR, LF)

    # initialize -> the scaler (and the names rebound when the left side differs)
    _whole_lines_only(rw, init_statement, comments)
    indent = _indent(lines, init_statement.lineno)
    scaler_args = device + (f", enabled={_text(rw, enabled)}" if enabled is not None else "")
    created = f"{indent}{SCALER} = torch.amp.GradScaler({scaler_args}){newline}"
    if (model_name, opt_name) != (model.id, optimizer.id):
        created = f"{indent}{_text(rw, target)} = {model.id}, {optimizer.id}{newline}" + created
    rw.splices.append((index.line_start(init_statement.lineno), index.line_end(init_statement.end_lineno), created))

    # every optimizer.step() -> scaler.step(optimizer); scaler.update()
    steps = [node for node in ast.walk(function) if isinstance(node, ast.Expr) and _is_step(node.value, opt_name)]
    if not steps or any(s.lineno < init.lineno or _function_of(rw, s, tree) is not function for s in steps) \
            or _other_steps(function, opt_name, steps):
        raise NotMechanical("no plain `optimizer.step()` statement, or a step used otherwise (a closure, a value)")
    for step in steps:
        start, end = index.span(step.value)
        rw.splices.append((start, end, f"{SCALER}.step({opt_name})"))
        _ends_its_line(rw, step)
        at = index.line_end(step.end_lineno)
        rw.splices.append((at, at, f"{_indent(lines, step.lineno)}{SCALER}.update(){newline}"))

    # scale_loss -> scaler.scale(loss).backward(...), the statements before it under autocast
    regions: list[tuple[int, int]] = []
    blocks: set[int] = set()
    backward_statements: list[ast.stmt] = []
    autocast = f"torch.autocast({device}, dtype={dtype}" + (
        f", enabled={_text(rw, enabled)})" if enabled is not None else ")")
    for use in scale_losses:
        call = _call_of(use)
        with_node = rw.parents.get(id(rw.parents.get(id(call))))  # the call's withitem's With
        loss = _scale_loss_arguments(call, with_node, opt_name)
        backward = with_node.body[0].value  # type: ignore[union-attr]
        # `if flag: with amp.scale_loss(...) ... else: loss.backward()`: both branches become the scaler's (a
        # disabled scaler's scale() returns the loss as it is)
        guard = rw.parents.get(id(with_node))
        guarded = optional is not None and isinstance(guard, ast.If) and isinstance(guard.test, ast.Name) \
            and guard.body == [with_node]  # else an `if` of its own (`if i % k == 0:`), a block like any other
        if guarded:
            _availability_guard(guard, optional, use.ref.scope, "a scale_loss")
            _plain_backward_else(guard, with_node, loss, backward)
            flags.append(guard.test.id)
        statement = guard if guarded else with_node
        backward_statements.append(statement)
        block, position = _block_of(rw, statement)
        # the forward pass: the statements before it in its block (after initialize, when that is in the block too)
        begin = block.index(init_statement) + 1 if init_statement in block else 0
        if id(block) in blocks or position <= begin:
            raise NotMechanical("two scale_loss in one block, or no forward pass before a scale_loss in its block")
        blocks.add(id(block))
        _whole_lines_only(rw, statement, comments)
        # `with amp.scale_loss(LOSS, opt) as s:\n s.backward(ARGS)` -> `scaler.scale(LOSS).backward(ARGS)`: the
        # loss and the arguments stay where they are (another rule may edit inside them)
        loss_start, loss_end = index.span(loss)
        rw.splices.append((index.line_start(statement.lineno), loss_start,
                           f"{_indent(lines, statement.lineno)}{SCALER}.scale("))
        rw.splices.append((loss_end, index.span(backward.func)[1], ").backward"))
        if guarded:  # the `else:` and its `loss.backward()` go
            rw.splices.append((index.span(with_node)[1], index.line_end(statement.end_lineno), newline))
        first, last = first_line(block[begin]), block[position - 1].end_lineno
        _reindentable(rw, block[begin:position], first, last)
        # the forward pass under autocast: a header line, and four spaces at the start of each line
        at = index.line_start(first)
        rw.region_splices.append((at, at, f"{_indent(lines, first)}with {autocast}:{newline}"))
        for number in range(first, last + 1):
            if lines[number - 1].strip():
                at = index.line_start(number)
                rw.region_splices.append((at, at, "    "))
        regions.append((first, last))
        where_ = f"line {first}" if first == last else f"lines {first}-{last}"
        before = (f"`if {_text(rw, guard.test)}: with {amp}.scale_loss(...)` and its `else: ....backward(...)` -> "
                  f"`{SCALER}.scale(...).backward(...)` (where the scaler is disabled, scale() returns the loss as it "
                  "is)" if guarded else f"`{amp}.scale_loss(...)` -> `{SCALER}.scale(...).backward(...)`")
        rw.messages[id(use.ref)] = f"{before}; {where_} before it run under `{autocast}`"

    # clipping over master_params directly before a step -> unscale_, then clipping over param_groups
    step_lines = {s.lineno for s in steps}
    unscaled_steps: set[int] = set()
    for use in clips:
        call = _call_of(use)
        if not (len(call.args) == 1 and not call.keywords and isinstance(call.args[0], ast.Name)
                and call.args[0].id == opt_name):
            raise NotMechanical("master_params is not given the optimizer alone")
        clip = rw.parents.get(id(call))
        statement = rw.parents.get(id(clip))
        if not (isinstance(clip, ast.Call) and clip.args and clip.args[0] is call
                and isinstance(statement, (ast.Expr, ast.Assign)) and statement.value is clip):
            raise NotMechanical("master_params is not the first argument of a clipping statement")
        block, position = _block_of(rw, statement)
        following = block[position + 1] if position + 1 < len(block) else None
        if following is None or following.lineno not in step_lines:
            raise NotMechanical("clipping is not directly before the optimizer step (inside micro-steps it would clip "
                                "partial, scaled gradients)")
        _starts_its_line(rw, statement)
        start, end = index.span(call)
        params = f'(p for group in {opt_name}.param_groups for p in group["params"])'
        rw.splices.append((start, end, params))
        at = index.line_start(statement.lineno)
        rw.splices.append((at, at, f"{_indent(lines, statement.lineno)}{SCALER}.unscale_({opt_name}){newline}"))
        rw.messages[id(use.ref)] = (f"`{amp}.master_params({opt_name})` -> `{SCALER}.unscale_({opt_name})`, then "
                                    "clipping over the optimizer's param_groups (what master_params iterated)")
        unscaled_steps.add(following.lineno)

    # Gradients read between a backward and its step (clipping over any parameters, a `.grad`): apex had
    # unscaled them when scale_loss exited, the scaler keeps them scaled until its step. In the step's own
    # block, `unscale_` goes before the first statement that reads them (once per step, as the scaler
    # allows); read in the micro-steps of an accumulation, they cannot be unscaled yet.
    unscaled_at: list[int] = []
    for step in steps:
        if step.lineno in unscaled_steps:
            continue
        block, position = _block_of(rw, step)
        begin = next((block.index(s) + 1 for s in backward_statements if s in block), 0)
        readers = [s for s in block[begin:position] if _reads_gradients(rw, s, scope)]
        if readers:
            first = readers[0]
            _starts_its_line(rw, first)
            at = index.line_start(first_line(first))
            rw.splices.append((at, at, f"{_indent(lines, first.lineno)}{SCALER}.unscale_({opt_name}){newline}"))
            unscaled_at.append(first.lineno)
    for statement in backward_statements:
        block, position = _block_of(rw, statement)
        if any(step in block for step in steps):
            continue  # the step's own block: above
        for later in block[position + 1:]:
            if not any(isinstance(node, ast.Expr) and node in steps for node in ast.walk(later)) \
                    and _reads_gradients(rw, later, scope):
                raise NotMechanical(f"gradients are read on line {later.lineno}, between a backward and the step of "
                                    "an accumulation, where a scaler keeps them scaled (apex had unscaled them)")

    # amp.state_dict() / amp.load_state_dict(...) -> the scaler's; what is loaded goes through a helper that
    # also reads apex's format
    helper = None
    for use in states:
        if use.ref.role != "call" or len(use.ref.parts) != 2:
            raise NotMechanical("state_dict/load_state_dict is not called directly")
        start, end = index.span(use.ref.node)
        method = use.ref.parts[1]
        if method == "state_dict":
            rw.splices.append((start, end, f"{SCALER}.{method}"))
            rw.messages[id(use.ref)] = (
                f"`{amp}.state_dict` -> `{SCALER}.state_dict`: checkpoints now hold GradScaler's format "
                "{'scale', 'growth_factor', 'backoff_factor', 'growth_interval', '_growth_tracker'}, not apex's "
                "{'loss_scaler0': {'loss_scale', 'unskipped'}}")
            continue
        helper = helper or _scaler_state_helper(rw, function, init_statement, use.ref.scope, newline)
        call = _call_of(use)
        if len(call.args) != 1 or call.keywords or isinstance(call.args[0], ast.Starred):
            raise NotMechanical("load_state_dict is not given one state")
        state_start, state_end = index.span(call.args[0])
        around = index.text[end:state_start] + index.text[state_end:index.span(call)[1]]
        if "#" in around:
            raise NotMechanical("a comment sits inside the parentheses of load_state_dict")
        rw.splices.append((start, state_start, f"{SCALER}.load_state_dict({helper[0]}("))
        rw.splices.append((state_end, index.span(call)[1], "))"))
        rw.messages[id(use.ref)] = (
            f"`{amp}.load_state_dict(state)` -> `{SCALER}.load_state_dict({helper[0]}(state))`: `{helper[0]}` "
            f"({'added at module level' if helper[1] else 'already in the module'}) also reads the format "
            "apex.amp.state_dict() wrote ({'loss_scaler0': {'loss_scale', 'unskipped'}}) into GradScaler's, with "
            "apex's dynamic scaling: old apex checkpoints load")

    # evaluation after initialize in the function: its `with torch.no_grad():` blocks get the autocast too
    evaluation = _evaluation_blocks(rw, function, init_statement, regions, init_use.ref.scope)
    for block_node in evaluation:
        at = index.span(block_node.items[-1].optional_vars or block_node.items[-1].context_expr)[1]
        rw.splices.append((at, at, f", {autocast}"))

    # the import: gone, or `import torch` where the file has none
    replacement = "" if torch_bindings else f"import torch{newline}"
    if optional is None:
        _whole_lines_only(rw, import_node, comments)
        removed: ast.stmt = import_node
    else:  # the whole `try`; the flags it sets True stay, and its comments as lines of their own
        removed = optional.statement
        _ends_its_line(rw, removed)
        indent = _indent(lines, removed.lineno)
        kept_lines = {flag.lineno for flag in optional.flags_set}  # one line each, with its comment
        kept = [f"{indent}{lines[flag.lineno - 1][index.col(flag.lineno, flag.col_offset):].rstrip()}{newline}"
                for flag in optional.flags_set]
        kept_comments = [f"{indent}{comments[n]}{newline}" for n in range(removed.lineno, removed.end_lineno + 1)
                         if n in comments and n not in kept_lines]
        replacement += "".join(kept + kept_comments)
        rw.messages[id(import_node)] = _optional_import_message(amp, sorted(set(flags)), bool(kept_comments))
    rw.splices.append((index.line_start(removed.lineno), index.line_end(removed.end_lineno), replacement))

    _no_overlap(rw, regions)
    _no_other_edit_inside(rw)
    covered = regions + [(b.lineno, b.end_lineno) for b in evaluation]
    outside = sorted({node.lineno for node in ast.walk(function)
                      if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == model_name
                      and node.lineno > init.end_lineno and not any(a <= node.lineno <= b for a, b in covered)
                      and _function_of(rw, node, tree) is function})
    passes = "the forward passes" + (f" and the `no_grad`/`inference_mode` blocks on "
                                     f"{_lines([b.lineno for b in evaluation])}"
                                     if evaluation else "")
    note = (f"; O1 put every call after initialize in mixed precision, the autocast added covers {passes}: "
            f"the calls of `{model_name}` on {_lines(outside)}, and any call outside {where}, are outside it "
            "(float32 unless under an autocast of their own)" if outside else
            f"; O1 put every call after initialize in mixed precision, the autocast added covers {passes}: "
            f"calls outside {where} (evaluation elsewhere) are outside it (float32 unless under an autocast "
            "of their own)")
    rw.messages[id(init_use.ref)] = (
        f"`{amp}.initialize` (O1) -> `{SCALER} = torch.amp.GradScaler({scaler_args})`; `{opt_name}.step()` on "
        f"{_lines([s.lineno for s in steps])} -> `{SCALER}.step({opt_name})` and `{SCALER}.update()`"
        + (f"; `{SCALER}.unscale_({opt_name})` before the gradients are read on {_lines(unscaled_at)} (apex had "
           "unscaled them when scale_loss exited)" if unscaled_at else "") + note)


def _device_and_dtype(analysis: Analysis) -> tuple[str, str]:
    """The device the scaler and autocast get (`--device`, `--device-expr`, as for torch's own names) and
    autocast's dtype: float16 as O1's, bfloat16 on the CPU unless --keep-dtype (as AMP002's rewrites do)."""
    options = analysis.options
    if options.device == "auto" and options.device_expr is None:
        raise NotMechanical("--device auto needs a module-level device name, which this rewrite does not add")
    device = analysis.device_text(Target("torch.amp.GradScaler", "cuda"))
    cpu_dtype = analysis.family.cpu_dtypes.get("torch.float16")
    if options.to_cpu and not options.keep_dtype and cpu_dtype is not None:
        return device, cpu_dtype
    return device, "torch.float16"


def _scaler_state_helper(rw: _Rewrite, function: ast.AST, init_statement: ast.stmt, scope,
                         newline: str) -> tuple[str, bool]:
    """The name of the module-level helper that turns an apex checkpoint's state into GradScaler's, and whether
    it is added: one already in the module (same code, any name, bound once and seen from `scope`) is reused;
    else it goes before the top-level statement that holds the function, or before initialize's in a script."""
    tree = rw.analysis.tree
    for statement in tree.body:
        if isinstance(statement, ast.FunctionDef) and len(scope.lookup(statement.name)[1]) == 1 \
                and scope.lookup(statement.name)[0] is rw.analysis.walker.module_scope:
            same = rules.SCALER_STATE_HELPER.format(name=statement.name, nl="\n")
            if ast.dump(statement) == ast.dump(ast.parse(same).body[0]):
                return statement.name, False
    name = free_name(tree, rules.SCALER_STATE_HELPER_NAME)
    text = rules.SCALER_STATE_HELPER.format(name=name, nl=newline) + newline * 2
    index = rw.analysis.index
    if isinstance(function, ast.Module):  # a script: with the scaler that replaces initialize (one splice there)
        start, end, created = next(s for s in rw.splices if s[0] == index.line_start(init_statement.lineno))
        rw.splices.remove((start, end, created))
        rw.splices.append((start, end, newline * 2 + text + created))
    else:
        top = function
        while rw.parents.get(id(top)) is not tree:
            top = rw.parents[id(top)]
        at = index.line_start(first_line(top))  # type: ignore[arg-type]
        rw.splices.append((at, at, text))
    return name, True


def _availability_guard(guard: ast.If, optional: OptionalImport, scope, what: str) -> None:
    reason = flag_reason(guard.test, optional, scope)
    if reason is not None:
        raise NotMechanical(f"{what} is under an `if` whose test is not whether apex imported: {reason}")


def _plain_backward_else(guard: ast.If, with_node: ast.With, loss: ast.expr, backward: ast.Call) -> None:
    """`if flag: with amp.scale_loss(loss, opt) as s: s.backward(ARGS)` / `else: loss.backward(ARGS)`: the
    same loss, the same arguments, in both branches."""
    other = guard.orelse[0] if len(guard.orelse) == 1 else None
    call = other.value if isinstance(other, ast.Expr) else None
    if not (guard.body == [with_node] and isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr == "backward" and ast.dump(call.func.value) == ast.dump(loss)
            and [ast.dump(a) for a in (*call.args, *call.keywords)]
            == [ast.dump(a) for a in (*backward.args, *backward.keywords)]):
        raise NotMechanical("a scale_loss under a flag is not alone in its `if`, or its `else` is not the same "
                            "loss's `.backward(...)` with the same arguments")


def _evaluation_blocks(rw: _Rewrite, function: ast.AST, init_statement: ast.stmt, regions: list[tuple[int, int]],
                       scope) -> list[ast.With]:
    """The outermost `with torch.no_grad():` (or inference_mode) blocks of the function after initialize and
    outside the forward passes, not already under an autocast of their own: O1 ran them in mixed precision."""
    def resolved(item: ast.withitem) -> str | None:
        call = item.context_expr
        return rw.analysis.resolve_value(call.func, scope) if isinstance(call, ast.Call) else None

    found: list[ast.With] = []
    for node in ast.walk(function):  # breadth first: an outer block comes before the blocks inside it
        if not (isinstance(node, ast.With) and node.lineno > init_statement.end_lineno
                and _function_of(rw, node, rw.analysis.tree) is function):
            continue
        names = [resolved(item) for item in node.items]
        if any(name in rules.EVALUATION_CONTEXTS for name in names) \
                and not any(name in rules.AUTOCAST_CONTEXTS for name in names) \
                and not any(a <= node.lineno <= b for a, b in regions) \
                and not any(b.lineno <= node.lineno <= b.end_lineno for b in found):
            found.append(node)
    return sorted(found, key=lambda b: b.lineno)


def _optional_import_message(amp: str, flags: list[str], comments_kept: bool) -> str:
    said = (f"; {_names(flags)}, True exactly where apex imported, {'is' if len(flags) == 1 else 'are'} now "
            "always True: mixed precision stays on where the author meant it, not silently off" if flags else "")
    kept = "; the comments of the removed `try` are kept as lines of their own" if comments_kept else ""
    return (f"the optional `from apex import {amp}` and its `except` branch are removed (torch.amp, which takes "
            f"its place, is always there){said}{kept}")


def _names(names: list[str]) -> str:
    return ", ".join(f"`{n}`" for n in names)


def _lines(numbers: list[int]) -> str:
    return ("line " if len(numbers) == 1 else "lines ") + ", ".join(map(str, numbers))


def _rule_code(full: str) -> str:
    rule = rule_of(full)
    return rule.code if rule is not None else ""


def _call_of(use: AmpUse) -> ast.Call:
    call = use.ref.parent
    if use.ref.role != "call" or not isinstance(call, ast.Call) or call.func is not use.ref.node:
        raise NotMechanical("an apex.amp name is not called directly")
    return call


def _initialize_arguments(call: ast.Call) -> tuple[ast.Name, ast.Name, ast.expr | None]:
    if len(call.args) != 2 or not all(isinstance(a, ast.Name) for a in call.args):
        raise NotMechanical("initialize is not given one model and one optimizer by name (lists keep their shapes by "
                            "hand)")
    enabled = None
    for keyword in call.keywords:
        if keyword.arg not in _INITIALIZE_KEYWORDS:
            raise NotMechanical("initialize has a keyword beyond opt_level, enabled, verbosity and loss_scale")
        value = keyword.value
        if keyword.arg == "opt_level" and not (isinstance(value, ast.Constant) and value.value == "O1"):
            raise NotMechanical('opt_level is not the literal "O1"')
        if keyword.arg == "loss_scale" and not (isinstance(value, ast.Constant) and value.value == "dynamic"):
            raise NotMechanical('loss_scale is not "dynamic"')
        if keyword.arg == "enabled":
            # evaluated once by initialize, then by the scaler and by each autocast: no side effects
            if not isinstance(value, (ast.Name, ast.Attribute, ast.Constant)):
                raise NotMechanical("enabled is not a name, attribute or constant (it would be evaluated again)")
            enabled = value
    return call.args[0], call.args[1], enabled  # type: ignore[return-value]


def _scale_loss_arguments(call: ast.Call, with_node: ast.AST | None, opt_name: str) -> ast.expr:
    if not (isinstance(with_node, ast.With) and len(with_node.items) == 1
            and with_node.items[0].context_expr is call and isinstance(with_node.items[0].optional_vars, ast.Name)):
        raise NotMechanical("a scale_loss is not the single item of a `with ... as name`")
    scaled = with_node.items[0].optional_vars.id
    if not (len(call.args) == 2 and isinstance(call.args[1], ast.Name) and call.args[1].id == opt_name
            and all(k.arg == "delay_unscale" for k in call.keywords)):
        raise NotMechanical("a scale_loss is not given (loss, optimizer) of initialize, or has keywords beyond "
                            "delay_unscale")
    body = with_node.body
    if not (len(body) == 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Call)):
        raise NotMechanical("a scale_loss body is not a single `.backward(...)` call")
    backward = body[0].value
    if not (isinstance(backward.func, ast.Attribute) and backward.func.attr == "backward"
            and isinstance(backward.func.value, ast.Name) and backward.func.value.id == scaled):
        raise NotMechanical("a scale_loss body is not a single `.backward(...)` call")
    if any(isinstance(n, ast.Name) and n.id == scaled for a in (*backward.args, *backward.keywords)
           for n in ast.walk(a)):
        raise NotMechanical("the scaled loss is used again in the backward call")
    return call.args[0]


def _reads_gradients(rw: _Rewrite, statement: ast.stmt, scope) -> bool:
    """Does `statement` read gradients: a `.grad`, or a call of torch's gradient clipping?"""
    for node in ast.walk(statement):
        if isinstance(node, ast.Attribute) and node.attr == "grad" and isinstance(node.ctx, ast.Load):
            return True
        if isinstance(node, ast.Call) and rw.analysis.resolve_value(node.func, scope) in rules.GRADIENT_CLIPPING:
            return True
    return False


def _is_step(node: ast.AST, opt_name: str) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "step"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == opt_name
            and not node.args and not node.keywords)


def _other_steps(function: ast.AST, opt_name: str, steps: list[ast.Expr]) -> bool:
    """A step of the optimizer that is not a statement of its own (a closure, a value used)."""
    counted = {id(s.value) for s in steps}
    for node in ast.walk(function):
        if isinstance(node, ast.Attribute) and node.attr == "step" and isinstance(node.value, ast.Name) \
                and node.value.id == opt_name:
            call = next((c for c in ast.walk(function) if isinstance(c, ast.Call) and c.func is node), None)
            if call is None or id(call) not in counted:
                return True
    return False


def _function_of(rw: _Rewrite, node: ast.AST, module: ast.Module) -> ast.AST:
    """The innermost function (or other scope) holding `node`, or the module."""
    parent = rw.parents.get(id(node))
    while parent is not None and not isinstance(parent, _SCOPES):
        parent = rw.parents.get(id(parent))
    return module if parent is None else parent


def _block_of(rw: _Rewrite, statement: ast.AST | None) -> tuple[list[ast.stmt], int]:
    parent = rw.parents.get(id(statement))
    for name in ("body", "orelse", "finalbody"):
        block = getattr(parent, name, None)
        if isinstance(block, list) and statement in block:
            return block, block.index(statement)  # type: ignore[arg-type]
    raise NotMechanical("a statement is not in a plain block")


def _indent(lines: list[str], line: int) -> str:
    text = lines[line - 1]
    return text[: len(text) - len(text.lstrip(" \t"))]


def _text(rw: _Rewrite, node: ast.AST) -> str:
    start, end = rw.analysis.index.span(node)
    return rw.analysis.index.text[start:end]


def _comment_lines(source: str) -> dict[int, str]:
    """Each line with a comment, and the comment, on the lines `ast` numbers (`locations.tokens`, which
    `suppressions.scan` reads too). Not scan's run reused: scan tokenizes only text that names a directive, and
    a shared run would be a second path for what this planner reaches in every other file."""
    found = {}
    try:
        for token in tokens(source):
            if token.type == tokenize.COMMENT:
                found[token.start[0]] = token.string
    except (tokenize.TokenError, SyntaxError):
        raise NotMechanical("the file does not tokenize") from None
    return found


def _starts_its_line(rw: _Rewrite, statement: ast.stmt) -> None:
    line = rw.analysis.index.lines[first_line(statement) - 1]
    if line[: rw.analysis.index.col(statement.lineno, statement.col_offset)].strip():
        raise NotMechanical("a statement that would be rebuilt shares its line")


def _ends_its_line(rw: _Rewrite, statement: ast.stmt) -> None:
    _starts_its_line(rw, statement)
    index = rw.analysis.index
    rest = index.text[index.span(statement)[1]:index.line_end(statement.end_lineno)]
    if rest.strip() and not rest.strip().startswith("#"):
        raise NotMechanical("a statement that would be rebuilt shares its line")


def _whole_lines_only(rw: _Rewrite, statement: ast.stmt, comments: dict[int, str]) -> None:
    """The statement's lines are rebuilt: nothing else may be on them (no comment would survive)."""
    _ends_its_line(rw, statement)
    if any(line in comments for line in range(first_line(statement), statement.end_lineno + 1)):
        raise NotMechanical("a comment sits on a line that would be rebuilt")


def _reindentable(rw: _Rewrite, statements: list[ast.stmt], first: int, last: int) -> None:
    """The lines can take four more spaces: they start with spaces only, and no string spans lines."""
    _starts_its_line(rw, statements[0])
    for line in rw.analysis.index.lines[first - 1:last]:
        if line.strip() and "\t" in line[: len(line) - len(line.lstrip(" \t"))]:
            raise NotMechanical("tabs indent the forward pass that would be re-indented")
    for statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, (ast.Constant, ast.JoinedStr)) and isinstance(getattr(node, "value", ""), (str, list)) \
                    and node.end_lineno != node.lineno:
                raise NotMechanical("a string spans lines in the forward pass that would be re-indented")


def _no_overlap(rw: _Rewrite, regions: list[tuple[int, int]]) -> None:
    index = rw.analysis.index
    spans = sorted((s, e) for s, e, _ in rw.splices)
    for (_, end), (start, _) in zip(spans, spans[1:]):
        if start < end:
            raise NotMechanical("edits overlap")
    for first, last in regions:
        lo, hi = index.line_start(first), index.line_end(last)
        if any(lo <= s < hi for s, _, _ in rw.splices):
            raise NotMechanical("a step, a clip or the state is used inside the forward pass")
    rw.splices += rw.region_splices


def _no_other_edit_inside(rw: _Rewrite) -> None:
    """Another rule's edits may sit between the splices (`ampfix.engine.apply` merges them), not across one."""
    for edit in rw.analysis.edits:
        if any(s < edit.end and edit.start < e for s, e, _ in rw.splices if s < e):
            raise NotMechanical("another rule edits a statement this rewrite rebuilds")
