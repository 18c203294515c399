"""A switch between apex.amp and the project's own native path on an enum's members, across modules (vissl, on
classy_vision's `AmpType`): one module sets `task.amp_type` to `AmpType.APEX` or `AmpType.PYTORCH` (or None), and
every module that reads it compares it to a member:

    if task.amp_type == AmpType.APEX:                   if task.amp_type in (AmpType.PYTORCH, AmpType.APEX):
        with apex.amp.scale_loss(loss, opt) as s:           task.amp_grad_scaler.scale(loss).backward()
            s.backward()                        ->      else:
    elif task.amp_type == AmpType.PYTORCH:                  loss.backward()
        task.amp_grad_scaler.scale(loss).backward()
    else:
        loss.backward()

The switch is found from resolved names: every apex.amp use of the project lies in the body of an `if X == E.A:`
(E.A a dotted name resolved through the module's imports: the apex member), and the project's modules compare E's
members to exactly one other member, E.N (the native one). The apex member then takes the native member's path in
every module that reads them: each `X == E.N` reads `X in (E.N, E.A)` (true for exactly those two values: None and
any other value run as before); an `if X == E.A:` followed by `elif X == E.N:` goes, the `elif` becoming that
widened `if`; an `if X == E.A:` with no `else` goes (the native value ran nothing there); one whose body loads
apex's state (`apex.amp.load_state_dict(S)`, alone or under an availability test whose `else` only calls) and whose
`else` is `SCALER.load_state_dict(S)` loads into that scaler through the helper that also reads apex's format, so a
checkpoint an apex run saved still resumes. The module's apex import goes where no other use of apex is left. Any
other read of E or its members, or any other `if` on the apex member, and nothing is rewritten: the modules are
rewritten together or none (each asks the others' plans, as a split set-up does: `ampfix.families.apex.split`). The
numerics of the apex value change (apex's opt_level and its loss scaler's settings no longer apply): under
--unsafe-fixes only.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ampfix.core.locations import SourceIndex, first_line
from ampfix.core.plan import free_name
from ampfix.core.project import ProjectModules
from ampfix.families.apex import rules
from ampfix.families.apex.rewrite.tree import _last_line
from ampfix.syntax.bindings import ChainRef, Walker, resolve

_APEX = "apex"


@dataclass(frozen=True)
class Members:
    """The switch: the enum's qualified name, its apex member and its native member (their names)."""

    enum: str
    apex: str
    native: str

    @property
    def where(self) -> str:
        name = self.enum.rpartition(".")[2]
        return (f"the switch on `{name}` across the project's modules (`{name}.{self.native}` native, "
                f"`{name}.{self.apex}` apex.amp)")


@dataclass
class Switched:
    """One module's part: its splices, the message of each apex.amp use (by id() of its node) and of each import it
    removes (by id() of the import), the comparisons it widens (their nodes), what the note says the apex value
    loses here."""

    splices: list[tuple[int, int, str]] = field(default_factory=list)
    messages: dict[int, str] = field(default_factory=dict)
    widened: list[ast.Compare] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)


