"""The command line: parses flags, renders, picks exit codes. The work is in engine/files/runner."""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

from ampfix import __version__
from ampfix.console import EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS, fast_path, run_files
from ampfix.options import Options

__all__ = ["EXIT_CLEAN", "EXIT_ERROR", "EXIT_FINDINGS", "app", "main"]

# `run` and `verify` are registered on first use: the runner's commands import rich, which
# `check` and `rewrite` never need (they print plain text, and start-up is paid per commit).
_RUNNER_COMMANDS = {"run": "run_command", "verify": "verify_command"}
_PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


def _runner_command(name: str):
    from ampfix.runner import commands

    single = typer.Typer(add_completion=False)
    single.command(name, context_settings=_PASS_THROUGH)(getattr(commands, _RUNNER_COMMANDS[name]))
    return typer.main.get_command(single)


class _Group(TyperGroup):
    def _load(self, name: str) -> None:
        if name in _RUNNER_COMMANDS and name not in self.commands:
            self.commands[name] = _runner_command(name)

    def list_commands(self, ctx) -> list[str]:
        for name in _RUNNER_COMMANDS:
            self._load(name)
        return super().list_commands(ctx)

    def get_command(self, ctx, cmd_name: str):
        self._load(cmd_name)
        return super().get_command(ctx, cmd_name)

    def resolve_command(self, ctx, args):
        if args and args[0] not in self.commands:  # an unknown name: suggest among every command
            for name in _RUNNER_COMMANDS:
                self._load(name)
        return super().resolve_command(ctx, args)


app = typer.Typer(
    cls=_Group,
    add_completion=False,
    no_args_is_help=True,
    help="Migrate deprecated torch.cuda.amp / torch.cpu.amp to torch.amp; run CUDA scripts on CPU.",
)


class OutputFormat(str, enum.Enum):
    text = "text"
    json = "json"


PathsArg = Annotated[list[Path], typer.Argument(help="Files or folders (folders: every *.py below).")]
UnsafeOpt = Annotated[bool, typer.Option("--unsafe-fixes", help="Also apply fixes that may change meaning.")]
TargetOpt = Annotated[
    Optional[str],
    typer.Option("--target-torch", metavar="X.Y",
                 help="Oldest torch the code must run on; rules needing newer torch are only reported."),
]
FormatOpt = Annotated[OutputFormat, typer.Option("--output-format", help="text, or json (one array).")]


def _options(unsafe_fixes: bool, target_torch: str | None) -> Options:
    version = None
    if target_torch is not None:
        try:
            major, minor = (int(x) for x in target_torch.split(".")[:2])
        except ValueError:
            raise typer.BadParameter(f"expected X.Y, got {target_torch!r}", param_hint="--target-torch")
        version = (major, minor)
    return Options(unsafe_fixes=unsafe_fixes, target_torch=version)


@app.command()
def check(paths: PathsArg, output_format: FormatOpt = OutputFormat.text, unsafe_fixes: UnsafeOpt = False,
          target_torch: TargetOpt = None) -> None:
    """List every deprecated AMP use; write nothing. Exit 0 clean, 1 findings, 2 error."""
    raise typer.Exit(run_files(paths, "check", _options(unsafe_fixes, target_torch), output_format.value))


@app.command()
def rewrite(paths: PathsArg, diff: Annotated[bool, typer.Option("--diff", help="Print a diff; write nothing.")] = False,
            output_format: FormatOpt = OutputFormat.text, unsafe_fixes: UnsafeOpt = False,
            target_torch: TargetOpt = None) -> None:
    """Rewrite in place (or --diff). Exit 0 nothing to do, 1 changed or findings left, 2 error."""
    mode = "diff" if diff else "rewrite"
    raise typer.Exit(run_files(paths, mode, _options(unsafe_fixes, target_torch), output_format.value))


@app.command()
def rules(output_format: FormatOpt = OutputFormat.text) -> None:
    """The rule table: code, old -> new, minimum torch, fix."""
    from ampfix import report

    text = report.rules_json() if output_format is OutputFormat.json else report.rules_text()
    sys.stdout.write(text + "\n")


def _version_callback(value: bool) -> None:
    if value:
        sys.stdout.write(f"ampfix {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version_callback, is_eager=True)] = False) -> None:
    pass


def main() -> None:
    code = fast_path(sys.argv[1:])  # `ampfix check FILES`: the typer defaults, without parsing
    if code is not None:
        sys.exit(code)
    app()
