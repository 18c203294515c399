"""A set-up split across modules where the set-up module builds, right after initialize, an object of the other
module's class whose method scales the loss (DeepLearningExamples' GNMT: `Seq2SeqTrainer.__init__` calls initialize,
then builds `AMPOptimizer`, whose `step` holds scale_loss and whose `__init__` sets apex's loss scaler through
`_amp_state`): rewritten under --unsafe-fixes, both halves or none (docs/apex.md, *A class that scales the loss,
built after initialize*).

The class owns the scaler (`self.scaler`, made where its `__init__` wrote `_amp_state`: that write raised unless
initialize had run, so every object of the class is built after initialize); the set-up module drops initialize
and runs the forward pass whose loss reaches the class's method under `torch.autocast(..., enabled=isinstance(<the
object>, <the class>))`: the object's class is what initialize's `if` decided. Each half checks its own shape (tree
and text) and the other's (tree), and asks the other file's own plan (`ProjectModules.half_planned`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ampfix.core.locations import SourceIndex
from ampfix.core.project import ProjectModules
from ampfix.families.apex import rules
from ampfix.families.apex.rules import NATIVE

SCALER = NATIVE.scaler  # the attribute the class binds its GradScaler to
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_STATE = "apex.amp._amp_state"
_KEYWORDS = frozenset({"opt_level", "keep_batchnorm_fp32", "cast_model_outputs"})
_CAST_OUTPUTS = ("cast_model_outputs=torch.float16 has no twin: autocast's outputs have the dtype of the op that "
                 "made them, so the loss may be computed from float32 outputs where apex gave it float16 ones")
_CEILING = "apex's dynamic loss scale stopped growing at 2**24, a GradScaler's has no ceiling"


@dataclass(frozen=True)
class StepClass:
    """The step half: the class, its `__init__` and the method that scales the loss, and what they hold."""

    klass: ast.ClassDef
    init: ast.FunctionDef
    method: ast.FunctionDef
    with_node: ast.With
    loss: str
    optimizer: str
    update: ast.If
    master_params: tuple[ast.Call, ...]
    step: ast.Expr
    settings: tuple[ast.stmt, ...]  # the statements writing `_amp_state.loss_scalers[0]`, in order
    keywords: tuple[tuple[str, str], ...]  # the GradScaler keywords they are (`init_scale`, `loss_scale`)
    imports: tuple[ast.stmt, ...]


@dataclass(frozen=True)
class SetUp:
    """The set-up half: initialize's statement, the object built after it, and the forward pass to put under
    autocast."""

    klass: ast.ClassDef
    initialize: ast.Assign
    kept: str  # `self.fp_optimizer`
    built: str  # the class as the module names it
    forward: tuple[ast.stmt, ...]
    owner: str  # the method holding the forward pass
    self_name: str
    keywords: dict[str, ast.expr]
    import_node: ast.ImportFrom
    module: str  # the module the class is imported from
    built_at: int  # the line of its construction


class NotThisShape(str):
    """Why a module holding initialize is no set-up half of this shape (its finding's reasons stand)."""


def _parents(tree: ast.Module) -> dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _apex_imports(tree: ast.Module) -> list[ast.stmt]:
    return [node for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "apex"
            or isinstance(node, ast.Import) and any(a.name.split(".")[0] == "apex" for a in node.names)]


def _is_amp_import(node: ast.stmt) -> bool:
    return isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "apex" \
        and [(a.name, a.asname) for a in node.names] == [("amp", None)]


def _imports_amp(node: ast.stmt) -> bool:
    """An import of apex.amp or below it, or one binding the name `amp`."""
    if isinstance(node, ast.ImportFrom):
        module = node.module or ""
        return rules.under_amp(module) \
            or any((a.asname or a.name) == "amp" for a in node.names)
    return isinstance(node, ast.Import) and any(
        rules.under_amp(a.name) or a.asname == "amp"
        for a in node.names)


def _imports_torch(tree: ast.Module) -> bool:
    return any(isinstance(s, ast.Import) and [(a.name, a.asname) for a in s.names] == [("torch", None)]
               for s in tree.body)


def _names(tree: ast.AST, name: str) -> list[ast.Name]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name]


