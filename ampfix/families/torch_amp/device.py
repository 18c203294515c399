"""The device policy (`--device`, `--device-expr`): the device argument a moved call gets, where CUDA code goes.

- `device_text`: a new call's device: the old name's own, or the device target for CUDA;
- `site_device`: the device at one use; under `--device auto` a device already in scope there
  (`scope_device`), else the module's device name (`module_device`: one a previous run added, or a new
  one added after the imports);
- `cpu_dtypes`: the float16 arguments of a CUDA call moved to the CPU, which become bfloat16.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ampfix.core.plan import free_name
from ampfix.core.rules import Rule, Target
from ampfix.syntax.bindings import ChainRef, Scope, dotted_parts
from ampfix.syntax.context import ModuleContext
from ampfix.syntax.quotes import module_quote, quoted


@dataclass(frozen=True)
class ModuleDevice:
    """--device auto: the module-level name that holds the device chosen when the module runs."""

    name: str
    statement: str | None  # the assignment to add after the imports; None: the module has it already
    add_torch_import: bool  # `import torch` goes before it (no name bound to torch at the top)
    torch_name: str  # the name bound to the package, to spell `torch.device(...)` with


# The names a device in scope goes by (--device auto), and whether it may be a device object rather
# than a device type string (then its `.type` is taken through the device class).
SCOPE_DEVICE_NAMES = (("device_type", False), ("device", True))
AUTO_DEVICE_NAME = "AMP_DEVICE"


def device_text(context: ModuleContext, target: Target) -> str:
    """The device argument of a new call: the old name's own, or the device target for CUDA."""
    options = context.options
    if target.device != "cuda" or not options.retargets:
        return quoted(str(target.device), context.fact(module_quote))
    if options.device_expr is not None:
        return options.device_expr
    if options.device == "auto":
        module = context.fact(module_device)
        return module.name if isinstance(module, ModuleDevice) else AUTO_DEVICE_NAME
    return quoted(options.device, context.fact(module_quote))


def site_device(context: ModuleContext, ref: ChainRef, target: Target) -> tuple[str, str, bool] | str:
    """The device argument at this use: (its text, what the message says of it, whether it is the
    module's device name); or why there is none."""
    device = device_text(context, target)
    options = context.options
    if not (options.device == "auto" and options.device_expr is None and target.device == "cuda"):
        return device, "", False
    module = context.fact(module_device)
    if isinstance(module, str):
        return module
    decorator = ref.role == "decorator" or id(ref.parent) in context.fact(decorator_calls)
    if ref.role == "call" and not decorator:
        in_scope = scope_device(context, ref, module)
        if in_scope is not None:
            return in_scope[0], f" ({in_scope[1]})", False
    if module.statement is None and ref.scope.lookup(module.name)[0] is not context.walker.module_scope:
        return f"`{module.name}` is bound in this scope: the module's device name cannot be used here"
    how = "found in the module" if module.statement is None else f"added after the imports: `{module.statement}`"
    if decorator:
        how += "; a decorator runs where it is defined, so a module-level name"
    return device, f" ({how})", True


def decorator_calls(context: ModuleContext) -> frozenset[int]:
    """id() of every call used as a decorator."""
    return frozenset(id(d) for node in ast.walk(context.tree)
                     if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     for d in node.decorator_list if isinstance(d, ast.Call))


def module_device(context: ModuleContext) -> ModuleDevice | str:
    """The module's device name for --device auto: the one a previous run added (any assignment of
    exactly the expression it adds), else a new name that clashes with nothing; or why none."""
    family, tree = context.family, context.tree
    scope = context.walker.module_scope
    torch_names = [name for name, bindings in scope.bindings.items()
                   if all(b.kind == "import" and b.qname == family.package for b in bindings)]
    bound_at_top = {alias.asname or alias.name for stmt in opening_statements(tree) if isinstance(stmt, ast.Import)
                    for alias in stmt.names if alias.name == family.package}
    torch_name = next((n for n in sorted(torch_names, key=lambda n: n != family.package) if n in bound_at_top), None)
    add_import = torch_name is None
    if torch_name is None:
        if any(b.qname != family.package for b in scope.bindings.get(family.package, [])):
            return (f"`{family.package}` is bound to something else in this module: no device name "
                    "can be added for --device auto")
        torch_name = family.package
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                and _is_device_choice(context, stmt.value) and len(scope.bindings[stmt.targets[0].id]) == 1:
            return ModuleDevice(stmt.targets[0].id, None, False, torch_name)
    name = free_name(tree, AUTO_DEVICE_NAME)
    available = torch_name + (family.cuda_available or "")[len(family.package):]
    quote = context.fact(module_quote)
    statement = f"{name} = {quoted('cuda', quote)} if {available}() else {quoted('cpu', quote)}"
    return ModuleDevice(name, statement, add_import, torch_name)


