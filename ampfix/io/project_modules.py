"""The engine's questions about the project around a file (`ampfix.core.project`), answered from its files.

A name imported from a module of the project (`from .compat import torch`, `from pkg.utils import autocast`) is
what that module binds it to at its top level by imports, followed through the project's own modules. Read when
asked, not indexed: a file's questions are few (only names that can lead to the family's, `Family.name_parts`),
each one small parse; a read module is kept for the run, keyed by its path and its stat (mtime, size), so a file
changed during the run is read again. Nothing is kept between runs, so nothing can be stale (docs/design.md,
"A name from another module of the project").

Absolute modules are looked up from the file's package root: the first folder above it without an `__init__.py`
(where `python -m` or an installed package puts it on `sys.path`).
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

from ampfix.core.project import Export
from ampfix.syntax.bindings import Binding, Walker

_DEPTH = 4  # re-exports followed through at most this many modules
_parsed: dict[Path, tuple[tuple[int, int], dict[str, list[Binding]] | None]] = {}


class FileModules:
    """The questions of one file (`path`)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def exported(self, level: int, module: str | None, name: str) -> Export | None:
        return _exported(self.path, level, module, name, _DEPTH)


def project_modules(path: Path) -> FileModules:
    return FileModules(path)


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
    if level:
        base = path.parent
        for _ in range(level - 1):
            base = base.parent
    else:
        base = _package_root(path.parent)
        if not parts or not (base / parts[0]).is_dir():
            return None
    if not parts:
        return base / "__init__.py" if (base / "__init__.py").is_file() else None
    folder = base.joinpath(*parts)
    for candidate in (folder.with_suffix(".py"), folder / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


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
