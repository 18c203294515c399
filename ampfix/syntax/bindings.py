"""One walk over a module's `ast`: statements numbered in pre-order, bindings per scope, and every
dotted name, string and import recorded with its scope, its statement and its role.

This is the cheap half of name resolution; `resolve` is the other half, asked only of the dotted names
whose head some import of interest binds.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from typing import Any
from dataclasses import dataclass, field


@dataclass(eq=False)
class Scope:
    kind: str  # "module", "function" (also lambdas and comprehensions) or "class"
    parent: Scope | None
    bindings: dict[str, list[Binding]] = field(default_factory=dict)
    global_names: set[str] = field(default_factory=set)
    node: ast.AST | None = None  # the def or class a function or class scope belongs to
    star_lines: list[int] = field(default_factory=list)  # the lines of `from m import *` (module scope only)

    def bind(self, binding: Binding) -> None:
        target = self
        if binding.name in self.global_names:
            while target.parent is not None:
                target = target.parent
        target.bindings.setdefault(binding.name, []).append(binding)

    def lookup(self, name: str) -> tuple[Scope | None, list[Binding]]:
        start = self
        if name in self.global_names:
            while start.parent is not None:
                start = start.parent
        scope: Scope | None = start
        first = True
        while scope is not None:
            # A class body's names are invisible to the functions nested in it.
            if (first or scope.kind != "class") and name in scope.bindings:
                return scope, scope.bindings[name]
            first = False
            scope = scope.parent
        return None, []


@dataclass(eq=False)
class Guard:
    """A branch that may exist for another torch version; `ampfix.syntax.guards` decides whether it does.

    kind "if": the statements under one branch of an `if`, `node` its test; `taken` says which
    branch: True for the body (run where the test holds), False for the `else` (and an `elif`, which
    is an `if` inside that `else`).
    kind "fallback": one handler of a `try` that catches ImportError/AttributeError, `node` the `try`,
    `handler` that handler.
    """

    kind: str
    node: ast.AST
    scope: Scope
    taken: bool = True
    handler: ast.ExceptHandler | None = None


Guards = tuple[Guard, ...]  # the branches around a statement, outermost first


@dataclass(eq=False, slots=True)
class Binding:
    name: str
    kind: str  # "import", "other", or "none" (`x = None`, a placeholder that conflicts with nothing)
    line: int
    qname: str | None = None  # for imports: what the name refers to
    guards: Guards = ()  # the branches the binding is made in
    # What was bound, where a version guard may need it: the value of `name = value`, or the
    # FunctionDef of `def name`.
    value: ast.AST | None = None
    imported_by: ImportRef | None = None  # for imports: the statement that binds it
    # An import read from what the code spells, not from an import statement: how (for messages), e.g.
    # "bound by `__import__('torch')`", or "not bound in this file; the star import on line 1 may provide it".
    inferred: str | None = None
    # A name imported from another module of the project, which binds it to `qname` there: how, for messages
    # ("imported from `.compat`, which binds it to `torch` (pkg/compat.py:1)"). Set by `ModuleContext`.
    reexported: str | None = None


@dataclass(eq=False, slots=True)
class ChainRef:
    node: ast.expr
    parts: tuple[str, ...]
    scope: Scope
    # "call", "decorator", "type", "base", "store", "value", "none_test" (`X is None`) or
    # "feature_check" (the object of `hasattr(X, "name")`)
    role: str
    parent: ast.AST | None
    guards: Guards
    in_string: bool = False  # parsed from a string annotation: `node`'s position is inside the string


@dataclass(eq=False, slots=True)
class StringRef:
    node: ast.Constant
    scope: Scope
    in_annotation: bool
    guards: Guards
    parent: ast.AST | None = None  # the expression (or statement) it is a direct child of: a call for an argument

    @property
    def value(self) -> str:
        """The string's value (only str constants are recorded)."""
        assert isinstance(self.node.value, str)
        return self.node.value


