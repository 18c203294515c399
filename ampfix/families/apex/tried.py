"""Several apex imports in one module-level `try` whose handlers only raise (apex's ImageNet example):

    try:
        from apex.parallel import DistributedDataParallel as DDP     (AMP110: rewritten to torch's DDP)
        from apex.fp16_utils import *                                 (AMP107: `to_python_float` only, `fp16_utils`)
        from apex import amp, optimizers                              (AMP100: the O1 rewrite; `optimizers` unread)
        from apex.multi_tensor_apply import multi_tensor_applier      (apex's surviving modules, unread)
    except ImportError:
        raise ImportError("Please install apex ...")

Each rewrite (apex.amp's, apex.parallel's, the star import's) plans its uses and leaves the import to this module,
which removes what the rewrites made unused: an import whose every name went, or those names of it (`from apex
import amp, optimizers` -> `from apex import optimizers`). Where every import of the `try` goes, the `try` goes whole,
its handler with it: apex missing was an error, and nothing apex provides is needed any more. An import of apex's
surviving modules (`apex.optimizers`, `apex.multi_tensor_apply`) whose names nothing in the module reads goes then
too (it only made apex a requirement); one that is read stays, and so does the `try` around what is left, which
still imports, or raises, as before."""

from __future__ import annotations

import ast
import tokenize

from ampfix.core.locations import SourceIndex, tokens


def raising_try(tree: ast.Module, node: ast.stmt, index: SourceIndex) -> ast.Try | None:
    """The module-level `try` holding `node` whose body holds only imports, at least two, each on lines of its own,
    and whose handlers only raise (no `else`, no `finally`), with no comment on its lines (removing the `try`, or an
    import of it, would drop it); else None."""
    for top in tree.body:
        if isinstance(top, ast.Try) and node in top.body and len(top.body) > 1 and not top.orelse \
                and not top.finalbody and top.handlers \
                and all(isinstance(s, (ast.Import, ast.ImportFrom)) for s in top.body) \
                and all(len(h.body) == 1 and isinstance(h.body[0], ast.Raise) for h in top.handlers) \
                and all((a.end_lineno or a.lineno) < b.lineno for a, b in zip(top.body, top.body[1:])) \
                and top.lineno < top.body[0].lineno and not _commented(top, index):
            return top
    return None


def _commented(statement: ast.stmt, index: SourceIndex) -> bool:
    """Does a comment stand on the lines of `statement`, a module-level statement (its text tokenizes alone)?"""
    start, end = index.line_start(statement.lineno), index.line_end(statement.end_lineno or statement.lineno)
    try:
        return any(token.type == tokenize.COMMENT for token in tokens(index.text[start:end]))
    except (tokenize.TokenError, SyntaxError):
        return True


def _unread(tree: ast.Module, aliases: list[ast.alias]) -> bool:
    """No name these aliases bind is read in the module (a star import's names cannot be told: read)."""
    bound = {(a.asname or a.name).partition(".")[0] for a in aliases}
    return "*" not in bound and not any(isinstance(n, ast.Name) and n.id in bound for n in ast.walk(tree))


def plan_tried(tree: ast.Module, index: SourceIndex, statement: ast.Try,
               gone: dict[int, set[str]]) -> tuple[list[tuple[int, int, str]], dict[int, str]]:
    """The edits that remove from the `try` the names the rewrites made unused (`gone`: by id() of each import, the
    names it binds that go), and the message for each import removed or cut, by id() of the import."""
    removed: list[ast.stmt] = []
    cut: list[tuple[ast.ImportFrom, list[ast.alias]]] = []
    left: list[list[ast.alias]] = []
    for node in statement.body:
        assert isinstance(node, (ast.Import, ast.ImportFrom))  # raising_try
        names = gone.get(id(node), set())
        aliases = [a for a in node.names if (a.asname or a.name).partition(".")[0] not in names]
        left.append(aliases)
        if not aliases:
            removed.append(node)
        elif len(aliases) < len(node.names) and isinstance(node, ast.ImportFrom):
            cut.append((node, aliases))
    whole = all(not aliases or _unread(tree, aliases) for aliases in left) and any(gone.values())
    messages: dict[int, str] = {}
    if whole:
        for node in statement.body:
            messages[id(node)] = ("the import is removed with the `try` of apex's imports, whose handler only raised: "
                                  "what it imported is rewritten, or read nowhere in the module")
        return [(*index.removal(statement.lineno, statement.end_lineno or statement.lineno), "")], messages
    splices: list[tuple[int, int, str]] = []
    for node in removed:
        splices.append((*index.removal(node.lineno, node.end_lineno or node.lineno), ""))
        messages[id(node)] = "the import is removed: what it imported is rewritten"
    for node, aliases in cut:
        kept = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in aliases)
        start, end = index.span(node)
        splices.append((start, end, f"from {node.module} import {kept}"))
        messages[id(node)] = f"`{ast.unparse(node)}` -> `from {node.module} import {kept}`: the names rewritten go"
    return splices, messages
