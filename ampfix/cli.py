"""The command line: parses flags, renders, picks exit codes. The work is in engine/files/runner."""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ampfix import __version__
from ampfix.options import Options
from ampfix.runner.commands import run_command, verify_command

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2

app = typer.Typer(
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


def _collect(paths: list[Path], options: Options, mode: str):
    from ampfix.files import process_paths

    return [r for r in process_paths(paths, options, mode) if r.findings or r.error or r.changed]


def _exit_code(results, mode: str) -> int:
    if any(r.error for r in results):
        return EXIT_ERROR
    if mode == "check":
        return EXIT_FINDINGS if any(r.findings for r in results) else EXIT_CLEAN
    return EXIT_FINDINGS if any(r.changed or any(not f.fixed for f in r.findings) for r in results) else EXIT_CLEAN


@app.command()
def check(paths: PathsArg, output_format: FormatOpt = OutputFormat.text, unsafe_fixes: UnsafeOpt = False,
          target_torch: TargetOpt = None) -> None:
    """List every deprecated AMP use; write nothing. Exit 0 clean, 1 findings, 2 error."""
    results = _collect(paths, _options(unsafe_fixes, target_torch), "check")
    _emit(results, "check", output_format)
    raise typer.Exit(_exit_code(results, "check"))


@app.command()
def rewrite(paths: PathsArg, diff: Annotated[bool, typer.Option("--diff", help="Print a diff; write nothing.")] = False,
            output_format: FormatOpt = OutputFormat.text, unsafe_fixes: UnsafeOpt = False,
            target_torch: TargetOpt = None) -> None:
    """Rewrite in place (or --diff). Exit 0 nothing to do, 1 changed or findings left, 2 error."""
    mode = "diff" if diff else "rewrite"
    results = _collect(paths, _options(unsafe_fixes, target_torch), mode)
    _emit(results, mode, output_format)
    raise typer.Exit(_exit_code(results, mode))


def _emit(results, mode: str, output_format: OutputFormat) -> None:
    from ampfix import report

    if output_format is OutputFormat.json:
        if mode == "diff":
            sys.stdout.write("".join(r.diff for r in results))
            sys.stderr.write(report.findings_json(results) + "\n")
        else:
            sys.stdout.write(report.findings_json(results) + "\n")
        return
    # With --diff the diff alone goes to stdout (it can be piped to `git apply`).
    findings_out = sys.stderr if mode == "diff" else sys.stdout
    for result in results:
        if mode == "diff" and result.diff:
            sys.stdout.write(result.diff)
        for line in report.finding_lines(result, mode):
            findings_out.write(line + "\n")
    findings_out.write(report.summary(results, mode) + "\n")


@app.command()
def rules(output_format: FormatOpt = OutputFormat.text) -> None:
    """The rule table: code, old -> new, minimum torch, fix."""
    from ampfix import report

    text = report.rules_json() if output_format is OutputFormat.json else report.rules_text()
    sys.stdout.write(text + "\n")


_PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}
app.command("run", context_settings=_PASS_THROUGH)(run_command)
app.command("verify", context_settings=_PASS_THROUGH)(verify_command)


def _version_callback(value: bool) -> None:
    if value:
        sys.stdout.write(f"ampfix {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version_callback, is_eager=True)] = False) -> None:
    pass


def main() -> None:
    app()
