"""`[tool.ampfix]` in the nearest pyproject.toml above the paths: found, read, checked, and overridden
by flags. Never prints.

Read on every commit by the pre-commit fast path: it imports tomllib only when a pyproject.toml
is found, and the rule table only when `select` or `ignore` needs checking.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any
from collections.abc import Callable, Mapping, Sequence

PYPROJECT = "pyproject.toml"


class ConfigError(Exception):
    """A configuration that cannot be used: the message names the file and the key."""


@dataclass(frozen=True)
class Settings:
    # gitignore-style patterns, relative to the folder of the pyproject.toml. `exclude` replaces
    # the built-in list of skipped folders (None keeps it); `extend-exclude` adds to either.
    exclude: tuple[str, ...] | None = None
    extend_exclude: tuple[str, ...] = ()
    # Rule codes or prefixes (`AMP0`); None selects every rule.
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    target_torch: tuple[int, int] | None = None
    unsafe_fixes: bool = False
    device: str = "cuda"  # where CUDA code is moved to: cuda, cpu or auto
    device_expr: str | None = None  # the user's own device expression, put at every CUDA site
    keep_dtype: bool = False
    explicit_autocast_defaults: bool = False  # every autocast rewrite writes the old class's dtype/cache defaults
    source: Path | None = None  # the pyproject.toml read; None when there is none

    @property
    def root(self) -> Path | None:
        """The folder the exclude patterns are relative to."""
        return None if self.source is None else self.source.parent


def parse_version(value: object) -> tuple[int, int]:
    """"2.3" -> (2, 3). Shared by `target-torch` and `--target-torch`."""
    if not isinstance(value, str):
        raise ValueError(f"expected a version as a string \"X.Y\", got {value!r}")
    parts = value.split(".")
    if len(parts) in (2, 3) and all(part.isdigit() for part in parts):
        return int(parts[0]), int(parts[1])
    raise ValueError(f"expected a version X.Y, got {value!r}")


def _strings(value: object) -> tuple[str, ...]:
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(value)
    raise ValueError(f"expected a list of strings, got {value!r}")


def _codes(value: object) -> tuple[str, ...]:
    codes = _strings(value)
    from ampfix.families import ALL_RULES

    known = [rule.code for rule in ALL_RULES]
    for code in codes:
        if not code or not any(known_code.startswith(code) for known_code in known):
            raise ValueError(f"{code!r} is not a rule code or a prefix of one ({', '.join(known)})")
    return codes


def parse_device(value: object) -> str:
    from ampfix.core.options import DEVICE_MODES

    if isinstance(value, str) and value in DEVICE_MODES:
        return value
    raise ValueError(f"expected one of {', '.join(DEVICE_MODES)}, got {value!r}")


def parse_device_expr(value: object) -> str:
    """A device expression as it will be inserted: one Python expression on one line."""
    import ast

    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a Python expression, got {value!r}")
    text = value.strip()
    if "\n" in text or "\r" in text:
        raise ValueError(f"expected an expression on one line, got {value!r}")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as error:
        raise ValueError(f"{value!r} is not a Python expression: {error.msg}") from None
    if isinstance(tree.body, (ast.Tuple, ast.NamedExpr, ast.Lambda, ast.Yield, ast.Await)) and not text.startswith("("):
        raise ValueError(f"{value!r} is not one argument: parenthesize it")
    return text


def _bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueError(f"expected true or false, got {value!r}")


# key in [tool.ampfix] -> (Settings field, parser). A new key is one line here and a field above.
KEYS: dict[str, tuple[str, Callable[[object], Any]]] = {
    "exclude": ("exclude", _strings),
    "extend-exclude": ("extend_exclude", _strings),
    "select": ("select", _codes),
    "ignore": ("ignore", _codes),
    "target-torch": ("target_torch", parse_version),
    "unsafe-fixes": ("unsafe_fixes", _bool),
    "device": ("device", parse_device),
    "device-expr": ("device_expr", parse_device_expr),
    "keep-dtype": ("keep_dtype", _bool),
    "explicit-autocast-defaults": ("explicit_autocast_defaults", _bool),
}


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
        import tomli as tomllib
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


def settings_from_table(table: Mapping[str, object], source: Path | None) -> Settings:
    values: dict[str, object] = {}
    where = f"{source}: " if source is not None else ""
    for key, value in table.items():
        if key not in KEYS:
            raise ConfigError(f"{where}[tool.ampfix]: unknown key {key!r} (known: {', '.join(KEYS)})")
        name, parse = KEYS[key]
        try:
            values[name] = parse(value)
        except ValueError as error:
            raise ConfigError(f"{where}[tool.ampfix] {key}: {error}") from None
    return Settings(**values, source=source)


def common_path(paths: Sequence[Path]) -> Path:
    """The deepest path holding every path (made absolute): where configuration is looked for."""
    return Path(os.path.commonpath([os.path.abspath(path) for path in paths] or [os.getcwd()]))


def load(paths: Sequence[Path], overrides: Mapping[str, object] = {}) -> Settings:
    """The settings for a run over `paths`: the nearest [tool.ampfix], then the flags given.

    `overrides` maps Settings fields to the values of the flags that were given on the command
    line; a flag always wins over the file.
    """
    found = find_pyproject(common_path(paths))
    settings = Settings() if found is None else settings_from_table(found[1], found[0])
    unknown = set(overrides) - {f.name for f in fields(Settings)}
    if unknown:
        raise ValueError(f"not settings: {sorted(unknown)}")
    return replace(settings, **overrides) if overrides else settings


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