class _Module:
    """A module's tree as the switch reads it: its dotted names with what each resolves to, each node's parent."""

    def __init__(self, tree: ast.Module, chains: list[ChainRef] | None = None) -> None:
        self.tree = tree
        if chains is None:
            walker = Walker()
            walker.statements(tree.body, walker.module_scope)
            chains = walker.chains
        self.resolved: list[tuple[ChainRef, str]] = []
        for chain in chains:
            found = resolve(chain.node, chain.scope)
            if found is not None and found.qname is not None:
                self.resolved.append((chain, found.qname))
        self._parents: dict[int, ast.AST] | None = None

    def parent(self, node: ast.AST) -> ast.AST | None:
        if self._parents is None:
            self._parents = {id(child): holder for holder in ast.walk(self.tree)
                             for child in ast.iter_child_nodes(holder)}
        return self._parents.get(id(node))

    def apex_uses(self) -> list[ChainRef]:
        return [chain for chain, qname in self.resolved if _below(qname, rules.AMP_MODULE)]

    def reads_below(self, enum: str) -> list[tuple[ChainRef, str]]:
        return [(chain, qname) for chain, qname in self.resolved if _below(qname, enum)]

    def compared(self, node: ast.expr) -> ast.Compare | None:
        """The `X == node` whose right side `node` is (one comparison), or None."""
        holder = self.parent(node)
        if isinstance(holder, ast.Compare) and len(holder.ops) == 1 and isinstance(holder.ops[0], ast.Eq) \
                and holder.comparators[0] is node:
            return holder
        return None

    def member_test(self, test: ast.expr) -> str | None:
        """The qualified name `test` compares to, where it is `X == E.M`: E a name the module imports from a module
        (`from pkg.amp_types import AmpType`, so E.M resolves to `pkg.amp_types.AmpType.M`), else None (`X ==
        torch.float16` compares to a module's attribute, not a class's member)."""
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
                and isinstance(right := test.comparators[0], ast.Attribute) and isinstance(right.value, ast.Name)):
            return None
        qname = next((qname for chain, qname in self.resolved if chain.node is right), None)
        return qname if qname is not None and qname.count(".") >= 2 else None

    def apex_branch(self, node: ast.AST) -> ast.If | None:
        """The innermost `if X == E.M:` whose body holds `node`, or None."""
        child, holder = node, self.parent(node)
        while holder is not None:
            if isinstance(holder, ast.If) and any(child is s for s in holder.body) \
                    and self.member_test(holder.test) is not None:
                return holder
            child, holder = holder, self.parent(holder)
        return None


def _below(qname: str, name: str) -> bool:
    return qname == name or qname.startswith(name + ".")


def apex_member(module: _Module) -> str | None:
    """The qualified name of the member every apex.amp use of the module is compared to (`if X == E.A:` around it),
    "" where the uses are not all so, None where the module uses no apex.amp."""
    uses = module.apex_uses()
    if not uses:
        return None
    found = set()
    for use in uses:
        branch = module.apex_branch(use.node)
        if branch is None:
            return ""
        found.add(module.member_test(branch.test))
    return found.pop() if len(found) == 1 else ""


def guarding_enum(tree: ast.Module) -> str | None:
    """The qualified name of the enum whose member guards every apex.amp use of the module, or None."""
    member = apex_member(_Module(tree))
    return member.rpartition(".")[0] or None if member else None


def switch_of(own: _Module, project: ProjectModules) -> tuple[Members, tuple[str, ...]] | str | None:
    """The switch the project's modules make (this one, `own`, among them), and the other files that read its enum;
    or why it is not one; None where the project's apex.amp uses are not all in branches on one member."""
    members = {apex_member(own)}
    if "" in members:
        return None  # this module's own uses are no such switch: the project is not asked
    apex_files = _files(project.uses_below(rules.AMP_MODULE))
    for place in apex_files:
        tree = project.tree_of(place)
        members.add(apex_member(_Module(tree)) if tree is not None else "")
    members.discard(None)
    if len(members) != 1 or "" in members:
        return None
    apex = members.pop()
    assert apex is not None  # discarded above
    enum, _, apex_name = apex.rpartition(".")
    if not enum:
        return None
    readers = _files(project.uses_below(enum))
    names: dict[str, str] = {}  # each member the modules read: where first
    for place, module in [("this module", own), *((p, _Module(t)) for p in readers
                                                   if (t := project.tree_of(p)) is not None)]:
        for chain, qname in module.reads_below(enum):
            if qname != enum:
                names.setdefault(qname[len(enum) + 1:], f"{place.rpartition(':')[0] or place}:{chain.node.lineno}")
    others = [name for name in names if name != apex_name]
    name = enum.rpartition(".")[2]
    if len(others) != 1:
        where = ", ".join(f"`{name}.{n}` ({names[n]})" for n in others[:3]) or "none"
        where += f" and {len(others) - 3} more" if len(others) > 3 else ""
        return (f"apex.amp is used under `{name}.{apex_name}` tests, and the project's modules compare `{name}` to "
                f"other members than one native one: {where}")
    return Members(enum, apex_name, others[0]), tuple(dict.fromkeys((*readers, *apex_files)))


