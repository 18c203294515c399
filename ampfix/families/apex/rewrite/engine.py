"""The engine, as the apex O1 rewrite reaches it: these imports and `_Engine` are the only places that touch it
(the package's `plan_rewrite` and `commit_rewrites` are given the `ApexModule` they hand to `_Engine`)."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from ampfix.core.locations import SourceIndex
from ampfix.core.plan import Edit, Splice, free_name
from ampfix.core.rules import Target
from ampfix.families.apex import rules
from ampfix.families.apex.module import ApexModule
from ampfix.syntax.bindings import Scope
from ampfix.syntax.parents import Parents

if TYPE_CHECKING:
    from ampfix.core.options import Options


class _Engine:
    """What the rewrite reads from the engine's analysis of the module, and where it hands over its splices."""

    def __init__(self, analysis: ApexModule) -> None:
        self._analysis = analysis
        self.tree: ast.Module = analysis.tree
        self.index: SourceIndex = analysis.index
        self.options: Options = analysis.options
        self.module_scope: Scope = analysis.walker.module_scope
        self.parents: Parents = analysis.context.parents
        self._scopes: dict[int, Scope] | None = None

    def scope_of(self, name: ast.expr) -> Scope | None:
        """The scope the bindings walk read `name` in (every name is one of its chains, as is each whole chain
        `torch.cuda.amp.GradScaler`), or None."""
        if self._scopes is None:
            self._scopes = {id(ref.node): ref.scope for ref in self._analysis.walker.chains}
        return self._scopes.get(id(name))

    def device(self) -> str:
        """The device the scaler and autocast get: `--device`, `--device-expr`, as for torch's own CUDA names."""
        return self._analysis.device_text(Target(rules.NATIVE.grad_scaler, "cuda"))

    def cpu_dtype(self, dtype: str) -> str | None:
        """What `dtype` chosen for CUDA becomes on the CPU (as AMP002's rewrites do), or None."""
        return self._analysis.family.cpu_dtypes.get(dtype)

    def resolve(self, node: ast.expr, scope: Scope) -> str | None:
        return self._analysis.resolve_value(node, scope)

    def unbound_deprecated_read(self, package: str) -> tuple[int, str] | None:
        """The first read of one of the family's deprecated names through `package` where that name is bound to
        nothing and no other planner edits it (they do where a star import may bind it): its line and dotted name,
        or None. An `import torch` the rewrite adds binds it, and the next run would rewrite it: not idempotent."""
        family = self._analysis.family
        edited = self.edit_spans()
        for ref in self._analysis.walker.chains:
            if ref.parts[0] == package and len(ref.parts) > 1 and not ref.scope.lookup(package)[1]:
                dotted = ".".join(ref.parts)
                start, end = self.index.span(ref.node)
                if family.deprecated_root(dotted) is not None and not any(a < end and start < b for a, b in edited):
                    return ref.node.lineno, dotted
        return None

    def project_uses(self, title: str) -> list[str]:
        """The places in the project's other modules that name `title` (an apex name) through their imports; none
        where no project can be read (one file alone)."""
        project = self._analysis.context.project
        return list(project.uses(title)) if project is not None else []

    def free_name(self, base: str) -> str:
        return free_name(self.tree, base)

    def edit_spans(self) -> list[tuple[int, int]]:
        """The spans the other planners edit (they run before this one)."""
        return [(edit.start, edit.end) for edit in self._analysis.edits]

    def add_splices(self, splices: list[tuple[int, int, str]]) -> None:
        for start, end, text in splices:
            line = self.index.text.count("\n", 0, start) + 1
            self._analysis.add_edit(Edit(start, end, line, "Splice", "", Splice(self._at_an_unended_end(start, end,
                                                                                                      text))))

    def _at_an_unended_end(self, start: int, end: int, text: str) -> str:
        """`text` as it goes at the end of a file whose last line has no line break: lines added after that line
        (`scaler.update()` after a last `optimizer.step()`) begin with the break instead of ending with it, and text
        that replaces the end ends without one, as the file did."""
        source = self.index.text
        ending = next((b for b in ("\r\n", "\n", "\r") if text.endswith(b)), None)
        if end != len(source) or not source or source.endswith(("\n", "\r")) or ending is None:
            return text
        return ending + text[:-len(ending)] if start == end else text[:-len(ending)]


Engine = _Engine  # the adapter's type, for the family's other rewrites


def engine_of(analysis: ApexModule) -> _Engine:
    """The adapter, for the apex family's other rewrites (`ampfix.families.apex.parallel`)."""
    return _Engine(analysis)