def _method(klass: ast.ClassDef, node: ast.AST) -> ast.FunctionDef | None:
    """The plain method of `klass` (undecorated, taking the object) whose lines hold `node`."""
    line = getattr(node, "lineno", 0)
    for method in klass.body:
        if isinstance(method, ast.FunctionDef) and not method.decorator_list and method.args.args \
                and method.lineno <= line <= (method.end_lineno or 0):
            return method
    return None


def _class_of(tree: ast.Module, node: ast.AST) -> ast.ClassDef | None:
    line = getattr(node, "lineno", 0)
    return next((c for c in tree.body if isinstance(c, ast.ClassDef) and c.lineno <= line <= (c.end_lineno or 0)),
                None)


def _self(method: ast.FunctionDef) -> str:
    return method.args.args[0].arg


def _params(method: ast.FunctionDef) -> set[str]:
    return {a.arg for a in (*method.args.posonlyargs, *method.args.args, *method.args.kwonlyargs)}


def _is_call_of(node: ast.AST, func: str, args: int | None = None) -> bool:
    return isinstance(node, ast.Call) and ast.unparse(node.func) == func and (args is None or len(node.args) == args)


# The step half ----------------------------------------------------------------------------------------------------
def step_class(tree: ast.Module) -> StepClass | str:
    """The module's class that scales the loss, in the shape rewritten, or why not."""
    imports = _apex_imports(tree)
    state = [s for s in imports if isinstance(s, ast.Import) and [(a.name, a.asname) for a in s.names]
             == [(_STATE, None)]]
    amp_imports = [s for s in imports if _is_amp_import(s)]
    if len(amp_imports) != 1 or len(imports) != 1 + len(state) or len(state) > 1 \
            or not all(s in tree.body for s in imports):
        return "apex is imported otherwise than `from apex import amp` (and `import apex.amp._amp_state`) at the top"
    if not _imports_torch(tree):
        return "the module does not `import torch` at its top"
    parents = _parents(tree)
    scale_losses, master_params = [], []
    for name in _names(tree, "amp"):
        attribute = parents.get(id(name))
        call = parents.get(id(attribute)) if isinstance(attribute, ast.Attribute) else None
        if not (isinstance(attribute, ast.Attribute) and isinstance(call, ast.Call) and call.func is attribute):
            return "apex.amp is used otherwise than scale_loss and master_params calls"
        if attribute.attr == "scale_loss":
            scale_losses.append(call)
        elif attribute.attr == "master_params":
            master_params.append(call)
        else:
            return f"apex.amp.{attribute.attr} is used"
    if len(scale_losses) != 1:
        return "the module does not hold exactly one scale_loss"
    call = scale_losses[0]
    klass = _class_of(tree, call)
    method = _method(klass, call) if klass is not None else None
    if klass is None or method is None:
        return "scale_loss is not in a plain method of a module-level class"
    with_node = parents.get(id(parents.get(id(call))))
    if not (isinstance(with_node, ast.With) and with_node in method.body and len(with_node.items) == 1
            and with_node.items[0].context_expr is call and isinstance(with_node.items[0].optional_vars, ast.Name)):
        return "scale_loss is not the one item of a `with ... as name` of its method's own body"
    scaled = with_node.items[0].optional_vars.id
    backward = with_node.body[0] if len(with_node.body) == 1 else None
    if not (isinstance(backward, ast.Expr) and _is_call_of(backward.value, f"{scaled}.backward", 0)
            and isinstance(backward.value, ast.Call) and not backward.value.keywords
            and len(call.args) == 2 and not call.keywords
            and all(isinstance(a, ast.Name) for a in call.args)):
        return "scale_loss is not `with amp.scale_loss(loss, optimizer) as s: s.backward()` on two names"
    loss, optimizer = (a.id for a in call.args if isinstance(a, ast.Name))
    if optimizer not in _params(method):
        return f"the optimizer `{optimizer}` scale_loss is given is not a parameter of `{method.name}`"
    position = method.body.index(with_node)
    update = method.body[position + 1] if position + 1 < len(method.body) else None
    if not (isinstance(update, ast.If) and isinstance(update.test, ast.Name) and update.test.id in _params(method)
            and not update.orelse and update.body[0].lineno > update.lineno):
        return "scale_loss is not followed by `if <parameter>:` (the step), with no `else`"
    steps = [s for s in ast.walk(method) if isinstance(s, ast.Call) and ast.unparse(s.func) == f"{optimizer}.step"]
    step = next((s for s in update.body if isinstance(s, ast.Expr) and _is_call_of(s.value, f"{optimizer}.step", 0)
                 and isinstance(s.value, ast.Call) and not s.value.keywords), None)
    if step is None or len(steps) != 1:
        return f"`{optimizer}.step()` is not once, a statement of that `if`'s own body"
    for clip in master_params:
        inside = update.lineno < clip.lineno < step.lineno and _method(klass, clip) is method
        if not (inside and len(clip.args) == 1 and isinstance(clip.args[0], ast.Name)
                and clip.args[0].id == optimizer and not clip.keywords):
            return "master_params is not given the optimizer alone, between that `if` and the step"
    if any(isinstance(n, ast.Attribute) and n.attr == SCALER for n in ast.walk(tree)):
        return f"the module already uses an attribute `{SCALER}`"
    if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == klass.name
           for n in ast.walk(tree)):
        return f"`{klass.name}` is built in its own module too"
    init = next((m for m in klass.body if isinstance(m, ast.FunctionDef) and m.name == "__init__"
                 and not m.decorator_list and m.args.args), None)
    if init is None or any(isinstance(n, ast.Return) for n in ast.walk(init)):
        return f"`{klass.name}` has no plain `__init__` (without `return`) to make the scaler in"
    written = _settings(tree, parents, init)
    if isinstance(written, str):
        return written
    settings, keywords = written
    return StepClass(klass, init, method, with_node, loss, optimizer, update, tuple(master_params), step, settings,
                     keywords, tuple(imports))