def _files(places: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(place.rpartition(":")[0] if place.rpartition(":")[2].isdigit() else place
                               for place in places))


def settled(tree: ast.Module, members: Members) -> bool:
    """The module as the switch leaves it (rewritten already by this run, or by hand): no apex.amp use, and each
    read of the members in a widened comparison, or the test of a load through the helper."""
    module = _Module(tree)
    return not module.apex_uses() and all(
        qname == members.enum and isinstance(module.parent(chain.node), (ast.Subscript, ast.Call))
        or _done(module, chain.node, members) for chain, qname in module.reads_below(members.enum))


def _done(module: _Module, node: ast.expr, members: Members) -> bool:
    """Is `node` (a read of a member) as the switch leaves it: in `X in (E.N, E.A)`, or the test `X == E.A` of an
    `if` that loads through the helper, `S.load_state_dict(H(A))`, and else `S.load_state_dict(A)`?"""
    names = (f"{members.enum}.{members.native}", f"{members.enum}.{members.apex}")
    pair, compare = module.parent(node), None
    if isinstance(pair, ast.Tuple) and len(pair.elts) == 2:
        compare = module.parent(pair)
        return isinstance(compare, ast.Compare) and len(compare.ops) == 1 and isinstance(compare.ops[0], ast.In) \
            and compare.comparators[0] is pair \
            and tuple(next((q for c, q in module.resolved if c.node is e), None) for e in pair.elts) == names
    compare = module.compared(node)
    holder = module.parent(compare) if compare is not None else None
    if not (isinstance(holder, ast.If) and holder.test is compare and len(holder.body) == len(holder.orelse) == 1
            and module.member_test(compare) == names[1]):
        return False
    loads = [s.value if isinstance(s, ast.Expr) else None for s in (holder.body[0], holder.orelse[0])]
    if not all(isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "load_state_dict"
               and len(c.args) == 1 for c in loads):
        return False
    helped, plain = (c.args[0] for c in loads if isinstance(c, ast.Call))
    return isinstance(helped, ast.Call) and len(helped.args) == 1 and ast.dump(helped.args[0]) == ast.dump(plain)


