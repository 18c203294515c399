"""A switch between apex.amp and the module's own native path, on a string (DeepLearningExamples' Transformer-XL):

    if args.amp == 'pytorch':                        if args.amp in ('pytorch', 'apex'):
        scaler = torch.cuda.amp.GradScaler()             scaler = torch.cuda.amp.GradScaler()
    elif args.amp == 'apex':                   ->
        model, optimizer = amp.initialize(...)

Every apex.amp use lies in an `elif S == '<apex>':` branch that follows an `if S == '<native>':`. The module already
has the native path for the same job, so the apex value takes it: each `S == '<native>'` reads `S in ('<native>',
'<apex>')` (true for exactly those two values), which leaves every `elif S == '<apex>':` after it dead, and it goes.
Each value keeps its meaning: '<native>' runs as it ran, '<apex>' asks for mixed precision and now gets torch.amp's
(apex.amp is gone, so it could only fail), and whatever else `S` holds runs as before. One chain differs: where the
apex branch was `amp.load_state_dict(state)` and the native one `NAME.load_state_dict(...)`, the apex branch loads
into NAME through the helper that also reads apex's format, so a checkpoint an apex run saved still resumes. A test
`... and S == '<apex>' and ...` of an `if` that only raises (apex missing was an error for that value) goes; so do the
optional import and the registrations autocast makes no-ops. The numerics of the apex value change (apex's opt_level
and its loss scaler's settings no longer apply): under --unsafe-fixes only. Anything else that reads `S`, or a use
elsewhere, and the module is not this shape.

timm's (DeepLearningExamples' GPUNet) puts the apex branch first, `if S == '<apex>': ... elif S == '<native>': ...`:
the apex branch goes and its `elif` becomes the `if`, widened as every native test is. Each `S != '<native>'` (timm's
choice of apex's SyncBN and DDP) reads `S not in ('<native>', '<apex>')`, so the apex value runs the native value's
side there too (the note names each such `if`); an `assert` reading `S` stays (it only stops a run, each value where
it stopped). Some `if` testing `S == '<native>'` must name torch's autocast or GradScaler: else the native value is
not shown to be a mixed-precision path. The optional import's flags set True stay where its `try` was (always True);
where the `try` also imports apex.parallel, its imports are left to the step after this rewrite and apex.parallel's
(`ampfix.families.apex.detect`)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ampfix.core.locations import first_line
from ampfix.families.apex import rules
from ampfix.families.apex.optional import OptionalImport
from ampfix.families.apex.rewrite.loss_scale import runs_nothing
from ampfix.families.apex.rewrite.registrations import float16_function
from ampfix.families.apex.rewrite.tree import _last_line, _chain, _Tree
from ampfix.families.apex.rewrite.vocabulary import AmpUse, Splices


@dataclass
class Switched:
    """The splices and the message of each use (by id() of its ChainRef, and of the optional import); `note`: what
    changes in the numerics of the apex value."""

    splices: Splices = field(default_factory=list)
    messages: dict[int, str] = field(default_factory=dict)
    note: str = ""


def _literal_test(node: ast.expr, op: type[ast.cmpop] = ast.Eq) -> tuple[str, str] | None:
    """`S == 'value'` (or `op`; S a name or attribute chain): S's text is the caller's, here its node and the
    value."""
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], op) \
            and _chain(node.left) and isinstance(value := node.comparators[0], ast.Constant) \
            and isinstance(value.value, str):
        return ast.dump(node.left), value.value
    return None


def _apex_branch(tree: _Tree, node: ast.AST) -> ast.If | None:
    """The innermost `if` whose body holds `node` and that is an `elif S == ...:` after an `if S == ...:` (with no
    `else`), or an `if S == ...:` (itself no `elif`) followed by an `elif S == ...:` (timm's, apex first)."""
    child, parent = node, tree.parent(node)
    while parent is not None:
        if isinstance(parent, ast.If) and any(child is s for s in parent.body):
            above = tree.parent(parent)
            is_elif = isinstance(above, ast.If) and above.orelse == [parent]
            if is_elif and not parent.orelse:
                return parent
            if not is_elif and len(parent.orelse) == 1 and isinstance(parent.orelse[0], ast.If):
                return parent
        child, parent = parent, tree.parent(parent)
    return None


def _native_of(tree: _Tree, branch: ast.If) -> ast.If | None:
    """The native `if` of an apex branch: the `if` before an `elif` branch, the `elif` after an apex-first one."""
    if branch.orelse:
        native = branch.orelse[0]
        return native if isinstance(native, ast.If) else None
    above = tree.parent(branch)
    return above if isinstance(above, ast.If) else None


@dataclass
class _Switch:
    """The switch found: its subject (`ast.dump`) as spelled, its two values, the apex branches, the load chains."""

    subject: str
    spelled: str
    native: str
    apex: str
    branches: list[ast.If]
    loads: dict[int, tuple[ast.If, str]]  # id() of the native `if` of a load chain: its apex branch, the scaler's name
    quoted: str = ""  # the two values as the module quotes them: `('native', 'apex')`, the tuple the tests read

    @property
    def where(self) -> str:
        return f"the switch on `{self.spelled}` ('{self.native}' native, '{self.apex}' apex.amp)"


def native_switch(tree: _Tree, uses: list[AmpUse], registrations: list[AmpUse], import_node: ast.ImportFrom,
                  optional: OptionalImport | None) -> Switched | str | None:
    """The switch's rewrite, or why this switch is not rewritten; None where the module has no such switch."""
    switch = _find(tree, uses)
    if not isinstance(switch, _Switch):
        return switch
    where, switched, index = switch.where, Switched(), tree.index
    found = _comparisons(tree, switch, switched)
    if isinstance(found, str):
        return f"{where}: {found}"
    raising, elses = found
    if not _runs_native_amp(tree, switch):
        return (f"{where}: no `if` that tests `{switch.spelled} == {switch.native!r}` names torch's autocast or "
                f"GradScaler: '{switch.native}' is not shown to be a mixed-precision path for '{switch.apex}' to take")
    kept = _import_kept(tree, import_node, optional)
    if kept is not None:
        return f"{where}: {kept}"
    opt_level = _initialize_settings(tree, uses)
    if opt_level is None:
        return f"{where}: initialize is given more than the model, the optimizer and opt_level"
    if any(len(tree.block_of(guard)[0]) == 1 or not _alone_on_its_lines(tree, guard) for guard in raising):
        return f"{where}: removing the `if` that raises where apex is missing would leave its block empty, or a " \
            "statement shares its lines"
    gone = _registrations(tree, registrations, switched)
    if isinstance(gone, str):
        return f"{where}: {gone}"
    removed = [b for b in switch.branches if all(b is not load for load, _ in switch.loads.values())]
    for branch in removed:
        native_if = _native_of(tree, branch)
        if native_if is not None and (lost := _lost_steps(branch.body, native_if.body)):
            elses.append(f"the apex branch on line {branch.lineno} is removed{lost}")
    for branch in removed:
        native_if = _native_of(tree, branch)
        if branch.orelse and native_if is not None:  # apex first: its `elif` becomes the `if`
            switched.splices.append((index.span(branch)[0], index.span(native_if.test)[0], "if "))
    for statement in [b for b in removed if not b.orelse] + raising + gone:
        switched.splices.append((*index.removal(statement.lineno, _last_line(statement)), ""))
    switched.splices.extend(_import_removal(tree, import_node, optional, switched))
    _load_through_the_helper(tree, uses, switch.loads, switched)
    spelled, native, apex = switch.spelled, switch.native, switch.apex
    negated = (f", each `{spelled} != {native!r}` reads `{spelled} not in {switch.quoted}`"
               if any(isinstance(n, ast.Compare) and _literal_test(n, ast.NotEq) == (switch.subject, native)
                      for n in ast.walk(tree.engine.tree)) else "")
    dead = ("the apex branch before it is removed (the `elif` after it becomes the `if`)" if any(
        b.orelse for b in removed) else "the apex branch it left dead is removed")
    said = (f"{where}: '{apex}' now takes the native path '{native}' took (torch.amp's autocast and GradScaler; "
            f"apex.amp is gone, so it could only fail), each `{spelled} == {native!r}` reads `{spelled} in "
            f"{switch.quoted}`{negated}, and {dead}")
    for use in uses:
        switched.messages.setdefault(id(use.ref), said)
    switched.note = (f"{where}: '{apex}' now runs torch.amp's autocast and a GradScaler with torch's defaults, not "
                     f"apex's opt_level ({opt_level}: O2's float16 model and float32 master weights have no native "
                     "twin) nor its loss scaler's settings" + "".join(f"; {e}" for e in elses))
    return switched


def _find(tree: _Tree, uses: list[AmpUse]) -> _Switch | str | None:
    """The switch every use lies in an apex branch of, or why not (None: no such switch)."""
    branches: list[ast.If] = []
    for use in uses:
        branch = _apex_branch(tree, use.ref.node)
        if branch is None:
            return None if not branches else f"the apex.amp use on line {use.ref.node.lineno} is not in an `elif`"
        if branch not in branches:
            branches.append(branch)
    tests = {_literal_test(b.test) for b in branches}
    natives = {_literal_test(p.test) for b in branches if (p := _native_of(tree, b)) is not None}
    test, native_test, first = tests.pop(), natives.pop(), branches[0].test
    if tests or natives or test is None or native_test is None or native_test[0] != test[0] \
            or native_test[1] == test[1] or not isinstance(first, ast.Compare):
        return None
    native_if = _native_of(tree, branches[0])
    assert native_if is not None and isinstance(native_if.test, ast.Compare)  # natives holds its test
    quoted = f"({tree.text(native_if.test.comparators[0])}, {tree.text(first.comparators[0])})"
    switch = _Switch(test[0], tree.text(first.left), native_test[1], test[1], branches, {}, quoted)
    for branch in branches:
        native = _native_of(tree, branch)
        elif_branch = native if branch.orelse else branch
        if elif_branch is None or not tree.index.lines[elif_branch.lineno - 1].lstrip().startswith("elif"):
            which = "native" if branch.orelse else "apex"
            return (f"{switch.where}: the {which} branch on line {getattr(elif_branch, 'lineno', branch.lineno)} is "
                    "an `if` inside an `else`, not an `elif`")
        loaded = _loaded_into(tree, branch) if not branch.orelse else None
        if loaded is not None:
            switch.loads[id(tree.parent(branch))] = (branch, loaded)
        elif any(isinstance(n, ast.Attribute) and n.attr == "load_state_dict" for n in ast.walk(branch)):
            return (f"{switch.where}: the apex branch on line {branch.lineno} loads apex's state other than as "
                    "`amp.load_state_dict(state)` beside the native branch's one `scaler.load_state_dict(...)`")
    return switch


def _comparisons(tree: _Tree, switch: _Switch, switched: Switched) -> tuple[list[ast.If], list[str]] | str:
    """Each `S == native` widened (but a load chain's), into `switched`; the `if`s that raise where apex is missing,
    and what the note says of each `else` the apex value ran; or why not: S read otherwise."""
    raising: list[ast.If] = []
    elses: list[str] = []
    spelled, native, apex = switch.spelled, switch.native, switch.apex
    compared = {id(n.left) for n in ast.walk(tree.engine.tree) if isinstance(n, ast.Compare)}
    for node in ast.walk(tree.engine.tree):
        if isinstance(node, (ast.Name, ast.Attribute)) and ast.dump(node) == switch.subject \
                and id(node) not in compared:
            return f"line {node.lineno} reads `{spelled}` otherwise (what it does with '{apex}' is not known)"
        if not (isinstance(node, ast.Compare) and ast.dump(node.left) == switch.subject):
            continue
        value = _literal_test(node)
        holder = tree.parent(node)
        if _literal_test(node, ast.NotEq) == (switch.subject, native):
            start, end = tree.index.span(node)
            switched.splices.append((start, end, f"{spelled} not in {switch.quoted}"))
            elses.extend(_body_left(tree, node))
        elif value is not None and value[1] == native:
            if not (isinstance(holder, ast.If) and id(holder) in switch.loads):
                start, end = tree.index.span(node)
                switched.splices.append((start, end, f"{spelled} in {switch.quoted}"))
                elses.extend(_else_taken(tree, node, switch.branches))
        elif value is not None and value[1] == apex and isinstance(holder, ast.If) and holder in switch.branches:
            continue
        elif value is not None and value[1] == apex and (guard := _raises_alone(tree, node)) is not None:
            raising.append(guard)
        elif _asserted(tree, node):
            continue
        else:
            return f"line {node.lineno} compares `{spelled}` otherwise"
    return raising, elses


_TORCH_AMP = ("torch.amp.", "torch.cuda.amp.", "torch.autocast", "torch.cpu.amp.")


def _runs_native_amp(tree: _Tree, switch: _Switch) -> bool:
    """Does the body of some `if` testing `S == native` name torch's AMP (`torch.cuda.amp.GradScaler()`, timm's
    `amp_autocast = torch.cuda.amp.autocast`)? Else the native value is not shown to be the mixed-precision path the
    apex value could take (`if S == 'none': ... elif S == 'apex': ...` is no such switch)."""
    for compare in ast.walk(tree.engine.tree):
        if not (isinstance(compare, ast.Compare) and _literal_test(compare) == (switch.subject, switch.native)):
            continue
        holder = _if_testing(tree, compare)
        for node in (n for s in (holder.body if holder is not None else []) for n in ast.walk(s)):
            scope = tree.engine.scope_of(node) if isinstance(node, (ast.Attribute, ast.Name)) else None
            if scope is not None and isinstance(node, ast.expr) \
                    and (tree.engine.resolve(node, scope) or "").startswith(_TORCH_AMP):
                return True
    return False


def _if_testing(tree: _Tree, compare: ast.Compare) -> ast.If | None:
    """The `if` whose test is `compare` or an `and` with it an operand, or None."""
    test: ast.AST = compare
    if isinstance(above := tree.parent(compare), ast.BoolOp) and isinstance(above.op, ast.And):
        test = above
    holder = tree.parent(test)
    return holder if isinstance(holder, ast.If) and holder.test is test else None


def _body_left(tree: _Tree, compare: ast.Compare) -> list[str]:
    """Where `compare` (`S != native`) is the test of an `if` (or an operand of its `and`): the apex value ran its
    body, and now runs its `else`, as the native value did. What it says, with the optimizers the body stepped that
    the `else` steps neither so nor through a scaler."""
    holder = _if_testing(tree, compare)
    if holder is None:
        return []
    runs = "that `if`'s `else`" if holder.orelse else "neither (it has no `else`)"
    calls = _apex_calls(tree, holder.body)
    apex = f" (not apex's {', '.join(calls)})" if calls else ""
    return [f"where it ran the body of the `if` on line {holder.lineno}, it runs {runs}, as the native value "
            f"did{apex}{_lost_steps(holder.body, holder.orelse)}"]


def _apex_calls(tree: _Tree, statements: list[ast.stmt]) -> list[str]:
    """The calls, as written, of apex's names in `statements` (`ApexDDP(model, delay_allreduce=True)`)."""
    found = []
    for node in (n for s in statements for n in ast.walk(s)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and (scope := tree.engine.scope_of(node.func)) is not None \
                and (tree.engine.resolve(node.func, scope) or "").startswith("apex."):
            found.append(f"`{tree.text(node)}`")
    return found


def _asserted(tree: _Tree, compare: ast.Compare) -> bool:
    """Does `compare` lie in the test of an `assert`? The assert only stops a run, and each value of the subject
    stops where it stopped: the apex value still asks what it asked (timm's `assert not use_amp == "apex", "Cannot
    use APEX AMP with torchscripted model"` still refuses it)."""
    child: ast.AST = compare
    node = tree.parent(compare)
    while isinstance(node, (ast.BoolOp, ast.UnaryOp, ast.Compare)):
        child, node = node, tree.parent(node)
    return isinstance(node, ast.Assert) and node.test is child


def _else_taken(tree: _Tree, compare: ast.Compare, branches: list[ast.If]) -> list[str]:
    """Where `compare` is the test of an `if` (or an operand of its `and`) with an `else` that is not an apex branch:
    the apex value ran that `else`, and now runs the `if`'s body, as the native value did. What it says, with the
    optimizers the `else` stepped (`X.step()`) that the body steps neither so nor through a scaler (`s.step(X)`)."""
    test: ast.AST = compare
    if isinstance(above := tree.parent(compare), ast.BoolOp) and isinstance(above.op, ast.And):
        test = above
    holder = tree.parent(test)
    if not (isinstance(holder, ast.If) and holder.test is test and holder.orelse) \
            or any(holder.orelse == [branch] or branch.orelse == [holder] for branch in branches):
        return []
    return [f"where it ran the `else` of the `if` on line {holder.lineno}, it runs that `if`'s body, as the native "
            f"value did{_lost_steps(holder.orelse, holder.body)}"]


def _lost_steps(ran: list[ast.stmt], runs: list[ast.stmt]) -> str:
    """The optimizers `ran` stepped (`X.step()`) that `runs` steps neither so nor through a scaler (`s.step(X)`),
    as the note says them ("" where none)."""
    stepped = [_stepped(node) for s in ran for node in ast.walk(s)]
    kept = {name for s in runs for node in ast.walk(s) for name in (_stepped(node), _scaler_stepped(node))}
    lost = sorted({name for name in stepped if name is not None and name not in kept})
    return f" (so `{'`, `'.join(lost)}` {'is' if len(lost) == 1 else 'are'} no longer stepped there)" if lost else ""


def _stepped(node: ast.AST) -> str | None:
    """`X.step()`: X's name, else None."""
    if isinstance(node, ast.Call) and not node.args and isinstance(node.func, ast.Attribute) \
            and node.func.attr == "step" and isinstance(node.func.value, ast.Name):
        return node.func.value.id
    return None


def _scaler_stepped(node: ast.AST) -> str | None:
    """`scaler.step(X)`: X's name, else None."""
    if isinstance(node, ast.Call) and len(node.args) == 1 and isinstance(node.func, ast.Attribute) \
            and node.func.attr == "step" and isinstance(node.args[0], ast.Name):
        return node.args[0].id
    return None


def _loaded_into(tree: _Tree, branch: ast.If) -> str | None:
    """The scaler's name where `branch` is `amp.load_state_dict(state)` alone and the native branch before it is
    `NAME.load_state_dict(...)` alone, else None."""
    native_if = tree.parent(branch)
    calls = [s.value if isinstance(s, ast.Expr) else None for s in (*branch.body, *getattr(native_if, "body", []))]
    if len(calls) != 2 or not all(isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                                  and c.func.attr == "load_state_dict" and len(c.args) == 1 and not c.keywords
                                  for c in calls):
        return None
    native_call = calls[1]
    assert isinstance(native_call, ast.Call) and isinstance(native_call.func, ast.Attribute)  # checked above
    return native_call.func.value.id if isinstance(native_call.func.value, ast.Name) else None


def _raises_alone(tree: _Tree, compare: ast.Compare) -> ast.If | None:
    """The `if` whose test is an `and` with `compare` an operand, whose body only raises, with no `else`; or None."""
    guard = tree.parent(compare)
    holder = tree.parent(guard)
    if isinstance(guard, ast.BoolOp) and isinstance(guard.op, ast.And) and isinstance(holder, ast.If) \
            and holder.test is guard and not holder.orelse and all(isinstance(s, ast.Raise) for s in holder.body) \
            and any(_apex_missing(operand) for operand in guard.values):
        return holder
    return None


def _apex_missing(test: ast.expr) -> bool:
    """`'apex' not in ...` (`sys.modules`): apex was not imported."""
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Constant) and test.left.value == "apex"
            and len(test.ops) == 1 and isinstance(test.ops[0], ast.NotIn))


