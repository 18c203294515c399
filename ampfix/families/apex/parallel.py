"""AMP110/AMP111: apex.parallel's DistributedDataParallel, convert_syncbn_model and SyncBatchNorm -> torch's.

Rewritten all together or not at all, only where the code proves it right: every apex.parallel name the module
uses is one of these, imported by `from apex.parallel import ...` statements at module level (each on lines of its
own, no comment on them; or in a `try` whose handlers only raise; or in the optional import of apex.amp's `try`,
whose imports `ampfix.families.apex.detect` removes after both rewrites; or earlier in the block of the call), or read
as `apex.parallel.<name>` through an `import apex` that binds it as well, and called directly; `torch` is imported at
module level (or by the apex.amp rewrite made beside it, before the module-level uses); each call passes only what
means the same to torch (`PARALLEL_TWINS`). `DistributedDataParallel(model)` gets `device_ids=[<local rank>]`, the
one GPU of this process (apex's used the module's device): a `local_rank` name seen from the call, or an
`X.local_rank` read in the call's scope where `X` is seen from the call; without one it is reported. The imports
are removed. One process or several, torch's DDP averages the gradients as apex's did (apex's `delay_allreduce`,
`message_size`, ... change only communication and are reported, not dropped).
"""

from __future__ import annotations

import ast

from ampfix.families.apex import rules
from ampfix.families.apex.module import ApexModule
from ampfix.families.apex.optional import optional_holding
from ampfix.families.apex.rewrite import Engine, NotMechanical, engine_of
from ampfix.families.apex.tried import raising_try
from ampfix.syntax.bindings import ChainRef


def plan_parallel(analysis: ApexModule, uses: list[tuple[ChainRef, str]],
                  torch_imported_at: int | None = None) -> dict[int, str] | str:
    """The message of each use (id() of its ref) and of each import removed (id() of the statement), or why not.
    `torch_imported_at`: the line where the apex.amp rewrite made in the same pass imports torch at module level
    (torch is then imported by its own name, as the next run would find)."""
    engine = engine_of(analysis)
    try:
        splices, messages = _plan(engine, uses, torch_imported_at)
    except NotMechanical as reason:
        return str(reason)
    engine.add_splices(splices)
    return messages


Splices = list[tuple[int, int, str]]


class UnsafeFix(str):
    """The message of a use rewritten under --unsafe-fixes only."""


def _delay_allreduce(engine: Engine, call: ast.Call) -> ast.keyword | None:
    """`delay_allreduce=True`, the last argument, under --unsafe-fixes (apex's ImageNet example): dropped, torch's
    DDP averaging the same gradients (`rules.DELAY_ALLREDUCE` says what differs); else None."""
    last = call.keywords[-1] if call.keywords else None
    if last is not None and last.arg == "delay_allreduce" and isinstance(last.value, ast.Constant) \
            and last.value.value is True and len(call.keywords) == 1:
        if not engine.options.unsafe_fixes:
            raise NotMechanical(f"delay_allreduce=True would be dropped: {rules.DELAY_ALLREDUCE} (an unsafe fix "
                                "exists: --unsafe-fixes)")
        return last
    return None


