"""``python -m ampfix.runner run|verify ...``: the two runner commands without the rest of the CLI."""

import typer

from ampfix.runner.host.commands import LauncherCommand, run_command, verify_command

EXTRA_ARGS = {"allow_extra_args": True, "ignore_unknown_options": True}

app = typer.Typer(add_completion=False, no_args_is_help=True)
app.command("run", cls=LauncherCommand)(run_command)
app.command("verify", context_settings=EXTRA_ARGS)(verify_command)

if __name__ == "__main__":
    app()
