"""A set-up split across modules where the module that calls initialize builds, after it, an object of a class of
the other module whose method scales the loss (DeepLearningExamples' GNMT: `Seq2SeqTrainer.__init__` calls
initialize, then builds `AMPOptimizer`, whose `step` holds scale_loss and whose `__init__` sets apex's loss scaler
through its private `_amp_state`, `scaler_settings`): what each half's finding says of that class. Nothing is
rewritten from here (docs/apex.md, *Set-ups split across modules*): the notes say what the rewrite across modules
would have to make and does not.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from ampfix.core.project import ProjectModules
from ampfix.families.apex import rules
from ampfix.families.apex.scaler_settings import function_of
from ampfix.syntax.bindings import ChainRef, Scope

Parent = Callable[[ast.AST], "ast.AST | None"]
ResolveValue = Callable[[ast.expr, Scope], "str | None"]

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def scaling_class(holder: ast.AST | None, parent: Parent, module: ast.Module) -> tuple[ast.ClassDef, str] | None:
    """The module-level class and the plain method (directly in its body, undecorated: it takes the object) that
    hold `holder`, or None (a staticmethod's object is not the one built)."""
    method = function_of(holder, parent) if holder is not None else None
    klass = parent(method) if method is not None else None
    if isinstance(klass, ast.ClassDef) and klass in module.body and method is not None \
            and not method.decorator_list and method.args.args:
        return klass, method.name
    return None


def step_class_note(project: ProjectModules, scale_losses: list[ChainRef], parent: Parent,
                    module: ast.Module) -> str:
    """In the module holding scale_loss and no initialize: the class whose method scales the loss, where the project
    builds it and what the rewrite across modules does not make ("" where scale_loss is in no method of a class)."""
    found = {scaling_class(ref.node, parent, module) for ref in scale_losses}
    only = found.pop() if len(found) == 1 else None
    if only is None:
        return ""
    klass, method = only
    calls = project.constructions(klass.name)
    if calls is None or not calls.seen or calls.escape is not None:
        return ""  # built otherwise (a registry, by name): who holds the object cannot be told
    # the project's files are read up to the first construction given an argument by position
    built = f"built at {', '.join(calls.seen[:3])}" + (" (at least)" if calls.positional is not None else "")
    return (f"; `{klass.name}.{method}` scales the loss, and the class is {built}: {_REWRITTEN_WHERE}, where the "
            "set-up's module builds it once, in the statement right after initialize (by hand otherwise: "
            f"{_by_hand(klass.name, method)}, initialize removed where the class is built, and the forward passes "
            "whose loss reaches it under autocast there)")


# the shape `class_split` rewrites (this module only names the class and where it is built)
_REWRITTEN_WHERE = ("rewritten across modules under --unsafe-fixes only in the shape of docs/apex.md's *A class that "
                    "scales the loss, built after initialize*")


def _by_hand(klass: str, method: str) -> str:
    return (f"a GradScaler made in `{klass}.__init__` and used in `{klass}.{method}` (scale, `unscale_` before "
            "clipping, step, update)")


def set_up_class_note(project: ProjectModules, init: ChainRef, parent: Parent, resolve: ResolveValue) -> str:
    """In the module holding initialize and no scale_loss: the object built after initialize (a statement after it in
    its block) of a class of the project whose method holds a scale_loss, or ""."""
    statement = parent(init.parent) if init.parent is not None else None
    block = parent(statement) if statement is not None else None
    body = getattr(block, "body", None)
    if not isinstance(statement, ast.stmt) or not isinstance(body, list) or statement not in body:
        return ""
    places = project.uses(rules.SCALE_LOSS.title)
    for later in body[body.index(statement) + 1:]:
        if not (isinstance(later, ast.Assign) and isinstance(later.value, ast.Call) and len(later.targets) == 1):
            continue
        qname = resolve(later.value.func, init.scope)
        module, _, name = (qname or "").rpartition(".")
        file = project.file_of(module) if module else None
        tree = project.tree_of(file) if file is not None else None
        if tree is None:
            continue
        for place in places:
            head, _, line = place.rpartition(":")
            if head != file or not line.isdigit():
                continue
            klass = next((c for c in tree.body if isinstance(c, ast.ClassDef) and c.name == name
                          and c.lineno <= int(line) <= (c.end_lineno or 0)), None)
            method = next((m for m in (klass.body if klass is not None else []) if isinstance(m, _FUNCTIONS)
                           and m.lineno <= int(line) <= (m.end_lineno or 0)), None)
            if klass is not None and method is not None:
                kept = ast.unparse(later.targets[0])
                return (f"; the loss is scaled in `{name}.{method.name}` ({place}), an object of which is built on "
                        f"line {later.lineno} after initialize and kept as `{kept}`: {_REWRITTEN_WHERE} (by hand "
                        f"otherwise: {_by_hand(name, method.name)}, initialize removed here, and the forward passes "
                        "whose loss reaches it under `torch.autocast(..., "
                        f"enabled=isinstance({kept}, {ast.unparse(later.value.func)}))`)")
    return ""
