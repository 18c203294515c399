"""The sub-rewrites of apex.amp's imports: `amp is not None` -> `True` (torch.amp is always there), the import
itself (gone, or `import torch` where the file has none; the optional import's whole `try`), and the local imports of
a trainer's other methods."""

from __future__ import annotations

import ast

from ampfix.families.apex.optional import OptionalImport
from ampfix.families.apex.rewrite.statements import _ends_its_line, _whole_lines_only
from ampfix.families.apex.rewrite.sub_rewrite import _Rewrite
from ampfix.families.apex.rewrite.tree import _last_line
from ampfix.families.apex.rewrite.vocabulary import NotMechanical, _NATIVE


def _rewrite_availability_tests(rw: _Rewrite) -> None:
    """`amp is not None` -> `True`."""
    amp = rw.shape.amp
    for use, test in rw.shape.availability:
        value = "False" if isinstance(test.ops[0], ast.Is) else "True"
        said = "it said whether apex imported, and torch.amp, which takes apex.amp's place, is always there"
        if value == "False" and _raises_alone(rw, test):
            guard = rw.tree.parent(test)
            assert isinstance(guard, ast.If)
            index = rw.tree.index
            rw.splices.append((*index.removal(guard.lineno, _last_line(guard)), ""))
            rw.messages[id(use.ref)] = f"`if {amp} is None: raise ...` is removed: {said}"
            continue
        start, end = rw.tree.index.span(test)
        rw.splices.append((start, end, value))
        rw.messages[id(use.ref)] = f"`{rw.tree.text(test)}` -> `{value}`: {said}"


def _raises_alone(rw: _Rewrite, test: ast.Compare) -> bool:
    """`if amp is None: raise ...` (apex missing was an error), no `else`, on lines of its own without comments,
    with a statement in its block that is not such a check (removed, the checks do not leave the block empty)."""
    guard = rw.tree.parent(test)
    if not _raise_check(rw, guard, test):
        return False
    assert isinstance(guard, ast.If)  # _raise_check
    block, _ = rw.tree.block_of(guard)
    try:
        _whole_lines_only(rw, guard)
    except NotMechanical:
        return False
    tests = {id(t) for _, t in rw.shape.availability}
    return any(not (isinstance(s, ast.If) and id(s.test) in tests and _raise_check(rw, s, s.test)) for s in block)


def _raise_check(rw: _Rewrite, guard: ast.AST | None, test: ast.expr) -> bool:
    """`guard` is `if <test>: raise ...`, no `else`, `test` an `amp is None` of the rewrite."""
    return (isinstance(guard, ast.If) and guard.test is test and isinstance(test, ast.Compare)
            and isinstance(test.ops[0], ast.Is) and not guard.orelse
            and all(isinstance(s, ast.Raise) for s in guard.body))


def _rewrite_import(rw: _Rewrite) -> None:
    """The import: gone, or `import torch` where the file has none; the optional import's whole `try`, the
    flags it sets True kept, and its comments as lines of their own."""
    shape, index, lines = rw.shape, rw.tree.index, rw.tree.lines
    newline, optional = shape.newline, shape.optional
    replacement = "" if shape.torch_bound else f"import {_NATIVE.package}{newline}"
    if shape.import_statement is None:
        return  # a local import in initialize's `if`: gone with it
    if optional is not None and optional.others:
        # the `try` also imports apex.parallel: its imports are left to one step after both rewrites (`detect`)
        if not shape.torch_bound:
            raise NotMechanical("the optional import's `try` also imports apex.parallel, and the module does not "
                                "import torch")
        rw.messages[id(shape.import_node)] = _optional_import_message(shape.amp, sorted(set(rw.flags)), False)
        return
    if optional is None:
        _whole_lines_only(rw, shape.import_statement)
        removed: ast.stmt = shape.import_statement
    else:
        removed = optional.statement
        _ends_its_line(rw, removed)
        indent = rw.tree.indent(removed.lineno)
        kept_lines = {flag.lineno for flag in optional.flags_set}  # one line each, with its comment
        kept = [f"{indent}{lines[flag.lineno - 1][index.col(flag.lineno, flag.col_offset):].rstrip()}{newline}"
                for flag in optional.flags_set]
        kept_comments = [f"{indent}{shape.comments[n]}{newline}" for n in range(removed.lineno, _last_line(removed) + 1)
                         if n in shape.comments and n not in kept_lines]
        replacement += "".join(kept + kept_comments)
        _drop_flag_cleared_before(rw, optional)
        rw.messages[id(shape.import_node)] = _optional_import_message(shape.amp, sorted(set(rw.flags)),
                                                                      bool(kept_comments))
    imports_torch = _first_torch_import(rw, removed) if not shape.torch_bound else None
    if imports_torch is not None:  # `import torch` joins the module's torch imports, not after other statements
        import_torch = f"import {_NATIVE.package}{newline}"
        replacement = replacement.removeprefix(import_torch)
        rw.splices.append((index.line_start(imports_torch.lineno), index.line_start(imports_torch.lineno),
                           import_torch))
        rw.torch_imported_at = imports_torch.lineno - 1
    elif not shape.torch_bound and any(removed is top for top in rw.tree.engine.tree.body):
        rw.torch_imported_at = removed.lineno
    first, last = removed.lineno, _last_line(removed)
    state = shape.state_import
    if state is not None:  # `import apex.amp._amp_state` beside it goes too (`detect._state_import`)
        _whole_lines_only(rw, state)
        _remove_beside(rw, state, first, last, replacement)
        if state.lineno == last + 1 and not replacement:  # the blank lines around both are the lower one's to take
            rw.splices.append((index.line_start(first), index.line_end(last), ""))
            return
    start, end = (index.removal(first, last) if not replacement
                  else (index.line_start(first), index.line_end(last)))
    if state is not None and _last_line(state) == first - 1 and not replacement:
        end = index.removal(state.lineno, last)[1]
    rw.splices.append((start, end, replacement))