def _plan(engine: Engine, uses: list[tuple[ChainRef, str]],
          torch_imported_at: int | None) -> tuple[Splices, dict[int, str]]:
    index = engine.index
    _, torch_bindings = engine.module_scope.lookup(rules.NATIVE.package)
    imported = bool(torch_bindings) or torch_imported_at is not None and all(
        ref.node.lineno > torch_imported_at for ref, _ in uses if ref.scope is engine.module_scope)
    if not imported or not all(b.kind == "import" and b.qname == rules.NATIVE.package for b in torch_bindings):
        raise NotMechanical("the module does not import torch by its own name")
    splices: Splices = []
    messages: dict[int, str] = {}
    sites: dict[int, ast.ImportFrom] = {}
    packages: dict[int, tuple[ast.Import, list[ChainRef]]] = {}  # `import apex`, and the apex.parallel calls through it
    for ref, full in uses:
        twin = rules.PARALLEL_TWINS.get(full)
        call = ref.parent
        if twin is None or ref.role != "call" or not isinstance(call, ast.Call) or call.func is not ref.node:
            raise NotMechanical(f"`{full}` is not called directly, or has no rewrite")
        _, bindings = ref.scope.lookup(ref.parts[0])
        statement = bindings[0].imported_by.node if len(bindings) == 1 and bindings[0].imported_by else None
        if isinstance(statement, ast.Import) and _package_import(statement, ref) \
                and _binds_before(engine, statement, call):
            packages.setdefault(id(statement), (statement, []))[1].append(ref)
        elif not (isinstance(statement, ast.ImportFrom) and statement.module == "apex.parallel" and len(ref.parts) == 1
                  and (_binds_before(engine, _import_site(engine, statement), call)
                       or optional_holding(engine.tree, statement, engine.module_scope) is not None)):
            raise NotMechanical("an apex.parallel name does not come from `from apex.parallel import ...` at module "
                                "level, or before its use in the use's block (alone, or in a `try` whose handlers "
                                "only raise)")
        if isinstance(statement, ast.ImportFrom):
            sites[id(statement)] = statement
        new, keywords, positional = twin
        dropped = _delay_allreduce(engine, call) if new == "torch.nn.parallel.DistributedDataParallel" else None
        if len(call.args) > positional or any(isinstance(a, ast.Starred) for a in call.args) \
                or any(k.arg not in keywords and k is not dropped for k in call.keywords):
            raise NotMechanical(f"`{ref.parts[0]}(...)` passes arguments torch's {new} does not take alike "
                                "(apex's communication options have no twin)")
        start, end = index.span(ref.node)
        splices.append((start, end, new))
        extra = ""
        if new == "torch.nn.parallel.DistributedDataParallel":
            rank = _local_rank(engine, ref)
            if rank is None:
                raise NotMechanical("no local rank in scope for device_ids (a `local_rank` name, or `X.local_rank`)")
            at = index.span(call.args[-1])[1] if call.args else None
            if at is None or [k for k in call.keywords if k is not dropped]:
                raise NotMechanical("DistributedDataParallel is not given the module alone")
            splices.append((at, index.span(dropped)[1] if dropped is not None else at, f", device_ids=[{rank}]"))
            extra = f", with device_ids=[{rank}] (the GPU of this process; apex's used the module's device)"
            if dropped is not None:
                messages[id(ref)] = UnsafeFix(f"`{'.'.join(ref.parts)}` -> `{new}`{extra}; delay_allreduce=True is "
                                              f"dropped: {rules.DELAY_ALLREDUCE}")
                continue
        messages[id(ref)] = f"`{'.'.join(ref.parts)}` -> `{new}`{extra}"
    for package, refs in packages.values():
        _remove_package_import(engine, package, refs, splices)
    held = [st for st in sites.values() if optional_holding(engine.tree, st, engine.module_scope) is not None]
    for statement in held:  # in the optional import's `try`: removed by the step after both rewrites (`detect`)
        if not {f"apex.parallel.{alias.name}" for alias in statement.names} <= set(rules.PARALLEL_TWINS):
            raise NotMechanical("the apex.parallel import also imports a name with no rewrite")
        messages[id(statement)] = "the apex.parallel import is removed: torch's names take its place"
    for site in sorted({id(_import_site(engine, st)): _import_site(engine, st) for st in sites.values()
                        if raising_try(engine.tree, st, engine.index) is None and st not in held}.values(),
                       key=lambda node: node.lineno):
        _remove(engine, site, [st for st in sites.values() if _import_site(engine, st) is site], splices, messages)
    for edit_start, edit_end in engine.edit_spans():
        if any(s < edit_end and edit_start < e for s, e, _ in splices if s <= e):
            raise NotMechanical("another rewrite edits a statement this one changes")
    return splices, messages


def _import_site(engine: Engine, statement: ast.ImportFrom) -> ast.stmt:
    """What removing the import removes: the import, or the `try` holding only apex.parallel imports whose handlers
    only raise (the import failing was an error, and torch's names, which take their place, are always there:
    DeepLearningExamples' `try: from apex.parallel import DistributedDataParallel as DDP` / `except ImportError:
    raise ImportError("Please install apex ...")`)."""
    parent = engine.parents.of(statement)
    if isinstance(parent, ast.Try) and raising_try(engine.tree, statement, engine.index) is parent:
        return parent  # several apex imports: `tried` removes what the rewrites made unused
    if isinstance(parent, ast.Try) and not parent.orelse and not parent.finalbody and all(
            isinstance(s, ast.ImportFrom) and s.module == "apex.parallel" for s in parent.body) and all(
            len(h.body) == 1 and isinstance(h.body[0], ast.Raise) for h in parent.handlers):
        return parent
    return statement


def _package_import(statement: ast.Import, ref: ChainRef) -> bool:
    """`import apex` (no alias), its name read as `apex.parallel.<name>(...)`: apex's ImageNet example's
    `import apex; model = apex.parallel.convert_syncbn_model(model)`."""
    return [(a.name, a.asname) for a in statement.names] == [("apex", None)] \
        and list(ref.parts[:2]) == ["apex", "parallel"] and len(ref.parts) == 3