def plan_switch(module: _Module, index: SourceIndex, members: Members) -> Switched | str:
    """This module's part of the switch, or why it is not rewritten."""
    switched = Switched()
    apex_q, native_q = f"{members.enum}.{members.apex}", f"{members.enum}.{members.native}"
    handled: list[tuple[int, int]] = []  # the spans whose apex.amp uses go
    loads: list[tuple[ast.stmt, ast.Call, ast.Call]] = []  # (statement replaced, apex's load, the scaler's load)
    elifs: set[int] = set()  # id() of the `elif X == E.N` tests made the `if` of their chain
    for chain, qname in module.reads_below(members.enum):
        node, line = chain.node, chain.node.lineno
        if qname != members.enum and _done(module, node, members):
            continue  # rewritten already
        compare = module.compared(node)
        if qname == members.enum:
            if not isinstance(module.parent(node), (ast.Subscript, ast.Call)):
                return f"line {line} reads `{_text(index, node)}` otherwise than as `E[...]` or `E(...)`"
            continue
        if compare is None:
            return f"line {line} reads `{_text(index, node)}` otherwise than as `X == {_text(index, node)}`"
        holder = module.parent(compare)
        if qname == native_q:
            continue  # widened below, once the `if`s on the apex member have said which `elif`s they take
        if qname != apex_q or not isinstance(holder, ast.If) or holder.test is not compare:
            return f"line {line} compares to `{_text(index, node)}` otherwise than as the test of an `if`"
        if index.lines[holder.lineno - 1].lstrip().startswith("elif"):
            return f"the `if` on line {line} that tests `{_text(index, node)}` is an `elif`"
        after = holder.orelse[0] if len(holder.orelse) == 1 else None
        if isinstance(after, ast.If) and isinstance(after.test, ast.Compare) \
                and module.member_test(after.test) == native_q \
                and index.lines[after.lineno - 1].lstrip().startswith("elif") \
                and ast.dump(after.test.left) == ast.dump(compare.left):
            start, end = index.span(holder)[0], index.span(after.test)[1]
            switched.splices.append((start, end, f"if {_widened(index, after.test, members)}"))
            elifs.add(id(after.test))
            handled.append((start, end))
            switched.lost.append(f"the apex branch on line {holder.lineno} is removed")
        elif not holder.orelse:
            block = getattr(module.parent(holder), "body", None)
            if not isinstance(block, list) or len(block) == 1 or not _alone_on_its_lines(index, holder):
                return (f"removing the `if` on line {holder.lineno} would leave its block empty, or a statement "
                        "shares its lines")
            span = index.removal(holder.lineno, _last_line(holder))
            switched.splices.append((*span, ""))
            handled.append(index.span(holder))
            switched.lost.append(f"the apex branch on line {holder.lineno} is removed{_given(module, index, holder)}")
        else:
            load = _state_load(module, holder)
            if load is None:
                return (f"the `if` on line {holder.lineno} that tests `{_text(index, node)}` has an `else`, and is "
                        "neither followed by an `elif` on the native member nor a load of apex's state beside the "
                        "native scaler's")
            loads.append(load)
            handled.append(index.span(load[0]))
    for chain, qname in module.reads_below(members.enum):
        compare = module.compared(chain.node)
        inside = compare is not None and any(a <= index.span(compare)[0] < b for a, b in handled)
        if qname == native_q and compare is not None and id(compare) not in elifs and not inside:
            switched.splices.append((*index.span(compare), _widened(index, compare, members)))
            switched.widened.append(compare)
    uses = module.apex_uses()
    for use in uses:
        start, end = index.span(use.node)
        if not any(a <= start and end <= b for a, b in handled):
            return f"the apex.amp use on line {use.node.lineno} is not in a branch the switch removes"
    if loads:
        _load_through_the_helper(module, index, loads, switched)
    gone = _import_removals(module, index, handled, switched)
    if isinstance(gone, str):
        return gone
    spans = sorted((start, end) for start, end, _ in switched.splices)
    if any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:])):
        return "two of its edits meet (an `if` on a member inside the branch of another)"
    return switched


def _given(module: _Module, index: SourceIndex, branch: ast.If) -> str:
    """What the initialize calls in `branch` were given beyond the model and the optimizer, as the note says it."""
    calls = [chain.parent for chain, qname in module.resolved if qname == rules.INITIALIZE.title
             and isinstance(chain.parent, ast.Call) and index.span(branch)[0] <= index.span(chain.node)[0]
             < index.span(branch)[1]]
    given = [_text(index, node) for call in calls if isinstance(call, ast.Call)
             for node in (*call.args[2:], *call.keywords)]
    return f" (initialize there was given `{', '.join(given)}`: none of it applies now)" if given else ""


def _text(index: SourceIndex, node: ast.AST) -> str:
    start, end = index.span(node)
    return index.text[start:end]


def _widened(index: SourceIndex, compare: ast.Compare, members: Members) -> str:
    """`X == E.N` -> `X in (E.N, E.A)`, E spelled as there."""
    native = compare.comparators[0]
    assert isinstance(native, ast.Attribute)  # member_test / reads_below: a dotted name
    return f"{_text(index, compare.left)} in ({_text(index, native)}, {_text(index, native.value)}.{members.apex})"


