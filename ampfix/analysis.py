"""Find every deprecated AMP use in a module and decide, per use, to rewrite it or to report it.

Works on the standard-library `ast`: it parses ~10x faster than LibCST, so `check` never needs
LibCST and `rewrite` hands LibCST only the statements that change (see `ampfix.apply`).

Names are resolved through the file's own bindings (imports, assignments, definitions, per
scope), not matched as text: `import torch as th; th.cuda.amp.autocast()` is found, a local
`def autocast()` is not. Only the bindings of names that some `torch` import binds are resolved.
"""

from __future__ import annotations

import ast
import io
import re
from dataclasses import dataclass, field

from ampfix.bindings import Binding, ChainRef, ImportRef, Scope, StringRef, Walker, dotted_parts
from ampfix.options import Options
from ampfix.rules import ALL_RULES, DEPRECATED_ROOTS, Rule, Target, module_paths, no_twin

NO_TWIN_CODE = no_twin.RULE.code
MODULE_PATH_CODE = module_paths.RULE.code

_SYMBOLS: dict[str, tuple[Rule, Target | None]] = {
    name: (rule, target) for rule in ALL_RULES for name, target in rule.symbols.items()
}
_DOTTED_PATH = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


# ---------------------------------------------------------------------------------------------
# Edits handed to the LibCST applier. Keys are (statement index, ordinal of the chain/string
# within that statement), both counted the same way on the ast and the CST side.


@dataclass(frozen=True)
class CallEdit:
    device: str  # source text of the device expression
    device_position: int | None  # insert as a positional argument at this index...
    device_keyword: str | None  # ...or as this keyword after the last positional
    keywords_for_positionals: tuple[str, ...] = ()  # name the i-th positional argument


@dataclass(frozen=True)
class ChainEdit:
    new_dotted: str | None = None  # replace the dotted name; None: keep it (its import changes)
    call: CallEdit | None = None  # edit the arguments of the call whose callee this is
    decorator_call: str | None = None  # bare decorator: append "(<this>)"
    partial_args: str | None = None  # wrap as functools.partial(<name>, <this>)


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
    stmt_end: list[int]
    heads: frozenset[str]
    chain_edits: dict[tuple[int, int], ChainEdit]
    chain_texts: dict[int, list[str]]
    string_edits: dict[tuple[int, int], str]
    string_values: dict[int, list[str]]
    import_edits: dict[int, ImportEdit]
    needs_functools: bool = False

    @property
    def has_edits(self) -> bool:
        return bool(self.chain_edits or self.string_edits or self.import_edits)

    def edited_statements(self) -> list[int]:
        stmts = {k[0] for k in self.chain_edits} | {k[0] for k in self.string_edits}
        return sorted(stmts | set(self.import_edits))


def _is_torch(qname: str | None) -> bool:
    return qname is not None and (qname == "torch" or qname.startswith("torch."))


def _under_deprecated_root(qname: str) -> bool:
    return any(qname == root or qname.startswith(root + ".") for root in DEPRECATED_ROOTS)


def _root_replaced(qname: str) -> str:
    for root in DEPRECATED_ROOTS:
        if qname == root or qname.startswith(root + "."):
            return "torch.amp" + qname[len(root) :]
    return qname



# ---------------------------------------------------------------------------------------------
# Deciding


@dataclass(eq=False)
class _Use:
    """One deprecated use found in the code, and what to do with it."""

    ref: ChainRef
    code: str
    message: str
    edit: ChainEdit | None  # None: left as it is
    unsafe: bool = False
    fixable: bool = False
    suggestion: str | None = None
    group: tuple[int, str] | None = None  # (id(scope), name) of the import binding it goes through