def _alone_on_its_lines(tree: _Tree, statement: ast.stmt) -> bool:
    """Only blanks before the statement on its first line, and only blanks or a comment after it on its last."""
    start, end = tree.index.span(statement)
    before = tree.index.text[tree.index.line_start(statement.lineno):start]
    after = tree.index.text[end:tree.index.line_end(_last_line(statement))]
    return not before.strip() and (not after.strip() or after.strip().startswith("#"))


def _initialize_settings(tree: _Tree, uses: list[AmpUse]) -> str | None:
    """The opt_level initialize is given, as spelled ("apex's default, O1" where none), or None where it is given
    anything else (a loss_scale, keep_batchnorm_fp32...: settings the native path has no place for)."""
    spelled = "apex's default, O1"
    for use in uses:
        call = use.ref.parent
        if use.full != rules.INITIALIZE.title or not isinstance(call, ast.Call):
            continue
        if len(call.args) > 2 or any(k.arg != "opt_level" for k in call.keywords):
            return None
        spelled = next((f"`{tree.text(k.value)}`" for k in call.keywords), spelled)
    return spelled


def _registrations(tree: _Tree, registrations: list[AmpUse], switched: Switched) -> list[ast.stmt] | str:
    """The `if 'apex' in sys.modules:` holding only registrations autocast makes no-ops (or the registration's own
    statement where its block holds more), to remove; their messages."""
    removed: list[ast.stmt] = []
    for use in registrations:
        statement = tree.parent(use.ref.parent)
        holder = tree.parent(statement)
        assert isinstance(statement, ast.Expr)  # registrations.no_op_registrations
        gone: ast.stmt = statement
        if isinstance(holder, ast.If) and holder.body == [statement] and not holder.orelse \
                and runs_nothing(holder.test):
            gone = holder
        if len(tree.block_of(gone)[0]) == 1 or not _alone_on_its_lines(tree, gone):
            return (f"removing the registration on line {statement.lineno} (or the `if` holding it alone) would "
                    "leave its block empty, or a statement shares its lines")
        if gone not in removed:
            removed.append(gone)
        assert isinstance(use.ref.parent, ast.Call)  # a registration's call
        name = float16_function(use.ref.parent, use.ref.scope, tree.engine.resolve)
        switched.messages[id(use.ref)] = (
            f"`{tree.text(statement)}` is removed: CUDA autocast runs torch.{name} in float16 already (it is on "
            "autocast's float16 list), so under the native path's autocast the registration has nothing to do")
    return removed


