"""The engine's questions about the project around a file (`ampfix.core.project`), answered from its files.

A name imported from a module of the project (`from .compat import torch`, `from pkg.utils import autocast`) is
what that module binds it to at its top level by imports, followed through the project's own modules. Read when
asked, not indexed: a file's questions are few (only names that can lead to the family's, `Family.name_parts`),
each one small parse; a read module is kept for the run, keyed by its path and its stat (mtime, size), so a file
changed during the run is read again. Between runs, only the answers of the walks' byte filters are kept, each
by its file's stat (`ampfix.io.project_index`), so nothing can be stale (docs/design.md, "A name from another
module of the project").

A class of the file (a GradScaler subclass) is looked for in the project's other files: those whose bytes spell its
name are parsed, and each read of it (`from .scaling import S`, `scaling.S`, `pkg.scaling.S`, through re-exports) is
followed in its file as the class's own module follows it (`ModuleFlows.constructions`).

Absolute modules are looked up as Python looks them up where the project runs (`_search_path`, `_found`): a
script's own folder, a module's package root, the project root and its `src/` (docs/design.md, "Absolute imports").
A value passed to a function of another module is followed there (`argument_calls`).
"""

from __future__ import annotations

import ast
import functools
import os
import re
from pathlib import Path
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from ampfix.core.project import Calls, Export
from ampfix.io import code_stamp
from ampfix.io.project_index import Index, Test, digest

if TYPE_CHECKING:
    from ampfix.core.options import Options
    from ampfix.syntax.bindings import Binding, ChainRef, Walker
    from ampfix.syntax.flow import ModuleFlows

_DEPTH = 4  # re-exports followed through at most this many modules
# A `from M import names` statement, found in the bytes before any parse (the parse decides). No `^`: a pattern
# that starts with a literal is searched for at C speed (10x faster); one inside a string or comment only makes
# its file parsed.
_FROM_IMPORT = re.compile(rb"from[ \t]+([\w.]+)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)")
_WORD = re.compile(rb"\w+")
_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")
_parsed: dict[Path, tuple[tuple[int, int], dict[str, list[Binding]] | None]] = {}
# (project root, one name or None: the rules' names) -> (the module file, the name taken from it) -> [(where, the
# importing file)]: one walk per run.
_indexed: dict[tuple[Path, str | None], dict[tuple[Path, str], list[tuple[str, Path]]]] = {}
# (project root, qualified name) -> [(where, the file)]: its uses in the project's files, one walk per question.
_used: dict[tuple[Path, str], list[tuple[str, Path]]] = {}
# (project root, the module file, a name, of its results) -> its calls in the project's other files: one walk per run;
# (the module file twice, a function's name, "argument <position> <keyword>") -> its calls of that parameter.
_constructed: dict[tuple[Path, Path, str, str], Calls | None] = {}
# project root -> its byte answers kept between runs (`ampfix.io.project_index`), loaded once per run and process.
_indices: dict[Path, Index] = {}
_cache = True  # whether this run reads and keeps them (`--no-cache`: not)