class _Analyzer:
    def __init__(self, tree: ast.Module, lines: list[str], options: Options) -> None:
        self.lines = lines
        self.options = options
        self.walker = Walker()
        self.walker.statements(tree.body, self.walker.module_scope)
        self.findings: list[PlannedFinding] = []
        self.chain_edits: dict[tuple[int, int], ChainEdit] = {}
        self.string_edits: dict[tuple[int, int], str] = {}
        self.import_edits: dict[int, ImportEdit] = {}
        self.needs_functools = False
        self.plain_imports: dict[int, set[str]] = {}
        self.heads = self._torch_bound_names()
        chains = [ref for ref in self.walker.chains if ref.parts[0] in self.heads]
        self.chain_ordinals, self.chain_texts = _number_per_statement(chains, lambda r: ".".join(r.parts))
        self.string_ordinals, self.string_texts = _number_per_statement(self.walker.strings, lambda r: r.node.value)

    # helpers -------------------------------------------------------------------------------
    def _torch_bound_names(self) -> frozenset[str]:
        names: set[str] = set()
        # Only a scope holding an import can hold a torch import binding (or its module, for `global`).
        scopes = {id(imp.scope): imp.scope for imp in self.walker.imports}
        scopes[id(self.walker.module_scope)] = self.walker.module_scope
        for scope in scopes.values():
            for name, bindings in scope.bindings.items():
                if any(b.kind == "import" and _is_torch(b.qname) for b in bindings):
                    names.add(name)
        return frozenset(names)

    def col(self, line: int, byte_col: int) -> int:
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="replace"))

    def add_finding(self, node: ast.AST, code: str, message: str, *, fixable: bool, unsafe: bool = False,
                    will_fix: bool = False, suggestion: str | None = None) -> None:
        line = getattr(node, "lineno", 1)
        col = self.col(line, getattr(node, "col_offset", 0))
        self.findings.append(PlannedFinding(line, col, code, message, fixable, unsafe, will_fix, suggestion))

    def held_back(self, rule: Rule) -> str | None:
        if self.options.rules is not None and rule.code not in self.options.rules:
            return f"{rule.code} is not selected"
        target = self.options.target_torch
        if target is not None and rule.min_torch is not None and rule.min_torch > target:
            need = ".".join(map(str, rule.min_torch))
            have = ".".join(map(str, target))
            return f"needs torch >= {need}; the target is torch {have}"
        return None

    def device_text(self, target: Target) -> str:
        return self.options.cuda_device if target.device == "cuda" else f'"{target.device}"'

    # the main pass -------------------------------------------------------------------------
    def run(self) -> Plan:
        uses = [use for ref in self.walker.chains if ref.parts[0] in self.heads for use in self.resolve(ref)]
        self.settle_groups(uses)
        self.plan_imports()
        for use in uses:
            self.record_use(use)
        for string in self.walker.strings:
            self.string(string)
        return self.plan()

    def resolve(self, ref: ChainRef) -> list[_Use]:
        if isinstance(ref.node, ast.Name) and not isinstance(ref.node.ctx, ast.Load):
            return []  # a binding, not a use
        scope, bindings = ref.scope.lookup(ref.parts[0])
        torch_imports = [b for b in bindings if b.kind == "import" and _is_torch(b.qname)]
        if not torch_imports:
            return []
        qnames = {b.qname for b in torch_imports}
        conflicting = len(qnames) > 1 or any(
            b.kind == "other" or (b.kind == "import" and not _is_torch(b.qname)) for b in bindings
        )
        binding = torch_imports[0]
        full = ".".join((binding.qname or "", *ref.parts[1:]))
        symbol = _longest_symbol(full)
        if symbol is None and not _under_deprecated_root(full):
            return []
        through_binding = _under_deprecated_root(binding.qname or "")
        group = (id(scope), ref.parts[0]) if through_binding else None
        imported = _longest_symbol(binding.qname or "") if through_binding else None
        if imported is not None and imported[2] is None:
            return []  # a name with no twin stays imported as it is; its import line is reported
        if conflicting:
            lines = sorted({b.line for b in bindings})
            code = symbol[1].code if symbol else NO_TWIN_CODE
            return [_Use(ref, code, f"`{ref.parts[0]}` is bound to several things (lines "
                         f"{', '.join(map(str, lines))}); rewriting one use would break the others", None,
                         group=group)]
        return [self.decide(ref, full, symbol, binding, group)]

    def decide(self, ref: ChainRef, full: str, symbol: tuple[str, Rule, Target | None] | None,
               binding: Binding, group: tuple[int, str] | None) -> _Use:
        if symbol is None:
            return _Use(ref, NO_TWIN_CODE, f"`{full}` has no known torch.amp twin", None, group=group)
        name, rule, target = symbol
        rest = full[len(name):]
        if target is None:
            return _Use(ref, rule.code, f"`{full}` has no torch.amp twin", None, group=group)
        new_name = target.new + rest
        if group is None:
            new_dotted = self.new_dotted(ref, binding, new_name)
            if new_dotted is None:
                return _Use(ref, rule.code, f"`{full}`: no name bound to `torch` here to spell "
                            f"`{new_name}` with", None, suggestion=new_name)
        else:
            new_dotted = None
        reason = self.held_back(rule)
        if reason is None and group is not None:
            # The import moves too: the uses can only change if it can.
            imported = _longest_symbol(binding.qname or "")
            reason = self.held_back(imported[1]) if imported else None
        if reason is None and (ref.guarded or (group is not None and binding.guarded)):
            reason = "inside a branch that tests the torch version; the new name may not exist there"
        if reason is not None:
            suggestion = new_name if rest or ref.role == "type" else self.suggest(rule, target, new_name)
            return _Use(ref, rule.code, f"`{full}` left: {reason}", None, group=group, suggestion=suggestion)
        return self.decide_context(ref, full, rule, target, rest, new_name, new_dotted, group)

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
        prefix = binding.qname or ""
        if new_name.startswith(prefix + "."):
            return ref.parts[0] + new_name[len(prefix):]
        _, torch_bindings = ref.scope.lookup("torch")
        if torch_bindings and all(b.kind == "import" and b.qname == "torch" for b in torch_bindings):
            return new_name
        return None

    def decide_context(self, ref: ChainRef, full: str, rule: Rule, target: Target, rest: str,
                       new_name: str, new_dotted: str | None, group: tuple[int, str] | None) -> _Use:
        shape = rule.shape
        suggestion = new_name if rest or ref.role == "type" else self.suggest(rule, target, new_name)
        use = _Use(ref, rule.code, "", None, group=group, suggestion=suggestion)
        if shape is None:  # a pure rename
            if target.module and not rest and ref.role not in ("type",):
                use.message = f"`{full}`: the module object itself has no drop-in twin"
                use.code = NO_TWIN_CODE
                return use
            return self.fixed(use, f"`{full}` -> `{new_name}`", ChainEdit(new_dotted=new_dotted))
        if rest:
            use.message = f"`{full}`: an attribute of a deprecated object; migrate by hand"
            return use
        device = self.device_text(target)
        if ref.role == "call":
            return self.decide_call(use, full, shape, device, new_name, new_dotted)
        if ref.role == "type":
            return self.fixed(use, f"`{full}` -> `{new_name}` (type position)", ChainEdit(new_dotted=new_dotted))
        if ref.role == "decorator":
            if shape.bare_decorator_ok:
                args = f"{shape.device_keyword}={device}"
                return self.fixed(use, f"`@{full}` -> `@{new_name}({args})`",
                                  ChainEdit(new_dotted=new_dotted, decorator_call=args))
            use.message = f"bare `@{full}` passes the function as `enabled`; add the arguments by hand"
            return use
        if ref.role == "base":
            use.message = (f"class derives from `{full}`: a positional construction of the subclass would "
                           f"bind to `device` of `{new_name}`")
            return self.unsafe(use, ChainEdit(new_dotted=new_dotted))
        use.message = f"`{full}` is referenced without a call; its calls cannot be given the device here"
        if shape.partial_keeps_meaning:
            args = f"{shape.device_keyword}={device}" if shape.device_keyword else device
            use.suggestion = f"functools.partial({new_name}, {args})"
            return self.unsafe(use, ChainEdit(new_dotted=new_dotted, partial_args=args))
        return use

    def decide_call(self, use: _Use, full: str, shape, device: str, new_name: str,
                    new_dotted: str | None) -> _Use:
        call = use.ref.parent
        assert isinstance(call, ast.Call)
        starred = any(isinstance(arg, ast.Starred) for arg in call.args)
        # `*args` only matters where positions move: named (autocast) or a device among them (_cast).
        if starred and (shape.positionals_to_keywords or shape.device_position not in (None, 0)):
            use.message = f"`{full}(*args)`: the positions of the arguments are unknown"
            return use
        positionals = len(call.args)
        if not starred and positionals > len(shape.old_params):
            use.message = f"`{full}` called with {positionals} positional arguments; it takes at most " \
                          f"{len(shape.old_params)}"
            return use
        keywords = {kw.arg for kw in call.keywords if kw.arg is not None}
        if shape.device_keyword in keywords or "device_type" in keywords or "device" in keywords:
            use.message = f"`{full}` already given a device argument"
            return use
        if shape.device_position is not None and positionals < shape.device_position:
            use.message = f"`{full}`: the arguments before the device are passed by keyword"
            return use
        names = shape.old_params[:positionals] if shape.positionals_to_keywords else ()
        edit = CallEdit(device, shape.device_position, shape.device_keyword, tuple(names))
        what = f"device {device}"
        if names:
            what += ", positional arguments named " + ", ".join(names)
        return self.fixed(use, f"`{full}(...)` -> `{new_name}(...)` with {what}",
                          ChainEdit(new_dotted=new_dotted, call=edit))

    def fixed(self, use: _Use, message: str, edit: ChainEdit) -> _Use:
        use.message, use.edit, use.fixable = message, edit, True
        return use

    def unsafe(self, use: _Use, edit: ChainEdit) -> _Use:
        use.fixable = use.unsafe = True
        if self.options.unsafe_fixes:
            use.edit = edit
        return use

    # bindings through deprecated imports: all uses rewritten, or none -------------------------
    def settle_groups(self, uses: list[_Use]) -> None:
        self.blocked_groups: dict[tuple[int, str], _Use] = {}
        for use in uses:
            if use.group is not None and use.edit is None and use.group not in self.blocked_groups:
                self.blocked_groups[use.group] = use
        for use in uses:
            blocker = self.blocked_groups.get(use.group) if use.group else None
            if blocker is not None and use.edit is not None:
                use.edit = None
                use.fixable = False
                use.message = (f"left: `{use.ref.parts[0]}` is also used on line {blocker.ref.node.lineno} "
                               f"in a way that cannot be rewritten")

    def plan_imports(self) -> None:
        for imp in self.walker.imports:
            if isinstance(imp.node, ast.ImportFrom):
                self.plan_import_from(imp)
            else:
                self.plan_import(imp)

    def import_blocker(self, imp: ImportRef, name: str, qname: str) -> str | None:
        """Why the import binding `name` cannot move to its torch.amp twin, or None."""
        symbol = _longest_symbol(qname)
        if symbol is None or symbol[2] is None or symbol[0] != qname:
            return f"`{qname}` has no torch.amp twin"
        blocker = self.blocked_groups.get((id(imp.scope), name))
        if blocker is not None:
            return f"`{name}` is used on line {blocker.ref.node.lineno} in a way that cannot be rewritten"
        _, bindings = imp.scope.lookup(name)
        if any(b.kind != "none" and b.qname != qname for b in bindings):
            return f"`{name}` is bound to several things"
        reason = self.held_back(symbol[1])
        if reason is None and imp.guarded:
            reason = "inside a branch that tests the torch version"
        return reason

    def plan_import_from(self, imp: ImportRef) -> None:
        node = imp.node
        assert isinstance(node, ast.ImportFrom)
        if node.level or not node.module or not _is_torch(node.module):
            return
        migrated: list[int] = []
        kept: list[int] = []
        new_modules: set[str] = set()
        for i, alias in enumerate(node.names):
            qname = f"{node.module}.{alias.name}"
            if alias.name == "*":
                if _under_deprecated_root(node.module):
                    self.add_finding(node, MODULE_PATH_CODE, f"`from {node.module} import *`: the names it "
                                     "binds cannot be resolved; import them by name", fixable=False)
                kept.append(i)
                continue
            if not _under_deprecated_root(qname):
                kept.append(i)
                continue
            reason = self.import_blocker(imp, alias.asname or alias.name, qname)
            if reason is not None:
                symbol = _longest_symbol(qname)
                code = symbol[1].code if symbol and symbol[2] is None else (
                    NO_TWIN_CODE if symbol is None else MODULE_PATH_CODE)
                self.add_finding(alias, code, f"`{qname}` import left: {reason}", fixable=False)
                kept.append(i)
                continue
            migrated.append(i)
            new_modules.add(_root_replaced(qname).rpartition(".")[0])
        if not migrated:
            return
        if len(new_modules) != 1:  # cannot happen with today's rules; never guess
            return
        (new_module,) = new_modules
        self.import_edits[imp.stmt_index] = ImportEdit(new_module=new_module, kept_aliases=tuple(kept))
        names = ", ".join(node.names[i].name for i in migrated)
        self.add_finding(node, MODULE_PATH_CODE, f"`from {node.module} import {names}` -> "
                         f"`from {new_module} import {names}`", fixable=True, will_fix=True)

    def plan_import(self, imp: ImportRef) -> None:
        node = imp.node
        renamed: dict[int, str] = {}
        removed: list[int] = []
        for i, alias in enumerate(node.names):
            if not _under_deprecated_root(alias.name):
                continue
            if alias.asname:
                reason = self.import_blocker(imp, alias.asname, alias.name)
            else:  # binds `torch` itself; `import torch` already loads both paths
                symbol = _longest_symbol(alias.name)
                reason = None if symbol and symbol[2] and symbol[0] == alias.name else "no torch.amp twin"
                reason = reason or self.held_back(module_paths.RULE)
                if reason is None and imp.guarded:
                    reason = "inside a branch that tests the torch version"
            if reason is not None:
                self.add_finding(alias, MODULE_PATH_CODE, f"`import {alias.name}` left: {reason}", fixable=False)
                continue
            new_name = _root_replaced(alias.name)
            plain = self.plain_imports.setdefault(id(imp.scope), self.existing_plain_imports(imp.scope))
            if not alias.asname and new_name in plain:
                # `import torch.amp` is already there: the renamed line would repeat it.
                removed.append(i)
                self.add_finding(alias, MODULE_PATH_CODE, f"`import {alias.name}` removed: `import {new_name}` "
                                 "is already there", fixable=True, will_fix=True)
                continue
            if not alias.asname:
                plain.add(new_name)
            renamed[i] = new_name
            self.add_finding(alias, MODULE_PATH_CODE, f"`import {alias.name}` -> `import {renamed[i]}`",
                             fixable=True, will_fix=True)
        if renamed or removed:
            self.import_edits[imp.stmt_index] = ImportEdit(renamed_aliases=renamed, removed_aliases=tuple(removed))

    def existing_plain_imports(self, scope: Scope) -> set[str]:
        return {
            alias.name
            for imp in self.walker.imports
            if imp.scope is scope and isinstance(imp.node, ast.Import)
            for alias in imp.node.names
            if not alias.asname
        }

    # recording -----------------------------------------------------------------------------
    def record_use(self, use: _Use) -> None:
        if use.edit is not None and (use.edit.new_dotted or use.edit.call or use.edit.decorator_call
                                     or use.edit.partial_args):
            self.chain_edits[self.chain_key(use.ref)] = use.edit
            self.needs_functools |= use.edit.partial_args is not None
        message = use.message
        if use.unsafe and not self.options.unsafe_fixes:
            message += " (an unsafe fix exists: --unsafe-fixes)"
        self.add_finding(use.ref.node, use.code, message, fixable=use.fixable, unsafe=use.unsafe,
                         will_fix=use.edit is not None, suggestion=use.suggestion)

    def chain_key(self, ref: ChainRef) -> tuple[int, int]:
        return ref.stmt_index, self.chain_ordinals[id(ref)]

    # strings -------------------------------------------------------------------------------
    def string(self, ref: StringRef) -> None:
        if ref.in_annotation:
            self.string_annotation(ref)
        elif _DOTTED_PATH.fullmatch(ref.node.value) and _under_deprecated_root(ref.node.value):
            self.string_path(ref)

    def string_path(self, ref: StringRef) -> None:
        path = ref.node.value
        symbol = _longest_symbol(path)
        if symbol is None or symbol[2] is None or symbol[0] != path:
            code = symbol[1].code if symbol else NO_TWIN_CODE
            self.add_finding(ref.node, code, f"string names `{path}`, which has no torch.amp twin", fixable=False)
            return
        new_path = symbol[2].new
        literal = self.literal_with(ref, [(0, len(path), new_path)])
        fixable = literal is not None
        if fixable and self.options.unsafe_fixes:
            self.string_edits[self.string_key(ref)] = literal
        message = (f"string names the deprecated `{path}`: once the code uses `{new_path}`, a patch or "
                   f"lookup of this path no longer reaches it")
        if fixable and not self.options.unsafe_fixes:
            message += " (an unsafe fix exists: --unsafe-fixes)"
        self.add_finding(ref.node, symbol[1].code, message, fixable=fixable, unsafe=True,
                         will_fix=fixable and self.options.unsafe_fixes, suggestion=f'"{new_path}"')

    def string_annotation(self, ref: StringRef) -> None:
        """`"torch.cuda.amp.GradScaler | None"`: each dotted name inside is resolved like code."""
        value = ref.node.value
        try:
            inner = ast.parse(value.strip(), mode="eval")
        except SyntaxError:
            return
        offset = len(value) - len(value.lstrip())
        inner_values = {id(n.value) for n in ast.walk(inner) if isinstance(n, ast.Attribute)}
        replacements: list[tuple[int, int, str]] = []
        uses: list[_Use] = []
        for node in ast.walk(inner):
            if id(node) in inner_values or not isinstance(node, (ast.Name, ast.Attribute)):
                continue
            parts = dotted_parts(node)
            if parts is None or parts[0] not in self.heads:
                continue
            as_code = ChainRef(node, parts, ref.scope, ref.stmt_index, "type", None, ref.guarded)
            for use in self.resolve(as_code):
                if use.group is not None and use.edit is not None:
                    continue  # through a deprecated import: the import's rewrite covers it
                uses.append(use)
                if use.edit is not None and use.edit.new_dotted is not None:
                    replacements.append((offset + node.col_offset, offset + node.end_col_offset, use.edit.new_dotted))
        if not uses:
            return
        literal = self.literal_with(ref, replacements)
        reason = next((use.message for use in uses if use.edit is None), None)
        if literal is None:
            reason = reason or "the literal has escapes, a prefix or several lines"
        for use in uses:
            written = ".".join(use.ref.parts)
            if reason:
                self.add_finding(ref.node, use.code, f"string annotation names `{written}`; left: {reason}",
                                 fixable=False, suggestion=use.suggestion)
            else:
                self.add_finding(ref.node, use.code, f"string annotation `{written}` -> `{use.edit.new_dotted}`",
                                 fixable=True, will_fix=True)
        if not reason:
            self.string_edits[self.string_key(ref)] = literal

    def literal_with(self, ref: StringRef, replacements: list[tuple[int, int, str]]) -> str | None:
        """The string literal with spans of its value replaced; None if value != raw content."""
        node = ref.node
        if node.lineno != node.end_lineno:
            return None
        line = self.lines[node.lineno - 1].encode("utf-8")
        raw = line[node.col_offset : node.end_col_offset].decode("utf-8")
        quote = next((q for q in ('"""', "'''", '"', "'") if raw.startswith(q)), None)
        if quote is None or not raw.endswith(quote) or len(raw) < 2 * len(quote):
            return None  # a prefix (r, u, b, f) or a concatenation
        content = raw[len(quote) : -len(quote)]
        if content != node.value or "\\" in content:
            return None
        for start, end, new in sorted(replacements, reverse=True):
            content = content[:start] + new + content[end:]
        return quote + content + quote

    def string_key(self, ref: StringRef) -> tuple[int, int]:
        return ref.stmt_index, self.string_ordinals[id(ref)]

    def functools_imported(self) -> bool:
        bindings = self.walker.module_scope.bindings.get("functools", [])
        return any(b.kind == "import" and b.qname == "functools" for b in bindings)

    # the result ----------------------------------------------------------------------------
    def plan(self) -> Plan:
        chain_stmts = {stmt for stmt, _ in self.chain_edits}
        string_stmts = {stmt for stmt, _ in self.string_edits}
        self.findings.sort(key=lambda f: (f.line, f.col, f.code))
        return Plan(
            findings=self.findings,
            stmt_end=self.walker.stmt_end,
            heads=self.heads,
            chain_edits=self.chain_edits,
            chain_texts={stmt: self.chain_texts[stmt] for stmt in chain_stmts},
            string_edits=self.string_edits,
            string_values={stmt: self.string_texts[stmt] for stmt in string_stmts},
            import_edits=self.import_edits,
            needs_functools=self.needs_functools and not self.functools_imported(),
        )


