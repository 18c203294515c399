"""Find every deprecated AMP use in a module and decide, per use, to rewrite it or to report it.

Works on the standard-library `ast`: it parses ~10x faster than LibCST, so `check` never needs
LibCST and `rewrite` hands LibCST only the statements that change (see `ampfix.engine.apply`).

Names are resolved through the file's own bindings (imports, assignments, definitions, per
scope), not matched as text: `import torch as th; th.cuda.amp.autocast()` is found, a local
`def autocast()` is not. Only the bindings of names that some `torch` import binds are resolved.

Each use gets one `Decision`, made once from the use, the options and the branches around it;
uses that go through one deprecated import then move together or not at all (`_settle_groups`).
Every edit is keyed by the character span of the `ast` node the decision was made on.
"""

from __future__ import annotations

import ast
import bisect
import functools
from dataclasses import dataclass, field, replace

from ampfix.syntax.bindings import Binding, ChainRef, Guards, Walker, dotted_parts, resolved
from ampfix.syntax.guards import GuardJudge
from ampfix.core.locations import SourceIndex, source_lines, statement_groups
from ampfix.core.options import Options
from ampfix.core.rules import Family, Rule, Target
from ampfix.engine.nesting import Nesting, written_defaults
from ampfix.families import TORCH_AMP
from ampfix.families.torch_amp import module_paths, no_twin
from ampfix.syntax.suppressions import NONE, Suppressions

NO_TWIN_CODE = no_twin.RULE.code
MODULE_PATH_CODE = module_paths.RULE.code


# ---------------------------------------------------------------------------------------------
# What the applier is handed.


@dataclass(frozen=True)
class CallEdit:
    device: str  # source text of the device expression
    device_position: int | None  # insert as a positional argument at this index...
    device_keyword: str | None  # ...or as this keyword after the last positional
    keywords_for_positionals: tuple[str, ...] = ()  # name the i-th positional argument
    added_keywords: tuple[tuple[str, str], ...] = ()  # (keyword, source text) appended after the arguments


@dataclass(frozen=True)
class ChainEdit:
    new_dotted: str | None = None  # replace the dotted name; None: keep it (its import changes)
    call: CallEdit | None = None  # edit the arguments of the call whose callee this is
    decorator_call: str | None = None  # bare decorator: append "(<this>)"
    partial_args: str | None = None  # wrap as functools.partial(<name>, <this>)

    @property
    def changes_text(self) -> bool:
        return bool(self.new_dotted or self.call or self.decorator_call or self.partial_args)


@dataclass(frozen=True)
class ImportEdit:
    # `import a.b as c, d`: new dotted name per alias index (missing: unchanged).
    renamed_aliases: dict[int, str] = field(default_factory=dict)
    removed_aliases: tuple[int, ...] = ()  # duplicates of an import already there
    # `from M import ...`: the new module for the migrated aliases, and the alias indices that
    # stay with the old module (a split: they move to a new statement after this one).
    new_module: str | None = None
    kept_aliases: tuple[int, ...] = ()


@dataclass(frozen=True)
class ValueEdit:
    text: str  # an expression that replaces a literal (a device argument)


@dataclass(frozen=True)
class Splice:
    """Replace the edit's span with this text, as text (`ampfix.families.apex.rewrite`, which checks itself that no
    comment or string is cut). Other edits may sit between splices, never across one (`ampfix.engine.apply`)."""

    text: str


@dataclass(frozen=True)
class Edit:
    """One change, at the [start, end) character span of the ast node it was decided on."""

    start: int
    end: int
    line: int  # 1-based, for messages
    node: str  # the LibCST node type that must be found there: Name, Attribute, SimpleString, Import, ImportFrom
    text: str  # what that node spells: the dotted name (NFKC), the string's value; "" for imports
    change: ChainEdit | ImportEdit | ValueEdit | Splice | str  # a string edit is the new literal


@dataclass(frozen=True)
class PlannedFinding:
    line: int
    col: int  # 0-based, in characters
    code: str
    message: str
    fixable: bool
    unsafe: bool
    will_fix: bool
    suggestion: str | None = None


