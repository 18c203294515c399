"""The module's tree, with what the stages ask of it: each node's parent, blocks, text and indentation (`_Tree`),
a node's last line, and whether it is a name or an attribute chain."""

from __future__ import annotations

import ast

from collections.abc import Callable

from ampfix.families.apex.rewrite.engine import _Engine
from ampfix.families.apex.rewrite.vocabulary import AmpUse, NotMechanical, _SCOPES


class _Tree:
    """The module's statements as the rewrite walks them: each node's parent, blocks, text and indentation."""

    def __init__(self, engine: _Engine) -> None:
        self.engine = engine
        self.index = engine.index
        self.lines = engine.index.lines
        self.parent_of = engine.parents.of
        self._attribute_stores: dict[str, list[tuple[int, ast.Attribute]]] | None = None  # with each one's walk order

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

    def attribute_stores(self, *attributes: str) -> list[ast.Attribute]:
        """Every `X.<attribute>` the module assigns or deletes, any X, in walk order: what the checks that an
        attribute is assigned nowhere else look through (one walk of the module, the first time it is asked)."""
        if self._attribute_stores is None:
            self._attribute_stores = {}
            for order, node in enumerate(ast.walk(self.engine.tree)):
                if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
                    self._attribute_stores.setdefault(node.attr, []).append((order, node))
        return [node for _, node in sorted(stored for attribute in set(attributes)
                                           for stored in self._attribute_stores.get(attribute, []))]

    def text(self, node: ast.AST) -> str:
        start, end = self.index.span(node)
        return self.index.text[start:end]

    def indent(self, line: int) -> str:
        text = self.lines[line - 1]
        return text[: len(text) - len(text.lstrip(" \t"))]


def _last_line(node: ast.stmt | ast.expr) -> int:
    return node.end_lineno if node.end_lineno is not None else node.lineno


def _name_stores(root: ast.AST, name: str) -> list[ast.Name]:
    """The names `name` that `root` (and what it holds) assigns or deletes, in walk order."""
    return [n for n in ast.walk(root) if isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load)]


def _binds_otherwise(node: ast.AST, name: str) -> bool:
    """`node` binds `name` other than as a name node: `global`/`nonlocal`, an import, a def or class, `except ... as`,
    a match pattern."""
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        return name in node.names
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return any((alias.asname or alias.name.partition(".")[0]) == name for alias in node.names)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ExceptHandler, ast.MatchAs,
                         ast.MatchStar)):
        return node.name == name
    return isinstance(node, ast.MatchMapping) and node.rest == name


def _chain(node: ast.expr) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _chains(node: ast.expr, names: bool = False) -> bool:
    """A list (or tuple) of names or attribute chains (`names`: of plain names only), not empty."""
    return isinstance(node, (ast.List, ast.Tuple)) and bool(node.elts) and all(
        isinstance(e, ast.Name) if names else _chain(e) for e in node.elts)


def _use_holders(tree: _Tree, uses: list[AmpUse], function: ast.AST, lines: tuple[int, int],
                 accepted: Callable[[ast.AST], bool], where: str) -> list[ast.FunctionDef]:
    """The functions other than initialize's `function` that hold apex.amp uses, each `accepted` (a method of its
    class, a module-level function); every other use lies in `function` within `lines`. Else NotMechanical, saying
    `where` the uses may lie."""
    holders: list[ast.FunctionDef] = []
    for use in uses:
        holder = tree.function_of(use.ref.node)
        if holder is function and lines[0] <= use.ref.node.lineno <= lines[1]:
            continue
        if not (isinstance(holder, ast.FunctionDef) and accepted(holder)):
            raise NotMechanical(f"an apex.amp use lies outside the function of initialize (or {where}), or before it, "
                                "or after the `try` body that holds it")
        if holder not in holders:
            holders.append(holder)
    return holders