class FileModules:
    """The questions of one file (`path`)."""

    def __init__(self, path: Path, root: Path | None = None, options: Options | None = None,
                 asks_halves: bool = True, plans_half: PlansHalf | None = None) -> None:
        self.path = path
        self.root = root  # the project's folder, where it is known (else: the nearest with a project file)
        self.options = options  # the run's (before the file's own target), for `half_planned`
        self.asks_halves = asks_halves  # False in `half_planned`'s own run of another file: no further asking
        self.plans_half = plans_half  # the run's planner of another file (the io layer's, which reads and decodes)

    def exported(self, level: int, module: str | None, name: str) -> Export | None:
        return _exported(self.path, level, module, name, _DEPTH)

    def importers(self, name: str) -> tuple[str, ...]:
        try:
            me = self.path.resolve()
        except OSError:
            return ()
        root = self.root or _project_root(me)
        index = _importers(root) if name in _asked() else _importers(root, name)
        return tuple(where for where, path in index.get((me, name), ()) if path.resolve() != me)

    def uses(self, qname: str, below: bool = False) -> tuple[str, ...]:
        try:
            me = self.path.resolve()
        except OSError:
            return ()
        root = self.root or _project_root(me)
        found = [(where, path.resolve()) for where, path in _uses(root, qname, below)]
        # nearest first: the most folders shared with this file (espnet2's trainer: espnet2's task before espnet's)
        nearest = sorted((-_shared(me, path), where) for where, path in found if path != me)
        return tuple(where for _, where in nearest)

    def constructions(self, name: str) -> Calls | None:
        return self._calls(name, "construct")

    def result_calls(self, name: str) -> Calls | None:
        return self._calls(name, "results")

    def value_calls(self, name: str) -> Calls | None:
        return self._calls(name, "value")

    def argument_calls(self, level: int, module: str, name: str, position: int | None,
                       keyword: str | None) -> Calls | None:
        holder = _module_file(self.path.absolute(), level, module or None)
        defined_in = _origin(holder, name, _DEPTH) if holder is not None else None
        if defined_in is None:
            return None
        key = (defined_in, defined_in, name, f"argument {position} {keyword}")
        if key not in _constructed:
            _constructed[key] = _argument_calls(defined_in, name, position, keyword)
        return _constructed[key]

    def _calls(self, name: str, results: str) -> Calls | None:
        try:
            me = self.path.resolve()
        except OSError:
            return None
        root = self.root or _project_root(me)
        key = (root, me, name, results)
        if key not in _constructed:
            _constructed[key] = _calls(root, me, name, results)
        return _constructed[key]

    def module(self) -> str | None:
        return _module_name(self.path.absolute())

    def file_of(self, module: str) -> str | None:
        found = _module_file(self.path.absolute(), 0, module)
        return None if found is None else _shown(found.resolve())

    def uses_below(self, qname: str) -> tuple[str, ...]:
        return self.uses(qname, below=True)

    def switch_reader(self) -> bool:
        return reads_apex_switch(self.path, self.root)

    def in_run(self, place: str) -> bool:
        files = _run_files()
        return files is not None and _place_path(place) in files

    def tree_of(self, place: str) -> ast.Module | None:
        try:
            return ast.parse(_place_path(place).read_bytes())
        except (OSError, SyntaxError, ValueError, RecursionError):
            return None

    def half_planned(self, place: str) -> bool:
        """Planned by the engine as this run plans it (rewrite, the run's options and the file's own target), with
        a project that answers True here: the other file's own half decides, from the same facts."""
        if not self.asks_halves:
            return True
        if self.options is None or self.plans_half is None:
            return False
        path = _place_path(place)
        return self.plans_half(path, FileModules(path, self.root, self.options, asks_halves=False))


# Whether the file `path`, planned with the project `project` (the run's options), rewrites its half of a set-up.
PlansHalf = Callable[[Path, "FileModules"], bool]
# The run's files, as `discover` finds them (the paths given, the excludes, --force-exclude), found when first asked:
# only a half of a set-up split across modules asks.
_run: tuple[tuple[str, ...], object, bool] | None = None
_run_found: frozenset[Path] | None = None
_discover: Callable[..., Iterable[object]] | None = None  # the io layer's walk of a run's paths


def begin_run(paths: tuple[str, ...], exclusions: object, force_exclude: bool,
              discover: Callable[..., Iterable[object]]) -> None:
    """The files of this run are those `discover(paths, exclusions, force_exclude)` finds (`in_run`)."""
    global _run, _run_found, _discover
    _run, _run_found, _discover = (paths, exclusions, force_exclude), None, discover


def run_state() -> tuple[tuple[str, ...], object, bool] | None:
    """What a pool worker is given to answer `in_run` as the parent does (`begin_run` there)."""
    return _run


def cache_state() -> bool:
    """Whether this run keeps the project's byte answers between runs: what a pool worker is given (`forget` there)."""
    return _cache


def _run_files() -> frozenset[Path] | None:
    global _run_found
    if _run is None or _discover is None:
        return None
    if _run_found is None:
        found = set()
        for path in _discover(*_run):
            if isinstance(path, Path):
                try:
                    found.add(path.resolve())
                except OSError:
                    continue
        _run_found = frozenset(found)
    return _run_found


