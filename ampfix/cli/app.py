"""The command line: parses flags, renders, picks exit codes. The work is in engine/files/runner."""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from ampfix import __version__
from ampfix.cli.console import EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS, fast_path, run_files

__all__ = ["EXIT_CLEAN", "EXIT_ERROR", "EXIT_FINDINGS", "app", "main"]

# `run` and `verify` are registered on first use: the runner's commands import rich, which
# `check` and `rewrite` never need (they print plain text, and start-up is paid per commit).
_RUNNER_COMMANDS = {"run": "run_command", "verify": "verify_command"}
_PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


def _runner_command(name: str):
    from ampfix.runner.host import commands

    single = typer.Typer(add_completion=False, rich_markup_mode=None)
    # run stops at its script as launchers do (everything after it is the script's); verify takes its
    # options anywhere and passes on what follows `--`.
    settings = {"cls": commands.LauncherCommand} if name == "run" else {"context_settings": _PASS_THROUGH}
    single.command(name, **settings)(getattr(commands, _RUNNER_COMMANDS[name]))
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

    def format_commands(self, ctx, formatter) -> None:
        """Each command's first sentence whole, wrapped under its name: click would cut it with "..."."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=_WHOLE_SENTENCE)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


_WHOLE_SENTENCE = 1_000


class _Command(TyperCommand):
    """Arguments shown as click shows them (`[PATH]...`, `CODE`), without typer's braces around a required one
    and its type labels (`PATH <list[Path]>`)."""

    def collect_usage_pieces(self, ctx) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        return pieces + [self._shown(param, usage=True) for param in self.get_params(ctx)
                         if param.param_type_name == "argument"]

    def format_options(self, ctx, formatter) -> None:
        arguments, options = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                arguments.append((self._shown(param, usage=False), record[1]))
            else:
                options.append(record)
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)

    @staticmethod
    def _shown(argument, usage: bool) -> str:
        name = argument.metavar or argument.name.upper()
        if usage and not argument.required:
            name = f"[{name}]"
        return name + ("..." if argument.nargs != 1 else "")


# Plain help, as click prints it: typer's rich panels label every flag `<bool>`, and read
# `[tool.ampfix]` in a help text as markup.
app = typer.Typer(
    cls=_Group,
    add_completion=False,
    rich_markup_mode=None,
    no_args_is_help=True,
    help="Migrate deprecated torch.cuda.amp / torch.cpu.amp to torch.amp; run CUDA scripts on CPU.",
)


class OutputFormat(str, enum.Enum):
    text = "text"
    json = "json"
    github = "github"
    sarif = "sarif"


_PATHS_HELP = "Files or folders (folders: every *.py and *.ipynb below); `-` reads stdin."
PathsArg = Annotated[list[Path], typer.Argument(metavar="PATH", help=_PATHS_HELP)]
CheckPathsArg = Annotated[list[Path] | None, typer.Argument(
    metavar="PATH", help=_PATHS_HELP + " Default: the current folder.", show_default=False)]
UnsafeOpt = Annotated[bool | None, typer.Option(
    "--unsafe-fixes/--no-unsafe-fixes", show_default=False,
    help="Also apply fixes that may change meaning (default: `unsafe-fixes` in [tool.ampfix], else off).")]
TargetOpt = Annotated[
    str | None,
    typer.Option("--target-torch", metavar="X.Y",
                 help="Oldest torch the code must run on: rules needing newer torch are only reported, and "
                      "version tests are decided for it (default: `target-torch` in [tool.ampfix], else the torch "
                      "requirement of each file's project, else the newest torch)."),
]
SelectOpt = Annotated[str | None, typer.Option(
    "--select", metavar="CODES", help="Only these rules: codes or prefixes, comma-separated (AMP001,AMP01).")]
IgnoreOpt = Annotated[str | None, typer.Option(
    "--ignore", metavar="CODES", help="Leave these rules out: codes or prefixes, comma-separated.")]
DeviceOpt = Annotated[str | None, typer.Option(
    "--device", metavar="cuda|cpu|auto",
    help="Where CUDA code goes: cuda (default, as written), cpu, or auto (a device chosen when it runs).")]
DeviceExprOpt = Annotated[str | None, typer.Option(
    "--device-expr", metavar="EXPR", help="Your own device expression at every CUDA site (\"cfg.device_type\").")]
KeepDtypeOpt = Annotated[bool | None, typer.Option(
    "--keep-dtype/--no-keep-dtype", show_default=False,
    help="With --device cpu, keep an explicit float16 (default: it becomes bfloat16).")]
ExplicitDefaultsOpt = Annotated[bool | None, typer.Option(
    "--explicit-autocast-defaults/--no-explicit-autocast-defaults", show_default=False,
    help="Write the old autocast's dtype/cache_enabled defaults in every rewrite (default: only where an "
         "enclosing autocast or a changed default shows; docs/autocast-defaults.md).")]
ApexOptLevelOpt = Annotated[str | None, typer.Option(
    "--apex-opt-level", metavar="O1|O2",
    help="The apex opt level your project runs where initialize's opt_level is not a literal (a command-line "
         "argument, a config value): O1 is rewritten as O1; O2 under --unsafe-fixes, as a change of numerics.")]
FormatOpt = Annotated[OutputFormat, typer.Option(
    "--output-format", help="text; json (one array); github (workflow annotations); sarif (2.1.0).")]
ExitZeroOpt = Annotated[bool, typer.Option(
    "--exit-zero", help="Exit 0 even when there are findings (2 still means an error).")]
ForceExcludeOpt = Annotated[bool, typer.Option(
    "--force-exclude", help="Apply the configured excludes to files named on the command line too.")]
QuietOpt = Annotated[bool, typer.Option(
    "--quiet", "-q", help="Print the findings only: no summary, no progress line.")]
NoCacheOpt = Annotated[bool, typer.Option(
    "--no-cache", help="Read and keep nothing between runs: neither the answers about the project's files nor "
                       "a file's kept check (in the user cache folder, $AMPFIX_CACHE_DIR or ~/.cache/ampfix).")]
StdinNameOpt = Annotated[str | None, typer.Option(
    "--stdin-filename", metavar="PATH",
    help="The name of the file read from stdin (`-`), for messages, configuration and excludes.")]


def _flags(**given: object) -> dict[str, Any]:
    """The settings given as flags (by option name; None: not given), parsed and checked as the
    [tool.ampfix] keys of the same names: they win over [tool.ampfix]."""
    from ampfix.io.config import FlagError, parse_flags

    try:
        return parse_flags({name.replace("_", "-"): value for name, value in given.items()})
    except FlagError as error:
        raise typer.BadParameter(str(error), param_hint=f"--{error.key}") from error


def _codes(value: str | None) -> list[str] | None:
    return None if value is None else [code.strip() for code in value.split(",") if code.strip()]


FixOpt = Annotated[bool, typer.Option(
    "--fix", help="Fix what can be fixed, as `ampfix rewrite` does (ruff's `check --fix`).")]


@app.command(cls=_Command)
def check(paths: CheckPathsArg = None, fix: FixOpt = False, output_format: FormatOpt = OutputFormat.text,
          unsafe_fixes: UnsafeOpt = None,
          target_torch: TargetOpt = None, select: SelectOpt = None, ignore: IgnoreOpt = None,
          exit_zero: ExitZeroOpt = False, force_exclude: ForceExcludeOpt = False,
          stdin_filename: StdinNameOpt = None, quiet: QuietOpt = False, device: DeviceOpt = None,
          device_expr: DeviceExprOpt = None, keep_dtype: KeepDtypeOpt = None,
          explicit_autocast_defaults: ExplicitDefaultsOpt = None, apex_opt_level: ApexOptLevelOpt = None,
          no_cache: NoCacheOpt = False) -> None:
    """List every deprecated AMP use; write nothing (with --fix, rewrite). Exit 0 clean, 1 findings, 2 error."""
    flags = _flags(device=device, device_expr=device_expr, keep_dtype=keep_dtype, unsafe_fixes=unsafe_fixes,
                   target_torch=target_torch, select=_codes(select), ignore=_codes(ignore),
                   explicit_autocast_defaults=explicit_autocast_defaults, apex_opt_level=apex_opt_level)
    mode = "rewrite" if fix else "check"  # ruff's `check --fix`: the rewrite
    raise typer.Exit(run_files(paths or [Path(".")], mode, flags, output_format.value, force_exclude=force_exclude,
                               exit_zero=exit_zero, stdin_filename=stdin_filename, quiet=quiet, cache=not no_cache))


@app.command(cls=_Command)
def rewrite(paths: PathsArg, diff: Annotated[bool, typer.Option("--diff", help="Print a diff; write nothing.")] = False,
            output_format: FormatOpt = OutputFormat.text, unsafe_fixes: UnsafeOpt = None,
            target_torch: TargetOpt = None, select: SelectOpt = None, ignore: IgnoreOpt = None,
            exit_zero: ExitZeroOpt = False, force_exclude: ForceExcludeOpt = False,
            stdin_filename: StdinNameOpt = None, quiet: QuietOpt = False, device: DeviceOpt = None,
            device_expr: DeviceExprOpt = None, keep_dtype: KeepDtypeOpt = None,
          explicit_autocast_defaults: ExplicitDefaultsOpt = None, apex_opt_level: ApexOptLevelOpt = None,
          no_cache: NoCacheOpt = False) -> None:
    """Rewrite in place (or --diff; `-`: stdin to stdout). Exit 0 nothing to do, 1 changed or findings left, 2 error."""
    mode = "diff" if diff else "rewrite"
    flags = _flags(device=device, device_expr=device_expr, keep_dtype=keep_dtype, unsafe_fixes=unsafe_fixes,
                   target_torch=target_torch, select=_codes(select), ignore=_codes(ignore),
                   explicit_autocast_defaults=explicit_autocast_defaults, apex_opt_level=apex_opt_level)
    raise typer.Exit(run_files(paths, mode, flags, output_format.value, force_exclude=force_exclude,
                               exit_zero=exit_zero, stdin_filename=stdin_filename, quiet=quiet, cache=not no_cache))


class TableFormat(str, enum.Enum):
    text = "text"
    json = "json"


CodeArg = Annotated[str | None, typer.Argument(metavar="CODE", help="One rule's page: AMP001.", show_default=False)]
TableFormatOpt = Annotated[TableFormat, typer.Option("--output-format", help="text, or json (the table).")]
TableTargetOpt = Annotated[str | None, typer.Option(
    "--target-torch", metavar="X.Y",
    help="Show what is held back at this torch (default: the current folder's `target-torch` in "
         "[tool.ampfix], else its project's torch requirement, else the newest).")]


@app.command(cls=_Command)
def rules(code: CodeArg = None, output_format: TableFormatOpt = TableFormat.text,
          target_torch: TableTargetOpt = None) -> None:
    """The rule table: code, old -> new, minimum torch, fix; what is held back at the target torch. With a
    CODE, that rule's page (as `ampfix rule CODE`)."""
    if code is not None:
        rule(code)
        return
    from ampfix.cli import report
    from ampfix.io.config import ConfigError

    try:
        target = _folder_target(Path.cwd(), _flags(target_torch=target_torch))
    except ConfigError as error:
        sys.stderr.write(f"ampfix: error: {error}\n")
        raise typer.Exit(EXIT_ERROR) from None
    text = report.rules_json(target=target) if output_format is TableFormat.json else report.rules_text(target=target)
    sys.stdout.write(text + "\n")


@app.command(cls=_Command)
def rule(code: Annotated[str, typer.Argument(metavar="CODE", help="A rule's code: AMP001.")]) -> None:
    """One rule's page: what it migrates, its minimum torch, what is fixed and what is left and why, its examples."""
    from ampfix.cli.rule_page import find_rule, rule_page

    found = find_rule(code)
    if found is None:
        sys.stderr.write(f"ampfix: error: no rule {code!r}; `ampfix rules` lists them\n")
        raise typer.Exit(EXIT_ERROR)
    sys.stdout.write(rule_page(found) + "\n")


def _folder_target(folder: Path, flags: dict[str, Any]):
    """The target torch of a run in `folder`, as `check` would take it for a file there."""
    from ampfix.io.config import load
    from ampfix.io.files import targeted

    return targeted(folder / "-", load([folder], flags).options)[1]


def _version_callback(value: bool) -> None:
    if value:
        sys.stdout.write(f"ampfix {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version_callback, is_eager=True,
                                                help="Show the version and exit.")] = False) -> None:
    pass


def main() -> None:
    code = fast_path(sys.argv[1:])  # `ampfix check FILES`: the typer defaults, without parsing
    if code is not None:
        sys.exit(code)
    app()