def _settings(tree: ast.Module, parents: dict[int, ast.AST],
              init: ast.FunctionDef) -> tuple[tuple[ast.stmt, ...], tuple[tuple[str, str], ...]] | str:
    """The statements of `__init__` writing apex's first loss scaler (directly, or through one name bound to it),
    consecutive in its body, and the GradScaler keywords they are; or why not."""
    statements: list[ast.stmt] = []
    written: dict[str, str] = {}
    for name in _names(tree, "apex"):
        chain = parents.get(id(name))
        while isinstance(chain, ast.Attribute):
            chain = parents.get(id(chain))
        subscript = chain
        if not (isinstance(subscript, ast.Subscript) and ast.unparse(subscript.value) == rules.LOSS_SCALERS
                and isinstance(subscript.slice, ast.Constant) and subscript.slice.value == 0):
            return "apex is used otherwise than apex.amp._amp_state.loss_scalers[0]"
        above = parents.get(id(subscript))
        targets: list[tuple[ast.AST | None, ast.AST | None]]
        if isinstance(above, ast.Attribute):
            targets = [(above, parents.get(id(above)))]
        elif isinstance(above, ast.Assign) and above.targets == [above.targets[0]] \
                and isinstance(above.targets[0], ast.Name):
            bound = above.targets[0].id
            statements.append(above)
            targets = [(parents.get(id(n)), parents.get(id(parents.get(id(n)))))
                       for n in _names(init, bound) if n is not above.targets[0]]
        else:
            return "apex's loss scaler is used otherwise than its settings written"
        for attribute, statement in targets:
            if not (isinstance(attribute, ast.Attribute) and isinstance(attribute.ctx, ast.Store)
                    and isinstance(statement, ast.Assign) and statement.targets == [attribute]):
                return "apex's loss scaler is used otherwise than its settings written"
            if attribute.attr not in rules.LOSS_SCALER_SETTINGS:
                return f"apex's loss scaler's `{attribute.attr}` is set: it has no GradScaler twin"
            written[attribute.attr] = ast.unparse(statement.value)
            statements.append(statement)
    statements.sort(key=lambda s: s.lineno)
    first = init.body.index(statements[0]) if statements and statements[0] in init.body else -1
    if statements and init.body[first:first + len(statements)] != statements:
        return "apex's loss scaler is not set by consecutive statements of `__init__`'s own body"
    keywords = tuple((rules.LOSS_SCALER_SETTINGS[a], written[a]) for a in rules.LOSS_SCALER_SETTINGS if a in written)
    return tuple(statements), keywords


def step_rewritten(tree: ast.Module | None, klass: str) -> bool:
    """The step half as this rewrite writes it: no apex, and the class's `__init__` binding `self.scaler` to a
    GradScaler."""
    found = next((c for c in tree.body if isinstance(c, ast.ClassDef) and c.name == klass), None) if tree else None
    init = next((m for m in found.body if isinstance(m, ast.FunctionDef) and m.name == "__init__"), None) \
        if found is not None else None
    return tree is not None and init is not None and not _apex_imports(tree) and any(
        isinstance(s, ast.Assign) and [ast.unparse(t) for t in s.targets] == [f"{_self(init)}.{SCALER}"]
        and _is_call_of(s.value, NATIVE.grad_scaler) for s in init.body)