@dataclass(eq=False)
class ImportRef:
    node: ast.Import | ast.ImportFrom
    scope: Scope
    guards: Guards
    tried: ast.Try | None = None  # the `try` that holds this import as a statement of its own body

    @property
    def optional(self) -> bool:
        """Does the module go on where this import fails? A handler of the `try` around it catches the missing
        name and does not end in `raise` (one that re-raises makes the import required)."""
        return self.tried is not None and any(catches_missing_names(h) and not isinstance(h.body[-1], ast.Raise)
                                              for h in self.tried.handlers)


# What the expression walk has still to visit: (node, scope, role, parent, inside an annotation).
_Work = tuple[ast.AST, "Scope", str, "ast.AST | None", bool]

_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
_TYPE_CHECK_FUNCS = frozenset({"isinstance", "issubclass"})
# unittest's `self.assertIsInstance(obj, cls)`: the second argument is a type, as for isinstance.
_TYPE_CHECK_METHODS = frozenset({"assertIsInstance", "assertNotIsInstance"})
_FEATURE_CHECK_FUNCS = frozenset({"hasattr"})
_NONE_TESTS = (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)
# What a `try` catches when its handlers are a fallback for a torch that lacks a name.
_FALLBACK_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "AttributeError"})
_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError"})


# A string that names a deprecated path spells `amp` (the roots) or `autocast` (each name outside them, the
# state functions: the part `ampfix.io.codec.NAMES_PART` tests first; tests/test_prefilter.py checks both); one that
# names a removed apex module spells `apex` (`"apex.parallel"`, `ampfix.families.apex.detect`), and so does the value
# of a setting that selects apex, or `Apex` (`"ApexOptimWrapper"`; tests/test_apex.py checks the settings).
STRING_PARTS = ("amp", "autocast", "apex", "Apex")
_STRING_PART = re.compile("|".join(map(re.escape, STRING_PARTS)))  # one search of each literal, in C


