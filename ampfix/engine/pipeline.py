"""The planners, in the one order they run, over one module's context; their findings and edits make the plan.

Works on the standard-library `ast`: it parses ~10x faster than LibCST, so `check` never needs LibCST and
`rewrite` hands LibCST only the statements that change (`ampfix.engine.apply`). Names are resolved through
the file's own bindings (imports, assignments, definitions, per scope), not matched as text.
"""

from __future__ import annotations

import ast

from ampfix.core.options import Options
from ampfix.core.locations import statement_groups
from ampfix.core.plan import Plan
from ampfix.core.project import ProjectModules
from ampfix.engine.heads import head_insertion, head_statements
from ampfix.engine.planners.branches import plan_outdated_branches
from ampfix.engine.planners.device_literals import plan_device_literals
from ampfix.engine.planners.imports import plan_imports, try_imports_move
from ampfix.engine.planners.strings import plan_strings
from ampfix.engine.planners.uses import record_uses
from ampfix.families import TORCH_AMP
from ampfix.families.apex.rules import may_hold_use as may_hold_apex_use
from ampfix.syntax.context import ModuleContext, Planner, Sink
from ampfix.syntax.suppressions import NONE, Suppressions


def plan_apex(context: ModuleContext, sink: Sink) -> None:
    """The apex planner, imported for a module it can find something in (`apex.rules.may_hold_use`), or that reads
    the enum of a switch on apex.amp under --unsafe-fixes (`ProjectModules.switch_reader`)."""
    if may_hold_apex_use(context.index.text) or (context.options.unsafe_fixes and context.project is not None
                                                 and context.project.switch_reader()):
        from ampfix.families.apex.detect import plan_apex as plan

        plan(context, sink)


PLANNERS: tuple[Planner, ...] = (
    # Imports, then the uses: both read the uses' settlement (`uses.settled_uses`, a fact of the module
    # computed once, on first read), since an import moves only with every use of the name it binds.
    plan_imports,
    record_uses,
    plan_strings,  # string paths and string annotations, decided as code is
    plan_device_literals,  # torch.amp calls already given "cuda", under a device target only
    # Last: NVIDIA apex's removed mixed precision rebuilds whole statements as text, and reads the edits
    # every planner above made (`Sink.edits`) so that it cuts none of them.
    plan_apex,
    # After every edit is planned: outdated version branches (a declared target only) are removed as text around
    # them, where no edit meets the lines removed or reindented (`branches`).
    plan_outdated_branches,
)


def analyze(tree: ast.Module, source: str, options: Options, suppressions: Suppressions = NONE,
            project: ProjectModules | None = None) -> Plan:
    context = ModuleContext(tree, source, options, TORCH_AMP, suppressions, imports_move=try_imports_move,
                            project=project)
    sink = Sink(context)
    for planner in PLANNERS:
        planner(context, sink)
    findings = sorted(sink.findings, key=lambda f: (f.line, f.col, f.code))
    edits = list(sink.edits)
    statements = statement_groups(tree, context.index) if edits else []
    head = head_statements(context, sink.needs)
    head_at, head_text = head_insertion(tree, context.index, statements, head) if head else (None, "")
    return Plan(findings, edits, statements, head_at, head_text)
