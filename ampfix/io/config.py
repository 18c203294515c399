"""`[tool.ampfix]` in the nearest pyproject.toml above the paths: found, read, checked, and overridden
by flags. Never prints.

Read on every commit by the pre-commit fast path: it imports tomllib only when a pyproject.toml
is found, and the rule table only when `select` or `ignore` needs checking.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ampfix.core.options import Options

if TYPE_CHECKING:
    from ampfix.io.exclusion import Exclusions

PYPROJECT = "pyproject.toml"


class ConfigError(Exception):
    """A configuration that cannot be used: the message names the file and the key."""


class FlagError(ValueError):
    """A flag's value that cannot be used; `key` names the flag (`--{key}`)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class Settings:
    """What a run uses: the engine's options, and which files it looks at."""

    options: Options = Options()
    # gitignore-style patterns, relative to the folder of the pyproject.toml. `exclude` replaces
    # the built-in list of skipped folders (None keeps it); `extend-exclude` adds to either.
    exclude: tuple[str, ...] | None = None
    extend_exclude: tuple[str, ...] = ()
    source: Path | None = None  # the pyproject.toml read; None when there is none

    @property
    def root(self) -> Path | None:
        """The folder the exclude patterns are relative to."""
        return None if self.source is None else self.source.parent

    def exclusions(self) -> Exclusions:
        from ampfix.io.exclusion import Exclusions

        return Exclusions(self.root, self.exclude, self.extend_exclude)


def _strings(value: object) -> tuple[str, ...]:
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(value)
    raise ValueError(f"expected a list of strings, got {value!r}")


def _codes(value: object) -> tuple[str, ...]:
    codes = _strings(value)
    from ampfix.families import ALL_RULES

    known = sorted({rule.code for rule in ALL_RULES})  # in order, each once (AMP008 and AMP009 share a rule's place)
    for code in codes:
        if not code or not any(known_code.startswith(code) for known_code in known):
            raise ValueError(f"{code!r} is not a rule code or a prefix of one ({', '.join(known)})")
    return codes


Parser = Callable[[object], Any]
# key in [tool.ampfix] (and flag) -> (name, parser). The run's own keys; then every option of
# `Options`, each under its field's name with dashes (declared there, with its parser).
# `select` and `ignore` become `Options.rules`.
KEYS: dict[str, tuple[str, Parser]] = {
    "exclude": ("exclude", _strings),
    "extend-exclude": ("extend_exclude", _strings),
    "select": ("select", _codes),
    "ignore": ("ignore", _codes),
    **{option.name.replace("_", "-"): (option.name, option.metadata["parse"])
       for option in fields(Options) if "parse" in option.metadata},
}
_OPTION_NAMES = frozenset(name for name, _ in KEYS.values()) & {option.name for option in fields(Options)}


def find_pyproject(start: Path) -> tuple[Path, dict[str, object]] | None:
    """The nearest pyproject.toml at or above `start` that has a [tool.ampfix] table, with the table.

    A pyproject.toml without the table is passed over, as ruff does: a sub-package's own
    pyproject.toml does not hide the repository's configuration.
    """
    folder = start if start.is_dir() else start.parent
    for candidate in (folder, *folder.parents):
        path = candidate / PYPROJECT
        if not path.is_file():
            continue
        table = _tool_table(path)
        if table is not None:
            return path, table
    return None


def _tool_table(path: Path) -> dict[str, object] | None:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]  # Python 3.10 only: not installed where mypy runs on 3.11+
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror or error}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    tool = document.get("tool")
    table = tool.get("ampfix") if isinstance(tool, dict) else None
    if table is not None and not isinstance(table, dict):
        raise ConfigError(f"{path}: `tool.ampfix` must be a table")
    return table


def _parsed(table: Mapping[str, object], where: str) -> dict[str, Any]:
    """The keys of a [tool.ampfix] table, parsed: name -> value."""
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key not in KEYS:
            raise ConfigError(f"{where}[tool.ampfix]: unknown key {key!r} (known: {', '.join(KEYS)})")
        name, parse = KEYS[key]
        try:
            values[name] = parse(value)
        except ValueError as error:
            raise ConfigError(f"{where}[tool.ampfix] {key}: {error}") from None
    return values


