"""Run `check` / `rewrite` on paths and write what the CLI writes; pick the exit code.

Shared by the typer commands (`ampfix.cli`) and the start-up fast path of `ampfix.__main__`.
Imports neither typer nor rich nor libcst: a pre-commit run over files without an AMP use must
start in a blink, and typer alone takes longer to import than the whole run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Sequence

from ampfix.options import Options

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
FORMATS = ("text", "json")


def run_files(paths: Sequence[Path], mode: str, options: Options = Options(), output_format: str = "text") -> int:
    """Check, diff or rewrite `paths`, write the report, return the exit code."""
    from ampfix.files import process_paths

    results = [r for r in process_paths(paths, options, mode) if r.findings or r.error or r.changed]
    _emit(results, mode, output_format)
    return exit_code(results, mode)


def exit_code(results, mode: str) -> int:
    if any(r.error for r in results):
        return EXIT_ERROR
    if mode == "check":
        return EXIT_FINDINGS if any(r.findings for r in results) else EXIT_CLEAN
    return EXIT_FINDINGS if any(r.changed or any(not f.fixed for f in r.findings) for r in results) else EXIT_CLEAN


def _emit(results, mode: str, output_format: str) -> None:
    from ampfix import report

    if output_format == "json":
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


# The fast path. `ampfix check a.py b.py` (what pre-commit runs: a command and file names, no
# flag) needs no flag parsing at all: the defaults of the typer command are the defaults of
# `run_files`. Anything else (a flag, `--`, `--help`, another command, no path) goes to typer,
# which parses everything; so do Windows (click expands wildcards there) and shell completion.
FAST_COMMANDS = {"check": "check", "rewrite": "rewrite"}  # command -> mode


def fast_path(args: Sequence[str]) -> int | None:
    """The exit code of `args` run without typer, or None when typer must parse them."""
    if len(args) < 2 or args[0] not in FAST_COMMANDS or os.name == "nt":
        return None
    if any(arg.startswith("-") for arg in args[1:]) or any(k.endswith("_COMPLETE") for k in os.environ):
        return None
    try:
        return run_files([Path(arg) for arg in args[1:]], FAST_COMMANDS[args[0]])
    except KeyboardInterrupt:
        return 130  # as click does
    except BrokenPipeError:  # as click does: exit 1, quietly (the reader went away)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
