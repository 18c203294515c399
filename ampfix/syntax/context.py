"""What a planner works with: the read-only context of one module, and the sink it writes into.

A planner is a function `planner(context, sink)`; the engine runs them in the one sequence it declares
(`ampfix.engine.pipeline.PLANNERS`). The context holds what every planner reads (the tree, the source,
the walk's bindings, the family, the options, the suppression comments, the guard judge, the resolver)
and facts derived from them once (`fact`); planners never change it. The sink takes their findings and
edits, and is where suppression comments are applied: a finding a comment covers is dropped there, with
the edits and head statements that came with it.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar, cast

from ampfix.core.locations import SourceIndex
from ampfix.core.options import Options
from ampfix.core.plan import ChainEdit, Edit, ImportEdit, PlannedFinding, Splice, ValueEdit
from ampfix.core.project import ProjectModules
from ampfix.core.rules import Family, Rule
from ampfix.syntax.bindings import Binding, Guards, ImportRef, Resolved, Scope, Walker, import_bindings, resolve
from ampfix.syntax.guards import GuardJudge
from ampfix.syntax.parents import Parents
from ampfix.syntax.suppressions import Suppressions

T = TypeVar("T")


class ModuleContext:
    def __init__(self, tree: ast.Module, source: str, options: Options, family: Family, suppressions: Suppressions,
                 imports_move: Callable[[ModuleContext, ast.Try], bool] | None = None,
                 project: ProjectModules | None = None) -> None:
        self.tree = tree
        self.source = source
        self.index = SourceIndex(source)
        self.lines = self.index.lines
        self.options = options
        self.family = family
        self.suppressions = suppressions
        self.walker = Walker()
        self.walker.statements(tree.body, self.walker.module_scope)
        self.project = project
        if project is not None:
            self._bind_reexports(project)
        moves = None if imports_move is None else functools.partial(imports_move, self)
        self.judge = GuardJudge(family, options.target_torch, imports_move=moves)
        self._facts: dict[Callable[[ModuleContext], object], object] = {}

    def _bind_reexports(self, project: ProjectModules) -> None:
        """`from .compat import torch`: the name is what the project's module binds it to, where that is a name of
        the family's package (asked only of the names that can lead to one)."""
        family, module_scope = self.family, self.walker.module_scope
        for imp in self.walker.imports:
            node = imp.node
            if not isinstance(node, ast.ImportFrom) or (node.level == 0 and family.owns(node.module)):
                continue
            for alias in node.names:
                if alias.name not in family.name_parts:
                    continue
                export = project.exported(node.level, node.module, alias.name)
                if export is None or not family.owns(export.qname):
                    continue
                bound = alias.asname or alias.name
                spelled = "." * node.level + (node.module or "")
                for binding in {id(b): b for scope in (imp.scope, module_scope)
                                for b in scope.bindings.get(bound, ())}.values():
                    if binding.imported_by is imp:
                        binding.qname = export.qname
                        binding.reexported = (f"imported from `{spelled}`, which binds it to `{export.qname}` "
                                              f"({export.where})")

    @functools.cached_property
    def parents(self) -> Parents:
        """Each node's parent, mapped where asked (`ampfix.syntax.parents`): one map for every planner."""
        return Parents(self.tree)

    def fact(self, derive: Callable[[ModuleContext], T]) -> T:
        """`derive(self)`, computed once per module: a fact of the module that several planners read."""
        if derive not in self._facts:
            self._facts[derive] = derive(self)
        return cast(T, self._facts[derive])  # what `derive` returned, stored just above

    @functools.cached_property
    def heads(self) -> frozenset[str]:
        """The names some import of the family's package binds, in any scope: only chains headed by one
        can resolve to the family's names."""
        return frozenset(self.head_modules)

    @functools.cached_property
    def head_modules(self) -> dict[str, frozenset[str]]:
        """Each of `heads` -> every qualified name an import of the family's package binds it to, in any
        scope: what a chain headed by it can resolve through."""
        modules: dict[str, set[str]] = {}
        for name, binding in import_bindings(self.walker):
            if binding.qname is not None and self.family.owns(binding.qname):
                modules.setdefault(name, set()).add(binding.qname)
        return {name: frozenset(qnames) for name, qnames in modules.items()}

    def resolve(self, node: ast.expr, scope: Scope, *, within: Callable[[str], bool] | None = None,
                unanimous: bool = False, live: bool = False, star: bool = False) -> Resolved | None:
        """`ampfix.syntax.bindings.resolve`; `live`: bindings made in branches the target never runs do not
        reach a use it runs."""
        return resolve(node, scope, within=within, unanimous=unanimous, live=self.judge.live if live else None,
                       star=star)

    def resolve_value(self, node: ast.expr, scope: Scope) -> str | None:
        """The qualified name a dotted name in an argument spells where every binding of its head is the same
        import (what a decision reads must mean one thing), or None."""
        found = resolve(node, scope, unanimous=True)
        return None if found is None else found.qname

    def hold_back(self, rule: Rule | None, guards: Guards) -> str | None:
        """Why a use of `rule`'s names under `guards` must keep the old name, or None.
        The one place that weighs the rule selection, --target-torch and version guards."""
        if rule is not None and self.options.rules is not None and rule.code not in self.options.rules:
            return f"{rule.code} is not selected"
        target = self.options.target_torch
        if target is not None and rule is not None and rule.min_torch is not None and rule.min_torch > target:
            need = ".".join(map(str, rule.min_torch))
            have = ".".join(map(str, target))
            package = self.family.package
            return f"needs {package} >= {need}; the target is {package} {have}"
        return self.judge.reason(guards)

    def imported_elsewhere(self, imp: ImportRef, name: str) -> str | None:
        """Why the import binding `name` at the top of this module stays as it is for the project's other modules,
        or None: a file that takes `name` from here (`from .utils import autocast`) reads what this import binds,
        and its uses move with it, not with this file's."""
        if self.project is None or imp.scope is not self.walker.module_scope:
            return None
        places = self.project.importers(name)
        if not places:
            return None
        shown = ", ".join(places[:3]) + (f" and {len(places) - 3} more" if len(places) > 3 else "")
        return (f"`{name}` is imported from this module by {shown}, whose uses move with this import: migrate "
                "them together")

    def spelled_through(self, head: str, binding: Binding, scope: Scope, new: str) -> str | None:
        """`new` spelled through `head`, the name `binding` binds, when it lies under that binding's
        module; else as it stands, when the package's name in `scope` is bound only to the package; or None."""
        prefix = binding.qname or ""
        if new.startswith(prefix + "."):
            return head + new[len(prefix):]
        _, package_bindings = scope.lookup(self.family.package)
        if package_bindings and all(b.kind == "import" and b.qname == self.family.package for b in package_bindings):
            return new
        return None