class _ExpressionWalker:
    """What the walk records (scopes, bindings, chains, strings, imports) and its walk of expressions."""

    def __init__(self) -> None:
        self.module_scope = Scope("module", None)
        self.chains: list[ChainRef] = []
        self.strings: list[StringRef] = []
        # Attribute chains spelling `amp` below a root that is not a name (`mods["t"].cuda.amp.autocast`):
        # `parts` holds the attributes only.
        self.opaque_chains: list[ChainRef] = []
        self.imports: list[ImportRef] = []
        # The scopes where `__import__(...)` / `import_module(...)` binds a name (import bindings outside
        # `imports`' scopes).
        self.dynamic_import_scopes: list[Scope] = []
        # Every str/bytes literal and every f-string: the file's quote style is read from them.
        self.literals: list[ast.Constant] = []
        self.fstrings: list[ast.JoinedStr] = []
        self.guards: Guards = ()

    def arguments(self, args: ast.arguments, outer: Scope, inner: Scope) -> None:
        for default in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
            self.expr(default, outer, "value", args)
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        every += [a for a in (args.vararg, args.kwarg) if a is not None]
        for arg in every:
            if arg.annotation is not None:
                self.annotation(arg.annotation, outer)
            inner.bind(Binding(arg.arg, "other", arg.lineno))

    def annotation(self, node: ast.expr, scope: Scope) -> None:
        self.expr(node, scope, "type", None, annotation=True)

    # expressions -----------------------------------------------------------------------------
    def expr(self, node: ast.expr, scope: Scope, role: str, parent: ast.AST | None, annotation: bool = False) -> None:
        """Record the dotted names and strings of an expression, in source order. An explicit stack,
        not recursion: `1 + 1 + ...` with thousands of terms is valid Python."""
        work: list[_Work] = [(node, scope, role, parent, annotation)]
        while work:
            item = work.pop()
            if type(item[0]) is ast.Name:  # most nodes: recorded here, without a call
                name, scope, role, parent, annotation = item
                assert isinstance(name, ast.Name)
                if type(name.ctx) is not ast.Load:
                    scope.bind(Binding(name.id, "other", name.lineno, guards=self.guards))
                self.chains.append(ChainRef(name, (name.id,), scope, "type" if annotation else role, parent,
                                            self.guards))
                continue
            later = self.expr_step(*item)
            if later:
                work.extend(reversed(later))

    def expr_step(self, node: ast.AST, scope: Scope, role: str, parent: ast.AST | None,
                  annotation: bool) -> list[_Work]:
        """Record `node` if it is a dotted name or a string; return its parts still to walk (a Name is
        recorded by `expr`)."""
        if isinstance(node, ast.Attribute):
            parts = dotted_parts(node)
            if parts is not None:
                self.chains.append(ChainRef(node, parts, scope, "type" if annotation else role, parent, self.guards))
                return []
            attributes, root = attribute_chain(node)
            if "amp" in attributes:
                self.opaque_chains.append(ChainRef(node, attributes, scope, "type" if annotation else role, parent,
                                                   self.guards))
            return [(root, scope, "value", node, annotation)]
        if isinstance(node, ast.Call):
            return self.call(node, scope, annotation)
        if isinstance(node, ast.Constant):
            literal = node.value
            if isinstance(literal, str):
                self.literals.append(node)
                if _STRING_PART.search(literal):
                    self.strings.append(StringRef(node, scope, annotation, self.guards, parent))
            elif isinstance(literal, bytes):
                self.literals.append(node)
            return []
        if isinstance(node, ast.Lambda):
            inner = Scope("function", scope)
            self.arguments(node.args, scope, inner)
            return [(node.body, inner, "value", node, annotation)]
        if isinstance(node, _COMPREHENSIONS):
            self.comprehension(node, scope)
            return []
        if isinstance(node, ast.JoinedStr):
            self.fstrings.append(node)
            later: list[_Work] = []
            for value in node.values:
                if isinstance(value, ast.FormattedValue):
                    later.append((value.value, scope, "value", value, annotation))
                    if value.format_spec is not None:
                        later.append((value.format_spec, scope, "value", value, annotation))
            return later
        if isinstance(node, ast.Tuple) and role == "type":
            return [(element, scope, "type", node, annotation) for element in node.elts]
        if isinstance(node, ast.NamedExpr):
            scope.bind(Binding(node.target.id, "other", node.lineno))
            self.chains.append(ChainRef(node.target, (node.target.id,), scope, "store", node, self.guards))
            return [(node.value, scope, "value", node, annotation)]
        if isinstance(node, ast.Compare) and _is_none_test(node):
            return [(side, scope, "none_test", node, annotation) for side in (node.left, *node.comparators)]
        rest: list[_Work] = []
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                rest.append((child, scope, "type" if annotation else "value", node, annotation))
            elif isinstance(child, ast.AST):
                self.nested(child, scope)
        return rest

    def call(self, node: ast.Call, scope: Scope, annotation: bool) -> list[_Work]:
        func = node.func
        later: list[_Work] = [(func, scope, "call", node, annotation)]
        type_checked = (isinstance(func, ast.Name) and func.id in _TYPE_CHECK_FUNCS) or (
            isinstance(func, ast.Attribute) and func.attr in _TYPE_CHECK_METHODS)
        feature_checked = isinstance(func, ast.Name) and func.id in _FEATURE_CHECK_FUNCS
        for i, arg in enumerate(node.args):
            if type_checked and i == 1:
                role = "type"
            elif feature_checked and i == 0:
                role = "feature_check"
            else:
                role = "value"
            later.append((arg, scope, role, node, annotation))
        for keyword in node.keywords:
            later.append((keyword.value, scope, "value", node, annotation))
        return later

    def comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp, scope: Scope) -> None:
        inner = Scope("function", scope)
        for i, generator in enumerate(node.generators):
            self.expr(generator.iter, scope if i == 0 else inner, "value", generator)
            self.expr(generator.target, inner, "store", generator)
            for condition in generator.ifs:
                self.expr(condition, inner, "value", generator)
        if isinstance(node, ast.DictComp):
            self.expr(node.key, inner, "value", node)
            self.expr(node.value, inner, "value", node)
        else:
            self.expr(node.elt, inner, "value", node)

    def nested(self, node: ast.AST, scope: Scope) -> None:
        """A part of an expression that is not one (an operator, a context): the expressions inside it."""
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.expr(child, scope, "value", node)
            else:
                self.nested(child, scope)


