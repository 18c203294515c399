"""Outdated version branches (AMP012): an `if` chain whose tests compare the torch version with literals,
decided at a declared target (`Options.declares_target`), keeps only what the target runs.

A branch the target never runs is removed with its header; a branch it always runs becomes the `else` of the
branches still undecided before it, or, with none, its body takes the chain's place, dedented; an `if` left
with nothing goes (`pass` where its block would be empty). A module-level name bound to a version test and
read only by tests removed here goes too. A test with any part that is not a version comparison
(`and DEVICE == "cuda"`) is undecided and stays, with everything after it in its chain.

Everything is text splices over whole lines and line-start indentation (the one splice path,
`ampfix.engine.apply`), so comments go with the lines they stand on and string contents are never reindented.
Runs last: dead branches hold every other planner's edits back (`ModuleContext.hold_back`), and where another
edit would meet a splice (an import re-printed in the same top-level statement, a call re-printed across lines
that are reindented) the chain is reported and left.
"""

from __future__ import annotations

import ast
import tokenize
from dataclasses import dataclass, field

from ampfix.core.locations import first_line, tokens
from ampfix.core.plan import Edit, Splice
from ampfix.families import VERSION_BRANCH_CODE
from ampfix.syntax import version_tests
from ampfix.syntax.bindings import Guard, Scope
from ampfix.syntax.context import ModuleContext, Sink
from ampfix.syntax.version_tests import UNKNOWN, BoolOp, Not, Test

_STATEMENT_LISTS = ("body", "orelse", "finalbody")


@dataclass
class _Branch:
    test: ast.expr | None  # None: the `else`
    keyword_line: int  # the line of `if` / `elif` / `else`
    keyword_col: int
    header_end_line: int  # the line holding the header's colon
    colon_col: int  # its column, in characters
    body: list[ast.stmt]
    value: bool | None = None  # at the target; None: undecided


@dataclass
class _Chain:
    node: ast.If
    scope: Scope
    block: list[ast.stmt]  # the statement list the chain stands in
    branches: list[_Branch]
    end_line: int
    deleted: set[int] = field(default_factory=set)  # lines removed
    covered: set[int] = field(default_factory=set)  # lines inside a header rewritten (`keywords`)
    reindent: dict[int, tuple[str, str]] = field(default_factory=dict)  # line -> (old prefix, new prefix)
    keywords: list[tuple[int, int, str]] = field(default_factory=list)  # (start, end, text) splices in headers
    removed_tests: list[ast.expr] = field(default_factory=list)
    findings: list[tuple[int, str]] = field(default_factory=list)  # (line, message)
    pass_at: tuple[int, str] | None = None  # a `pass` at this line with this indentation


def plan_outdated_branches(context: ModuleContext, sink: Sink) -> None:
    options = context.options
    if not options.declares_target or options.target_torch is None:
        return
    planner = _Planner(context)
    planner.statements(context.tree.body, context.walker.module_scope, context.tree.body)
    if not planner.chains:
        return
    groups = [(first_line(stmt), _last_line(stmt)) for stmt in context.tree.body]
    by_group: dict[int, list[_Chain]] = {}
    for chain in planner.chains:
        by_group.setdefault(_group_of(groups, chain.node.lineno), []).append(chain)
    applied: list[_Chain] = []
    for group, chains in by_group.items():
        first, last = groups[group]
        extent = (context.index.line_start(first), context.index.line_end(last))
        splices = _group_splices(context, chains, _reprinted_lines(context, sink.edits, chains))
        conflict = _conflict(sink.edits, extent, splices)
        _report(context, sink, chains, splices, conflict)
        if conflict is None:
            applied += chains
    for statement in _unused_bindings(context, applied):
        start, end = context.index.line_start(statement.lineno), context.index.line_end(_last_line(statement))
        target = statement.targets[0]
        assert isinstance(target, ast.Name)  # `_unused_bindings` takes `NAME = test` only
        message = (f"outdated version test: `{target.id}` is decided at the target torch "
                   f"({context.judge.target_text()}) and read only by the tests removed: removed")
        finding = sink.finding(statement, VERSION_BRANCH_CODE, message, fixable=True, will_fix=True)
        sink.add((finding,), (Edit(start, end, statement.lineno, "Splice", "", Splice("")),))


