"""The line length a project's formatter keeps, read from its configuration.

A rewrite that joins an argument to the line of the others (`ampfix.engine.apply`) must leave that line
within the length the project's formatter keeps, or the next format run undoes the hunk. The length is
black's `line-length` in `[tool.black]`, else ruff's (`line-length` in `ruff.toml`, `.ruff.toml` or
`[tool.ruff]`; ruff's formatter uses it too), from the nearest folder at or above the file that configures
either (the search stops at a repository root); else black's and ruff's default, 88.

A project declares a formatter with a `[tool.black]` table, or ruff's `[tool.ruff.format]` (`[format]` in
`ruff.toml`): its files are formatted, so a one-line call that the inserted device pushes past the length
is split as the formatter would split it (a `[tool.ruff]` table alone may configure the linter only).

Cached per folder, like the declared torch (`ampfix.io.declared_torch`): a run reads each folder once.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ampfix.io.declared_torch import REPOSITORY_MARKERS

DEFAULT_LINE_LENGTH = 88
_RUFF_FILES = ("ruff.toml", ".ruff.toml")


@dataclass(frozen=True)
class Formatter:
    line_length: int = DEFAULT_LINE_LENGTH
    declared: bool = False  # the project declares black's or ruff's formatter


def formatter_of_file(path: Path) -> Formatter:
    """The formatter settings for `path` (cached by its folder as named)."""
    return _for_named_folder(str(path.parent))


def forget() -> None:
    """Forget what was read (a long-lived process sees edited configuration)."""
    _for_named_folder.cache_clear()
    _for_folder.cache_clear()


@cache
def _for_named_folder(folder: str) -> Formatter:
    return _for_folder(Path(folder).resolve())


@cache
def _for_folder(folder: Path) -> Formatter:
    found = _configured(folder)
    if found is not None:
        return found
    if folder.parent == folder or any((folder / marker).exists() for marker in REPOSITORY_MARKERS):
        return Formatter()
    return _for_folder(folder.parent)


def _configured(folder: Path) -> Formatter | None:
    """The folder's formatter settings; None where the folder configures neither formatter."""
    pyproject = _toml(folder / "pyproject.toml")
    tool = pyproject.get("tool") if isinstance(pyproject.get("tool"), dict) else {}
    assert isinstance(tool, dict)
    black = tool.get("black")
    if isinstance(black, dict):
        return Formatter(_length(black), True)
    for name in _RUFF_FILES:
        if (folder / name).is_file():
            table = _toml(folder / name)
            return Formatter(_length(table), isinstance(table.get("format"), dict))
    ruff = tool.get("ruff")
    if isinstance(ruff, dict):
        return Formatter(_length(ruff), isinstance(ruff.get("format"), dict))
    return None


def _length(table: dict[str, object]) -> int:
    value = table.get("line-length")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else DEFAULT_LINE_LENGTH


def _toml(path: Path) -> dict[str, object]:
    """The file's table; empty when it is absent or not TOML (the run's own configuration reports that)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return {}