class Walker(_ExpressionWalker):
    """The walk of a module: its statements, scopes and bindings; expressions as `_ExpressionWalker` walks them."""

    # statements ------------------------------------------------------------------------------
    def statements(self, body: list[ast.stmt], scope: Scope) -> None:
        for stmt in body:
            self.statement(stmt, scope)

    def statement(self, node: ast.stmt, scope: Scope) -> None:
        handler = _STATEMENT_HANDLERS.get(type(node))
        if handler is not None:
            handler(self, node, scope)
        else:
            self.generic(node, scope)

    # The common statements, walked as `generic` walks them (same order, same parents), without its lookups.
    def stmt_Expr(self, node: ast.Expr, scope: Scope) -> None:
        self.expr(node.value, scope, "value", node)

    def stmt_Return(self, node: ast.Return, scope: Scope) -> None:
        if node.value is not None:
            self.expr(node.value, scope, "value", node)

    def stmt_AugAssign(self, node: ast.AugAssign, scope: Scope) -> None:
        self.expr(node.target, scope, "value", node)
        self.expr(node.value, scope, "value", node)

    def stmt_For(self, node: ast.For | ast.AsyncFor, scope: Scope) -> None:
        self.expr(node.target, scope, "value", node)
        self.expr(node.iter, scope, "value", node)
        self.statements(node.body, scope)
        self.statements(node.orelse, scope)

    stmt_AsyncFor = stmt_For

    def stmt_While(self, node: ast.While, scope: Scope) -> None:
        self.expr(node.test, scope, "value", node)
        self.statements(node.body, scope)
        self.statements(node.orelse, scope)

    def stmt_With(self, node: ast.With | ast.AsyncWith, scope: Scope) -> None:
        for item in node.items:
            self.expr(item.context_expr, scope, "value", item)
            if item.optional_vars is not None:
                self.expr(item.optional_vars, scope, "value", item)
        self.statements(node.body, scope)

    stmt_AsyncWith = stmt_With

    def stmt_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef, scope: Scope) -> None:
        for decorator in node.decorator_list:
            self.expr(decorator, scope, "decorator", node)
        inner = Scope("function", scope, node=node)
        self.arguments(node.args, scope, inner)
        if node.returns is not None:
            self.annotation(node.returns, scope)
        scope.bind(Binding(node.name, "other", node.lineno, guards=self.guards, value=node))
        self.statements(node.body, inner)

    stmt_AsyncFunctionDef = stmt_FunctionDef

    def stmt_ClassDef(self, node: ast.ClassDef, scope: Scope) -> None:
        for decorator in node.decorator_list:
            self.expr(decorator, scope, "decorator", node)
        for base in node.bases:
            self.expr(base, scope, "base", node)
        for keyword in node.keywords:
            self.expr(keyword.value, scope, "value", keyword)
        scope.bind(Binding(node.name, "other", node.lineno, guards=self.guards))
        self.statements(node.body, Scope("class", scope, node=node))

    def stmt_Import(self, node: ast.Import, scope: Scope, tried: ast.Try | None = None) -> None:
        imp = ImportRef(node, scope, self.guards, tried)
        self.imports.append(imp)
        for alias in node.names:
            if alias.asname:
                name, qname = alias.asname, alias.name
            else:
                name = qname = alias.name.partition(".")[0]
            scope.bind(Binding(name, "import", node.lineno, qname, self.guards, imported_by=imp))

    def stmt_ImportFrom(self, node: ast.ImportFrom, scope: Scope, tried: ast.Try | None = None) -> None:
        imp = ImportRef(node, scope, self.guards, tried)
        self.imports.append(imp)
        module = "." * node.level + (node.module or "")
        for alias in node.names:
            if alias.name == "*":
                scope.star_lines.append(node.lineno)
                continue
            qname = f"{module}.{alias.name}" if node.level == 0 else None
            scope.bind(Binding(alias.asname or alias.name, "import", node.lineno, qname, self.guards,
                               imported_by=imp))

    def stmt_Global(self, node: ast.Global, scope: Scope) -> None:
        scope.global_names.update(node.names)

    def stmt_Assign(self, node: ast.Assign, scope: Scope) -> None:
        placeholder = isinstance(node.value, ast.Constant) and node.value.value is None
        for target in node.targets:
            if placeholder and isinstance(target, ast.Name):
                scope.bind(Binding(target.id, "none", target.lineno, guards=self.guards))
            elif isinstance(target, ast.Name):
                self.store_name(target, scope, node, node.value)
            else:
                self.expr(target, scope, "store", node)
        self.expr(node.value, scope, "value", node)

    def stmt_AnnAssign(self, node: ast.AnnAssign, scope: Scope) -> None:
        if isinstance(node.target, ast.Name):
            self.store_name(node.target, scope, node, node.value)
        else:
            self.expr(node.target, scope, "store", node)
        self.annotation(node.annotation, scope)
        if node.value is not None:
            self.expr(node.value, scope, "value", node)

    def store_name(self, target: ast.Name, scope: Scope, parent: ast.AST, value: ast.expr | None) -> None:
        imported = dynamic_import(value)
        if imported is not None:
            scope.bind(Binding(target.id, "import", target.lineno, imported[0], self.guards, value=value,
                               inferred=imported[1]))
            self.dynamic_import_scopes.append(scope)
        else:
            scope.bind(Binding(target.id, "other", target.lineno, guards=self.guards, value=value))
        self.chains.append(ChainRef(target, (target.id,), scope, "store", parent, self.guards))

    def stmt_If(self, node: ast.If, scope: Scope) -> None:
        # An elif chain is a chain of nested ifs: walked as a loop, so its length is no limit.
        outer = self.guards
        while True:
            self.expr(node.test, scope, "value", node)
            self.guards = (*self.guards, Guard("if", node.test, scope, taken=True))
            self.statements(node.body, scope)
            self.guards = (*self.guards[:-1], Guard("if", node.test, scope, taken=False))
            if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
                node = node.orelse[0]
                continue
            self.statements(node.orelse, scope)
            break
        self.guards = outer

    def stmt_Try(self, node: ast.Try, scope: Scope) -> None:
        for stmt in node.body:
            if isinstance(stmt, ast.Import):
                self.stmt_Import(stmt, scope, tried=node)
            elif isinstance(stmt, ast.ImportFrom):
                self.stmt_ImportFrom(stmt, scope, tried=node)
            else:
                self.statement(stmt, scope)
        outer = self.guards
        for handler in node.handlers:
            if handler.type is not None:
                self.expr(handler.type, scope, "value", handler)
            if handler.name:
                scope.bind(Binding(handler.name, "other", handler.lineno))
            if catches_missing_names(handler):
                self.guards = (*outer, Guard("fallback", node, scope, handler=handler))
            self.statements(handler.body, scope)
            self.guards = outer
        self.statements(node.orelse, scope)
        self.statements(node.finalbody, scope)

    stmt_TryStar = stmt_Try

    def stmt_Match(self, node: ast.Match, scope: Scope) -> None:
        self.expr(node.subject, scope, "value", node)
        for case in node.cases:
            self.pattern(case.pattern, scope)
            if case.guard is not None:
                self.expr(case.guard, scope, "value", case)
            self.statements(case.body, scope)

    def pattern(self, node: ast.AST, scope: Scope) -> None:
        for name_field in ("name", "rest"):
            name = getattr(node, name_field, None)
            if isinstance(name, str):
                scope.bind(Binding(name, "other", getattr(node, "lineno", 0)))
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.pattern):
                self.pattern(child, scope)
            elif isinstance(child, ast.expr):
                self.expr(child, scope, "value", node)

    def generic(self, node: ast.AST, scope: Scope) -> None:
        for _, value in ast.iter_fields(node):
            if isinstance(value, list):
                for item in value:
                    self.child(item, scope, node)
            else:
                self.child(value, scope, node)

    def child(self, item: object, scope: Scope, parent: ast.AST) -> None:
        if isinstance(item, ast.stmt):
            self.statement(item, scope)
        elif isinstance(item, ast.expr):
            self.expr(item, scope, "value", parent)
        elif isinstance(item, ast.AST):
            self.generic(item, scope)


