"""What a suppression comment holds back before anything is decided (`Sink.add` drops what it covers).

A suppressed line is left alone and reports nothing. Its uses still count for the rule "imports
move with all their uses or not at all": a suppressed use of a name imported from a deprecated
module holds that import (and the name's other uses) back, as a use that cannot be rewritten
does; a suppressed import keeps the old module, so every use of the names it binds stays too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ampfix.engine.planners.decide import Decision, Use
from ampfix.families import MODULE_PATH_CODE
from ampfix.syntax.bindings import ImportRef
from ampfix.syntax.context import ModuleContext


def suppress_uses(context: ModuleContext, decided: list[tuple[Use, Decision]]
                  ) -> tuple[list[tuple[Use, Decision]], dict[tuple[int, str], str]]:
    """`decided` without the suppressed uses, and the groups they (or their imports) hold, with why."""
    # The comments are read only where a deprecated import or a use asks (`scan_when_asked`).
    suppressed_groups: dict[tuple[int, str], str] = {}
    for imp in context.walker.imports:
        aliases = list(deprecated_aliases(context, imp))
        # One suppressed name holds the whole statement: split, the names moved to a new line
        # would lose the comment, and the next run would migrate them.
        if any(import_suppressed(context, alias, qname) for alias, qname, _ in aliases):
            for alias, _, bound in aliases:
                if bound is not None:
                    suppressed_groups.setdefault(
                        (id(imp.scope), bound), f"imported on line {alias.lineno}, under a suppression comment")
    kept = []
    for use, decision in decided:
        if context.suppressions.covers(use.ref.node.lineno, decision.code):
            if use.group is not None:
                suppressed_groups.setdefault(
                    use.group, f"also used on line {use.ref.node.lineno}, where a comment suppresses it")
            continue
        kept.append((use, decision))
    return kept, suppressed_groups


def import_suppressed(context: ModuleContext, alias: ast.alias, qname: str) -> bool:
    """Whether a comment suppresses the import of `qname`: by the import's own code, or by the code
    of the rule for the name it imports (`from torch.cuda.amp import autocast  # noqa: AMP001`)."""
    line = alias.lineno
    symbol = context.family.symbol(qname)
    codes = (MODULE_PATH_CODE, symbol[1].code) if symbol is not None else (MODULE_PATH_CODE,)
    return any(context.suppressions.covers(line, code) for code in codes)


def deprecated_aliases(context: ModuleContext, imp: ImportRef) -> Iterator[tuple[ast.alias, str, str | None]]:
    """(alias, qualified name, name it binds as a group, or None) for each deprecated name imported."""
    family = context.family
    node = imp.node
    if isinstance(node, ast.ImportFrom):
        if node.level or not node.module or not family.owns(node.module):
            return
        for alias in node.names:
            qname = f"{node.module}.{alias.name}"
            if alias.name != "*" and family.deprecated_root(qname) is not None:
                yield alias, qname, alias.asname or alias.name
    else:
        for alias in node.names:
            if family.deprecated_root(alias.name) is not None:
                # `import torch.cuda.amp` binds `torch` itself: its uses are not held by this line.
                yield alias, alias.name, alias.asname
