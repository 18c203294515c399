"""The module's tree, with what the stages ask of it: each node's parent, blocks, text and indentation (`_Tree`),
a node's last line, and whether it is a name or an attribute chain."""

from __future__ import annotations

import ast

from ampfix.families.apex.rewrite.engine import _Engine
from ampfix.families.apex.rewrite.vocabulary import NotMechanical, _SCOPES


class _Tree:
    """The module's statements as the rewrite walks them: each node's parent, blocks, text and indentation."""

    def __init__(self, engine: _Engine) -> None:
        self.engine = engine
        self.index = engine.index
        self.lines = engine.index.lines
        self.parent_of = engine.parents.of

    def parent(self, node: ast.AST | None) -> ast.AST | None:
        return None if node is None else self.parent_of(node)

    def function_of(self, node: ast.AST) -> ast.AST:
        """The innermost function (or other scope) holding `node`, or the module."""
        parent = self.parent(node)
        while parent is not None and not isinstance(parent, _SCOPES):
            parent = self.parent(parent)
        return self.engine.tree if parent is None else parent

    def block_of(self, statement: ast.stmt) -> tuple[list[ast.stmt], int]:
        parent = self.parent(statement)
        for name in ("body", "orelse", "finalbody"):
            block = getattr(parent, name, None)
            if isinstance(block, list) and statement in block:
                return block, block.index(statement)
        raise NotMechanical("a statement is not in a plain block")

    def text(self, node: ast.AST) -> str:
        start, end = self.index.span(node)
        return self.index.text[start:end]

    def indent(self, line: int) -> str:
        text = self.lines[line - 1]
        return text[: len(text) - len(text.lstrip(" \t"))]


def _last_line(node: ast.stmt | ast.expr) -> int:
    return node.end_lineno if node.end_lineno is not None else node.lineno


def _chain(node: ast.expr) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _chains(node: ast.expr, names: bool = False) -> bool:
    """A list (or tuple) of names or attribute chains (`names`: of plain names only), not empty."""
    return isinstance(node, (ast.List, ast.Tuple)) and bool(node.elts) and all(
        isinstance(e, ast.Name) if names else _chain(e) for e in node.elts)