# type(statement) -> its walker method (`stmt_<type name>`), declared by the methods' names.
_STATEMENT_HANDLERS: dict[type, Callable[[Walker, Any, Scope], None]] = {
    kind: getattr(Walker, "stmt_" + kind.__name__) for kind in vars(ast).values()
    if isinstance(kind, type) and issubclass(kind, ast.stmt) and hasattr(Walker, "stmt_" + kind.__name__)
}


def import_bindings(walker: Walker) -> Iterator[tuple[str, Binding]]:
    """Every import binding of the module, in any scope, with the name it binds: an import statement's, or
    `__import__` / `import_module`'s. Only their scopes are searched, and the module's (where `global` puts them)."""
    scopes = {id(scope): scope for scope in (*(imp.scope for imp in walker.imports), *walker.dynamic_import_scopes,
                                             walker.module_scope)}
    for scope in scopes.values():
        for name, bindings in scope.bindings.items():
            for binding in bindings:
                if binding.kind == "import":
                    yield name, binding


def spelled_imports(node: ast.Import | ast.ImportFrom, parts: tuple[str, ...]) -> Iterator[tuple[int, str, str, int]]:
    """What a chain headed by a name `node` binds spells, as `from` imports: each (level, module, name, count), where
    the chain's first `count` parts read what `from <"." * level><module> import <name>` would bind. `import
    pkg.utils` and `pkg.utils.autocast`: (0, "pkg", "utils", 2), (0, "pkg.utils", "autocast", 3); `from pkg import
    utils` and `utils.autocast`: (0, "pkg", "utils", 1), (0, "pkg.utils", "autocast", 2)."""
    for alias in node.names:
        if (alias.asname or alias.name.partition(".")[0]) != parts[0]:
            continue
        # The dotted path the chain spells from the statement's module, and how many of its names the chain's head
        # stands for beyond the first (`import a.b as x`: `x` is `a.b`).
        if isinstance(node, ast.ImportFrom):
            level, module, names, hidden = node.level, node.module or "", [alias.name, *parts[1:]], 0
        elif alias.asname:
            level, module, names, hidden = 0, "", [*alias.name.split("."), *parts[1:]], alias.name.count(".")
        else:
            level, module, names, hidden = 0, "", list(parts), 0
        for i, part in enumerate(names):
            if i >= hidden and (module or level):
                yield level, module, part, i + 1 - hidden
            module = f"{module}.{part}" if module else part
        return


