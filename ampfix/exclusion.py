"""Which files a run leaves out: the configured excludes, and in folders what git ignores.

Patterns are gitignore-style, matched by pathspec (imported only when there is a pattern to
match: a pre-commit run without excludes or .gitignore files never loads it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

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
    """`path` below `base` as a forward-slash string, or None when it is not below it."""
    relative = os.path.relpath(path, base)
    if relative == os.curdir or relative == os.pardir or relative.startswith(os.pardir + os.sep):
        return None
    return relative.replace(os.sep, "/")


@dataclass(frozen=True)
class _IgnoreFiles:
    """The .gitignore files (and .git/info/exclude) in force in a folder: (folder, spec), outermost first."""

    layers: tuple[tuple[Path, object], ...] = ()

    def entering(self, folder: Path, has_gitignore: bool) -> _IgnoreFiles:
        if not has_gitignore:
            return self
        spec = _read_spec(folder / GITIGNORE)
        return self if spec is None else _IgnoreFiles((*self.layers, (folder, spec)))

    def ignores(self, path: Path, is_dir: bool) -> bool:
        for base, spec in reversed(self.layers):  # the deepest file that speaks decides, as in git
            relative = _relative(path, base)
            if relative is not None:
                verdict = _matched(spec, relative, is_dir)
                if verdict is not None:
                    return verdict
        return False


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
        patterns = [*(exclude or ()), *extend_exclude]
        self.spec = _compile(patterns) if patterns else None
        self.gitignore = gitignore

    def excludes(self, path: Path, is_dir: bool) -> bool:
        """Whether the configured excludes leave out this file or folder."""
        if is_dir and (path.name in self.names or path.name in VCS_DIRS):
            return True
        if self.spec is None:
            return False
        relative = _relative(Path(os.path.abspath(path)), self.root)
        return relative is not None and bool(_matched(self.spec, relative, is_dir))

    def forced_out(self, path: Path) -> bool:
        """--force-exclude: a path named on the command line is left out when it, or a folder
        holding it (below the configuration's folder), is excluded."""
        absolute = Path(os.path.abspath(path))
        if self.excludes(absolute, absolute.is_dir()):
            return True
        for folder in absolute.parents:
            if _relative(folder, self.root) is None:
                return False
            if self.excludes(folder, True):
                return True
        return False

    def walk_from(self, folder: Path) -> FolderFilter:
        """What a walk of `folder` leaves out. A folder named on the command line is walked even
        when it is itself excluded or ignored: the rules that exclude it then do not apply inside."""
        absolute = Path(os.path.abspath(folder))
        exclusions = self
        if self.spec is not None and _relative(absolute, self.root) is not None \
                and _matched(self.spec, _relative(absolute, self.root), True):
            exclusions = Exclusions(self.root, exclude=None if self.names else (), gitignore=self.gitignore)
        repository = _repository_root(absolute) if self.gitignore else None
        if repository is None:  # as git: .gitignore files count inside a repository only
            return FolderFilter(exclusions, None)
        ignore_files = _IgnoreFiles(_info_exclude(repository))
        above = [p for p in absolute.parents if p == repository or _relative(p, repository) is not None]
        for parent in reversed(above):
            ignore_files = ignore_files.entering(parent, (parent / GITIGNORE).is_file())
        if ignore_files.ignores(absolute, True):
            ignore_files = _IgnoreFiles()
        return FolderFilter(exclusions, ignore_files)


def _info_exclude(repository: Path) -> tuple[tuple[Path, object], ...]:
    spec = _read_spec(repository / ".git" / "info" / "exclude")
    return () if spec is None else ((repository, spec),)


@dataclass(frozen=True)
class FolderFilter:
    """Decides, entry by entry, what a folder walk skips; grows as the walk descends."""

    exclusions: Exclusions
    ignore_files: _IgnoreFiles | None

    def entering(self, folder: Path, has_gitignore: bool) -> FolderFilter:
        if self.ignore_files is None:
            return self
        inside = self.ignore_files.entering(folder, has_gitignore)
        return self if inside is self.ignore_files else FolderFilter(self.exclusions, inside)

    def skips(self, path: Path, is_dir: bool) -> bool:
        if self.exclusions.excludes(path, is_dir):
            return True
        return self.ignore_files is not None and self.ignore_files.ignores(path, is_dir)
