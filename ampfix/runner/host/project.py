"""The local modules a script imports: what ``verify`` rewrites beside the script. Parent side; no torch.

A script is run as ``python SCRIPT``, so its folder is first on ``sys.path``: a module it imports is
local when it resolves to a file under that folder (its *project*). The search is static, over every
``import``/``from ... import`` of the script and, transitively, of each local module found (in any
block: a function, a ``try``), and the constant names given to ``importlib.import_module``. Packages
bring their ``__init__.py`` files, which run on import too. Modules outside the folder (the standard
library, site-packages) are never listed. What the run really loaded is observed in the child too
(``Recorder.local_modules``), so a module imported by a computed name is still found afterwards.
"""

from __future__ import annotations

import ast
import tokenize
from pathlib import Path


def local_imports(script: Path) -> list[Path]:
    """The local modules ``script`` imports, transitively, in the order found (the script excluded)."""
    script = script.resolve()
    root = script.parent
    found: list[Path] = []
    pending = [script]
    seen = {script}
    while pending:
        current = pending.pop(0)
        for module in _imported_files(current, root):
            if module not in seen:
                seen.add(module)
                found.append(module)
                pending.append(module)
    return found


def _imported_files(path: Path, root: Path) -> list[Path]:
    try:
        with tokenize.open(path) as handle:
            tree = ast.parse(handle.read(), str(path))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return []  # the rewrite reports a file it cannot read or parse; nothing more to follow here
    files: list[Path] = []
    for node in ast.walk(tree):
        for dotted in _imported_names(node, path, root):
            files.extend(_module_files(dotted, root))
    return files


def _imported_names(node: ast.AST, path: Path, root: Path) -> list[str]:
    """Module names an import statement (or ``importlib.import_module("...")``) may load, relative to ``root``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        base = _absolute_base(node, path, root)
        if base is None:
            return []
        # ``from package import name``: ``name`` may be a submodule.
        return [base, *(f"{base}.{alias.name}" if base else alias.name for alias in node.names if alias.name != "*")]
    if isinstance(node, ast.Call) and _is_import_module(node.func) and node.args:
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str) and not first.value.startswith("."):
            return [first.value]
    return []


def _absolute_base(node: ast.ImportFrom, path: Path, root: Path) -> str | None:
    """``from X import ...``'s module as a name under ``root``; a relative one resolved from ``path``."""
    if not node.level:
        return node.module or ""
    package = path.parent
    for _ in range(node.level - 1):
        package = package.parent
    try:
        parts = list(package.relative_to(root).parts)
    except ValueError:
        return None  # above the project: not a local module
    if node.module:
        parts.extend(node.module.split("."))
    return ".".join(parts)


def _is_import_module(func: ast.expr) -> bool:
    if isinstance(func, ast.Attribute):
        return func.attr == "import_module" and isinstance(func.value, ast.Name) and func.value.id == "importlib"
    return False


def _module_files(dotted: str, root: Path) -> list[Path]:
    """The files importing ``dotted`` from ``root`` runs: each package's ``__init__.py`` on the way, then the module."""
    if not dotted:
        return []
    files = []
    folder = root
    parts = dotted.split(".")
    for part in parts:
        package_init = folder / part / "__init__.py"
        if package_init.is_file():
            files.append(package_init.resolve())
            folder = folder / part
            continue
        module = folder / f"{part}.py"
        if module.is_file():
            files.append(module.resolve())  # what follows a module's name is an attribute of it
            break
        if not (folder / part).is_dir():
            break
        folder = folder / part  # a folder without __init__.py: a namespace package
    return files