def parse_flags(given: Mapping[str, object]) -> dict[str, Any]:
    """The flags given on the command line, by key (`device-expr`; a value of None: not given),
    parsed and checked as the [tool.ampfix] keys of the same names; raises FlagError."""
    values: dict[str, Any] = {}
    for key, value in given.items():
        if value is None:
            continue
        name, parse = KEYS[key]
        try:
            values[name] = parse(value)
        except ValueError as error:
            raise FlagError(key, str(error)) from error
    return values


def _settings(values: Mapping[str, Any], source: Path | None, target_source: str | None = None) -> Settings:
    """The values of keys and flags, parsed, as Settings: mapped to the one options type here."""
    options = Options(**{name: value for name, value in values.items() if name in _OPTION_NAMES},
                      rules=enabled_rules(values.get("select"), values.get("ignore", ())),
                      target_source=target_source if values.get("target_torch") is not None else None)
    return Settings(options, values.get("exclude"), values.get("extend_exclude", ()), source)


def common_path(paths: Sequence[Path]) -> Path:
    """The deepest path holding every path (made absolute): where configuration is looked for."""
    return Path(os.path.commonpath([os.path.abspath(path) for path in paths] or [os.getcwd()]))


def load(paths: Sequence[Path], flags: Mapping[str, Any] = {}) -> Settings:
    """The settings for a run over `paths`: the nearest [tool.ampfix], then the flags given.

    `flags`: the values of the flags given on the command line, as `parse_flags` returns them; a
    flag always wins over the file.
    """
    found = find_pyproject(common_path(paths))
    values = {} if found is None else _parsed(found[1], f"{found[0]}: ")
    # Where the target torch came from, said in the report; unset, each file's project metadata decides it
    # (`ampfix.io.declared_torch`).
    if flags.get("target_torch") is not None:
        target_source: str | None = "--target-torch"
    else:
        target_source = None if found is None else f"{display_path(found[0])} [tool.ampfix]"
    return _settings({**values, **flags}, None if found is None else found[0], target_source)


def display_path(path: Path) -> str:
    """`path` relative to the current folder when it is below it, else as it is."""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return str(path)
    return str(path) if relative.startswith("..") else relative


def enabled_rules(select: Sequence[str] | None, ignore: Sequence[str]) -> frozenset[str] | None:
    """The rule codes a run applies, or None for all of them.

    As in ruff, the most specific selector decides: for each code, the longest prefix matching it
    in `select` or in `ignore` wins, and `ignore` wins a tie (`select = ["AMP"]` with
    `ignore = ["AMP00"]` leaves AMP010 and AMP011).
    """
    if select is None and not ignore:
        return None
    from ampfix.families import ALL_RULES

    def longest(code: str, selectors: Sequence[str]) -> int:
        return max((len(s) for s in selectors if code.startswith(s)), default=-1)

    chosen = set()
    for rule in ALL_RULES:
        selected = 0 if select is None else longest(rule.code, select)
        if selected >= 0 and selected > longest(rule.code, ignore):
            chosen.add(rule.code)
    return frozenset(chosen)


@functools.lru_cache(maxsize=256)
def folder_settings(folder: Path, flags: tuple[tuple[str, Any], ...] = ()) -> Settings:
    """The settings of a file in `folder` when a tool hands files one at a time (the LibCST codemod, the flake8
    plugin): the nearest `[tool.ampfix]` above it, then `flags` (`parse_flags`' items: hashable). Cached: a
    run asks once per folder."""
    return load([folder], dict(flags))


@functools.lru_cache(maxsize=256)
def folder_exclusions(folder: Path) -> Exclusions:
    """The excludes of a file in `folder` (its `[tool.ampfix]`), for a tool that names every file: a file they
    leave out is skipped as `--force-exclude` skips it (the pre-commit hooks' way)."""
    return folder_settings(folder).exclusions()