def _is_device_choice(context: ModuleContext, node: ast.expr) -> bool:
    """`"cuda" if torch.cuda.is_available() else "cpu"`, through whatever name torch is bound to."""
    return (isinstance(node, ast.IfExp) and isinstance(node.test, ast.Call) and not node.test.args
            and not node.test.keywords
            and context.resolve_value(node.test.func, context.walker.module_scope) == context.family.cuda_available
            and isinstance(node.body, ast.Constant) and node.body.value == "cuda"
            and isinstance(node.orelse, ast.Constant) and node.orelse.value == "cpu")


def scope_device(context: ModuleContext, ref: ChainRef, module: ModuleDevice) -> tuple[str, str] | None:
    """A device already in scope at a call: a parameter or local `device_type` / `device` of the
    function around it, or `self.device` set by its class; (its expression, what to say of it)."""
    line = ref.node.lineno
    torch_visible = ref.scope.lookup(module.torch_name)[0] is context.walker.module_scope
    device_type = f"{module.torch_name}.device({{}}).type"
    for name, may_be_object in SCOPE_DEVICE_NAMES:
        found, bindings = ref.scope.lookup(name)
        function = found.node if found is not None and found.kind == "function" else None
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or len(bindings) != 1:
            continue
        if may_be_object and not torch_visible:
            continue
        text = device_type.format(name) if may_be_object else name
        why = "a str or a device object" if may_be_object else "a device type"
        if name in _parameters(function):
            return text, f"the parameter `{name}` in scope, taken as {why}"
        if any(isinstance(stmt, ast.Assign) and stmt.lineno < line
               and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets) for stmt in function.body):
            return text, f"the local `{name}` set before it, taken as {why}"
    found, bindings = ref.scope.lookup("self")
    function = found.node if found is not None and found.kind == "function" else None
    if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) and len(bindings) == 1 and torch_visible \
            and _parameters(function)[:1] == ["self"] and found is not None and found.parent is not None \
            and found.parent.kind == "class" and _sets_self_attribute(found.parent.node, "device"):
        return device_type.format("self.device"), "`self.device`, set by the class, taken as a str or a device object"
    return None


def cpu_dtypes(context: ModuleContext, ref: ChainRef, rule: Rule,
               target: Target) -> tuple[tuple[tuple[ast.expr, str], ...], list[str]]:
    """For a CUDA call moved to the CPU: the float16 arguments that become bfloat16, and what the
    message says of each (also of one that has to stay)."""
    options, family = context.options, context.family
    shape, call = rule.shape, ref.parent
    if not (options.to_cpu and target.device == "cuda" and shape is not None and shape.cuda_dtype_params
            and isinstance(call, ast.Call)):
        return (), []
    given = [(kw.arg, kw.value) for kw in call.keywords if kw.arg in shape.cuda_dtype_params]
    given += [(name, arg) for name, arg in zip(shape.old_params, call.args) if name in shape.cuda_dtype_params]
    edits: list[tuple[ast.expr, str]] = []
    said: list[str] = []
    for name, value in given:
        old = context.resolve_value(value, ref.scope)
        new = family.cpu_dtypes.get(old or "")
        if new is None:
            continue
        if options.keep_dtype:
            said.append(f"{name}={old} kept (--keep-dtype)")
            continue
        spelled = _spell_value(context, value, ref.scope, new)
        if spelled is None:
            said.append(f"{name}={old} kept: no name bound to `{family.package}` here to spell `{new}` with")
            continue
        edits.append((value, spelled))
        said.append(f"{name}={old} -> {new} (float16 autocast is slow on the CPU; --keep-dtype keeps it)")
    return tuple(edits), said


def _spell_value(context: ModuleContext, node: ast.expr, scope: Scope, new: str) -> str | None:
    """`new` spelled through the binding `node` used (`th.half` -> `th.bfloat16`), or None."""
    parts = dotted_parts(node)
    start, end = context.index.span(node)
    if parts is None or "#" in context.index.text[start:end]:
        return None
    _, bindings = scope.lookup(parts[0])
    return context.spelled_through(parts[0], bindings[0], scope, new)


def opening_statements(tree: ast.Module) -> list[ast.stmt]:
    """The docstring and imports that open the module."""
    opening = []
    for i, stmt in enumerate(tree.body):
        docstring = i == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) \
            and isinstance(stmt.value.value, str)
        if not (docstring or isinstance(stmt, (ast.Import, ast.ImportFrom))):
            break
        opening.append(stmt)
    return opening


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = function.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, *(a for a in (args.vararg, args.kwarg) if a)]
    return [arg.arg for arg in every]


def _sets_self_attribute(cls: ast.AST | None, attribute: str) -> bool:
    """Does a method of the class assign `self.<attribute>`?"""
    if not isinstance(cls, ast.ClassDef):
        return False
    for node in ast.walk(cls):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        if any(isinstance(t, ast.Attribute) and t.attr == attribute and isinstance(t.value, ast.Name)
               and t.value.id == "self" for t in targets):
            return True
    return False