def _remove_beside(rw: _Rewrite, state: ast.Import, first: int, last: int, replacement: str) -> None:
    """The state import removed; where it is adjacent to the apex.amp import (lines `first`..`last`), the blank lines
    around the two go as for one statement removed, with the lower of them (each splice stays in its own statement)."""
    index = rw.tree.index
    state_first, state_last = state.lineno, _last_line(state)
    if state_last == first - 1 or replacement and state_first == last + 1:
        rw.splices.append((index.line_start(state_first), index.line_end(state_last), ""))
    elif state_first == last + 1:
        rw.splices.append((index.line_start(state_first), index.removal(first, state_last)[1], ""))
    else:
        rw.splices.append((*index.removal(state_first, state_last), ""))


def _drop_flag_cleared_before(rw: _Rewrite, optional: OptionalImport) -> None:
    """timm's `has_apex = False` on the line just before the `try`: the `has_apex = True` kept where the `try` was
    follows it at once, so it goes (kept where a comment or another statement shares its line, or a line stands
    between them)."""
    cleared = optional.cleared_before
    if cleared is None or cleared.end_lineno != optional.statement.lineno - 1:
        return
    try:
        _whole_lines_only(rw, cleared)
    except NotMechanical:
        return
    index = rw.tree.index
    rw.splices.append((index.line_start(cleared.lineno), index.line_end(cleared.lineno), ""))


def _first_torch_import(rw: _Rewrite, removed: ast.stmt) -> ast.Import | ast.ImportFrom | None:
    """The first module-level import of a torch module (`from torch import nn`, `import torch.nn as nn`) that comes
    before `removed` with another statement between them (else `import torch` takes `removed`'s place), on lines of
    its own: `import torch` goes just before it, with the module's imports. torch is loaded there already, so nothing
    runs in another order."""
    body = rw.tree.engine.tree.body
    if not any(removed is top for top in body):
        return None
    position = next(i for i, top in enumerate(body) if top is removed)
    if position == 0 or isinstance(body[position - 1], (ast.Import, ast.ImportFrom)):
        return None
    for i, top in enumerate(body[:position]):
        if not isinstance(top, (ast.Import, ast.ImportFrom)):
            continue
        modules = ([alias.name for alias in top.names] if isinstance(top, ast.Import) else
                   [top.module or ""] if not top.level else [])
        if any(m == _NATIVE.package or m.startswith(f"{_NATIVE.package}.") for m in modules):
            starts_line = i == 0 or _last_line(body[i - 1]) < top.lineno
            return top if starts_line and rw.tree.index.col(top.lineno, top.col_offset) == 0 else None
    return None


def _rewrite_method_imports(rw: _Rewrite) -> None:
    """A trainer's other methods each import apex.amp (the issue's first example): an import first in the `if`
    collapsed around a scale_loss goes with it; one in the method's own body is removed; anywhere else it would
    stay, failing on current apex, and the rewrite is held back."""
    index = rw.tree.index
    for node in rw.shape.method_imports:
        holder = rw.tree.parent(node)
        if isinstance(holder, ast.If) and holder in rw.backward_statements and holder.body[0] is node:
            continue
        if not (holder in rw.shape.methods and isinstance(holder, ast.FunctionDef) and node in holder.body
                and len(holder.body) > 1):
            raise NotMechanical(f"the `from apex import {rw.shape.amp}` on line {node.lineno} is neither in the body "
                                "of a method using it nor first in the `if` around its scale_loss")
        _whole_lines_only(rw, node)
        rw.splices.append((*index.removal(node.lineno, _last_line(node)), ""))


def _optional_import_message(amp: str, flags: list[str], comments_kept: bool) -> str:
    said = (f"; {_names(flags)}, True exactly where apex imported, {'is' if len(flags) == 1 else 'are'} now "
            "always True: mixed precision stays on where the author meant it, not silently off" if flags else "")
    kept = "; the comments of the removed `try` are kept as lines of their own" if comments_kept else ""
    return (f"the optional `from apex import {amp}` and its `except` branch are removed (torch.amp, which takes "
            f"its place, is always there){said}{kept}")


def _names(names: list[str]) -> str:
    return ", ".join(f"`{n}`" for n in names)