def _place_path(place: str) -> Path:
    """The file of a place `uses` shows (`pkg/train.py:12`), resolved."""
    head, _, line = place.rpartition(":")
    path = Path(head if head and line.isdigit() else place)
    try:
        return path.resolve()
    except OSError:
        return path.absolute()


# project root -> the files that read an enum whose members guard the project's apex.amp uses: one walk per run.
_switch_readers: dict[Path, frozenset[Path]] = {}


def reads_apex_switch(path: Path, root: Path | None = None) -> bool:
    """Does `path` read an enum whose members guard the project's apex.amp uses (`if X == E.APEX:` around each,
    `ampfix.families.apex.rewrite.enum_switch`)? Such a file spells no apex (vissl's gradient clipping hook compares
    `task.amp_type == AmpType.PYTORCH`), yet its comparisons are rewritten with the modules that use apex.amp.
    Asked only under --unsafe-fixes, of a file the byte filter passed over."""
    try:
        me = path.resolve()
    except OSError:
        return False
    root = root or _project_root(me)
    if root not in _switch_readers:
        from ampfix.families.apex.rewrite.enum_switch import guarding_enum  # only asked under --unsafe-fixes

        enums = set()
        for apex_file in dict.fromkeys(found for _, found in _uses(root, "apex.amp", below=True)):
            try:
                enum = guarding_enum(ast.parse(apex_file.read_bytes()))
            except (OSError, SyntaxError, ValueError, RecursionError):
                continue
            if enum is not None:
                enums.add(enum)
        _switch_readers[root] = frozenset(found.resolve() for enum in sorted(enums)
                                          for _, found in _uses(root, enum, below=True))
    return me in _switch_readers[root]


def _module_name(path: Path) -> str | None:
    """`pkg.setup` for `<root>/pkg/setup.py`, from its package root (the first folder above without `__init__.py`)."""
    if path.suffix != ".py":
        return None
    root = _package_root(path.parent)
    try:
        parts = list(path.relative_to(root).with_suffix("").parts)
    except ValueError:
        return None
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts) if parts and all(p.isidentifier() for p in parts) else None


def project_modules(path: Path, options: Options | None = None,
                    plans_half: PlansHalf | None = None) -> FileModules | None:
    """The questions of the file `path`; None for stdin without a file name (`-`), which is in no project."""
    return None if str(path) == "-" else FileModules(path.absolute(), options=options, plans_half=plans_half)


def _exported(path: Path, level: int, module: str | None, name: str, depth: int) -> Export | None:
    target = _module_file(path, level, module)
    if target is None or depth == 0:
        return None
    bindings = _top_level_bindings(target)
    found = bindings.get(name) if bindings is not None else None
    # One meaning: every binding of the name at the top of that module is the same import, in no branch (a
    # fallback, `if TYPE_CHECKING:`).
    if not found or any(b.kind != "import" or b.imported_by is None or b.inferred or b.guards for b in found):
        return None
    first = found[0]
    assert first.imported_by is not None
    node = first.imported_by.node
    where = f"{_shown(target)}:{first.line}"
    if first.qname is not None:
        if any(b.qname != first.qname for b in found):
            return None
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            further = _exported(target, 0, node.module, _imported_name(node, name), depth - 1)
            return further or Export(first.qname, where)
        return Export(first.qname, where)
    if len(found) != 1 or not isinstance(node, ast.ImportFrom):
        return None
    return _exported(target, node.level, node.module, _imported_name(node, name), depth - 1)  # relative, again


def _imported_name(node: ast.ImportFrom, bound: str) -> str:
    return next((alias.name for alias in node.names if (alias.asname or alias.name) == bound), bound)


def _module_file(path: Path, level: int, module: str | None) -> Path | None:
    """The file of the module `from <"." * level><module> import ...` in `path` names, where it is in the project."""
    parts = module.split(".") if module else []
    if not level:
        return _found(_search_path(path), parts) if parts else None
    base = path.parent
    for _ in range(level - 1):
        base = base.parent
    if not parts:
        return base / "__init__.py" if (base / "__init__.py").is_file() else None
    return _found((base,), parts)


