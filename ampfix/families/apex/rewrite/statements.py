"""What the stages ask of statements. Statements are rebuilt as text (`ampfix.core.plan.Splice`): no comment may
sit on a line that is rebuilt, and no string may span the lines that are re-indented."""

from __future__ import annotations

import ast

from ampfix.core.locations import first_line
from ampfix.families.apex import rules
from ampfix.families.apex.rewrite.sub_rewrite import _Rewrite
from ampfix.families.apex.rewrite.tree import _chain, _last_line
from ampfix.families.apex.rewrite.vocabulary import NotMechanical, _FUNCTIONS, _NATIVE


def _tests_condition(rw: _Rewrite, node: ast.AST | None) -> bool:
    """Is `node` an `if` testing the condition that guarded initialize (in a trainer's methods, as they test it)?"""
    condition = rw.shape.method_condition if rw.shape.in_init else rw.shape.condition
    # a name or attribute chain (`_chain`), compared as text: the trainer's is an assignment's target
    return condition is not None and isinstance(node, ast.If) and ast.unparse(node.test) == ast.unparse(condition)


def _reads_gradients(rw: _Rewrite, statement: ast.stmt | ast.expr) -> bool:
    """May `statement` read gradients? apex had unscaled them when scale_loss exited; a scaler keeps them scaled until
    its step, so whatever reads them between must come after an `unscale_` (which is always faithful there: apex's
    gradients were unscaled from that point on). Read are: a `.grad`; torch's clipping; a call handed the model or
    the optimizer (their parameters, master_params: a helper of the project's that clips or logs a norm); a method
    of either, but those that touch no gradient; a function of this module, or a method of the trainer's class,
    whose body reads them."""
    holders = _gradient_holders(rw)
    for node in ast.walk(statement):
        if _reads_directly(rw, node) or _calls_a_reader(rw, node, set()):
            return True
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and _chain(func.value) and ast.unparse(func.value) in holders:
                if func.attr not in rules.METHODS_NOT_READING_GRADIENTS:
                    return True
            elif any(_mentions(argument, holders) for argument in [*node.args, *(k.value for k in node.keywords)]):
                return True
    return False


def _reads_directly(rw: _Rewrite, node: ast.AST) -> bool:
    """A `.grad` read, or a call of torch's gradient clipping."""
    if isinstance(node, ast.Attribute) and node.attr == "grad" and isinstance(node.ctx, ast.Load):
        return True
    return isinstance(node, ast.Call) and _resolved(rw, node.func) in rules.GRADIENT_CLIPPING


def _calls_a_reader(rw: _Rewrite, node: ast.AST, seen: set[int]) -> bool:
    """`node` calls a function of this module (or a method of the class holding the rewrite) whose body reads
    gradients directly or through such a call."""
    if not isinstance(node, ast.Call):
        return False
    callee = _module_function(rw, node.func)
    if callee is None or id(callee) in seen:
        return False
    seen.add(id(callee))
    return any(_reads_directly(rw, inner) or _calls_a_reader(rw, inner, seen) for inner in ast.walk(callee))


