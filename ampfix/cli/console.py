"""Run `check` / `rewrite` on paths and write what the CLI writes; pick the exit code.

Shared by the typer commands (`ampfix.cli.app`) and the start-up fast path of `ampfix.__main__`.
Imports neither typer nor rich nor libcst: a pre-commit run over files without an AMP use must
start in a blink, and typer alone takes longer to import than the whole run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ampfix.core.options import Options
from ampfix.io.config import ConfigError, Settings, load

if TYPE_CHECKING:
    from types import FrameType

    from ampfix.io.declared_torch import Target
    from ampfix.io.files import FileResult

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
STDIN = Path("-")


EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells and click report it


def run_files(paths: Sequence[Path], mode: str, flags: Mapping[str, Any] = {},
              output_format: str = "text", *, force_exclude: bool = False, exit_zero: bool = False,
              stdin_filename: str | None = None, quiet: bool = False, cache: bool = True) -> int:
    """Check, diff or rewrite `paths` (or stdin, as `-`), write the report, return the exit code.

    `flags`: the settings given as flags (`config.parse_flags`), which win over `[tool.ampfix]`. Ctrl-C stops the run
    after the files in progress (a second one stops it at once); what was done until then is
    reported all the same, then the exit code is 130. Output never fails on the stream's
    encoding: what it cannot take is written backslash-escaped. `cache`: False (`--no-cache`) reads and keeps no
    answer about the project's files between runs (`ampfix.io.project_index`).
    """
    with _EscapedOutput():
        return _run(paths, mode, flags, output_format, force_exclude=force_exclude, exit_zero=exit_zero,
                    stdin_filename=stdin_filename, quiet=quiet, cache=cache)


def _run(paths: Sequence[Path], mode: str, flags: Mapping[str, Any], output_format: str, *,
         force_exclude: bool, exit_zero: bool, stdin_filename: str | None, quiet: bool, cache: bool) -> int:
    reading_stdin = STDIN in paths
    if reading_stdin and len(paths) > 1:
        return _usage_error("`-` (stdin) cannot be mixed with other paths")
    named = [Path(stdin_filename)] if reading_stdin and stdin_filename else [] if reading_stdin else paths
    try:
        settings = load(named, flags)
    except ConfigError as error:  # nothing has been read or written yet
        return _usage_error(str(error))
    options = settings.options
    terminal = _Terminal(quiet)
    failure, interrupts = None, _Interrupts()
    targets: set[Target] = set()
    from ampfix.io import declared_torch, formatter
    from ampfix.io.project_modules import forget as forget_importers

    declared_torch.forget()  # project metadata and formatter settings are read afresh by each run
    formatter.forget()
    forget_importers(cache)  # and which of its modules import which names (kept between runs unless --no-cache)
    if reading_stdin:
        results = _run_stdin(stdin_filename or "-", mode, options, settings, force_exclude, targets)
        terminal.scanned = 1
    else:
        from ampfix.io.files import process_paths

        with interrupts:
            found = process_paths(paths, options, mode, exclusions=_exclusions(settings),
                                  force_exclude=force_exclude, on_discovered=terminal.discovered,
                                  stop=interrupts.seen)
            results, failure = _collect(_noting_targets(terminal.follow(found), targets), interrupts)
        terminal.finish()
    _emit(results, mode, output_format, terminal, findings_to_stderr=reading_stdin and mode == "rewrite",
          targets=_said(targets), targets_in_text=_said(targets, newest_too=True))
    stopped = _stopped(failure, interrupts)
    if stopped is not None:
        return stopped
    code = exit_code(results, mode)
    return EXIT_CLEAN if exit_zero and code == EXIT_FINDINGS else code


def _usage_error(message: str) -> int:
    sys.stderr.write(f"ampfix: error: {message}\n")
    return EXIT_ERROR


def _exclusions(settings: Settings):
    return settings.exclusions()


def _noting_targets(results, targets: set[Target]):
    """The results, as they come; the target of each file the engine read is noted in `targets`."""
    for result in results:
        if result.target is not None:
            targets.add(result.target)
        yield result


def _said(targets: set[Target], newest_too: bool = False) -> list[Target]:
    """The targets a report names, once each, by source: those that something set (a flag, a key,
    project metadata), and with `newest_too` (the text report: a person reads which torch each file was
    worked at) the newest torch that nothing declared, first."""
    return sorted((t for t in targets if newest_too or t.source is not None),
                  key=lambda t: (t.source is not None, t.source or "", t.version or ()))


def _run_stdin(name: str, mode: str, options: Options, settings: Settings, force_exclude: bool,
               targets: set[Target]) -> list:
    """`ampfix check -` / `ampfix rewrite -`: `rewrite` prints the new text (the input when nothing
    changes or the name is excluded), `--diff` the diff; the findings go to the report."""
    from ampfix.io.files import process_stdin

    data = sys.stdin.buffer.read()
    if force_exclude and name != "-" and _exclusions(settings).forced_out(Path(name)):
        if mode == "rewrite":
            _write_bytes(data)
        return []
    result, new_data = process_stdin(name, data, options, mode)
    if result.target is not None:
        targets.add(result.target)
    if mode == "rewrite":
        _write_bytes(new_data)
    return [result] if result.findings or result.error or result.changed else []


def _write_bytes(data: bytes) -> None:
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def _collect(results_in, interrupts: _Interrupts) -> tuple[list, str | None]:
    """The results worth reporting, and the traceback of a failure of the run itself, if any.

    A second Ctrl-C or a failure outside any one file ends the loop, never the report: the files
    already rewritten are still listed.
    """
    results = []
    try:
        for result in results_in:
            if result.findings or result.error or result.changed:
                results.append(result)
    except KeyboardInterrupt:
        interrupts.count += 1
    except Exception:  # noqa: BLE001 - reported below, after the files done
        import traceback

        return results, traceback.format_exc()
    return results, None


def _stopped(failure: str | None, interrupts: _Interrupts) -> int | None:
    """The exit code of a run that did not end on its own (and why, on stderr); None if it did."""
    not_listed = "the files not listed were not processed."
    if failure is not None:
        sys.stderr.write(f"{failure}ampfix: internal error, the run stopped; {not_listed}\n")
        return EXIT_ERROR
    if interrupts.seen():
        how = "after the files in progress" if interrupts.count == 1 else "at once (a file in progress may be written)"
        sys.stderr.write(f"ampfix: interrupted, stopped {how}; {not_listed}\n")
        return EXIT_INTERRUPTED
    return None


class _Interrupts:
    """While a run lasts, the first Ctrl-C only asks it to stop; the second raises KeyboardInterrupt."""

    def __init__(self) -> None:
        self.count = 0
        self._previous: Callable[[int, FrameType | None], Any] | int | None = None

    def seen(self) -> bool:
        return self.count > 0

    def _on_interrupt(self, signum, frame) -> None:
        self.count += 1
        if self.count > 1:
            raise KeyboardInterrupt

    def __enter__(self) -> _Interrupts:
        import signal

        try:
            self._previous = signal.signal(signal.SIGINT, self._on_interrupt)
        except ValueError:  # not the main thread: Ctrl-C stays a KeyboardInterrupt
            self._previous = None
        return self

    def __exit__(self, *exc_info) -> None:
        import signal

        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


class _EscapedOutput:
    """While a run lasts, stdout and stderr write what their encoding cannot take backslash-escaped.

    A file's text (a diff, a path, a message quoting code) may hold any character, and the stream
    may be ASCII (PYTHONIOENCODING=ascii, a C locale): a report must never end in UnicodeEncodeError.
    """

    def __enter__(self) -> None:
        import codecs

        self._changed = []
        for stream in (sys.stdout, sys.stderr):
            errors, encoding = getattr(stream, "errors", None), getattr(stream, "encoding", None) or "ascii"
            # UTF-8 takes every character; surrogateescape then gives back the bytes of a file name
            # that was not valid UTF-8, as they were.
            lenient = errors == "surrogateescape" and codecs.lookup(encoding).name == "utf-8"
            if errors in ("strict", "surrogateescape") and not lenient and hasattr(stream, "reconfigure"):
                stream.reconfigure(errors="backslashreplace")
                self._changed.append((stream, errors))

    def __exit__(self, *exc_info) -> None:
        for stream, errors in self._changed:
            stream.reconfigure(errors=errors)


def exit_code(results, mode: str) -> int:
    if any(r.error for r in results):
        return EXIT_ERROR
    if mode == "check":
        return EXIT_FINDINGS if any(r.findings for r in results) else EXIT_CLEAN
    return EXIT_FINDINGS if any(r.changed or any(not f.fixed for f in r.findings) for r in results) else EXIT_CLEAN


def _emit(results, mode: str, output_format: str, terminal: _Terminal, findings_to_stderr: bool = False,
          targets: Sequence[Target] = (), targets_in_text: Sequence[Target] = ()) -> None:
    from ampfix.cli import report

    # With --diff the diff alone goes to stdout (it can be piped to `git apply`); so does the new
    # text of `rewrite -`.
    findings_out = sys.stderr if mode == "diff" or findings_to_stderr else sys.stdout
    if mode == "diff":
        sys.stdout.write("".join(r.diff for r in results))
    if output_format == "json":
        findings_out.write(report.findings_json(results) + "\n")
    elif output_format == "github":
        findings_out.write(report.github_annotations(results, mode))
    elif output_format == "sarif":
        findings_out.write(report.sarif(results, targets, mode) + "\n")
    else:
        colour = terminal.colour(findings_out)
        for result in results:
            for line in report.finding_lines(result, mode, colour):
                findings_out.write(line + "\n")
        if not terminal.quiet:
            findings_out.write("".join(line + "\n" for line in report.target_lines(results, mode, targets_in_text)))
            findings_out.write(report.summary(results, mode) + "\n")
        if not terminal.quiet and _is_terminal(findings_out):
            summary = report.terminal_summary(results, mode, terminal.scanned, terminal.elapsed())
            findings_out.write(report.paint(summary, "dim", colour) + "\n")


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class _Terminal:
    """What a person at a terminal gets beyond the report: a progress line on runs longer than
    about a second (on stderr, when it is a terminal, unless --quiet), colours (unless NO_COLOR),
    and the count of files scanned for the closing summary. Costs a counter per file otherwise."""

    PROGRESS_AFTER_S = 1.0
    REDRAW_EVERY_S = 0.1

    def __init__(self, quiet: bool) -> None:
        import time

        self.quiet = quiet
        self.clock = time.monotonic
        self.started = self.clock()
        self.scanned = 0
        self.processed = 0
        self.drawn_at = 0.0
        self.shows_progress = not quiet and _is_terminal(sys.stderr)
        self.drawn = False

    def elapsed(self) -> float:
        return self.clock() - self.started

    def discovered(self, path: Path | FileResult) -> None:
        self.scanned += 1
        if self.shows_progress:
            self._draw()

    def follow(self, results):
        for result in results:
            self.processed += 1
            if self.shows_progress:
                self._draw()
            yield result

    def _draw(self) -> None:
        now = self.clock()
        if now - self.started < self.PROGRESS_AFTER_S or now - self.drawn_at < self.REDRAW_EVERY_S:
            return
        self.drawn_at = now
        self.drawn = True
        sys.stderr.write(f"\r\033[Kampfix: {self.scanned:,} files scanned, {self.processed:,} naming amp "
                         f"processed {_SPINNER[int(now * 10) % len(_SPINNER)]}")
        sys.stderr.flush()

    def finish(self) -> None:
        if self.drawn:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()

    @staticmethod
    def colour(stream) -> bool:
        return _is_terminal(stream) and not os.environ.get("NO_COLOR")


_SPINNER = "|/-\\"


# The fast path. `ampfix check a.py b.py` (what pre-commit runs: a command and file names, no
# flag but --force-exclude) needs no flag parsing at all: the defaults of the typer command are the
# defaults of `run_files`. Anything else (another flag, `--`, `--help`, `-`, another command, no
# path) goes to typer, which parses everything; so do Windows (click expands wildcards there) and
# shell completion.
FAST_COMMANDS = {"check": "check", "rewrite": "rewrite"}  # command -> mode
FAST_FLAGS = frozenset({"--force-exclude"})


def fast_path(args: Sequence[str]) -> int | None:
    """The exit code of `args` run without typer, or None when typer must parse them."""
    if len(args) < 2 or args[0] not in FAST_COMMANDS or os.name == "nt":
        return None
    flags = {arg for arg in args[1:] if arg.startswith("-")}
    paths = [Path(arg) for arg in args[1:] if not arg.startswith("-")]
    if not flags <= FAST_FLAGS or not paths or any(k.endswith("_COMPLETE") for k in os.environ):
        return None
    try:
        return run_files(paths, FAST_COMMANDS[args[0]], force_exclude="--force-exclude" in flags)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # as click does: exit 1, quietly (the reader went away)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
