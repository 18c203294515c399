"""apex's view of the module being planned: what it reads of the context, and the sink it writes into
(the same planner protocol as torch's rules: `plan_apex(context, sink)`)."""

from __future__ import annotations

import ast

from ampfix.core.plan import Edit
from ampfix.core.rules import Rule, Target
from ampfix.families.torch_amp.device import device_text
from ampfix.syntax.bindings import Guards, Scope
from ampfix.syntax.context import ModuleContext, Sink


class ApexModule:
    def __init__(self, context: ModuleContext, sink: Sink) -> None:
        self.context = context
        self.sink = sink
        self.tree = context.tree
        self.index = context.index
        self.walker = context.walker
        self.options = context.options
        self.family = context.family
        self.suppressions = context.suppressions

    def hold_back(self, rule: Rule | None, guards: Guards) -> str | None:
        return self.context.hold_back(rule, guards)

    def resolve_value(self, node: ast.expr, scope: Scope) -> str | None:
        return self.context.resolve_value(node, scope)

    def device_text(self, target: Target) -> str:
        return device_text(self.context, target)

    def add_finding(self, node: ast.AST, code: str, message: str, *, fixable: bool, unsafe: bool = False,
                    will_fix: bool = False, suggestion: str | None = None) -> None:
        self.sink.add_finding(node, code, message, fixable=fixable, unsafe=unsafe, will_fix=will_fix,
                              suggestion=suggestion)

    def add_edit(self, edit: Edit) -> None:
        self.sink.add_edit(edit)

    @property
    def edits(self) -> tuple[Edit, ...]:
        """The edits the planners before this one made (apex runs last)."""
        return self.sink.edits