@dataclass
class Plan:
    findings: list[PlannedFinding]
    edits: list[Edit]
    # The top-level statements as [start, end) ranges of whole lines (`ampfix.locations.statement_groups`).
    statements: list[tuple[int, int]]
    # Set when statements are added after the opening imports (`import functools`, the module's device
    # name): the head of the file up to this offset is re-printed with them.
    head_end: int | None = None
    head_statements: tuple[str, ...] = ()

    @property
    def has_edits(self) -> bool:
        return bool(self.edits)


# ---------------------------------------------------------------------------------------------
# Deciding


@dataclass(frozen=True)
class Use:
    """A dotted name in the code that resolves below a deprecated root."""

    ref: ChainRef
    full: str  # the qualified name it resolves to
    binding: Binding  # the import its head goes through
    # (id(scope), name) of a deprecated import binding it goes through: those uses move together
    group: tuple[int, str] | None
    conflicting: bool  # its head is bound to several things


@dataclass(frozen=True)
class Decision:
    code: str
    message: str
    edit: ChainEdit | None = None  # None: left as it is
    fixable: bool = False
    unsafe: bool = False
    suggestion: str | None = None
    # Arguments respelled with the call when it moves to the CPU: (the dotted name, its new spelling).
    dtype_edits: tuple[tuple[ast.expr, str], ...] = ()
    module_device: bool = False  # its device is the module's device name (--device auto)


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