def _module_function(rw: _Rewrite, func: ast.expr) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The function `func` names: a `def` of the module, or nested in the function calling it, that alone binds the
    name where the call reads it (the bindings walk's resolution), or `self.<method>` where the rewrite's function is
    a method of a class that defines it, or inherits it from a class of the module."""
    if isinstance(func, ast.Name):
        scope = rw.tree.engine.scope_of(func)
        bindings = scope.lookup(func.id)[1] if scope is not None else []
        value = bindings[0].value if len(bindings) == 1 else None
        return value if isinstance(value, _FUNCTIONS) else None
    holder = rw.shape.function
    owner = rw.tree.parent(holder)
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and isinstance(owner, ast.ClassDef) \
            and isinstance(holder, _FUNCTIONS) and holder.args.args and func.value.id == holder.args.args[0].arg:
        return _method_of(rw, owner, func.attr, set())
    return None


def _method_of(rw: _Rewrite, owner: ast.ClassDef, name: str,
               seen: set[int]) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The method `name` of `owner`: its own, else the first of its bases' that are classes of this module (a
    trainer's `self.clip()` defined in its base class)."""
    methods = [m for m in owner.body if isinstance(m, _FUNCTIONS) and m.name == name]
    if methods:
        return methods[0] if len(methods) == 1 else None
    seen.add(id(owner))
    for base in owner.bases:
        classes = [c for c in rw.tree.engine.tree.body if isinstance(c, ast.ClassDef) and isinstance(base, ast.Name)
                   and c.name == base.id]
        if len(classes) == 1 and id(classes[0]) not in seen:
            found = _method_of(rw, classes[0], name, seen)
            if found is not None:
                return found
    return None


def _gradient_holders(rw: _Rewrite) -> set[str]:
    """The model and optimizer names as initialize bound them (each of a list)."""
    return {rw.shape.opt_name, *rw.shape.optimizers, *rw.shape.models}


def _mentions(node: ast.expr, holders: set[str]) -> bool:
    """Does `node` hand on one of `holders` (a name or attribute chain spelled the same), other than by calling it
    (`model(x)` hands on what the model computes, not the model)?"""
    called = {id(inner.func) for inner in ast.walk(node) if isinstance(inner, ast.Call)}
    return any(isinstance(inner, (ast.Name, ast.Attribute)) and id(inner) not in called and _chain(inner)
               and ast.unparse(inner) in holders for inner in ast.walk(node))


def _resolved(rw: _Rewrite, node: ast.expr) -> str | None:
    """The qualified name of `node`; a chain from an unbound `torch` (a name a star import may bind, flair's) is
    taken as torch's, as the rewrite takes it where it adds `import torch`."""
    found = rw.tree.engine.resolve(node, rw.shape.scope)
    root = node
    while isinstance(root, ast.Attribute):
        root = root.value
    if found is None and _chain(node) and isinstance(root, ast.Name) and root.id == _NATIVE.package \
            and not rw.shape.scope.lookup(root.id)[1]:
        return ast.unparse(node)
    return found


def _is_optimizer(node: ast.expr, opt_name: str) -> bool:
    """`node` is the optimizer initialize bound: its name, or a trainer's `self.optimizer`."""
    return _chain(node) and ast.unparse(node) == opt_name


def _all_optimizers(node: ast.expr, optimizers: tuple[str, ...]) -> bool:
    """`node` is a list (or tuple) of every optimizer initialize was given, each once, in any order."""
    return isinstance(node, (ast.List, ast.Tuple)) and all(_chain(e) for e in node.elts) \
        and sorted(ast.unparse(e) for e in node.elts) == sorted(optimizers)


def _is_step(node: ast.AST, opt_name: str) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "step"
            and _is_optimizer(node.func.value, opt_name) and not node.args and not node.keywords)


def _other_steps(function: ast.AST, opt_name: str, steps: list[ast.Expr]) -> bool:
    """A step of the optimizer that is not a statement of its own (a closure, a value used)."""
    counted = {id(s.value) for s in steps}
    for node in ast.walk(function):
        if isinstance(node, ast.Attribute) and node.attr == "step" and _is_optimizer(node.value, opt_name):
            call = next((c for c in ast.walk(function) if isinstance(c, ast.Call) and c.func is node), None)
            if call is None or id(call) not in counted:
                return True
    return False


def _starts_its_line(rw: _Rewrite, statement: ast.stmt) -> None:
    index = rw.tree.index
    line = index.lines[first_line(statement) - 1]
    if line[: index.col(statement.lineno, statement.col_offset)].strip():
        raise NotMechanical("a statement that would be rebuilt shares its line")


def _ends_its_line(rw: _Rewrite, statement: ast.stmt) -> None:
    _starts_its_line(rw, statement)
    index = rw.tree.index
    rest = index.text[index.span(statement)[1]:index.line_end(_last_line(statement))]
    if rest.strip() and not rest.strip().startswith("#"):
        raise NotMechanical("a statement that would be rebuilt shares its line")


def _whole_lines_only(rw: _Rewrite, statement: ast.stmt) -> None:
    """The statement's lines are rebuilt: nothing else may be on them (no comment would survive)."""
    _ends_its_line(rw, statement)
    if any(line in rw.shape.comments for line in range(first_line(statement), _last_line(statement) + 1)):
        raise NotMechanical("a comment sits on a line that would be rebuilt")


def _reindentable(rw: _Rewrite, statements: list[ast.stmt], first: int, last: int) -> None:
    """The lines can take four more spaces: they start with spaces only, and no string spans lines."""
    _starts_its_line(rw, statements[0])
    for line in rw.tree.lines[first - 1:last]:
        if line.strip() and "\t" in line[: len(line) - len(line.lstrip(" \t"))]:
            raise NotMechanical("tabs indent the forward pass that would be re-indented")
    for statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, (ast.Constant, ast.JoinedStr)) and isinstance(getattr(node, "value", ""), (str, list)) \
                    and node.end_lineno != node.lineno:
                raise NotMechanical("a string spans lines in the forward pass that would be re-indented")