def _import_kept(tree: _Tree, import_node: ast.ImportFrom, optional: OptionalImport | None) -> str | None:
    """Why the import cannot simply go, or None: it imports amp alone, on lines of its own; an optional one's `try`
    holds the import alone and its handler only calls (a warning) or passes: a name it bound would be left unbound."""
    statement: ast.stmt = import_node if optional is None else optional.statement
    if len(import_node.names) != 1 or not _alone_on_its_lines(tree, statement):
        return f"the apex import on line {import_node.lineno} imports more, or shares its lines"
    if optional is not None and optional.others:
        return None  # the `try` also imports apex.parallel: removed by the step after both rewrites (`detect`)
    if optional is not None and _unbound_left(optional):
        return (f"the optional import's `try` on line {statement.lineno} sets names (flags, or in its `except`), "
                "which removing it would leave unbound")
    if optional is not None and optional.flags_set and "#" in tree.text(statement):
        return f"the optional import's `try` on line {statement.lineno}, whose flags stay, holds a comment"
    return None


def _flags(optional: OptionalImport) -> list[str]:
    """The names the `try` sets True after the import."""
    return [t.id for flag in optional.flags_set for t in flag.targets if isinstance(t, ast.Name)]


def _unbound_left(optional: OptionalImport) -> bool:
    """Would removing the `try` leave a name unbound that it bound? Its flags stay where it was (True, as where apex
    imported), and the apex.amp name has no use left; a name only its `except` sets (`HAS_APEX = False` with no
    `HAS_APEX = True` in the `try`) would be."""
    kept = {*_flags(optional), optional.amp_name}
    return any(isinstance(s, ast.Assign) and any(not (isinstance(t, ast.Name) and t.id in kept) for t in s.targets)
               for h in optional.statement.handlers for s in h.body)