class _Planner:
    def __init__(self, context: ModuleContext) -> None:
        self.context = context
        self.target = context.options.target_torch
        self.scopes = {id(ref.node): ref.scope for ref in context.walker.chains}
        self.chains: list[_Chain] = []

    def statements(self, body: list[ast.stmt], scope: Scope, block: list[ast.stmt]) -> None:
        for stmt in body:
            inner = scope
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = self.inner_scope(stmt, scope)
            if isinstance(stmt, ast.If):
                chain = self.chain(stmt, scope, block)
                if chain is not None:
                    self.chains.append(chain)
                    for branch in chain.branches:  # nested tests, in the branches kept
                        if branch.value is not False:
                            self.statements(branch.body, scope, branch.body)
                    continue
            for name in _STATEMENT_LISTS:
                inner_body = getattr(stmt, name, None)
                if isinstance(inner_body, list) and inner_body and isinstance(inner_body[0], ast.stmt):
                    self.statements(inner_body, inner, inner_body)
            for handler in getattr(stmt, "handlers", ()):
                self.statements(handler.body, inner, handler.body)
            for case in getattr(stmt, "cases", ()):
                self.statements(case.body, inner, case.body)

    def inner_scope(self, stmt: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, scope: Scope) -> Scope:
        """The scope of a def's or class's body: the one some name in it was walked in."""
        for node in ast.walk(stmt):
            found = self.scopes.get(id(node))
            if found is not None and found.node is stmt:
                return found
        return scope

    def scope_of(self, test: ast.expr, fallback: Scope) -> Scope:
        return next((self.scopes[id(n)] for n in ast.walk(test) if id(n) in self.scopes), fallback)

    def chain(self, node: ast.If, scope: Scope, block: list[ast.stmt]) -> _Chain | None:
        lines = self.context.lines
        branches: list[_Branch] = []
        current: ast.If | None = node
        while current is not None:
            colon = _colon(lines, current.test)
            if colon is None or current.body[0].lineno == colon[0]:
                return None  # a one-line suite (`if test: x`): left
            branch = _Branch(current.test, current.lineno, current.col_offset, *colon, current.body)
            branch.value = self.decide(current.test, self.scope_of(current.test, scope))
            branches.append(branch)
            orelse = current.orelse
            if len(orelse) == 1 and isinstance(orelse[0], ast.If) and _is_elif(lines, orelse[0]):
                current = orelse[0]
                continue
            if orelse:
                line = _else_line(lines, branch.body[-1], orelse[0])
                if line is None:
                    return None
                col = lines[line - 1].index(":")
                branches.append(_Branch(None, line, node.col_offset, line, col, orelse))
            current = None
        if all(branch.value is None for branch in branches if branch.test is not None):
            return None
        chain = _Chain(node, scope, block, branches, _last_line(node))
        return chain if _collapse(self.context, chain) else None

    def decide(self, test: ast.expr, scope: Scope) -> bool | None:
        decided = self.context.judge.version_test(test, scope, frozenset())
        if _has_unknown(decided):
            return None
        values = version_tests.outcomes(decided, self.target)
        return next(iter(values)) if len(values) == 1 else None


