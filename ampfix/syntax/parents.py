"""Each node's parent in a module's tree, mapped where a question asks for it.

A whole module's map cost more than the rest of the analysis on real trainers, and most questions are about a
few nodes: so the map follows the position of the node asked about, down the statements whose span holds it,
then the statement it lies in. A node with no position (a `with` item, `arguments`) is mapped with a positioned
node below or around it; asked about first, the whole tree is mapped (correct, and rare).
"""

from __future__ import annotations

import ast
import bisect
import functools


class Parents:
    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self._parents: dict[int, ast.AST] = {}
        self._mapped: set[int] = set()  # id() of the nodes whose whole subtree is mapped

    @functools.cached_property
    def _starts(self) -> list[tuple[int, int]]:
        """The first position of each top-level statement (its decorators included; `x = 1; y = 2` are two)."""
        return [span[0] for span in map(span_of, self.tree.body) if span is not None]

    def of(self, node: ast.AST) -> ast.AST | None:
        """`node`'s parent (None for the module, or a node not in the tree)."""
        if id(node) not in self._parents:
            line = getattr(node, "lineno", None)
            if line is None:
                self._map_all(self.tree)
            else:
                where = (line, getattr(node, "col_offset", 0))
                index = bisect.bisect_right(self._starts, where) - 1
                if index >= 0:
                    root = self.tree.body[index]
                    self._parents[id(root)] = self.tree
                    self._map_towards(root, where)
                    if id(node) not in self._parents:  # a position outside its parent's span: map it all
                        self._map_all(root)
        return self._parents.get(id(node))

    def _map_towards(self, root: ast.AST, where: tuple[int, int]) -> None:
        """Map the children of `root` and of each statement below it whose span holds `where`; map any other child
        that holds it (or has no position) whole. A loop, not a recursion: statements nest as deep as `ast` builds."""
        pending = [root]
        while pending:
            node = pending.pop()
            if id(node) in self._mapped:
                continue
            for child in ast.iter_child_nodes(node):
                self._parents[id(child)] = node
                span = span_of(child)
                if span is None or span[0] <= where <= span[1]:
                    if isinstance(child, ast.stmt):
                        pending.append(child)
                    else:
                        self._map_all(child)

    def _map_all(self, node: ast.AST) -> None:
        if id(node) in self._mapped:
            return
        self._mapped.add(id(node))
        for parent in ast.walk(node):
            for child in ast.iter_child_nodes(parent):
                self._parents[id(child)] = parent


def span_of(node: ast.AST) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """From the first position to the last of `node`, its decorators included; None where it has none."""
    end_line = getattr(node, "end_lineno", None)
    if end_line is None:
        return None
    starts = [(getattr(node, "lineno", 0), getattr(node, "col_offset", 0))]
    starts += [(d.lineno, d.col_offset) for d in getattr(node, "decorator_list", ())]
    return min(starts), (end_line, getattr(node, "end_col_offset", None) or 0)