class Analysis:
    def __init__(self, tree: ast.Module, source: str, options: Options, family: Family = TORCH_AMP,
                 suppressions: Suppressions = NONE) -> None:
        self.tree = tree
        self.suppressions = suppressions
        self.options = options
        self.family = family
        self.index = SourceIndex(source)
        self.lines = self.index.lines
        self.walker = Walker()
        self.walker.statements(tree.body, self.walker.module_scope)
        self.judge = GuardJudge(family, options.target_torch, imports_move=self.try_imports_move)
        self.findings: list[PlannedFinding] = []
        self.edits: list[Edit] = []
        self.needs_functools = False
        self.needs_module_device = False
        self.heads = self._package_bound_names()
        self.blocked_groups: dict[tuple[int, str], Use] = {}
        # Groups held by a suppression comment (on a use, or on their import): why, for messages.
        self.suppressed_groups: dict[tuple[int, str], str] = {}

    def _package_bound_names(self) -> frozenset[str]:
        names: set[str] = set()
        # Only a scope holding an import can hold an import binding (or its module, for `global`).
        scopes = {id(imp.scope): imp.scope for imp in self.walker.imports}
        scopes[id(self.walker.module_scope)] = self.walker.module_scope
        for scope in scopes.values():
            for name, bindings in scope.bindings.items():
                if any(b.kind == "import" and self.family.owns(b.qname) for b in bindings):
                    names.add(name)
        return frozenset(names)

    # shared by the import and string planners ---------------------------------------------
    def add_finding(self, node: ast.AST, code: str, message: str, *, fixable: bool, unsafe: bool = False,
                    will_fix: bool = False, suggestion: str | None = None) -> None:
        line = getattr(node, "lineno", 1)
        col = self.index.col(line, getattr(node, "col_offset", 0))
        self.findings.append(PlannedFinding(line, col, code, message, fixable, unsafe, will_fix, suggestion))

    def add_edit(self, node: ast.AST, kind: str, text: str, change: ChainEdit | ImportEdit | ValueEdit | str) -> None:
        start, end = self.index.span(node)
        self.edits.append(Edit(start, end, node.lineno, kind, text, change))  # type: ignore[attr-defined]

    def hold_back(self, rule: Rule | None, guards: Guards) -> str | None:
        """Why a use of `rule`'s names under `guards` must keep the old name, or None.
        The one place that weighs the rule selection, --target-torch and version guards."""
        if rule is not None and self.options.rules is not None and rule.code not in self.options.rules:
            return f"{rule.code} is not selected"
        target = self.options.target_torch
        if target is not None and rule is not None and rule.min_torch is not None and rule.min_torch > target:
            need = ".".join(map(str, rule.min_torch))
            have = ".".join(map(str, target))
            package = self.family.package
            return f"needs {package} >= {need}; the target is {package} {have}"
        return self.judge.reason(guards)

    def try_imports_move(self, node: ast.Try) -> bool:
        """Is the body of this `try` only imports of deprecated names that all move to their twins?"""
        from ampfix.engine.planners.imports import moves_by_rules

        imports = [imp for imp in self.walker.imports if imp.tried is node]
        return len(imports) == len(node.body) and all(moves_by_rules(self, imp) for imp in imports)

    def device_text(self, target: Target) -> str:
        """The device argument of a new call: the old name's own, or the device target for CUDA."""
        if target.device != "cuda" or not self.options.retargets:
            return f'"{target.device}"'
        if self.options.device_expr is not None:
            return self.options.device_expr
        if self.options.device == "auto":
            module = self.module_device
            return module.name if isinstance(module, ModuleDevice) else AUTO_DEVICE_NAME
        return f'"{self.options.device}"'

    def site_device(self, use: Use, rule: Rule, target: Target) -> tuple[str, str, bool] | str:
        """The device argument at this use: (its text, what the message says of it, whether it is the
        module's device name); or why there is none."""
        device = self.device_text(target)
        if not (self.options.device == "auto" and self.options.device_expr is None and target.device == "cuda"):
            return device, "", False
        module = self.module_device
        if isinstance(module, str):
            return module
        decorator = use.ref.role == "decorator" or id(use.ref.parent) in self.decorator_calls
        if use.ref.role == "call" and not decorator:
            in_scope = self.scope_device(use, module)
            if in_scope is not None:
                return in_scope[0], f" ({in_scope[1]})", False
        if module.statement is None and use.ref.scope.lookup(module.name)[0] is not self.walker.module_scope:
            return f"`{module.name}` is bound in this scope: the module's device name cannot be used here"
        how = "found in the module" if module.statement is None else f"added after the imports: `{module.statement}`"
        if decorator:
            how += "; a decorator runs where it is defined, so a module-level name"
        return device, f" ({how})", True

    @functools.cached_property
    def nesting(self) -> Nesting:
        return Nesting(self.tree, self.walker)

    @functools.cached_property
    def decorator_calls(self) -> frozenset[int]:
        """id() of every call used as a decorator."""
        return frozenset(id(d) for node in ast.walk(self.tree)
                         if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                         for d in node.decorator_list if isinstance(d, ast.Call))

    @functools.cached_property
    def module_device(self) -> ModuleDevice | str:
        """The module's device name for --device auto: the one a previous run added (any assignment of
        exactly the expression it adds), else a new name that clashes with nothing; or why none."""
        scope = self.walker.module_scope
        torch_names = [name for name, bindings in scope.bindings.items()
                       if all(b.kind == "import" and b.qname == self.family.package for b in bindings)]
        opening = _opening_statements(self.tree)
        bound_at_top = {alias.asname or alias.name for stmt in opening if isinstance(stmt, ast.Import)
                        for alias in stmt.names if alias.name == self.family.package}
        torch_name = next((n for n in sorted(torch_names, key=lambda n: n != self.family.package)
                           if n in bound_at_top), None)
        add_import = torch_name is None
        if add_import:
            if any(b.qname != self.family.package for b in scope.bindings.get(self.family.package, [])):
                return (f"`{self.family.package}` is bound to something else in this module: no device name "
                        "can be added for --device auto")
            torch_name = self.family.package
        for stmt in self.tree.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                    and self.is_device_choice(stmt.value) and len(scope.bindings[stmt.targets[0].id]) == 1:
                return ModuleDevice(stmt.targets[0].id, None, False, torch_name)
        name = free_name(self.tree, AUTO_DEVICE_NAME)
        available = torch_name + self.family.cuda_available[len(self.family.package):]  # type: ignore[index]
        statement = f'{name} = "cuda" if {available}() else "cpu"'
        return ModuleDevice(name, statement, add_import, torch_name)

    def is_device_choice(self, node: ast.expr) -> bool:
        """`"cuda" if torch.cuda.is_available() else "cpu"`, through whatever name torch is bound to."""
        return (isinstance(node, ast.IfExp) and isinstance(node.test, ast.Call) and not node.test.args
                and not node.test.keywords
                and self.resolve_value(node.test.func, self.walker.module_scope) == self.family.cuda_available
                and isinstance(node.body, ast.Constant) and node.body.value == "cuda"
                and isinstance(node.orelse, ast.Constant) and node.orelse.value == "cpu")

    def scope_device(self, use: Use, module: ModuleDevice) -> tuple[str, str] | None:
        """A device already in scope at a call: a parameter or local `device_type` / `device` of the
        function around it, or `self.device` set by its class; (its expression, what to say of it)."""
        line = use.ref.node.lineno  # type: ignore[attr-defined]
        torch_visible = use.ref.scope.lookup(module.torch_name)[0] is self.walker.module_scope
        device_type = f"{module.torch_name}.device({{}}).type"
        for name, may_be_object in SCOPE_DEVICE_NAMES:
            found, bindings = use.ref.scope.lookup(name)
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
        found, bindings = use.ref.scope.lookup("self")
        function = found.node if found is not None and found.kind == "function" else None
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) and len(bindings) == 1 and torch_visible \
                and _parameters(function)[:1] == ["self"] and found.parent is not None \
                and found.parent.kind == "class" and _sets_self_attribute(found.parent.node, "device"):
            return device_type.format("self.device"), "`self.device`, set by the class, taken as a str or a device object"
        return None

    def cpu_dtypes(self, use: Use, rule: Rule, target: Target) -> tuple[tuple[tuple[ast.expr, str], ...], list[str]]:
        """For a CUDA call moved to the CPU: the float16 arguments that become bfloat16, and what the
        message says of each (also of one that has to stay)."""
        shape, call = rule.shape, use.ref.parent
        if not (self.options.to_cpu and target.device == "cuda" and shape is not None and shape.cuda_dtype_params
                and isinstance(call, ast.Call)):
            return (), []
        given = [(kw.arg, kw.value) for kw in call.keywords if kw.arg in shape.cuda_dtype_params]
        given += [(name, arg) for name, arg in zip(shape.old_params, call.args) if name in shape.cuda_dtype_params]
        edits: list[tuple[ast.expr, str]] = []
        said: list[str] = []
        for name, value in given:
            old = self.resolve_value(value, use.ref.scope)
            new = self.family.cpu_dtypes.get(old or "")
            if new is None:
                continue
            if self.options.keep_dtype:
                said.append(f"{name}={old} kept (--keep-dtype)")
                continue
            spelled = self.spell_value(value, use.ref.scope, new)
            if spelled is None:
                said.append(f"{name}={old} kept: no name bound to `{self.family.package}` here to spell `{new}` with")
                continue
            edits.append((value, spelled))
            said.append(f"{name}={old} -> {new} (float16 autocast is slow on the CPU; --keep-dtype keeps it)")
        return tuple(edits), said

    def resolve_value(self, node: ast.expr, scope) -> str | None:
        """The qualified name a dotted name in an argument spells through an import, or None."""
        return resolved(node, scope)

    def spell_value(self, node: ast.expr, scope, new: str) -> str | None:
        """`new` spelled through the binding `node` used (`th.half` -> `th.bfloat16`), or None."""
        parts = dotted_parts(node)
        start, end = self.index.span(node)
        if parts is None or "#" in self.index.text[start:end]:
            return None
        _, bindings = scope.lookup(parts[0])
        return self.spelled_through(parts[0], bindings[0], scope, new)

    # the main pass -------------------------------------------------------------------------
    def run(self) -> Plan:
        from ampfix.families.apex.detect import plan_apex
        from ampfix.engine.planners.device_literals import plan_device_literals
        from ampfix.engine.planners.imports import plan_imports
        from ampfix.engine.planners.strings import plan_strings

        uses = [use for ref in self.walker.chains if ref.parts[0] in self.heads
                if (use := self.resolve(ref)) is not None]
        decided = [(use, self.decide(use)) for use in uses]
        if self.suppressions is not NONE:
            from ampfix.engine.planners.suppressed import suppress_uses

            decided = suppress_uses(self, decided)
        decided = self._settle_groups(decided)
        plan_imports(self)
        for use, decision in decided:
            self.record(use, decision)
        plan_strings(self)
        if self.options.retargets:
            plan_device_literals(self)
        plan_apex(self)  # NVIDIA apex's removed mixed precision: a family of its own
        return self.plan()

    def resolve(self, ref: ChainRef) -> Use | None:
        """The deprecated name `ref` spells through an import, or None."""
        if isinstance(ref.node, ast.Name) and not isinstance(ref.node.ctx, ast.Load):
            return None  # a binding, not a use
        scope, bindings = ref.scope.lookup(ref.parts[0])
        if self.judge.dead(ref.guards) is None:
            # A binding in a branch the target torch never runs does not reach a use it runs.
            bindings = self.judge.live(bindings) or bindings
        imports = [b for b in bindings if b.kind == "import" and self.family.owns(b.qname)]
        if not imports:
            return None
        binding = imports[0]
        full = ".".join((binding.qname or "", *ref.parts[1:]))
        if self.family.deprecated_root(full) is None:
            return None
        through_binding = self.family.deprecated_root(binding.qname or "") is not None
        if through_binding:
            imported = self.family.symbol(binding.qname or "")
            if imported is not None and imported[2] is None:
                return None  # a name with no twin stays imported as it is; its import line is reported
        conflicting = len({b.qname for b in imports}) > 1 or any(
            b.kind == "other" or (b.kind == "import" and not self.family.owns(b.qname)) for b in bindings
        )
        group = (id(scope), ref.parts[0]) if through_binding else None
        return Use(ref, full, binding, group, conflicting)

    def decide(self, use: Use) -> Decision:
        ref, full = use.ref, use.full
        symbol = self.family.symbol(full)
        if use.conflicting:
            code = symbol[1].code if symbol else NO_TWIN_CODE
            dead = self.judge.dead(ref.guards)
            if dead is not None:
                return Decision(code, f"`{full}` left: {dead}")
            lines = sorted({b.line for b in ref.scope.lookup(ref.parts[0])[1]})
            return Decision(code, f"`{ref.parts[0]}` is bound to several things (lines {', '.join(map(str, lines))}); "
                            "rewriting one use would break the others")
        missing = self.family.missing_twin(full)
        if missing is not None:
            listed_by, why = missing
            if listed_by is None:
                return Decision(NO_TWIN_CODE, f"{why}; there is nothing to migrate it to")
            return Decision(listed_by.code, why)
        assert symbol is not None
        name, rule, target = symbol
        assert target is not None
        rest = full[len(name):]
        new_name = target.new + rest
        suggestion = new_name if rest or ref.role in ("type", "none_test") else self.suggest(rule, target, new_name)
        new_dotted = None
        if use.group is None:
            new_dotted = self.new_dotted(ref, use.binding, new_name)
            if new_dotted is None:
                return Decision(rule.code, f"`{full}`: no name bound to `{self.family.package}` here to spell "
                                f"`{new_name}` with",
                                suggestion=new_name)
            start, end = (0, 0) if ref.in_string else self.index.span(ref.node)
            if "#" in self.index.text[start:end]:  # the new name is written afresh: a comment in it would go
                return Decision(rule.code, f"`{full}`: a comment inside the dotted name; migrate by hand",
                                suggestion=new_name)
        if ref.role == "feature_check":
            return self.decide_feature_check(use, rule, target, rest, new_dotted)
        imported = self.family.symbol(use.binding.qname or "") if use.group is not None else None
        reason = self.hold_back(rule, ref.guards) or (
            self.hold_back(imported[1], use.binding.guards) if imported is not None else None)
        if reason is not None:
            return Decision(rule.code, f"`{full}` left: {reason}", suggestion=suggestion)
        return self.decide_context(use, rule, target, rest, new_name, new_dotted, suggestion)

    def suggest(self, rule: Rule, target: Target, new_name: str) -> str:
        """The new call, spelled out for a person to finish by hand."""
        shape = rule.shape
        if shape is None:
            return new_name
        device = self.device_text(target)
        if shape.device_keyword:
            return f"{new_name}(..., {shape.device_keyword}={device})"
        if shape.positionals_to_keywords:
            params = [f"{p}=..." for p in shape.old_params]
        elif shape.device_position:
            params = list(shape.old_params)
        else:
            params = ["..."]
        params.insert(shape.device_position or 0, device)
        return f"{new_name}({', '.join(params)})"

    def new_dotted(self, ref: ChainRef, binding: Binding, new_name: str) -> str | None:
        """Spell `new_name` through the binding the chain used (`th.cuda.amp.X` -> `th.amp.X`)."""
        return self.spelled_through(ref.parts[0], binding, ref.scope, new_name)

    def spelled_through(self, head: str, binding: Binding, scope, new: str) -> str | None:
        """`new` spelled through `head`, the name `binding` binds, when it lies under that binding's
        module; else as it stands, when the package's name in `scope` is bound only to the package; or None."""
        prefix = binding.qname or ""
        if new.startswith(prefix + "."):
            return head + new[len(prefix):]
        _, package_bindings = scope.lookup(self.family.package)
        if package_bindings and all(b.kind == "import" and b.qname == self.family.package for b in package_bindings):
            return new
        return None

    def decide_feature_check(self, use: Use, rule: Rule, target: Target, rest: str,
                             new_dotted: str | None) -> Decision:
        """`hasattr(torch.cuda.amp, "autocast")` asks the same of `torch.amp` when the name has a twin
        there under the same name."""
        full, call = use.full, use.ref.parent
        assert isinstance(call, ast.Call)
        attribute = call.args[1] if len(call.args) == 2 else None
        if not (target.module and not rest and isinstance(attribute, ast.Constant)
                and isinstance(attribute.value, str)):
            return Decision(NO_TWIN_CODE, f"`{full}`: the module object itself has no drop-in twin",
                            suggestion=target.new if target.module else None)
        asked = f"{full}.{attribute.value}"
        twin = self.family.symbol(asked)
        if twin is None or twin[0] != asked or twin[2] is None or twin[2].new != self.family.renamed(asked):
            return Decision(NO_TWIN_CODE, f"`hasattr({full}, {attribute.value!r})`: `{target.new}` has no "
                            f"`{attribute.value}` to ask for instead")
        check_rule = twin[1]
        imported = self.family.symbol(use.binding.qname or "") if use.group is not None else None
        reason = self.hold_back(check_rule, use.ref.guards) or (
            self.hold_back(imported[1], use.binding.guards) if imported is not None else None)
        if reason is not None:
            return Decision(check_rule.code, f"`hasattr({full}, {attribute.value!r})` left: {reason}",
                            suggestion=target.new)
        return Decision(check_rule.code, f"`hasattr({full}, {attribute.value!r})` -> "
                        f"`hasattr({target.new}, {attribute.value!r})`", ChainEdit(new_dotted=new_dotted),
                        fixable=True)

    def decide_context(self, use: Use, rule: Rule, target: Target, rest: str, new_name: str,
                       new_dotted: str | None, suggestion: str) -> Decision:
        ref, full, shape = use.ref, use.full, rule.shape

        def rewrite(message: str, edit: ChainEdit) -> Decision:
            return Decision(rule.code, message, edit, fixable=True, suggestion=suggestion)

        def leave(message: str, code: str = rule.code, suggestion: str | None = suggestion) -> Decision:
            return Decision(code, message, suggestion=suggestion)

        def unsafe(message: str, edit: ChainEdit, suggestion: str | None = suggestion) -> Decision:
            if self.options.unsafe_fixes:
                return Decision(rule.code, message, edit, fixable=True, unsafe=True, suggestion=suggestion)
            return Decision(rule.code, message + " (an unsafe fix exists: --unsafe-fixes)", None, fixable=True,
                            unsafe=True, suggestion=suggestion)

        if ref.role == "none_test":
            return rewrite(f"`{full}` -> `{new_name}` (compared with None: the signature does not matter)",
                           ChainEdit(new_dotted=new_dotted))
        if shape is None:  # a pure rename
            if target.module and not rest and ref.role != "type":
                return leave(f"`{full}`: the module object itself has no drop-in twin", NO_TWIN_CODE)
            return rewrite(f"`{full}` -> `{new_name}`", ChainEdit(new_dotted=new_dotted))
        if rest:
            return leave(f"`{full}`: an attribute of a deprecated object; migrate by hand")
        if ref.role == "type":
            return rewrite(f"`{full}` -> `{new_name}` (type position)", ChainEdit(new_dotted=new_dotted))
        site = self.site_device(use, rule, target)
        if isinstance(site, str):
            return leave(f"`{full}` left: {site}")
        device, note, module_device = site
        if ref.role == "call":
            decision = self.decide_call(use, rule, target, device, new_name, new_dotted, suggestion)
            if decision.edit is None:
                return decision
            return replace(decision, message=decision.message + note, module_device=module_device)
        if ref.role == "decorator":
            if shape.bare_decorator_ok:
                args = f"{shape.device_keyword}={device}"
                return replace(rewrite(f"`@{full}` -> `@{new_name}({args})`{note}",
                                       ChainEdit(new_dotted=new_dotted, decorator_call=args)),
                               module_device=module_device)
            return leave(f"bare `@{full}` passes the function as `enabled`; add the arguments by hand")
        if ref.role == "base":
            return unsafe(f"class derives from `{full}`: a positional construction of the subclass would "
                          f"bind to `device` of `{new_name}`", ChainEdit(new_dotted=new_dotted))
        message = f"`{full}` is referenced without a call; its calls cannot be given the device here"
        if _identity_matters(ref):
            return leave(message + "; it stands where the class itself is looked up or compared (a dict key, a "
                         "set element, a comparison), which a functools.partial is not")
        if shape.partial_keeps_meaning:
            args = f"{shape.device_keyword}={device}" if shape.device_keyword else device
            return replace(unsafe(message + note, ChainEdit(new_dotted=new_dotted, partial_args=args),
                                  suggestion=f"functools.partial({new_name}, {args})"),
                           module_device=module_device)
        return leave(message)

    def decide_call(self, use: Use, rule: Rule, target: Target, device: str, new_name: str, new_dotted: str | None,
                    suggestion: str) -> Decision:
        full, shape, call = use.full, rule.shape, use.ref.parent
        assert shape is not None and isinstance(call, ast.Call)

        def leave(message: str) -> Decision:
            return Decision(rule.code, message, suggestion=suggestion)

        starred = any(isinstance(arg, ast.Starred) for arg in call.args)
        # `*args` only matters where positions move: named (autocast) or a device among them (_cast).
        if starred and (shape.positionals_to_keywords or shape.device_position not in (None, 0)):
            return leave(f"`{full}(*args)`: the positions of the arguments are unknown")
        positionals = len(call.args)
        if not starred and positionals > len(shape.old_params):
            return leave(f"`{full}` called with {positionals} positional arguments; it takes at most "
                         f"{len(shape.old_params)}")
        keywords = {kw.arg for kw in call.keywords if kw.arg is not None}
        if keywords & {shape.device_keyword, *self.family.device_keywords}:
            return leave(f"`{full}` already given a device argument")
        if shape.device_position is not None and positionals < shape.device_position:
            return leave(f"`{full}`: the arguments before the device are passed by keyword")
        names = shape.old_params[:positionals] if shape.positionals_to_keywords else ()
        edit = CallEdit(device, shape.device_position, shape.device_keyword, tuple(names))
        what = f"device {device}"
        if names:
            what += ", positional arguments named " + ", ".join(names)
        dtype_edits, said = self.cpu_dtypes(use, rule, target)
        what += "".join(f"; {text}" for text in said)
        defaults = written_defaults(self, use, target, call)
        if isinstance(defaults, str):
            return leave(defaults)
        edit = replace(edit, added_keywords=defaults[0])
        return Decision(rule.code, f"`{full}(...)` -> `{new_name}(...)` with {what}{defaults[1]}",
                        ChainEdit(new_dotted=new_dotted, call=edit), fixable=True, suggestion=suggestion,
                        dtype_edits=dtype_edits)

    # bindings through deprecated imports: all uses rewritten, or none -------------------------
    def _settle_groups(self, decided: list[tuple[Use, Decision]]) -> list[tuple[Use, Decision]]:
        for use, decision in decided:
            if use.group is not None and decision.edit is None and use.group not in self.blocked_groups:
                self.blocked_groups[use.group] = use
        settled = []
        for use, decision in decided:
            blocker = self.blocked_groups.get(use.group) if use.group else None
            suppressed = self.suppressed_groups.get(use.group) if use.group else None
            if blocker is not None and decision.edit is not None:
                decision = replace(decision, edit=None, fixable=False, unsafe=False, dtype_edits=(), message=(
                    f"left: `{use.ref.parts[0]}` is also used on line {blocker.ref.node.lineno} "
                    "in a way that cannot be rewritten"))
            elif suppressed is not None and decision.edit is not None:
                decision = replace(decision, edit=None, fixable=False, unsafe=False,
                                   message=f"left: `{use.ref.parts[0]}` is {suppressed}")
            settled.append((use, decision))
        return settled

    # recording -----------------------------------------------------------------------------
    def record(self, use: Use, decision: Decision) -> None:
        edit = decision.edit
        if edit is not None and edit.changes_text:
            node = use.ref.node
            self.add_edit(node, type(node).__name__, ".".join(use.ref.parts), edit)
            self.needs_functools |= edit.partial_args is not None
            self.needs_module_device |= decision.module_device
            self.add_dtype_edits(decision.dtype_edits)
        self.add_finding(use.ref.node, decision.code, decision.message, fixable=decision.fixable,
                         unsafe=decision.unsafe, will_fix=edit is not None, suggestion=decision.suggestion)

    def add_dtype_edits(self, dtype_edits: tuple[tuple[ast.expr, str], ...]) -> None:
        for value, spelled in dtype_edits:
            self.add_edit(value, type(value).__name__, ".".join(dotted_parts(value) or ()), ChainEdit(new_dotted=spelled))

    def functools_imported(self) -> bool:
        bindings = self.walker.module_scope.bindings.get("functools", [])
        return any(b.kind == "import" and b.qname == "functools" for b in bindings)

    # the result ----------------------------------------------------------------------------
    def plan(self) -> Plan:
        if self.suppressions is not NONE:
            self.findings = [f for f in self.findings if not self.suppressions.covers(f.line, f.code)]
        self.findings.sort(key=lambda f: (f.line, f.col, f.code))
        statements = statement_groups(self.tree, self.index) if self.edits else []
        head: list[str] = []
        if self.needs_functools and not self.functools_imported():
            head.append("import functools")
        module = self.module_device if self.needs_module_device else None
        if isinstance(module, ModuleDevice) and module.statement is not None:
            head += ["import torch"] * module.add_torch_import + [module.statement]
        head_end = _head_end(self.tree, self.index, statements) if head else None
        return Plan(self.findings, self.edits, statements, head_end, tuple(head))