def _search_path(path: Path) -> tuple[Path, ...]:
    """The folders an absolute import in `path` is looked up in, as `sys.path` holds them where the project runs
    it: a script (its folder has no `__init__.py`: `python train.py`) first its own folder, which is its package
    root; a module of a package first its package root (`python -m`, pytest's rootdir, an installed package); then
    the project root and its `src/`; and last, for a module of a package, its own folder (that module run as a
    script, `python pkg/train.py`: only a name nothing else resolves is taken from there)."""
    project = _project_root(path)
    own = path.parent
    return tuple(dict.fromkeys((_package_root(own), project, project / "src", own)))


def _found(entries: Iterable[Path], parts: list[str]) -> Path | None:
    """The file of the module `parts` as Python's path finder takes it from the folders `entries` (`sys.path`, or
    a package's `__path__`): in the first folder holding it, a package (`name/__init__.py`) before a module
    (`name.py`), either before a namespace package (a folder without `__init__.py`), whose portions in every
    folder are searched for the rest only where no folder holds the name otherwise. A module below a module (a
    `.py` file) is none; a namespace package itself has no file."""
    name, rest = parts[0], parts[1:]
    portions = []
    for entry in entries:
        folder = entry / name
        if (folder / "__init__.py").is_file():
            return _found((folder,), rest) if rest else folder / "__init__.py"
        if (entry / f"{name}.py").is_file():
            return None if rest else entry / f"{name}.py"
        if rest and folder.is_dir():
            portions.append(folder)
    return _found(portions, rest) if portions else None


def _package_root(folder: Path) -> Path:
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        folder = folder.parent
    return folder


def _top_level_bindings(path: Path) -> dict[str, list[Binding]] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    key = (stat.st_mtime_ns, stat.st_size)
    kept = _parsed.get(path)
    if kept is not None and kept[0] == key:
        return kept[1]
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError, RecursionError):
        bindings = None
    else:
        from ampfix.syntax.bindings import Walker

        walker = Walker()
        walker.statements(tree.body, walker.module_scope)
        bindings = walker.module_scope.bindings
    _parsed[path] = (key, bindings)
    return bindings