def _collapse(context: ModuleContext, chain: _Chain) -> bool:
    """Plan the chain's lines: what goes, what is reindented, which header changes. False where a line
    cannot be reindented as text (indentation that is not the block's)."""
    index, lines = context.index, context.lines
    branches = chain.branches
    kept: list[_Branch] = []
    runs: _Branch | None = None  # the branch the target runs whenever it reaches it
    for branch in branches:
        if branch.test is None or branch.value is True:
            runs = branch
            break
        if branch.value is None:
            kept.append(branch)
    head_indent = lines[chain.node.lineno - 1][:chain.node.col_offset]
    for i, branch in enumerate(branches):
        start = branch.keyword_line
        end = branches[i + 1].keyword_line - 1 if i + 1 < len(branches) else chain.end_line
        if branch in kept:
            if branch is kept[0] and branch is not branches[0]:  # `elif` -> `if`
                offset = index.line_start(start) + branch.keyword_col
                chain.keywords.append((offset, offset + 4, "if"))
            continue
        if branch is runs and kept:  # `elif test:` -> `else:`, or the `else` as it is
            if branch.test is not None:
                assert branch.test.end_lineno is not None
                offset = index.line_start(start) + branch.keyword_col
                colon = index.line_start(branch.header_end_line) + branch.colon_col
                chain.keywords.append((offset, colon + 1, "else:"))
                chain.covered.update(range(start + 1, branch.header_end_line + 1))
                chain.removed_tests.append(branch.test)
            continue
        if branch is runs:  # no test left before it: its body takes the chain's place
            chain.deleted.update(range(start, branch.header_end_line + 1))
            if branch.test is not None:
                chain.removed_tests.append(branch.test)
            body_indent = lines[branch.body[0].lineno - 1][:branch.body[0].col_offset]
            if not body_indent.startswith(head_indent) or body_indent.strip():
                return False
            for line in range(branch.header_end_line + 1, end + 1):
                chain.reindent[line] = (body_indent, head_indent)
            continue
        chain.deleted.update(range(start, end + 1))  # never run
        if branch.test is not None:
            chain.removed_tests.append(branch.test)
        if branch.value is False:
            chain.findings.append((branch.keyword_line, _dead_message(context, chain, branch)))
        elif runs is not None and runs.test is not None:  # after a test the target always passes
            chain.findings.append((branch.keyword_line, _dead_message(context, chain, runs, taken=False)))
    if runs is not None and not kept and not chain.findings:
        chain.findings.append((chain.node.lineno, _runs_message(context, runs, chain)))
    if runs is None and not kept and len(chain.block) == 1 and chain.block is not context.tree.body:
        chain.pass_at = (chain.node.lineno, head_indent)
    return True


def _dead_message(context: ModuleContext, chain: _Chain, branch: _Branch, taken: bool = True) -> str:
    """The code under `branch`'s test (`taken`) or after it (not `taken`) never runs."""
    assert branch.test is not None
    guard = Guard("if", branch.test, chain.scope, taken=taken)
    test = context.judge.version_test(branch.test, chain.scope, frozenset())
    return f"outdated version branch: the code {context.judge.dead_reason(guard, test)}"


def _runs_message(context: ModuleContext, runs: _Branch, chain: _Chain) -> str:
    where = "the `else`" if runs.test is None else "the branch"
    return (f"outdated version test (line {chain.node.lineno}): the target torch ({context.judge.target_text()}) "
            f"always runs {where} on line {runs.keyword_line}; its body stands in the test's place")


def _reprinted_lines(context: ModuleContext, edits: tuple[Edit, ...], chains: list[_Chain]) -> frozenset[int]:
    """The continuation lines of the calls another edit re-prints (`ampfix.engine.apply`): no splice may
    cross a re-printed call, so they are left to the applier, which keeps them against their bracket
    (`ampfix.engine.continuation`)."""
    calls = [node for chain in chains for node in ast.walk(chain.node) if isinstance(node, ast.Call)]
    found: set[int] = set()
    for call in calls:
        start, end = context.index.span(call)
        if call.end_lineno and any(start <= edit.start < end for edit in edits):
            found.update(range(call.lineno + 1, call.end_lineno + 1))
    return frozenset(found)