def _opening_statements(tree: ast.Module) -> list[ast.stmt]:
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


def free_name(tree: ast.Module, base: str) -> str:
    """`base`, else `base_2`, `base_3`, ...: the first that is none of the module's names."""
    taken = _identifiers(tree)
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    return name


def _identifiers(tree: ast.Module) -> set[str]:
    """Every name the module binds or reads, in any scope: a new module-level name must be none of them."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def _head_end(tree: ast.Module, index: SourceIndex, groups: list[tuple[int, int]]) -> int:
    """The end of the first line group that is not one of the file's opening imports (or of the
    last group): `import functools` goes after those imports, so this head is re-printed."""
    opening = [True] * len(groups)
    starts = [start for start, _ in groups]
    for i, stmt in enumerate(tree.body):
        group = bisect.bisect_right(starts, index.line_start(stmt.lineno)) - 1
        docstring = i == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) \
            and isinstance(stmt.value.value, str)
        if not (isinstance(stmt, (ast.Import, ast.ImportFrom)) or docstring):
            opening[group] = False
        elif docstring and group < len(groups) and sum(1 for s in tree.body
                                                       if index.line_start(s.lineno) < groups[group][1]) > 1:
            opening[group] = False  # a docstring sharing its line with another statement is not alone
    first_other = next((i for i, flag in enumerate(opening) if not flag), len(groups) - 1)
    return groups[first_other][1]


def analyze(tree: ast.Module, source: str, options: Options, suppressions: Suppressions = NONE) -> Plan:
    return Analysis(tree, source, options, suppressions=suppressions).run()


__all__ = ["Analysis", "CallEdit", "ChainEdit", "Edit", "ImportEdit", "Plan", "PlannedFinding", "Splice", "analyze",
           "source_lines"]


def _identity_matters(ref: ChainRef) -> bool:
    """Is the reference a dict key, a set element or an operand of a comparison? There the class is
    looked up or compared (`{GradScaler: save_hook}[type(obj)]`), and no stand-in keeps its meaning."""
    parent, node = ref.parent, ref.node
    if isinstance(parent, ast.Dict):
        return any(key is node for key in parent.keys)
    if isinstance(parent, ast.DictComp):
        return parent.key is node
    return isinstance(parent, (ast.Set, ast.Compare))
