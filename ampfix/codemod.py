"""ampfix as a LibCST codemod: `python -m libcst.tool codemod -x ampfix.codemod.Migrate --no-format src/`.

`Migrate` runs the file through the same path `ampfix rewrite` does (`ampfix.io.files.process_data`: the
codec, the file's `[tool.ampfix]` and declared torch, the engine), so the module it returns is, byte for
byte, what `ampfix rewrite` writes; what it leaves goes to the codemod's warnings. It reads the module it is
given (`tree.bytes`), not the file, so it composes with other codemods in one `CodemodContext`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import libcst as cst
from libcst.codemod import CodemodCommand, CodemodContext, SkipFile

# The engine's options, as `ampfix rewrite` spells them: (flag, argparse keywords). Their values are parsed and
# checked as the flags and `[tool.ampfix]` keys of the same names (`ampfix.io.config.parse_flags`).
_ARGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("--target-torch", {"metavar": "X.Y", "help": "oldest torch the code must run on (as `ampfix rewrite`)"}),
    ("--select", {"metavar": "CODES", "help": "only these rules: codes or prefixes, comma-separated"}),
    ("--ignore", {"metavar": "CODES", "help": "leave these rules out: codes or prefixes, comma-separated"}),
    ("--device", {"metavar": "cuda|cpu|auto", "help": "where CUDA code goes (default cuda)"}),
    ("--device-expr", {"metavar": "EXPR", "help": "your own device expression at every CUDA site"}),
    ("--unsafe-fixes", {"action": argparse.BooleanOptionalAction, "help": "also the fixes that may change meaning"}),
    ("--keep-dtype", {"action": argparse.BooleanOptionalAction, "help": "with --device cpu, keep float16"}),
    ("--explicit-autocast-defaults", {"action": argparse.BooleanOptionalAction,
                                      "help": "write the old autocast defaults in every rewrite"}),
    ("--apex-opt-level", {"metavar": "O1|O2", "help": "the apex opt level run where the code does not say"}),
)


class Migrate(CodemodCommand):
    DESCRIPTION = "ampfix: torch.cuda.amp / torch.cpu.amp / apex.amp to torch.amp, as `ampfix rewrite` writes it."

    @staticmethod
    def add_args(arg_parser: argparse.ArgumentParser) -> None:
        for flag, keywords in _ARGS:
            arg_parser.add_argument(flag, default=None, **keywords)

    def __init__(self, context: CodemodContext, **flags: object) -> None:
        super().__init__(context)
        from ampfix.io.config import parse_flags

        given = {flag[2:]: flags.get(flag[2:].replace("-", "_")) for flag, _ in _ARGS}
        for key in ("select", "ignore"):
            given[key] = _codes(given[key])
        self.flags = parse_flags(given)  # FlagError (a ValueError) names the flag

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        from ampfix.io.config import folder_exclusions, folder_settings
        from ampfix.io.files import process_data

        path = Path(self.context.filename or "-")
        if folder_exclusions(path.parent).forced_out(path):  # LibCST names every file: as `--force-exclude`
            raise SkipFile("excluded by [tool.ampfix]")
        options = folder_settings(path.parent, tuple(sorted(self.flags.items()))).options
        result, new_data = process_data(path, tree.bytes, options, "diff")
        for finding in result.findings:
            if not finding.fixed:
                self.warn(f"{finding.line}:{finding.col}: {finding.code} {finding.message}")
        if result.error is not None:
            raise SkipFile(result.error)
        return cst.parse_module(new_data) if result.changed else tree


def _codes(value: object) -> list[str] | None:
    return None if value is None else [code.strip() for code in str(value).split(",") if code.strip()]