def _alone_on_its_lines(index: SourceIndex, statement: ast.stmt) -> bool:
    start, end = index.span(statement)
    before = index.text[index.line_start(statement.lineno):start]
    after = index.text[end:index.line_end(_last_line(statement))]
    return not before.strip() and (not after.strip() or after.strip().startswith("#"))


def _state_load(module: _Module, holder: ast.If) -> tuple[ast.stmt, ast.Call, ast.Call] | None:
    """Where `holder`'s body is `apex.amp.load_state_dict(S)` alone (or an `if` holding it alone, whose `else` only
    calls: a warning that apex is missing) and its `else` is `SCALER.load_state_dict(S)`: (the statement of the body,
    apex's call, the scaler's call)."""
    if len(holder.body) != 1 or len(holder.orelse) != 1:
        return None
    statement = holder.body[0]
    inner = statement
    if isinstance(statement, ast.If) and len(statement.body) == 1 \
            and all(isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) for s in statement.orelse):
        inner = statement.body[0]
    calls = [s.value if isinstance(s, ast.Expr) else None for s in (inner, holder.orelse[0])]
    apex, native = calls
    if not all(isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "load_state_dict"
               and len(c.args) == 1 and not c.keywords for c in calls):
        return None
    assert isinstance(apex, ast.Call) and isinstance(native, ast.Call)  # checked above
    apex_name = next((q for chain, q in module.resolved if chain.node is apex.func), None)
    if apex_name != rules.LOAD_STATE or ast.dump(apex.args[0]) != ast.dump(native.args[0]):
        return None
    return statement, apex, native


def _load_through_the_helper(module: _Module, index: SourceIndex, loads: list[tuple[ast.stmt, ast.Call, ast.Call]],
                             switched: Switched) -> None:
    """Each load of apex's state -> the native scaler's load through the helper, added once before the module-level
    statement holding the first."""
    helper = free_name(module.tree, rules.SCALER_STATE_HELPER_NAME)
    newline = "\r\n" if index.text.count("\r\n") else "\n"
    top: ast.AST = loads[0][0]
    while (above := module.parent(top)) is not module.tree and above is not None:
        top = above
    assert isinstance(top, ast.stmt)  # a statement of the module
    at = index.line_start(first_line(top))
    switched.splices.append((at, at, rules.SCALER_STATE_HELPER.format(name=helper, nl=newline) + newline * 2))
    for statement, apex, native in loads:
        assert isinstance(native.func, ast.Attribute)  # _state_load
        scaler = _text(index, native.func.value)
        loaded = f"{scaler}.load_state_dict({helper}({_text(index, native.args[0])}))"
        switched.splices.append((*index.span(statement), loaded))
        switched.messages[id(apex.func)] = (
            f"`{_text(index, apex)}` -> `{loaded}`: into the native value's scaler, through `{helper}` (added at "
            f"module level), which also reads the format apex.amp.state_dict() wrote ({rules.APEX_STATE_KEYS}): a "
            "checkpoint an apex run saved still resumes")