@dataclass(frozen=True)
class _Unit:
    """Findings and the edits and head statements that stand or fall with them."""

    findings: tuple[PlannedFinding, ...]
    edits: tuple[Edit, ...]
    needs: frozenset[str]


class Sink:
    """Where planners put findings and edits. A unit whose finding a suppression comment covers is dropped
    as it is added (the one place suppressions are applied), so a later planner never sees its edits."""

    def __init__(self, context: ModuleContext) -> None:
        self._index = context.index
        self._suppressions = context.suppressions
        self._units: list[_Unit] = []
        self._edits: list[Edit] = []

    # building ------------------------------------------------------------------------------
    def finding(self, node: ast.AST, code: str, message: str, *, fixable: bool, unsafe: bool = False,
                will_fix: bool = False, suggestion: str | None = None, follows: bool = False) -> PlannedFinding:
        line = getattr(node, "lineno", 1)
        col = self._index.col(line, getattr(node, "col_offset", 0))
        return PlannedFinding(line, col, code, message, fixable, unsafe, will_fix, suggestion, follows)

    def edit(self, node: ast.expr | ast.stmt, kind: str, text: str,
             change: ChainEdit | ImportEdit | ValueEdit | Splice | str) -> Edit:
        start, end = self._index.span(node)
        return Edit(start, end, node.lineno, kind, text, change)

    # adding --------------------------------------------------------------------------------
    def add(self, findings: tuple[PlannedFinding, ...] = (), edits: tuple[Edit, ...] = (),
            needs: frozenset[str] = frozenset()) -> None:
        """Findings with the edits and head statements (`needs`) that come with them; all dropped where a
        suppression comment covers one of the findings."""
        if any(self._suppressions.covers(f.line, f.code) for f in findings):
            return
        self._units.append(_Unit(findings, edits, needs))
        self._edits += edits

    def add_finding(self, node: ast.AST, code: str, message: str, *, fixable: bool, unsafe: bool = False,
                    will_fix: bool = False, suggestion: str | None = None) -> None:
        self.add((self.finding(node, code, message, fixable=fixable, unsafe=unsafe, will_fix=will_fix,
                               suggestion=suggestion),))

    def add_edit(self, edit: Edit) -> None:
        self.add(edits=(edit,))

    def withdraw(self, lines: set[int]) -> None:
        """Drop the findings on these lines that came without edits: the lines are removed
        (`ampfix.engine.planners.branches`), so what was said of their code no longer applies."""
        self._units = [unit for unit in self._units
                       if unit.edits or not unit.findings or any(f.line not in lines for f in unit.findings)]

    # reading -------------------------------------------------------------------------------
    @property
    def edits(self) -> tuple[Edit, ...]:
        """The edits planned so far (a planner that rebuilds statements checks it cuts none of them)."""
        return tuple(self._edits)

    @property
    def findings(self) -> list[PlannedFinding]:
        return [f for unit in self._units for f in unit.findings]

    @property
    def needs(self) -> frozenset[str]:
        """The head statements asked for (`functools`, the module's device name)."""
        return frozenset().union(*(unit.needs for unit in self._units))


class Planner(Protocol):
    def __call__(self, context: ModuleContext, sink: Sink) -> None: ...