def _import_removal(tree: _Tree, import_node: ast.ImportFrom, optional: OptionalImport | None,
                    switched: Switched) -> Splices:
    """The import of apex.amp (the optional one's whole `try`, its `except` branch with it): nothing is left to
    use it, and torch.amp is always there."""
    statement: ast.stmt = import_node if optional is None else optional.statement
    if optional is not None and optional.others:
        switched.messages[id(import_node)] = "the optional `from apex import amp` is removed: no apex.amp use is left"
        return []  # with the apex.parallel imports of its `try`, by the step after both rewrites (`detect`)
    if optional is not None and optional.flags_set:  # each flag stays where the `try` was, always True
        flags = _flags(optional)
        newline = "\r\n" if tree.index.text.count("\r\n") else "\n"
        kept = "".join(f"{tree.text(flag)}{newline}" for flag in optional.flags_set)
        switched.messages[id(import_node)] = (
            "the optional `from apex import amp` and its `except` branch are removed: no apex.amp use is left, and "
            f"the native path that takes its place is always there; {', '.join(f'`{f}`' for f in flags)}, True "
            f"exactly where apex imported, {'is' if len(flags) == 1 else 'are'} now always True")
        index = tree.index
        return [(index.line_start(statement.lineno), index.line_end(_last_line(statement)), kept)]
    if optional is not None:
        switched.messages[id(import_node)] = (
            "the optional `from apex import amp` and its `except` branch are removed: no apex.amp use is left, and "
            "the native path that takes its place is always there")
    return [(*tree.index.removal(statement.lineno, _last_line(statement)), "")]