def _shown(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return str(path)


@functools.lru_cache(maxsize=4096)
def _project_root(path: Path) -> Path:
    """The nearest folder above `path` with a repository or project file; else the package root."""
    for folder in path.parents:
        if any((folder / marker).exists() for marker in _MARKERS):
            return folder
    return _package_root(path.parent)


def _importers(root: Path, named: str | None = None) -> dict[tuple[Path, str], list[tuple[str, Path]]]:
    """Every `from M import name` of the project's files, for the names asked about (`_asked`), by the module file
    M resolves to; or, `named`, for that one name (a deprecated name bound under a name of its own, `from
    torch.cuda.amp import autocast as amp_autocast`, which no rule names). The bytes pick the files to parse; the
    parse decides."""
    index = _indexed.get((root, named))
    if index is not None:
        return index
    index = _indexed[(root, named)] = {}
    if named is not None:
        _collect_importers(root, index, frozenset({named}), _word_test(named), takes=_parsed_decides,
                           reads=_parsed_decides)
        return index
    names, package = _asked(), _package().encode()
    asked = {name.encode() for name in names}

    def may_take(data: bytes) -> bool:
        return any(_may_take(m, asked, package) for m in _FROM_IMPORT.finditer(data))

    _collect_importers(root, index, names, (("importer",), lambda d: may_take(d) or _may_read_attribute(d)),
                       takes=may_take, reads=_may_read_attribute)
    return index


def _parsed_decides(data: bytes) -> bool:
    return True


def _collect_importers(root: Path, index: dict[tuple[Path, str], list[tuple[str, Path]]], names: frozenset[str],
                       test: Test, takes: Callable[[bytes], bool], reads: Callable[[bytes], bool]) -> None:
    """Index the `from M import <one of names>` statements and the reads `module.<one of names>` of the project's
    files that pass `test`; `takes` and `reads` say which of the two a file's bytes may hold."""
    for path, data in _project_sources(root, (test,)):
        try:
            tree = ast.parse(data)
        except (SyntaxError, ValueError, RecursionError):
            continue
        for node in ast.walk(tree) if takes(data) else ():
            if not isinstance(node, ast.ImportFrom):
                continue
            for alias in node.names:
                module = _module_file(path, node.level, node.module) if alias.name in names else None
                if module is not None:
                    index.setdefault((module.resolve(), alias.name), []).append(
                        (f"{_shown(path)}:{node.lineno}", path))
        for module, name, where in _attribute_reads(path, tree, names) if reads(data) else ():
            index.setdefault((module, name), []).append((where, path))


def _shared(one: Path, other: Path) -> int:
    """How many leading folders the two paths share."""
    shared = 0
    for a, b in zip(one.parent.parts, other.parent.parts):
        if a != b:
            break
        shared += 1
    return shared


def _uses(root: Path, qname: str, below: bool = False) -> list[tuple[str, Path]]:
    """The uses of `qname` in the project's files, resolved as the engine resolves a file's names (the walk's dotted
    names, through the one resolver). The bytes pick the files to parse (both the package's name and the last part
    of `qname` appear); the parse decides. Asked only by files that hold half of something (apex's set-up)."""
    found = _used.get((root, qname + ".*" * below))
    if found is not None:
        return found
    found = _used[(root, qname + ".*" * below)] = []
    package, last = qname.split(".")[0].encode(), qname.rsplit(".", 1)[-1].encode()
    from ampfix.syntax.bindings import Walker, resolve

    tests = tuple((("in", word.decode()), _spells(word)) for word in dict.fromkeys((package, last)))
    for path, data in _project_sources(root, tests):
        try:
            tree = ast.parse(data)
            walker = Walker()
            walker.statements(tree.body, walker.module_scope)
        except (SyntaxError, ValueError, RecursionError):
            continue
        for chain in walker.chains:  # every dotted name: `from apex.amp import scale_loss as sl; sl(...)` too
            resolved = resolve(chain.node, chain.scope)
            if resolved is not None and resolved.qname is not None and (
                    resolved.qname == qname or below and resolved.qname.startswith(qname + ".")):
                found.append((f"{_shown(path)}:{chain.node.lineno}", path))
    return found
def _may_read_attribute(data: bytes) -> bool:
    """May the file read an asked name as an attribute of a module of the project (`utils.autocast`, after `from pkg
    import utils`)? Not where the name is read from torch (`torch.autocast`, `torch.cuda.amp.autocast`), nor from a
    head no import line of the file names (`args.amp`)."""
    for match in _attribute_pattern().finditer(data):
        start = match.start()
        prefix = _DOTTED_END.search(data, max(0, start - 200), start)
        components = prefix.group().split(b".") if prefix is not None else [b""]
        head, last = components[0], components[-1]
        if not head or last in (b"torch", b"cuda", b"cpu") or (last == b"amp" and len(components) > 1):
            continue
        if any(head in _WORD.findall(line.group("names")) and not _from_package(line) for line in
               _IMPORT_LINE.finditer(data)):
            return True
    return False


def _from_package(line: re.Match[bytes]) -> bool:
    """Is the import line the package's (`from torch.cuda import amp`, `import torch.cuda.amp as cuda_amp`)?"""
    package = _package().encode()
    spelled = line.group("module") or line.group("names").lstrip(b"( \t")
    return spelled == package or spelled.startswith((package + b".", package + b" ", package + b","))


_DOTTED_END = re.compile(rb"[A-Za-z_][\w.]*\Z")
_IMPORT_LINE = re.compile(rb"(?m)^[ \t]*(?:from[ \t]+(?P<module>[\w.]+)[ \t]+)?import[ \t]+(?P<names>\([^)]*\)|[^\n]*)")


@functools.cache
def _attribute_pattern() -> re.Pattern[bytes]:
    """`.<name>` for each asked name but `cuda` and `cpu`, which every torch file reads as attributes (`x.cuda()`):
    a project module that binds them from torch binds no deprecated name."""
    words = sorted((name for name in _asked() if name not in ("cuda", "cpu")), key=len, reverse=True)
    return re.compile(rb"\.(?:" + b"|".join(re.escape(w.encode()) for w in words) + rb")\b")


def _attribute_reads(path: Path, tree: ast.Module, names: frozenset[str]):
    """Each asked name read as an attribute of a module of the project (`utils.autocast`, `pkg.utils.autocast`):
    (that module's file, the name, where: `path:line (chain)`)."""
    from ampfix.syntax.bindings import Walker, spelled_imports

    walker = Walker()
    walker.statements(tree.body, walker.module_scope)
    for chain in walker.chains:
        if len(chain.parts) < 2 or names.isdisjoint(chain.parts[1:]):
            continue
        bindings = chain.scope.lookup(chain.parts[0])[1]
        imports = {id(b.imported_by): b.imported_by for b in bindings if b.imported_by is not None}
        if len(imports) != 1:
            continue
        for level, module, name, count in spelled_imports(next(iter(imports.values())).node, chain.parts):
            found = _module_file(path, level, module or None) if count >= 2 and name in names else None
            if found is not None:
                yield found.resolve(), name, f"{_shown(path)}:{chain.node.lineno} (`{'.'.join(chain.parts[:count])}`)"


def _may_take(match: re.Match[bytes], asked: set[bytes], package: bytes) -> bool:
    """May this `from M import ...` line take an asked name from a module of the project? Not from the package
    itself (`from torch.cuda.amp import autocast`); a line continued by a backslash or holding another statement
    after a `;` is parsed to be sure."""
    module, names = match.group(1), match.group(2)
    if module == package or module.startswith(package + b"."):
        return False
    return bool(asked.intersection(_WORD.findall(names))) or names.rstrip().endswith(b"\\") or b";" in names


@functools.cache
def _package() -> str:
    return code_stamp.derived("torch_amp.package", _package_of_rules, kept=_cache)


def _package_of_rules() -> str:
    from ampfix.families import TORCH_AMP

    return TORCH_AMP.package


@functools.cache
def _asked() -> frozenset[str]:
    """The names a file's imports are indexed for: a deprecated name's components, not the package (`torch`
    itself is no deprecated name to hold back). From the rule data, kept with ampfix's code (`code_stamp`): a warm
    run that asks does not load it."""
    return code_stamp.derived("torch_amp.asked", _asked_of_rules, kept=_cache)


def _asked_of_rules() -> frozenset[str]:
    from ampfix.families import TORCH_AMP

    return frozenset(part for part in TORCH_AMP.name_parts if part != TORCH_AMP.package)


def forget(cache: bool = True) -> None:
    """Forget the index: each run (in a long-lived process too: tests, an editor) walks the project afresh, and so
    sees a changed, added or removed file. Parsed modules are kept by their stat, which says when they change; the
    byte answers kept between runs are loaded again, and each is validated by its file's stat. `cache`: whether
    the next run reads and keeps them (`--no-cache`: not)."""
    global _run, _run_found, _cache
    _indexed.clear()
    _indices.clear()
    _cache = cache
    _used.clear()
    _switch_readers.clear()
    _run, _run_found = None, None  # a run that is not `process_paths`' (the codemod, flake8) has no file set
    _constructed.clear()


def _project_sources(root: Path, tests: tuple[Test, ...]) -> Iterator[tuple[Path, bytes]]:
    """Each file of the project whose bytes answer True to every test, with its bytes; one that cannot be read is
    skipped. The answers are kept between runs by each file's stat (`ampfix.io.project_index`), so a warm run reads
    only the files it then parses, and those changed."""
    index = _indices.get(root)
    if index is None:
        index = _indices[root] = Index(root, _rules_hash(), _cache)
    return index.sources(tests)


def _word_test(name: str) -> Test:
    """Whether a file's bytes spell `name` as a word (`\\bname\\b`), a literal searched first (C speed)."""
    spelled = name.encode()
    word = re.compile(rb"\b" + re.escape(spelled) + rb"\b")
    return ("word", name), lambda data: spelled in data and word.search(data) is not None


def _spells(word: bytes) -> Callable[[bytes], bool]:
    return lambda data: word in data


@functools.cache
def _rules_hash() -> str:
    """What the answers depend on: the names asked about and the package, and the filters' code (this module's
    bytes: a development install keeps its version while the filters change)."""
    try:
        code = Path(__file__).read_bytes()
    except OSError:  # not a file (a zip): the version in the header decides
        code = b""
    return digest(_package(), *sorted(_asked()), code).hex()


def _calls(root: Path, defined_in: Path, name: str, results: str) -> Calls:
    """The constructions of the class `name` of `defined_in` in the project's other files (`results` "construct"),
    the calls of what the function `name` returns ("results"), or of the variable's value ("value"), followed as
    its own module's are (`ampfix.syntax.flow.ModuleFlows`). The bytes pick the files that spell the name; the
    parse decides which reads are it. Code outside the project may call it where the project is a distribution
    (`_distributed`) and the name a public one of a module it ships."""
    shipped = _distributed(root)
    if shipped is not None and not name.startswith("_") and _importable(defined_in, root):
        return Calls((), escape=f"`{name}` is a public name of a module the project ships ({shipped}): "
                     f"code outside the project may {'construct' if results == 'construct' else 'call'} it")
    seen: list[str] = []
    for path, data in _project_sources(root, (_word_test(name),)):
        if path.resolve() == defined_in:
            continue
        try:
            tree = ast.parse(data)
        except (SyntaxError, ValueError, RecursionError):
            return Calls(tuple(seen), escape=f"{_shown(path)} names `{name}` and does not parse")
        found = _file_calls(path, tree, defined_in, name, results)
        if isinstance(found, str):
            return Calls(tuple(seen), escape=f"in {_shown(path)}, {found}")
        where = [f"{_shown(path)}:{call.lineno}" for call in found]
        seen += where
        positional = next((w for w, call in zip(where, found) if call.args), None)
        if positional is not None:
            return Calls(tuple(seen), positional=positional)
    return Calls(tuple(seen))


def _file_calls(path: Path, tree: ast.Module, defined_in: Path, name: str, results: str) -> list[ast.Call] | str:
    """The constructions of the class (or the calls of what the function returns) in one file of the project, or
    where it escapes there."""
    from ampfix.syntax.bindings import Walker

    walker = Walker()
    walker.statements(tree.body, walker.module_scope)
    reads: list[tuple[ChainRef, int]] = []
    # The names the file binds it under (`from .scaling import S as Scaler`), beside chains that spell it.
    renamed = {alias.asname for imp in walker.imports if isinstance(imp.node, ast.ImportFrom)
               for alias in imp.node.names if alias.name == name and alias.asname}
    for chain in walker.chains:
        if name not in chain.parts and chain.parts[0] not in renamed or chain.role == "store" and len(chain.parts) == 1:
            continue
        scope, bindings = chain.scope.lookup(chain.parts[0])
        if not bindings:
            if chain.parts[0] == name and walker.module_scope.star_lines:
                return (f"`{name}` on line {chain.node.lineno} may be the star import's on line "
                        f"{walker.module_scope.star_lines[0]}, which is not followed")
            continue
        imports = {id(b.imported_by): b.imported_by for b in bindings if b.imported_by is not None}
        length = None
        for imp in imports.values():
            length = _reads_name(path, imp.node, chain.parts, defined_in, name)
            if length is not None:
                break
        if length is None:
            continue
        if len(imports) != 1 or any(b.kind != "import" for b in bindings):
            return f"`{chain.parts[0]}` on line {chain.node.lineno} is bound to several things"
        if isinstance(length, str):
            return f"{length} on line {chain.node.lineno}"
        reads.append((chain, length))
    flows = _module_flows(tree, walker)
    flow = flows.results(reads, name) if results == "results" else \
        flows.constructions(reads, name, types=results == "construct")
    return flow.escape if flow.escape is not None else list(flow.calls)


def _module_flows(tree: ast.Module, walker: Walker) -> ModuleFlows:
    from ampfix.syntax.bindings import resolve
    from ampfix.syntax.flow import ModuleFlows
    from ampfix.syntax.parents import Parents

    return ModuleFlows(tree, walker, Parents(tree), lambda func, scope: getattr(
        resolve(func, scope, unanimous=True), "qname", None) == "functools.partial")


def _argument_calls(path: Path, name: str, position: int | None, keyword: str | None) -> Calls | None:
    """The calls the function `name` defined at the top of `path` makes of the parameter an argument at `position`
    (or passed as `keyword`) binds, followed in its module (`ModuleFlows.parameter`; a value that leaves the module
    there is an escape); None where `name` is no plain function there."""
    from ampfix.syntax.bindings import Walker
    from ampfix.syntax.flow import parameter_of

    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError, RecursionError):
        return None
    walker = Walker()
    walker.statements(tree.body, walker.module_scope)
    bindings = walker.module_scope.bindings.get(name, [])
    function = bindings[0].value if len(bindings) == 1 and not bindings[0].guards else None
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or function.decorator_list:
        return None  # a decorator may pass the arguments on as it likes
    param = parameter_of(function, position, keyword)
    shown = _shown(path)
    if param is None:
        return Calls((), escape=f"no parameter of `{name}` ({shown}:{function.lineno}) is known to take it")
    flow = _module_flows(tree, walker).parameter(function, param)
    seen = tuple(f"{shown}:{call.lineno}" for call in flow.calls) + flow.remote
    positional = next((f"{shown}:{call.lineno}" for call in flow.calls if call.args), flow.remote_positional)
    return Calls(seen, positional, None if flow.escape is None else f"in {shown}, {flow.escape}")