def _remove_package_import(engine: Engine, statement: ast.Import, refs: list[ChainRef], splices: Splices) -> None:
    """`import apex` goes where the calls rewritten are every read of its name in its scope (apex's surviving
    modules, `apex.optimizers`, keep it) and it stands alone on its lines, not alone in its block; else it stays."""
    scope: ast.AST | None = engine.parents.of(statement)  # the function (or module) that binds the name
    while scope is not None and not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
        scope = engine.parents.of(scope)
    scope = scope or engine.tree
    reads = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == "apex"]
    index = engine.index
    start, end = index.line_start(statement.lineno), index.line_end(statement.end_lineno or statement.lineno)
    parent = engine.parents.of(statement)
    alone = any(getattr(parent, name, None) == [statement] for name in ("body", "orelse", "finalbody"))
    if len(reads) != len(refs) or alone or index.text[start:end].strip() != "import apex":
        return
    splices.append((*index.removal(statement.lineno, statement.end_lineno or statement.lineno), ""))


def _binds_before(engine: Engine, site: ast.stmt, call: ast.Call) -> bool:
    """The import binds its names for the call wherever the call runs: at module level, or earlier in the block that
    holds the call's statement (a local import before `model = DDP(model)`); one alone in its block is not removed
    (the block would be empty)."""
    if site in engine.tree.body:
        return True
    parent = engine.parents.of(site)
    node: ast.AST | None = call
    while node is not None and engine.parents.of(node) is not parent:
        node = engine.parents.of(node)
    for name in ("body", "orelse", "finalbody"):
        block = getattr(parent, name, None)
        if isinstance(block, list) and site in block and node in block:
            return block.index(site) < block.index(node)
    return False


def _remove(engine: Engine, site: ast.stmt, statements: list[ast.ImportFrom], splices: Splices,
            messages: dict[int, str]) -> None:
    """The import (or its `try`, `_import_site`) goes when every name it binds is one of the names rewritten (and
    used only through them)."""
    index = engine.index
    held = [s for s in site.body if isinstance(s, ast.ImportFrom)] if isinstance(site, ast.Try) else statements
    rewritten = {f"apex.parallel.{alias.name}" for statement in held for alias in statement.names}
    if not rewritten <= set(rules.PARALLEL_TWINS) or len(held) != len(statements):
        raise NotMechanical("the apex.parallel import also imports a name with no rewrite")
    last = site.end_lineno or site.lineno
    start, end = index.line_start(site.lineno), index.line_end(last)
    text = index.text[start:end]
    if text.strip() != index.text[index.span(site)[0]:index.span(site)[1]].strip() or "#" in text:
        raise NotMechanical("the apex.parallel import shares its lines (or a comment)")
    splices.append((*index.removal(site.lineno, last), ""))
    for statement in statements:
        messages[id(statement)] = "the apex.parallel import is removed: torch's names take its place" + (
            " (with the `try` whose handlers only raised where it failed)" if site is not statement else "")


def _local_rank(engine: Engine, ref: ChainRef) -> str | None:
    """`local_rank` seen from the call; an `X.local_rank` read in the call's scope (`X` seen from it); or, where the
    module declares the option (`add_argument("--local_rank", ...)`), `X.local_rank` of the one `X = ....parse_args()`
    seen from the call."""
    if ref.scope.lookup(rules.LOCAL_RANK)[1]:
        return rules.LOCAL_RANK
    root = ref.scope.node if ref.scope.node is not None else engine.tree
    for node in ast.walk(root):
        if isinstance(node, ast.Attribute) and node.attr == rules.LOCAL_RANK and isinstance(node.ctx, ast.Load) \
                and isinstance(node.value, ast.Name) and ref.scope.lookup(node.value.id)[1]:
            return f"{node.value.id}.{rules.LOCAL_RANK}"
    declared = any(isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                   and node.func.attr == "add_argument" and node.args and isinstance(node.args[0], ast.Constant)
                   and node.args[0].value in (f"--{rules.LOCAL_RANK}", f"--{rules.LOCAL_RANK.replace('_', '-')}")
                   for node in ast.walk(engine.tree))
    parsed = [node.targets[0].id for node in ast.walk(engine.tree)
              if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
              and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute)
              and node.value.func.attr == "parse_args"]
    if declared and len(set(parsed)) == 1 and ref.scope.lookup(parsed[0])[1]:
        return f"{parsed[0]}.{rules.LOCAL_RANK}"
    return None