def _import_removals(module: _Module, index: SourceIndex, handled: list[tuple[int, int]],
                     switched: Switched) -> None | str:
    """The module-level imports of apex (each alone, or alone under an `if` on a call: `if is_apex_available():`),
    removed where every use of what they bind goes with the switch; kept where another use is left (apex.parallel's,
    reported on their own)."""
    left = [chain for chain, qname in module.resolved if _below(qname, _APEX)
            and not any(a <= index.span(chain.node)[0] < b for a, b in handled)]
    imports = [s for s in ast.walk(module.tree) if isinstance(s, (ast.Import, ast.ImportFrom))
               and any(n.split(".")[0] == _APEX for n in _imported(s))]
    if left or not imports:
        return None
    for node in imports:
        holder = module.parent(node)
        statement: ast.stmt = node
        if isinstance(holder, ast.If) and holder.body == [node] and not holder.orelse \
                and isinstance(holder.test, (ast.Call, ast.Name)) and holder in module.tree.body:
            statement = holder
        if statement not in module.tree.body or any(n.split(".")[0] != _APEX for n in _imported(node)) \
                or not _alone_on_its_lines(index, statement):
            return (f"the apex import on line {node.lineno} is not alone at module level (or alone under an `if`), "
                    "or imports more")
        switched.splices.append((*index.removal(statement.lineno, _last_line(statement)), ""))
        switched.messages[id(node)] = (
            "the apex import is removed: no use of apex is left, and the native path that takes its place is always "
            "there")
    return None


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    return [f"{node.module}.{alias.name}" if node.module and not node.level else "" for alias in node.names]


@dataclass
class Planned:
    """The switch's part in this module, with what each use and comparison is told, and the note."""

    members: Members
    switched: Switched
    said: str
    note: str  # what the apex value loses here, with where
    lost: str  # the same, without


def project_switch(module: _Module, index: SourceIndex, project: ProjectModules,
                   unsafe_fixes: bool) -> Planned | str | None:
    """This module's part of a switch on an enum's members across the project, where every module that reads them
    plans its part in this run (asked of each under --unsafe-fixes); or why not; None where there is no such switch
    (or this module reads none of its members)."""
    found = switch_of(module, project)
    if found is None or isinstance(found, str):
        return found
    members, others = found
    if not module.reads_below(members.enum):
        return None
    where = members.where
    switched = plan_switch(module, index, members)
    if isinstance(switched, str):
        return f"{where}: {switched}"
    pending = [place for place in others if not _settled(project, place, members)]
    missing = [place for place in pending if not project.in_run(place)]
    if missing:
        return (f"{where}: every module that reads its members must be rewritten in the same run: "
                f"{', '.join(missing)} (give this run every such module, or the project's folder)")
    if unsafe_fixes:
        refused = [place for place in pending
                   if not project.half_planned(place) and not _settled(project, place, members)]
        if refused:
            return f"{where}: the part in {', '.join(refused)} is not rewritten (its findings say why)"
    name = members.enum.rpartition(".")[2]
    apex, native = f"{name}.{members.apex}", f"{name}.{members.native}"
    said = (f"{where}: `{apex}` now takes the path `{native}` took (torch.amp's autocast and GradScaler; apex.amp "
            f"is gone, so it could only fail): each `X == {native}` of the project's modules reads "
            f"`X in ({native}, {apex})`, and the apex branches are removed")
    elses = [f"where it ran the `else` of the `if` on line {holder.lineno}, it runs that `if`'s body, as the native "
             "value did" if isinstance(holder, ast.If) else
             f"where it took the `else` value of the conditional expression on line {holder.lineno}, it takes the "
             "first, as the native value did" for compare in switched.widened
             if isinstance(holder := module.parent(compare), (ast.If, ast.IfExp)) and holder.test is compare
             and (holder.orelse if isinstance(holder, ast.If) else True)]
    lost = (f"`{apex}` now runs torch.amp's autocast and a GradScaler with torch's defaults, not apex's opt_level "
            "(O2's float16 model and float32 master weights have no native twin) nor its loss scaler's settings"
            + "".join(f"; {part}" for part in (*switched.lost, *elses)))
    return Planned(members, switched, said, f"{where}: {lost}", lost)


def _settled(project: ProjectModules, place: str, members: Members) -> bool:
    tree = project.tree_of(place)
    return tree is not None and settled(tree, members)


def module_of(tree: ast.Module, chains: list[ChainRef]) -> _Module:
    """The module being planned, from the engine's walk of it."""
    return _Module(tree, chains)