def _group_splices(context: ModuleContext, chains: list[_Chain],
                   reprinted: frozenset[int]) -> list[tuple[int, int, str]]:
    index, lines = context.index, context.lines
    deleted: set[int] = set()
    covered: set[int] = set()
    ops: dict[int, list[tuple[str, str]]] = {}
    keywords: list[tuple[int, int, str]] = []
    passes: dict[int, str] = {}
    for chain in chains:  # outer chains first: a nested chain's reindent applies before its outer's
        deleted |= chain.deleted
        covered |= chain.covered
        for line, op in chain.reindent.items():
            ops.setdefault(line, []).insert(0, op)
        keywords += chain.keywords
        if chain.pass_at is not None:
            passes[chain.pass_at[0]] = chain.pass_at[1]
    inside_strings = context.fact(_string_lines)
    splices: list[tuple[int, int, str]] = []
    for line in sorted(deleted):
        start, end = index.line_start(line), index.line_end(line)
        text = ""
        if line in passes:  # the `if` stood alone in its block
            indent = _reindented(passes[line], ops.get(line, []))
            text = f"{indent}pass{_line_break(lines[line - 1])}"
        if splices and splices[-1][1] == start and not splices[-1][2] and not text:
            splices[-1] = (splices[-1][0], end, "")
        else:
            splices.append((start, end, text))
    for line, line_ops in sorted(ops.items()):
        if line in deleted or line in covered or line in inside_strings or line in reprinted:
            continue
        text = lines[line - 1]
        indent = text[:len(text) - len(text.lstrip(" \t"))]
        if not text.strip():
            continue
        new = _reindented(indent, line_ops)
        if new != indent:
            start = index.line_start(line)
            splices.append((start, start + len(indent), new))
    splices += keywords
    return sorted(splices)


def _reindented(indent: str, ops: list[tuple[str, str]]) -> str:
    for old, new in ops:
        if indent.startswith(old):
            indent = new + indent[len(old):]
        elif old.startswith(indent):  # a comment or a continuation line left of the block: as far as it goes
            indent = new[:len(indent)] if len(indent) < len(new) else new
    return indent


def _conflict(edits: tuple[Edit, ...], group: tuple[int, int], splices: list[tuple[int, int, str]]) -> str | None:
    """Why these splices cannot go with the edits already planned in the same top-level statement, or None."""
    inside = [edit for edit in edits if group[0] <= edit.start < group[1]]
    for edit in inside:
        if any(s < edit.end and edit.start < e for s, e, _ in splices):
            return f"a rewrite on line {edit.line} meets the lines removed or reindented"
    return None


def _report(context: ModuleContext, sink: Sink, chains: list[_Chain], splices: list[tuple[int, int, str]],
            conflict: str | None) -> None:
    findings = []
    for chain in chains:
        for line, message in chain.findings:
            node = ast.Pass(lineno=line, col_offset=0)
            if conflict is None:
                findings.append(sink.finding(node, VERSION_BRANCH_CODE, message + ": removed", fixable=True,
                                             will_fix=True))
            else:
                findings.append(sink.finding(node, VERSION_BRANCH_CODE, f"{message}; left: {conflict}",
                                             fixable=False))
    if conflict is not None:
        sink.add(tuple(findings))
        return
    deleted = {line for chain in chains for line in chain.deleted}
    sink.withdraw(deleted)
    edits = tuple(Edit(start, end, context.index.text.count("\n", 0, start) + 1, "Splice", "", Splice(text))
                  for start, end, text in splices)
    sink.add(tuple(findings), edits)