# The set-up half --------------------------------------------------------------------------------------------------
def set_up(tree: ast.Module) -> SetUp | str:
    """The module's initialize followed by the building of a class it imports (the step half's), in the shape
    rewritten, or why not (`NotThisShape` where nothing is built after it)."""
    imports = _apex_imports(tree)
    amp_imports = [s for s in imports if isinstance(s, ast.ImportFrom) and _is_amp_import(s)]
    if len(amp_imports) != 1 or amp_imports[0] not in tree.body \
            or any(_imports_amp(s) for s in imports if s is not amp_imports[0]):
        return NotThisShape("apex.amp is imported otherwise than one `from apex import amp` at the top")
    parents = _parents(tree)
    names = _names(tree, "amp")
    attribute = parents.get(id(names[0])) if len(names) == 1 else None
    call = parents.get(id(attribute)) if attribute is not None else None
    statement = parents.get(id(call)) if call is not None else None
    if not (isinstance(attribute, ast.Attribute) and attribute.attr == "initialize" and isinstance(call, ast.Call)
            and call.func is attribute and isinstance(statement, ast.Assign) and statement.value is call):
        return NotThisShape("apex.amp is used otherwise than one `... = amp.initialize(...)`")
    klass = _class_of(tree, statement)
    method = _method(klass, statement) if klass is not None else None
    block = getattr(parents.get(id(statement)), "body", None)
    if klass is None or method is None or not isinstance(block, list) or statement not in block:
        return NotThisShape("initialize is not in a plain method of a module-level class")
    after = block[block.index(statement) + 1] if block.index(statement) + 1 < len(block) else None
    self_name = _self(method)
    if not (isinstance(after, ast.Assign) and len(after.targets) == 1 and isinstance(after.value, ast.Call)
            and isinstance(after.value.func, ast.Name) and isinstance(after.targets[0], ast.Attribute)
            and isinstance(after.targets[0].value, ast.Name) and after.targets[0].value.id == self_name):
        return NotThisShape("initialize is not directly followed by `self.<name> = <class>(...)`")
    built, kept = after.value.func.id, ast.unparse(after.targets[0])
    module = next((s.module for s in tree.body if isinstance(s, ast.ImportFrom) and s.level == 0 and s.module
                   and (built, None) in [(a.name, a.asname) for a in s.names]), None)
    if module is None:
        return NotThisShape(f"`{built}` is not imported by an absolute `from ... import {built}` at the top")
    target = statement.targets[0] if len(statement.targets) == 1 else None
    if not (isinstance(target, ast.Tuple) and len(call.args) == 2 and len(target.elts) == 2
            and [ast.unparse(e) for e in target.elts] == [ast.unparse(a) for a in call.args]):
        return "initialize does not rebind the model and optimizer it is given (`m, o = amp.initialize(m, o, ...)`)"
    keywords = {k.arg: k.value for k in call.keywords if k.arg is not None}
    level = keywords.get("opt_level")
    if len(keywords) != len(call.keywords) or not set(keywords) <= _KEYWORDS \
            or not (isinstance(level, ast.Constant) and level.value in ("O1", "O2")) \
            or ast.unparse(keywords.get("cast_model_outputs", ast.Name("torch.float16"))) != "torch.float16":
        return ("initialize is given other keywords than a literal opt_level O1 or O2, keep_batchnorm_fp32 and "
                "cast_model_outputs=torch.float16")
    if not _imports_torch(tree):
        return "the module does not `import torch` at its top"
    stores = [n for n in ast.walk(klass) if isinstance(n, ast.Attribute) and not isinstance(n.ctx, ast.Load)
              and ast.unparse(n) == kept]
    if any(_method(klass, n) is not method for n in stores):
        return f"`{kept}` is set outside `{method.name}`"
    forward = _forward(klass, kept, [ast.unparse(e) for e in target.elts], self_name)
    if isinstance(forward, str):
        return forward
    owner, statements = forward
    return SetUp(klass, statement, kept, built, statements, owner, self_name, keywords, amp_imports[0], module,
                 after.value.lineno)


