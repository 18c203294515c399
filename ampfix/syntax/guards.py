"""Version guards, recognised by structure: does a branch exist for a torch that lacks the new names?

A guard is
- an `if` whose test involves the torch version: `torch.__version__`, `torch.version.*`,
  `importlib.metadata.version("torch")`, anything computed from them (`packaging.version.parse(...)`,
  `LooseVersion(...)`, `.split(".")`, a comparison), a name assigned from such a value
  (`TORCH_GE_1_10 = ...`), a function whose return value is one (`def is_torch_ge(...)`), or a
  `hasattr`/`getattr` on something in torch (`hasattr(torch, "autocast")`) other than a deprecated
  module (that check is migrated with the code it guards);
- the handlers of a `try` that imports or uses the new API and catches ImportError,
  ModuleNotFoundError or AttributeError (the old API is the fallback there).

Names resolve through the file's bindings: `hasattr(args, "use_amp")` tests an argparse namespace and
`conversion_enabled` is a flag; neither is a guard, whatever its spelling.

An `if` guard is decided at the target torch (`Options.target_torch`; None: the newest) where its test
is made of comparisons of the version with a literal (`ampfix.syntax.version_tests`): a branch the target
never runs is dead (left, and said so), a branch it runs holds nothing back (the rewrite of unguarded
code already assumes the target). So is an `except ImportError` handler of a `try` whose body is only
imports of deprecated names that all move to twins the target has (nemo's `try: from torch.cuda.amp
import autocast` / `except ImportError: def autocast(...)`): rewritten, the imports cannot fail there,
so the target never runs the handler. Which imports move is the caller's to say (`imports_move`: the
rules, the options and the branches around the `try`). Every other guard holds its branches back.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from ampfix.syntax import version_tests
from ampfix.syntax.bindings import Binding, Guard, Guards, Scope, catches_only_failed_imports, qualified_name
from ampfix.core.rules import Family
from ampfix.syntax.version_tests import UNKNOWN, BoolOp, Comparison, Literal, Not, Parser, Test

IF_REASON = "inside a branch that tests the {package} version; the new name may not exist there"
FALLBACK_REASON = "in the fallback of a `try` that imports the new API; the old name is what it falls back to"
DEAD_REASON = "in the branch {branch}, which the target {package} ({target}) never runs"
DEAD_HANDLER_REASON = ("in the handler `except {caught}` (line {line}), which the target {package} ({target}) "
                       "never runs once the `try` imports the new names")

_INTROSPECTION = frozenset({"hasattr", "getattr"})
_METADATA_VERSION = frozenset({"importlib.metadata.version", "importlib_metadata.version"})


class GuardJudge:
    def __init__(self, family: Family, target: tuple[int, int] | None = None,
                 imports_move: Callable[[ast.Try], bool] | None = None) -> None:
        self.family = family
        self.target = target
        # Is the body of this `try` only imports that all move to twins the target has? None: never asked,
        # every handler holds its code back.
        self.imports_move = imports_move
        # id(guard) -> (dead, why the branch holds its code back or None)
        self.verdicts: dict[int, tuple[bool, str | None]] = {}
        self.tests: dict[int, Test] = {}

    def reason(self, guards: Guards) -> str | None:
        """Why code under these branches must keep the old names, or None. A branch the target never
        runs says so first: that is the reason whatever else is undecided around it."""
        return self.dead(guards) or next((why for guard in guards if (why := self.verdict(guard)[1])), None)

    def dead(self, guards: Guards) -> str | None:
        """Why code under these branches never runs on the target torch, or None."""
        for guard in guards:
            is_dead, why = self.verdict(guard)
            if is_dead:
                return why
        return None

    def verdict(self, guard: Guard) -> tuple[bool, str | None]:
        found = self.verdicts.get(id(guard))
        if found is None:
            found = self.verdicts[id(guard)] = self._judge(guard)
        return found

    def _judge(self, guard: Guard) -> tuple[bool, str | None]:
        if guard.kind != "if":
            return self.judge_handler(guard)
        test = self.tests.get(id(guard.node))
        if test is None:
            assert isinstance(guard.node, ast.expr)  # an `if` guard's node is its test
            test = self.tests[id(guard.node)] = self.version_test(guard.node, guard.scope, frozenset())
        values = version_tests.outcomes(test, self.target)
        if values == {not guard.taken}:
            return True, self.dead_reason(guard, test)
        if None not in values:
            return False, None  # the target runs this branch
        if self.involves_version(guard.node, guard.scope, set()):
            return False, IF_REASON.format(package=self.family.package)
        return False, None

    def dead_reason(self, guard: Guard, test: Test) -> str:
        assert isinstance(guard.node, ast.expr)  # an `if` guard's node is its test
        line = guard.node.lineno
        condition = version_tests.describe(test, guard.taken)
        if condition is not None:
            branch = f"for {condition} (line {line})"
        else:
            branch = f"where the test on line {line} is {'true' if guard.taken else 'false'}"
        return DEAD_REASON.format(branch=branch, package=self.family.package, target=self.target_text())

    def judge_handler(self, guard: Guard) -> tuple[bool, str | None]:
        node, handler = guard.node, guard.handler
        assert isinstance(node, ast.Try) and handler is not None
        if catches_only_failed_imports(handler) and self.imports_move is not None and self.imports_move(node):
            assert handler.type is not None  # it catches only failed imports, so it names them
            caught = ast.unparse(handler.type)
            return True, DEAD_HANDLER_REASON.format(caught=caught, line=handler.lineno, package=self.family.package,
                                                    target=self.target_text())
        return False, FALLBACK_REASON if self.tries_new_api(node, guard.scope) else None

    def target_text(self) -> str:
        return "the newest" if self.target is None else f"{'.'.join(map(str, self.target))} or newer"

    # a test decided from structure -------------------------------------------------------------
    def version_test(self, expr: ast.expr, scope: Scope, seen: frozenset[int]) -> Test:
        """The test as comparisons of the version with literals; UNKNOWN for any other part."""
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
            operand = self.version_test(expr.operand, scope, seen)
            return UNKNOWN if operand is UNKNOWN else Not(operand)
        if isinstance(expr, ast.BoolOp):
            return BoolOp(isinstance(expr.op, ast.And), tuple(self.version_test(v, scope, seen) for v in expr.values))
        if isinstance(expr, ast.Compare):
            return self.comparison(expr, scope, seen)
        bound = self.module_binding(expr, scope, seen)
        if bound is None:
            return UNKNOWN
        binding, value = bound
        return self.version_test(value, self.module_scope(scope), seen | {id(binding)})

    def comparison(self, expr: ast.Compare, scope: Scope, seen: frozenset[int]) -> Test:
        symbols = [version_tests.operator_symbol(op) for op in expr.ops]
        operands = [self.version_operand(side, scope, seen) for side in (expr.left, *expr.comparators)]
        known = [operand for operand in operands if operand is not None]
        ops = [symbol for symbol in symbols if symbol is not None]
        parsers = {parser for parser, _ in known}
        if len(ops) != len(symbols) or len(known) != len(operands) or len(parsers) != 1:
            return UNKNOWN
        versions = tuple(version for _, version in known)
        if versions.count(None) != 1:  # the installed version against literals, once
            return UNKNOWN
        return Comparison(parsers.pop(), versions, tuple(ops))

    def version_operand(self, expr: ast.expr, scope: Scope,
                        seen: frozenset[int]) -> tuple[Parser, Literal | None] | None:
        """(its parser, the literal or None for the installed version) for `V("1.6")`, `V(torch.__version__)`,
        or a module-level name bound once to one of them; else None."""
        if not isinstance(expr, ast.Call):
            bound = self.module_binding(expr, scope, seen)
            if bound is None:
                return None
            binding, value = bound
            return self.version_operand(value, self.module_scope(scope), seen | {id(binding)})
        parser = version_tests.PARSERS.get(qualified_name(expr.func, scope, unanimous=True) or "")
        if parser is None or len(expr.args) != 1 or expr.keywords:
            return None
        (arg,) = expr.args
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            literal = version_tests.parse_literal(arg.value, parser)
            return None if literal is None else (parser, literal)
        return (parser, None) if self.is_installed_version(arg, scope, seen) else None

    def is_installed_version(self, expr: ast.expr, scope: Scope, seen: frozenset[int]) -> bool:
        """`torch.__version__`, `torch.version.__version__`, `importlib.metadata.version("torch")`, or a
        module-level name bound once to one of them (unsloth's `torch_version = torch.__version__`)."""
        bound = self.module_binding(expr, scope, seen)
        if bound is not None:
            binding, value = bound
            return self.is_installed_version(value, self.module_scope(scope), seen | {id(binding)})
        if isinstance(expr, ast.Call):
            return (qualified_name(expr.func, scope, unanimous=True) in _METADATA_VERSION and len(expr.args) == 1
                    and not expr.keywords
                    and isinstance(expr.args[0], ast.Constant) and expr.args[0].value == self.family.distribution)
        return qualified_name(expr, scope, unanimous=True) in self.family.release_names

    def module_binding(self, expr: ast.expr, scope: Scope, seen: frozenset[int]) -> tuple[Binding, ast.expr] | None:
        """The one binding of a module-level name bound once to a value (`TORCH_GE_1_10 = ...`), and the value;
        or None.
        `seen`: the bindings being read already (`A = not A` reads no further)."""
        if not isinstance(expr, ast.Name):
            return None
        found_in, bindings = scope.lookup(expr.id)
        if found_in is None or found_in.kind != "module" or len(bindings) != 1:
            return None
        (binding,) = bindings
        if binding.kind != "other" or not isinstance(binding.value, ast.expr) or id(binding) in seen:
            return None
        return binding, binding.value

    def module_scope(self, scope: Scope) -> Scope:
        while scope.parent is not None:
            scope = scope.parent
        return scope

    def live(self, bindings: list[Binding]) -> list[Binding]:
        """The bindings made outside any branch the target never runs."""
        return [b for b in bindings if self.dead(b.guards) is None]

    def involves_version(self, expr: ast.AST, scope: Scope, seen: set[int]) -> bool:
        for node in ast.walk(expr):
            if isinstance(node, ast.Call) and self.call_is_version_test(node, scope, seen):
                return True
            if isinstance(node, (ast.Name, ast.Attribute)):
                if self.family.is_version(qualified_name(node, scope)):
                    return True
                if isinstance(node, ast.Name) and self.name_holds_version(node.id, scope, seen, call=False):
                    return True
        return False

    def call_is_version_test(self, call: ast.Call, scope: Scope, seen: set[int]) -> bool:
        func = call.func
        if isinstance(func, ast.Name) and func.id in _INTROSPECTION and call.args:
            shadowed = scope.lookup(func.id)[1]
            asked = qualified_name(call.args[0], scope)
            # A check on a deprecated module is itself migrated (`hasattr(torch.cuda.amp, "autocast")`
            # becomes `hasattr(torch.amp, "autocast")`): its branch is for the old names' twins.
            if not shadowed and self.family.owns(asked) and self.family.deprecated_root(asked or "") is None:
                return True
        if (qualified_name(func, scope) in _METADATA_VERSION and call.args and isinstance(call.args[0], ast.Constant)
                and call.args[0].value == self.family.distribution):
            return True
        return isinstance(func, ast.Name) and self.name_holds_version(func.id, scope, seen, call=True)

    def name_holds_version(self, name: str, scope: Scope, seen: set[int], call: bool) -> bool:
        """Is `name` assigned a version value (or, called, a function returning one)?"""
        found_in, bindings = scope.lookup(name)
        for binding in bindings:
            value = binding.value
            if value is None or id(binding) in seen or found_in is None:
                continue
            seen.add(id(binding))
            if isinstance(value, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if call and any(isinstance(node, ast.Return) and node.value is not None
                                and self.involves_version(node.value, found_in, seen) for node in ast.walk(value)):
                    return True
            elif not call and self.involves_version(value, found_in, seen):
                return True
        return False

    def tries_new_api(self, node: ast.Try, scope: Scope) -> bool:
        for stmt in node.body:
            for inner in ast.walk(stmt):
                if isinstance(inner, ast.ImportFrom) and inner.level == 0 and inner.module:
                    if any(self.family.is_new_api(f"{inner.module}.{alias.name}") for alias in inner.names):
                        return True
                elif isinstance(inner, ast.Import):
                    if any(self.family.is_new_api(alias.name) for alias in inner.names):
                        return True
                elif isinstance(inner, ast.Attribute) and self.family.is_new_api(qualified_name(inner, scope)):
                    return True
        return False
