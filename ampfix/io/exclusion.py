"""Which files a run leaves out: the configured excludes, and in folders what git ignores.

Patterns are gitignore-style, matched by pathspec (imported only when there is a pattern to
match: a pre-commit run without excludes or .gitignore files never loads it).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable, Sequence

# Folders never descended into unless `exclude` replaces this list: tool caches, installed
# packages, build output. Version-control data is skipped whatever the configuration.
DEFAULT_EXCLUDE = frozenset({
    ".tox", ".nox", ".mypy_cache", ".pytest_cache", ".ruff_cache", "__pycache__", "node_modules",
    "site-packages", "dist-packages", ".eggs", "build", "dist",
})
VCS_DIRS = frozenset({".git", ".hg", ".svn"})
GITIGNORE = ".gitignore"


def _compile(lines: Sequence[str]):
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines(lines)


def _matched(spec, relative: str, is_dir: bool) -> bool | None:
    """True: excluded, False: re-included by a `!` pattern, None: no pattern speaks of it."""
    return spec.check_file(relative + "/" if is_dir else relative).include


def _relative(path: Path, base: Path) -> str | None:
    """`path` (absolute) below `base` as a forward-slash string, or None when it is not below it."""
    relative = os.path.relpath(path, base)
    if relative == os.curdir or relative == os.pardir or relative.startswith(os.pardir + os.sep):
        return None
    return relative.replace(os.sep, "/")


@dataclass(frozen=True)
class _Layer:
    """Patterns that speak of paths relative to one folder. A walk names each entry by its path
    below the folder it started from ("pkg/sub/a.py"); for these patterns the entry is
    `prefix + that path without anchor` (string slicing, no path arithmetic per file)."""

    anchor: str  # the folder the patterns sit in, below the walk's start ("" or "pkg/")
    prefix: str  # the walk's start below the patterns' folder ("" or "a/b/"), when anchor is ""
    spec: object

    def verdict(self, walked: str, is_dir: bool) -> bool | None:
        return _matched(self.spec, self.prefix + walked[len(self.anchor):], is_dir)


def _layer(start: Path, base: Path, spec) -> _Layer:
    """Patterns relative to `base`, for a walk that starts in `start` (absolute; at or below base)."""
    inside = _relative(start, base)
    return _Layer("", "" if inside is None else inside + "/", spec)


def _read_spec(path: Path):
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return _compile(lines) if any(line.strip() and not line.startswith("#") for line in lines) else None


def _repository_root(folder: Path) -> Path | None:
    for candidate in (folder, *folder.parents):
        if (candidate / ".git").exists():
            return candidate
    return None


class Exclusions:
    """The excludes of one run (from `[tool.ampfix]` and the flags)."""

    def __init__(self, root: Path | None = None, exclude: Sequence[str] | None = None,
                 extend_exclude: Sequence[str] = (), gitignore: bool = True) -> None:
        self.root = Path(os.path.abspath(root or os.curdir))
        # The built-in list is a set of folder names: cheaper than patterns on every entry.
        self.names = DEFAULT_EXCLUDE if exclude is None else frozenset()
        self.patterns = (*(exclude or ()), *extend_exclude)
        self.gitignore = gitignore

    @functools.cached_property
    def spec(self):
        """The compiled patterns, or None; compiled on first use (files named without
        --force-exclude never need them)."""
        return _compile(self.patterns) if self.patterns else None

    def _excluded_by_name(self, name: str) -> bool:
        return name in self.names or name in VCS_DIRS

    def forced_out(self, path: Path) -> bool:
        """--force-exclude: a path named on the command line is left out when it, or a folder
        holding it (below the configuration's folder), is excluded."""
        absolute = Path(os.path.abspath(path))
        relative = _relative(absolute, self.root)
        if relative is None:  # outside the project: only the built-in names can speak of it
            return absolute.is_dir() and self._excluded_by_name(absolute.name)
        parts = relative.split("/")
        for depth in range(1, len(parts) + 1):
            is_dir = depth < len(parts) or absolute.is_dir()
            if is_dir and self._excluded_by_name(parts[depth - 1]):
                return True
            if self.spec is not None and _matched(self.spec, "/".join(parts[:depth]), is_dir):
                return True
        return False

    def walk_from(self, folder: Path) -> FolderFilter:
        """What a walk of `folder` leaves out. A folder named on the command line is walked even
        when it is itself excluded or ignored: the rules that exclude it then do not apply inside."""
        start = Path(os.path.abspath(folder))
        patterns: tuple[_Layer, ...] = ()
        if self.spec is not None:
            inside = _relative(start, self.root)
            if start == self.root or (inside is not None and not _matched(self.spec, inside, True)):
                patterns = (_layer(start, self.root, self.spec),)
        ignored: tuple[_Layer, ...] | None = None
        repository = _repository_root(start) if self.gitignore else None
        if repository is not None:  # as git: .gitignore files count inside a repository only
            layers = []
            info = _read_spec(repository / ".git" / "info" / "exclude")
            if info is not None:
                layers.append(_layer(start, repository, info))
            above = [p for p in reversed(start.parents) if _relative(p, repository) is not None]
            for base in (repository, *above):
                spec = _read_spec(base / GITIGNORE) if base != start else None  # the walk reads start's own
                if spec is not None:
                    layers.append(_layer(start, base, spec))
            if any(layer.prefix and _matched(layer.spec, layer.prefix[:-1], True) for layer in layers):
                layers = []  # the named folder is itself ignored: the files above it do not apply inside
            ignored = tuple(layers)
        return FolderFilter(self._excluded_by_name, patterns, ignored)


@dataclass(frozen=True)
class FolderFilter:
    """Decides, entry by entry, what a folder walk skips; grows as the walk descends. Entries are
    named by their path below the walk's start, with "/" ("pkg/sub/a.py")."""

    excluded_name: Callable[[str], bool]  # the built-in folder names
    patterns: tuple[_Layer, ...]  # the configured excludes (one layer, or none)
    ignored: tuple[_Layer, ...] | None  # .gitignore files, outermost first; None outside a repository

    def entering(self, folder: Path, walked: str, has_gitignore: bool) -> FolderFilter:
        """The filter inside `folder` (`walked` below the start, "" or "pkg/"): with its .gitignore."""
        if self.ignored is None or not has_gitignore:
            return self
        spec = _read_spec(folder / GITIGNORE)
        if spec is None:
            return self
        return FolderFilter(self.excluded_name, self.patterns, (*self.ignored, _Layer(walked, "", spec)))

    def skips(self, walked: str, name: str, is_dir: bool) -> bool:
        if is_dir and self.excluded_name(name):
            return True
        if any(layer.verdict(walked, is_dir) for layer in self.patterns):
            return True
        if self.ignored:
            for layer in reversed(self.ignored):  # the deepest file that speaks decides, as in git
                verdict = layer.verdict(walked, is_dir)
                if verdict is not None:
                    return verdict
        return False