def _forward(klass: ast.ClassDef, kept: str, bound: list[str],
             self_name: str) -> tuple[str, tuple[ast.stmt, ...]] | str:
    """The statements of the one method calling `<kept>.step(loss, optimizer, ...)` from the first that calls the
    model to the last binding the loss: the forward pass and the loss."""
    model, optimizer = bound
    steps = [n for n in ast.walk(klass) if isinstance(n, ast.Call) and ast.unparse(n.func) == f"{kept}.step"]
    method = _method(klass, steps[0]) if len(steps) == 1 else None
    if method is None or _self(method) != self_name:
        return f"`{kept}.step(...)` is not called once, in a plain method of the class"
    step = steps[0]
    if not (step.args and isinstance(step.args[0], ast.Name) and len(step.args) > 1
            and ast.unparse(step.args[1]) == optimizer):
        return f"`{kept}.step` is not given a loss's name and initialize's optimizer `{optimizer}`"
    loss = step.args[0].id
    held = next(s for s in method.body if s.lineno <= step.lineno <= (s.end_lineno or 0))
    before = method.body[:method.body.index(held)]
    models = [n for n in ast.walk(klass) if isinstance(n, ast.Call) and ast.unparse(n.func) == model]
    first = next((i for i, s in enumerate(before) if any(s.lineno <= n.lineno <= (s.end_lineno or 0)
                                                         for n in models)), None)
    last = max((i for i, s in enumerate(before) if isinstance(s, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == loss for t in s.targets)), default=None)
    inside = [n for n in models if any(s.lineno <= n.lineno <= (s.end_lineno or 0) for s in before)]
    if first is None or last is None or first > last or len(inside) != len(models):
        return (f"the model `{model}` is not called only in `{method.name}`, before the loss `{loss}` it hands to "
                f"`{kept}.step` is bound")
    statements = tuple(before[first:last + 1])
    if any((isinstance(n, ast.Constant) and isinstance(n.value, str) or isinstance(n, ast.JoinedStr))
           and n.lineno != n.end_lineno for s in statements for n in ast.walk(s)):
        return "a string spans lines in the forward pass that would be re-indented"
    return method.name, statements


def set_up_rewritten(tree: ast.Module | None, built: str) -> bool:
    """The set-up half as this rewrite writes it: no apex.amp import, and an autocast enabled by `isinstance(<the
    object>, <the class>)`."""
    return tree is not None and not any(_is_amp_import(s) for s in _apex_imports(tree)) and any(
        isinstance(node, ast.With) and any(
            _is_call_of(item.context_expr, NATIVE.autocast) and isinstance(item.context_expr, ast.Call) and any(
                k.arg == "enabled" and isinstance(k.value, ast.Call) and ast.unparse(k.value.func) == "isinstance"
                and len(k.value.args) == 2 and ast.unparse(k.value.args[1]) == built
                for k in item.context_expr.keywords) for item in node.items)
        for node in ast.walk(tree))


# The note, the same in both halves -------------------------------------------------------------------------------
def set_up_note(found: SetUp) -> str:
    """What the rewrite changes in the numerics, said at initialize (an unsafe fix whatever the level: apex's
    ceiling, and the model run elsewhere)."""
    level = found.keywords["opt_level"]
    o2 = isinstance(level, ast.Constant) and level.value == "O2"
    notes = [f"opt_level O2 becomes native AMP: {rules.OPT_LEVEL_LOSS}"] if o2 else []
    if "keep_batchnorm_fp32" in found.keywords:
        notes.append(rules.INITIALIZE_KEYWORDS["keep_batchnorm_fp32"])
    if "cast_model_outputs" in found.keywords:
        notes.append(_CAST_OUTPUTS)
    notes.append(_CEILING)
    notes.append(f"the model runs under autocast in `{found.klass.name}.{found.owner}` only, where its loss reaches "
                 f"`{found.built}`: run elsewhere (a translator given the same model), it now runs in float32"
                 + (" where O2 had cast it to float16" if o2 else ""))
    return "; ".join(notes)


# Said where the loss is scaled: what the level changes is said at initialize, in the other module.
STEP_NOTE = (f"{_CEILING}; the GradScaler is the object's, where apex's loss scaler was one for the process: the same "
             "where one object is built, as here")