def _number_per_statement(refs, text) -> tuple[dict[int, int], dict[int, list[str]]]:
    """Each ref's ordinal within its statement in source order, and each statement's texts in that
    order: how `ampfix.apply` counts the same names and strings in the CST."""
    per_stmt: dict[int, list] = {}
    for ref in refs:
        per_stmt.setdefault(ref.stmt_index, []).append(ref)
    ordinals: dict[int, int] = {}
    texts: dict[int, list[str]] = {}
    for stmt, in_stmt in per_stmt.items():
        in_stmt.sort(key=lambda r: (r.node.lineno, r.node.col_offset))
        texts[stmt] = [text(r) for r in in_stmt]
        ordinals.update((id(r), i) for i, r in enumerate(in_stmt))
    return ordinals, texts


def _longest_symbol(qname: str) -> tuple[str, Rule, Target | None] | None:
    parts = qname.split(".")
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        found = _SYMBOLS.get(name)
        if found is not None:
            return name, found[0], found[1]
    return None


def source_lines(source: str) -> list[str]:
    """Lines as the tokenizer counts them (str.splitlines would also split on form feeds)."""
    return io.StringIO(source, newline="").readlines()


def analyze(tree: ast.Module, source: str, options: Options) -> Plan:
    return _Analyzer(tree, source_lines(source), options).run()