def _load_through_the_helper(tree: _Tree, uses: list[AmpUse], loads: dict[int, tuple[ast.If, str]],
                             switched: Switched) -> None:
    """`amp.load_state_dict(state)` -> `scaler.load_state_dict(<helper>(state))`, the helper added once, before the
    top-level statement holding the first such chain."""
    if not loads:
        return
    engine, index = tree.engine, tree.index
    helper = engine.free_name(rules.SCALER_STATE_HELPER_NAME)
    newline = "\r\n" if index.text.count("\r\n") else "\n"
    first = min((branch for branch, _ in loads.values()), key=lambda b: b.lineno)
    top: ast.AST = first
    while (above := tree.parent(top)) is not engine.tree and above is not None:
        top = above
    assert isinstance(top, ast.stmt)  # a statement of the module
    at = index.line_start(first_line(top))
    switched.splices.append((at, at, rules.SCALER_STATE_HELPER.format(name=helper, nl=newline) + newline * 2))
    for branch, scaler in loads.values():
        call = branch.body[0].value if isinstance(branch.body[0], ast.Expr) else None
        assert isinstance(call, ast.Call)  # _loaded_into
        start, end = index.span(call)
        switched.splices.append((start, end, f"{scaler}.load_state_dict({helper}({tree.text(call.args[0])}))"))
        use = next(u for u in uses if u.ref.parent is call.func or u.ref.node is call.func)
        switched.messages[id(use.ref)] = (
            f"`{tree.text(call)}` -> `{scaler}.load_state_dict({helper}(...))`: into the native branch's scaler, "
            f"through `{helper}` (added at module level), which also reads the format apex.amp.state_dict() wrote "
            f"({rules.APEX_STATE_KEYS}): a checkpoint an apex run saved still resumes")