def attribute_chain(node: ast.Attribute) -> tuple[tuple[str, ...], ast.expr]:
    """The attributes of `node` from the innermost, and the expression below them."""
    attributes: list[str] = []
    value: ast.expr = node
    while isinstance(value, ast.Attribute):
        attributes.append(value.attr)
        value = value.value
    return tuple(reversed(attributes)), value


_DYNAMIC_IMPORTERS = {("__import__",): False, ("importlib", "import_module"): True, ("import_module",): True}


def dynamic_import(value: ast.expr | None) -> tuple[str, str] | None:
    """`__import__("torch")` / `importlib.import_module("torch")`: (the module the value is, how it is bound).
    Read from the call's spelling (an import of `importlib` is not required: the binding is only ever read
    where the chain below it is a deprecated path, `ampfix.engine.planners.uses`)."""
    if not (isinstance(value, ast.Call) and len(value.args) == 1 and not value.keywords):
        return None
    callee, arg = dotted_parts(value.func), value.args[0]
    whole = _DYNAMIC_IMPORTERS.get(callee or ())
    if whole is None or not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)) or not arg.value:
        return None
    # `__import__("a.b")` returns the package `a`; `import_module("a.b")` returns `a.b`.
    module = arg.value if whole else arg.value.partition(".")[0]
    if module.startswith(".") or not all(part.isidentifier() for part in module.split(".")):
        return None
    return module, f"bound by `{ast.unparse(value)}` on line {value.lineno}"


