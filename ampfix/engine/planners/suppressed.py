"""What a suppression comment does to the analysis's plan.

A suppressed line is left alone and reports nothing. Its uses still count for the rule "imports
move with all their uses or not at all": a suppressed use of a name imported from a deprecated
module holds that import (and the name's other uses) back, as a use that cannot be rewritten
does; a suppressed import keeps the old module, so every use of the names it binds stays too.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from ampfix.engine.analysis import MODULE_PATH_CODE

if TYPE_CHECKING:
    from ampfix.engine.analysis import Analysis, Decision, Use
    from ampfix.syntax.bindings import ImportRef


def suppress_uses(analysis: Analysis, decided: list[tuple[Use, Decision]]) -> list[tuple[Use, Decision]]:
    """`decided` without the suppressed uses; the groups they (or their imports) hold are noted in
    `analysis.suppressed_groups`."""
    for imp in analysis.walker.imports:
        aliases = list(deprecated_aliases(analysis, imp))
        # One suppressed name holds the whole statement: split, the names moved to a new line
        # would lose the comment, and the next run would migrate them.
        if any(import_suppressed(analysis, alias, qname) for alias, qname, _ in aliases):
            for alias, _, bound in aliases:
                if bound is not None:
                    analysis.suppressed_groups.setdefault(
                        (id(imp.scope), bound), f"imported on line {alias.lineno}, under a suppression comment")
    kept = []
    for use, decision in decided:
        if analysis.suppressions.covers(use.ref.node.lineno, decision.code):
            if use.group is not None:
                analysis.suppressed_groups.setdefault(
                    use.group, f"also used on line {use.ref.node.lineno}, where a comment suppresses it")
            continue
        kept.append((use, decision))
    return kept


def import_suppressed(analysis: Analysis, alias: ast.alias, qname: str) -> bool:
    """Whether a comment suppresses the import of `qname`: by the import's own code, or by the code
    of the rule for the name it imports (`from torch.cuda.amp import autocast  # noqa: AMP001`)."""
    line = alias.lineno
    symbol = analysis.family.symbol(qname)
    codes = (MODULE_PATH_CODE, symbol[1].code) if symbol is not None else (MODULE_PATH_CODE,)
    return any(analysis.suppressions.covers(line, code) for code in codes)


def deprecated_aliases(analysis: Analysis, imp: ImportRef):
    """(alias, qualified name, name it binds as a group, or None) for each deprecated name imported."""
    family = analysis.family
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
