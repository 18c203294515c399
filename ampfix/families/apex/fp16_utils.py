"""AMP107: `from apex.fp16_utils import *` where the module reads only `to_python_float` of what it binds (apex's
ImageNet example), under --unsafe-fixes: each `to_python_float(t)` becomes `t.item()`, and the import goes (only
from a `try` of several apex imports whose handlers only raise, `tried`; elsewhere it is left, saying so).

apex defined it as `t.item()` where `t` has an `item` (every tensor, and numpy's scalars), else `t[0]` (written for
the torch 0.3 tensors that had no `item`). The rewrite cannot tell that the argument is a tensor: where it is not
(a list, a tuple), `t[0]` becomes an AttributeError, hence --unsafe-fixes (`rules.TO_PYTHON_FLOAT`). Any other name
the star import binds (`rules.FP16_UTILS_STAR`: `FP16_Optimizer`, `network_to_half`, ...) read in the module, or
`to_python_float` bound otherwise too, or called otherwise than with one positional argument, holds it back: the
import stays, with its reason.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ampfix.core.locations import SourceIndex
from ampfix.families.apex import rules

_ATOMS = (ast.Name, ast.Attribute, ast.Call, ast.Subscript)  # `x.item()` needs no parentheses around these


@dataclass(frozen=True)
class Fp16Plan:
    statement: ast.ImportFrom  # the star import, which `tried` removes from the `try` of apex imports it is in
    calls: dict[int, str]  # the message of each `to_python_float(...)` rewritten, by id() of its name
    splices: tuple[tuple[int, int, str], ...]  # the calls' edits (the import's removal is its holder's)


def star_import(tree: ast.Module) -> ast.ImportFrom | None:
    """The one `from apex.fp16_utils import *` of the module, at module level (or in a module-level `try`)."""
    found = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module == rules.FP16_MODULE
             and [a.name for a in node.names] == ["*"] and not node.level]
    held = [top for top in tree.body if any(node is top or isinstance(top, ast.Try) and node in top.body
                                            for node in found)]
    return found[0] if len(found) == 1 and held else None


def plan_fp16_utils(tree: ast.Module, index: SourceIndex, bound_elsewhere: bool) -> Fp16Plan | str | None:
    """The plan (an unsafe fix), or why the star import stays (None: the module has no such import).
    `bound_elsewhere`: the module binds `to_python_float` otherwise too (a `def`, an assignment, another import)."""
    statement = star_import(tree)
    if statement is None:
        return None
    names = [node for node in ast.walk(tree) if isinstance(node, ast.Name) and node.id in rules.FP16_UTILS_STAR]
    other = next((node for node in names if node.id != rules.TO_PYTHON_FLOAT_NAME), None)
    if other is not None:
        return f"`{other.id}` on line {other.lineno} comes from the star import and has no native twin"
    if bound_elsewhere:
        return f"`{rules.TO_PYTHON_FLOAT_NAME}` is bound otherwise too"
    calls: dict[int, str] = {}
    splices: list[tuple[int, int, str]] = []
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for name in names:
        call = parents.get(id(name))
        if not (isinstance(call, ast.Call) and call.func is name and len(call.args) == 1 and not call.keywords
                and not isinstance(call.args[0], ast.Starred)):
            return f"`{rules.TO_PYTHON_FLOAT_NAME}` on line {name.lineno} is not called with one argument"
        argument = call.args[0]
        start, end = index.span(argument)
        text = index.text[start:end]
        spelled = f"{text}.item()" if isinstance(argument, _ATOMS) else f"({text}).item()"
        splices.append((*index.span(call), spelled))
        calls[id(name)] = f"`{rules.TO_PYTHON_FLOAT_NAME}({text})` -> `{spelled}`: {rules.TO_PYTHON_FLOAT}"
    return Fp16Plan(statement, calls, tuple(splices))