# The plans of each half ------------------------------------------------------------------------------------------
def _whole_lines(index: SourceIndex, node: ast.stmt) -> bool:
    """The statement alone on its lines, with no comment among them (they are rebuilt or removed)."""
    start, end = index.span(node)
    head = index.text[index.line_start(node.lineno):start]
    tail = index.text[end:index.line_end(node.end_lineno or node.lineno)]
    return not head.strip() and not tail.strip() and "#" not in index.text[start:end]


def _indent(index: SourceIndex, line: int) -> str:
    text = index.lines[line - 1]
    return text[:len(text) - len(text.lstrip())]


def _newline(index: SourceIndex, line: int) -> str:
    text = index.lines[line - 1]
    return text[len(text.rstrip("\r\n")):] or "\n"


def _removed(index: SourceIndex, node: ast.stmt) -> tuple[int, int, str]:
    start, end = index.removal(node.lineno, node.end_lineno or node.lineno)
    return start, end, ""


def _replaced(index: SourceIndex, node: ast.stmt, lines: list[str]) -> tuple[int, int, str]:
    indent, newline = _indent(index, node.lineno), _newline(index, node.end_lineno or node.lineno)
    return (index.line_start(node.lineno), index.line_end(node.end_lineno or node.lineno),
            "".join(indent + line + newline for line in lines))


def step_splices(found: StepClass, index: SourceIndex) -> list[tuple[int, int, str]] | str:
    """The step half's edits, or why its text holds them back."""
    rebuilt = [*found.imports, *found.settings, found.with_node, found.step]
    if any(not _whole_lines(index, s) for s in rebuilt):
        return "a statement the rewrite rebuilds shares its lines with other code or a comment"
    me, optimizer = _self(found.method), found.optimizer
    scaler = f"{_self(found.init)}.{SCALER}"
    made = f'{scaler} = {NATIVE.grad_scaler}("cuda"' + "".join(f", {k}={v}" for k, v in found.keywords) + ")"
    splices = [_removed(index, s) for s in found.imports]
    if found.settings:
        splices.append(_replaced(index, found.settings[0], [made]))
        splices.extend(_removed(index, s) for s in found.settings[1:])
    else:
        last = found.init.body[-1]
        if not _whole_lines(index, last):
            return "the last statement of `__init__` shares its lines with other code or a comment"
        at = index.line_end(last.end_lineno or last.lineno)
        splices.append((at, at, _indent(index, last.lineno) + made + _newline(index, last.end_lineno or last.lineno)))
    splices.append(_replaced(index, found.with_node, [f"{me}.{SCALER}.scale({found.loss}).backward()"]))
    first = found.update.body[0]
    at = index.line_start(first.lineno)
    splices.append((at, at, f"{_indent(index, first.lineno)}{me}.{SCALER}.unscale_({optimizer})"
                    + _newline(index, first.lineno)))
    for call in found.master_params:
        start, end = index.span(call)
        splices.append((start, end, rules.OPTIMIZER_PARAMS_OF.format(optimizer=optimizer)))
    splices.append(_replaced(index, found.step, [f"{me}.{SCALER}.step({optimizer})", f"{me}.{SCALER}.update()"]))
    return splices


def set_up_splices(found: SetUp, index: SourceIndex) -> list[tuple[int, int, str]] | str:
    """The set-up half's edits, or why its text holds them back."""
    if not _whole_lines(index, found.import_node) or not _whole_lines(index, found.initialize):
        return "initialize's statement or the apex.amp import shares its lines with other code or a comment"
    first, last = found.forward[0].lineno, found.forward[-1].end_lineno or found.forward[-1].lineno
    head = index.text[index.line_start(first):index.span(found.forward[0])[0]]
    tail = index.text[index.span(found.forward[-1])[1]:index.line_end(last)]
    if head.strip() or tail.strip() and not tail.strip().startswith("#"):
        return "the forward pass shares its lines with other code"
    if any("\t" in index.lines[n - 1][:len(index.lines[n - 1]) - len(index.lines[n - 1].lstrip())]
           for n in range(first, last + 1)):
        return "tabs indent the forward pass that would be re-indented"
    kept = found.kept.replace(f"{found.self_name}.", f"{found.self_name}.", 1)
    autocast = f'{rules.AUTOCAST[:-1]}, enabled=isinstance({kept}, {found.built}))'
    splices = [_removed(index, found.import_node), _removed(index, found.initialize)]
    at = index.line_start(first)
    splices.append((at, at, f"{_indent(index, first)}with {autocast}:{_newline(index, first)}"))
    for number in range(first, last + 1):
        if index.lines[number - 1].strip():
            at = index.line_start(number)
            splices.append((at, at, "    "))
    return splices


