"""A probe of where edits land: plan a rename on every dotted name and every plain string literal of
a module, apply the plan as `rewrite` would, and compare with the same replacements made by slicing
the text at the planned spans (and realigned, as the applier realigns: `ampfix.engine.continuation`). Used by the tests (over the fixtures) and by
benchmarks/edit_landing.py (over a large tree such as torch's own source).
"""

from __future__ import annotations

import ast

from ampfix.core.locations import SourceIndex, literal_with, statement_groups
from ampfix.core.plan import ChainEdit, Edit, Plan
from ampfix.syntax.bindings import Walker


def probe(source: str) -> tuple[str, str, int]:
    """(expected text, text from the applier, number of edits planned)."""
    from ampfix.engine.apply import apply_plan

    tree = ast.parse(source)
    index = SourceIndex(source)
    walker = Walker()
    walker.statements(tree.body, walker.module_scope)
    edits: list[Edit] = []
    for n, ref in enumerate(walker.chains):
        start, end = index.span(ref.node)
        edits.append(Edit(start, end, ref.node.lineno, type(ref.node).__name__, ".".join(ref.parts),
                          ChainEdit(new_dotted=f"_p{n}_")))
    for n, node in enumerate(ast.walk(tree)):
        # (The constant parts of an f-string carry the f-string's position; `literal_with` refuses them.)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and hasattr(node, "end_lineno"):
            literal = literal_with(index.lines, node, [(0, len(node.value), f"_s{n}_")])
            if literal is not None:
                start, end = index.span(node)
                edits.append(Edit(start, end, node.lineno, "SimpleString", node.value, literal))
    expected = source
    for edit in sorted(edits, key=lambda e: e.start, reverse=True):
        new = edit.change.new_dotted if isinstance(edit.change, ChainEdit) else edit.change
        expected = expected[: edit.start] + str(new) + expected[edit.end :]
    if not edits:
        return source, source, 0
    # The applier keeps continuation lines against their brackets once a rename moved them: so does the slicing.
    from ampfix.engine.continuation import realigned

    expected = realigned(source, expected)
    return expected, apply_plan(source, Plan([], edits, statement_groups(tree, index))), len(edits)