def _reads_name(path: Path, node: ast.Import | ast.ImportFrom, parts: tuple[str, ...], defined_in: Path,
                name: str) -> int | str | None:
    """How many of `parts`, a chain headed by a name `node` imports, name the class or function `name` of `defined_in`
    (`S`: 1, `mod.S`: 2, `pkg.mod.S`: 3); a message where a module of the project binds it in a way not followed;
    None: not that class."""
    from ampfix.syntax.bindings import spelled_imports

    for level, module, part, count in spelled_imports(node, parts):
        holder = _module_file(path, level, module or None) if part == name else None
        if holder is not None:
            origin = _origin(holder, name, _DEPTH)
            if origin == defined_in:
                return count
            if origin is None:
                return f"`{'.'.join(parts[:count])}` (from {_shown(holder)}, which is not followed)"
    return None


def _origin(path: Path, name: str, depth: int) -> Path | None:
    """The file that defines `name` (not by an import), where `path` binds it at its top level: itself, or the
    module its one import of it takes it from, followed through the project; None where that is not one answer."""
    bindings = _top_level_bindings(path)
    found = bindings.get(name) if bindings is not None else None
    if not found or depth == 0 or any(b.inferred or b.guards for b in found):
        return None
    if all(b.kind != "import" for b in found):
        return path.resolve()
    node = found[0].imported_by.node if found[0].imported_by is not None else None
    if len(found) != 1 or not isinstance(node, ast.ImportFrom):
        return None
    target = _module_file(path, node.level, node.module)
    return _origin(target, _imported_name(node, name), depth - 1) if target is not None else None


def _distributed(root: Path) -> str | None:
    """The file that makes the project a distribution others install and import (`setup.py`, `setup.cfg`, a
    `pyproject.toml` with a `[project]` or `[tool.poetry]` table), or None."""
    for marker in ("setup.py", "setup.cfg"):
        if (root / marker).is_file():
            return marker
    from ampfix.io.formatter import _toml

    table = _toml(root / "pyproject.toml")  # absent or not TOML: empty (pip cannot install from it either)
    tool = table.get("tool")
    return "pyproject.toml" if "project" in table or isinstance(tool, dict) and "poetry" in tool else None


def _importable(path: Path, root: Path) -> bool:
    """May an installed distribution ship the module: in a package, or a top-level module of the project's root or
    its `src/` (a `py_modules` entry)."""
    return (path.parent / "__init__.py").is_file() or path.parent in (root, root / "src")