def _unused_bindings(context: ModuleContext, chains: list[_Chain]) -> list[ast.Assign]:
    """Module-level `NAME = <version test>` statements (alone on their lines) whose name appears nowhere else in
    the module but in tests removed here: not in another binding, a `global`, or a string (`__all__`)."""
    removed = {id(node) for chain in chains for test in chain.removed_tests for node in ast.walk(test)}
    mentions: dict[str, list[ast.AST]] = {}
    for node in ast.walk(context.tree):
        if isinstance(node, ast.Name):
            mentions.setdefault(node.id, []).append(node)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                mentions.setdefault(name, []).append(node)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            mentions.setdefault(node.value, []).append(node)
    found = []
    for stmt in context.tree.body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            continue
        target = stmt.targets[0]
        others = [node for node in mentions.get(target.id, []) if node is not target]
        if not others or not all(id(node) in removed for node in others) or not _alone(context, stmt):
            continue
        if not _has_unknown(context.judge.version_test(stmt.value, context.walker.module_scope, frozenset())):
            found.append(stmt)
    return found


def _alone(context: ModuleContext, stmt: ast.stmt) -> bool:
    """Is the statement alone on its lines (no `;` neighbour), so that removing its lines removes it only?"""
    first = context.lines[stmt.lineno - 1].encode("utf-8")[:stmt.col_offset]
    last = context.lines[_last_line(stmt) - 1].encode("utf-8")[stmt.end_col_offset or 0:]
    return not first.strip() and (not last.strip() or last.strip().startswith(b"#"))


def _has_unknown(test: Test) -> bool:
    if test is UNKNOWN:
        return True
    if isinstance(test, Not):
        return _has_unknown(test.operand)
    if isinstance(test, BoolOp):
        return any(_has_unknown(operand) for operand in test.operands)
    return False


def _colon(lines: list[str], test: ast.expr) -> tuple[int, int] | None:
    """The line and column (in characters) of the colon that ends the header whose test this is: after the
    test come only closing parentheses, blanks, comments and line continuations."""
    line, col = test.end_lineno or test.lineno, test.end_col_offset or 0
    text = lines[line - 1].encode("utf-8")[col:].decode("utf-8", "replace")
    while True:
        stripped = text.lstrip(" \t)")
        if stripped.startswith(":"):
            return line, len(lines[line - 1]) - len(stripped)
        if stripped.startswith(("#", "\\", "\r", "\n")) or not stripped:
            line += 1
            if line > len(lines):
                return None
            text = lines[line - 1]
            continue
        return None


def _is_elif(lines: list[str], node: ast.If) -> bool:
    return lines[node.lineno - 1].encode("utf-8")[node.col_offset:].startswith(b"elif")


def _else_line(lines: list[str], last: ast.stmt, first: ast.stmt) -> int | None:
    """The line of the `else:` between a body's last statement and the `else` body's first."""
    for line in range((last.end_lineno or last.lineno) + 1, first.lineno):
        stripped = lines[line - 1].lstrip(" \t")
        if stripped.startswith("else") and stripped[4:].lstrip(" \t").startswith(":"):
            return line if not stripped[4:].lstrip(" \t")[1:].strip(" \t\r\n") else None
    return None


def _last_line(node: ast.stmt) -> int:
    return node.end_lineno or node.lineno


def _line_break(line: str) -> str:
    return line[len(line.rstrip("\r\n")):] or "\n"


def _group_of(groups: list[tuple[int, int]], line: int) -> int:
    return next(i for i, (first, last) in enumerate(groups) if first <= line <= last)


def _string_lines(context: ModuleContext) -> frozenset[int]:
    """Lines that begin inside a string token (the second and later lines of a multi-line string)."""
    found: set[int] = set()
    depth_start: list[int] = []
    try:
        for token in tokens(context.source):
            kind = tokenize.tok_name.get(token.type, "")
            if kind == "STRING" and token.end[0] > token.start[0]:
                found.update(range(token.start[0] + 1, token.end[0] + 1))
            elif kind == "FSTRING_START":
                depth_start.append(token.start[0])
            elif kind == "FSTRING_END" and depth_start:
                begin = depth_start.pop()
                found.update(range(begin + 1, token.end[0] + 1))
    except (tokenize.TokenError, SyntaxError):
        return frozenset(range(1, len(context.lines) + 1))  # nothing reindented where tokens are unsure
    return frozenset(found)