def dotted_parts(node: ast.expr) -> tuple[str, ...] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return tuple(reversed(parts))


@dataclass(frozen=True)
class Resolved:
    """What a dotted name refers to through an import."""

    qname: str  # the qualified name it spells
    binding: Binding  # the import binding its head goes through
    scope: Scope | None  # where its head is bound
    bindings: list[Binding]  # every binding of its head there (the live ones, when asked)


def resolve(node: ast.expr, scope: Scope, *, within: Callable[[str], bool] | None = None, unanimous: bool = False,
            live: Callable[[list[Binding]], list[Binding]] | None = None, star: bool = False) -> Resolved | None:
    """The one qualified-name resolver: the name the dotted name `node` spells through the first import
    binding of its head in `scope`, or None (a name bound by a store is a binding, not a use).

    `within`: only imports of names it accepts count (a family's package). `unanimous`: every binding of
    the head must be that same import (what a decision reads must mean one thing). `live`: the bindings
    that count, where it leaves any (those made in branches the target runs). `star`: a head no binding
    of the file explains, in a module with a star import, is read as the module its spelling names
    (`torch`, that `from models.common import *` may provide)."""
    if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
        return None
    parts = dotted_parts(node)
    if parts is None:
        return None
    found_in, bindings = scope.lookup(parts[0])
    if star and not bindings:
        bindings = star_binding(parts[0], scope)
    if live is not None:
        bindings = live(bindings) or bindings
    if unanimous:
        qnames = {b.qname if b.kind == "import" else None for b in bindings}
        if len(qnames) != 1 or None in qnames:
            return None
    binding = next((b for b in bindings if b.kind == "import" and b.qname and (within is None or within(b.qname))),
                   None)
    if binding is None or binding.qname is None:
        return None
    return Resolved(".".join((binding.qname, *parts[1:])), binding, found_in, bindings)


def module_scope(scope: Scope) -> Scope:
    while scope.parent is not None:
        scope = scope.parent
    return scope


def star_binding(name: str, scope: Scope) -> list[Binding]:
    """The binding a star import may make of `name` in a module with one: `name` read as the module it spells."""
    lines = module_scope(scope).star_lines
    if not lines:
        return []
    where = ", ".join(map(str, lines))
    return [Binding(name, "import", lines[0], name,
                    inferred=f"not bound in this file; read as the module `{name}` that the star import on "
                             f"line{'s' if len(lines) > 1 else ''} {where} may provide")]


def qualified_name(node: ast.expr, scope: Scope, *, unanimous: bool = False) -> str | None:
    """`resolve(...)`'s qualified name, or None."""
    found = resolve(node, scope, unanimous=unanimous)
    return None if found is None else found.qname


def _is_none_test(node: ast.Compare) -> bool:
    """`X is None`, `X is not None`, `X == None`, `X != None` (either side): the answer does not
    depend on what X's signature is."""
    if len(node.ops) != 1 or not isinstance(node.ops[0], _NONE_TESTS):
        return False
    return any(isinstance(side, ast.Constant) and side.value is None for side in (node.left, node.comparators[0]))


def catches_missing_names(handler: ast.ExceptHandler) -> bool:
    """A bare `except:`, or one naming ImportError / ModuleNotFoundError / AttributeError."""
    caught = handler.type
    if caught is None:
        return True
    return any(isinstance(n, ast.Name) and n.id in _FALLBACK_ERRORS for n in _caught(caught))


def catches_only_failed_imports(handler: ast.ExceptHandler) -> bool:
    """`except ImportError:`, `except (ImportError, ModuleNotFoundError):`: a handler that nothing but a
    failed import runs."""
    caught = handler.type
    return caught is not None and all(isinstance(n, ast.Name) and n.id in _IMPORT_ERRORS for n in _caught(caught))


def _caught(caught: ast.expr) -> list[ast.expr]:
    return caught.elts if isinstance(caught, ast.Tuple) else [caught]
