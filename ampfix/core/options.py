"""What a run may change: the one options type, shared by the engine, the analysis and the CLI.

Each option is declared once, here: a field of `Options` with its parser. The parser reads the
value of the `[tool.ampfix]` key and of the flag of the same name (the field's name with dashes:
`device_expr` is `device-expr` and `--device-expr`), so a new option is a field here, a flag in
`ampfix.cli.app`, and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# The device targets (`--device`): where code written for CUDA is moved to.
DEVICE_MODES = ("cuda", "cpu", "auto")


def parse_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueError(f"expected true or false, got {value!r}")


def parse_version(value: object) -> tuple[int, int]:
    """"2.3" -> (2, 3)."""
    if not isinstance(value, str):
        raise ValueError(f"expected a version as a string \"X.Y\", got {value!r}")
    parts = value.split(".")
    if len(parts) in (2, 3) and all(part.isdigit() for part in parts):
        return int(parts[0]), int(parts[1])
    raise ValueError(f"expected a version X.Y, got {value!r}")


def parse_device(value: object) -> str:
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


# The apex opt levels a project may declare it runs (`--apex-opt-level`), where its code reads the level from
# elsewhere (a command-line argument, a config): O1 and O2, the two NVIDIA's deprecation notice points to native AMP.
APEX_OPT_LEVELS = ("O1", "O2")


def parse_apex_opt_level(value: object) -> str:
    if isinstance(value, str) and value in APEX_OPT_LEVELS:
        return value
    raise ValueError(f"expected one of {', '.join(APEX_OPT_LEVELS)}, got {value!r}")


def _option(default: Any, parse: Callable[[object], Any]) -> Any:
    """A field that is also a `[tool.ampfix]` key and a flag, read by `parse` (which raises ValueError)."""
    return field(default=default, metadata={"parse": parse})


@dataclass(frozen=True)
class Options:
    # The oldest torch the code must keep running on; rules needing newer torch are held back.
    target_torch: tuple[int, int] | None = _option(None, parse_version)
    unsafe_fixes: bool = _option(False, parse_bool)
    # Where uses that target CUDA are moved to: "cuda" keeps them there (each old name's own device),
    # "cpu" moves them to the CPU, "auto" to a device chosen when the code runs.
    device: str = _option("cuda", parse_device)
    # Source text of the user's own device expression (`--device-expr`): when set, it is put at every
    # site that targets CUDA, whatever `device` says.
    device_expr: str | None = _option(None, parse_device_expr)
    # Moving to the CPU keeps an explicit float16 instead of making it bfloat16.
    keep_dtype: bool = _option(False, parse_bool)
    # Every autocast rewrite writes the old class's dtype/cache_enabled defaults, not only where the code shows
    # an enclosing region or a changed default (docs/autocast-defaults.md).
    explicit_autocast_defaults: bool = _option(False, parse_bool)
    # The apex opt level the project runs where initialize's `opt_level` is not a literal (an argparse option, a
    # config value): O1 makes that initialize a safe rewrite; O2 an unsafe one, reported as a change of numerics
    # (docs/apex.md, "Decisions declared once"). None: not declared, decided from the code alone.
    apex_opt_level: str | None = _option(None, parse_apex_opt_level)
    # The rule codes to apply and report (from `select` / `ignore`); None: every rule. A rule left out
    # is held back like a rule newer than the target, so its names and their imports stay together.
    rules: frozenset[str] | None = None
    # Where `target_torch` came from, for reports ("--target-torch", "pyproject.toml [tool.ampfix]", or the
    # project metadata it was read from); None: not set. The engine does not read it.
    target_source: str | None = None
    # Does something say which torch the code supports (a flag, `[tool.ampfix]`, the project's metadata), or is
    # `target_torch` the implicit newest? None: declared exactly when `target_torch` is set. Outdated version
    # branches are removed only at a declared target (`declares_target`).
    target_declared: bool | None = None
    # The line length of the file's formatter (black's, ruff's; `ampfix.io.formatter`): an argument joins the
    # line of the others only within it. Not a key of its own: the formatter's configuration is the one source.
    line_length: int = 88
    # The project declares black's or ruff's formatter: a one-line call the device pushes past `line_length`
    # is split as the formatter would split it.
    formatted: bool = False

    def __post_init__(self) -> None:
        parse_device(self.device)  # the one check of a device, for those who build Options in code

    @property
    def declares_target(self) -> bool:
        """Is the target torch declared (explicit or read from the project), not the implicit newest?"""
        declared = self.target_torch is not None if self.target_declared is None else self.target_declared
        return declared and self.target_torch is not None

    @property
    def retargets(self) -> bool:
        """Is CUDA code moved elsewhere (a non-default device target)?"""
        return self.device_expr is not None or self.device != "cuda"

    @property
    def to_cpu(self) -> bool:
        return self.device_expr is None and self.device == "cpu"

    def reports(self, rule_code: str) -> bool:
        """Whether a rule's findings are reported (errors, AMP9xx, are not rules: always reported)."""
        return self.rules is None or rule_code in self.rules