def other_file(project: ProjectModules, title: str) -> str:
    """The one file of the project's uses of `title` (`apex.amp.initialize`), or "" where they are not in one."""
    places = project.uses(title)
    files = {place.rpartition(":")[0] for place in places}
    return files.pop() if len(places) == 1 and len(files) == 1 else ""


@dataclass(frozen=True)
class Half:
    """This module's half, planned: its edits, what its apex.amp uses say, and what it changes in the numerics."""

    splices: tuple[tuple[int, int, str], ...]
    said: str
    note: str


def plan_half(project: ProjectModules, tree: ast.Module, index: SourceIndex, holds_initialize: bool,
              unsafe_fixes: bool) -> Half | str | None:
    """This module's half of the set-up, or why not (None where the module is no half of this shape at all)."""
    if holds_initialize:
        found = set_up(tree)
        if isinstance(found, NotThisShape):
            return None
        if isinstance(found, str):
            return found
        other = project.file_of(found.module) or ""
        other_tree = project.tree_of(other) if other else None
        if other_tree is None:
            return None
        step = step_class(other_tree)
        settled = isinstance(step, str) and step_rewritten(other_tree, found.built)
        if isinstance(step, str) and not settled:
            return f"the class that scales the loss, in {other}: {step}"
        if not isinstance(step, str) and step.klass.name != found.built:
            return None
        if project.uses(rules.INITIALIZE.title):
            return "initialize is called in another module too"
        splices = set_up_splices(found, index)
        said = (f"initialize removed: `{found.built}` (built after it) holds a torch.amp.GradScaler; the forward pass "
                f"and loss of `{found.klass.name}.{found.owner}` run under "
                f"`torch.autocast(..., enabled=isinstance({found.kept}, {found.built}))`")
        note = set_up_note(found)
    else:
        step = step_class(tree)
        other = other_file(project, rules.INITIALIZE.title)
        built_by = project.constructions(step.klass.name) if not other and not isinstance(step, str) else None
        if built_by is not None and len(built_by.seen) == 1:
            other = built_by.seen[0].rpartition(":")[0]  # its initialize removed already by this run
        other_tree = project.tree_of(other) if other else None
        if other_tree is None:
            return None
        found = set_up(other_tree)
        settled = isinstance(found, str)
        if isinstance(found, str):
            if isinstance(step, str) or isinstance(found, NotThisShape) and \
                    not set_up_rewritten(other_tree, step.klass.name):
                return None  # the set-up is no such half: the finding's reasons stand
            if not set_up_rewritten(other_tree, step.klass.name):
                return f"the set-up in {other}: {found}"
            built = step.klass.name  # its initialize removed already by this run
            calls = project.constructions(built)
        else:
            built = found.built
            calls = project.constructions(built)
            if calls is None or f"{other}:{found.built_at}" not in calls.seen:
                return None  # what is built after initialize is no class of this module
            if isinstance(step, str):
                return step
        if step.klass.name != built:
            return f"the loss is scaled in `{step.klass.name}`, not in `{built}`, built after initialize"
        if calls is None or len(calls.seen) != 1 or calls.escape is not None:
            return f"`{built}` is built elsewhere in the project too, or passed on"
        splices = step_splices(step, index)
        said = (f"`{step.klass.name}` holds a torch.amp.GradScaler (`{SCALER}`, made in `__init__`): "
                f"`{step.method.name}` scales the loss with it, unscales the gradients before the clipping (over the "
                "optimizer's param_groups, what master_params iterated) and steps and updates through it")
        note = STEP_NOTE
    if isinstance(splices, str):
        return splices
    elsewhere = [p for p in project.uses_below(rules.AMP_MODULE) if p.rpartition(":")[0] != other]
    if unsafe_fixes and elsewhere:
        return f"apex.amp is used at {elsewhere[0]} too, neither initialize's module nor the class's"
    if unsafe_fixes and not settled:
        if not project.in_run(other):
            return f"the other half of the set-up must be rewritten in the same run: {other}"
        if not project.half_planned(other):
            return f"the other half of the set-up in {other} is not rewritten (its finding says why)"
    return Half(tuple(splices), said, note)
