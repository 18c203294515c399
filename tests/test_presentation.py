"""What a person at a terminal sees: plain help, colours and a closing summary only on a terminal
(NO_COLOR honoured), a progress line on long runs (not with --quiet, not when stderr is a pipe)."""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ampfix.cli import console
from ampfix.cli.app import app

DEPRECATED = "import torch\nwith torch.cuda.amp.autocast(True):\n    pass\n"
OTHER = "import torch\ns = torch.cuda.amp.GradScaler()\n"


@pytest.mark.parametrize("command", [["check"], ["rewrite"], ["rules"], ["run"], ["verify"], []])
def test_help_has_no_bool_metavars(command: list[str]):
    result = CliRunner().invoke(app, [*command, "--help"])
    assert result.exit_code == 0
    assert "<bool>" not in result.stdout and "Usage: " in result.stdout
    if command == ["check"]:
        assert "  --exit-zero " in result.stdout and "[tool.ampfix]" in result.stdout


def on_a_terminal(args: list[str], cwd: Path, **env: str) -> str:
    """Run the console script with stdout and stderr on a pseudo-terminal; what it printed."""
    primary, secondary = pty.openpty()
    environment = {k: v for k, v in os.environ.items() if k != "NO_COLOR"} | env
    process = subprocess.Popen([sys.executable, "-m", "ampfix", *args], cwd=cwd, stdin=subprocess.DEVNULL,
                               stdout=secondary, stderr=secondary, env=environment)
    os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    process.wait(timeout=60)
    os.close(primary)
    return b"".join(chunks).decode().replace("\r\n", "\n")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "a.py").write_text(DEPRECATED)
    (tmp_path / "b.py").write_text(OTHER)
    (tmp_path / "c.py").write_text("import os\n")
    return tmp_path


def without_progress(shown: str) -> str:
    """The report alone: a loaded machine can make the run long enough to draw the progress line."""
    return re.sub("\r\033\\[K(ampfix: [^\r\n]*)?", "", shown)


def test_a_terminal_gets_colours_and_the_closing_summary(tree: Path):
    shown = without_progress(on_a_terminal(["check", "."], tree))
    assert shown.splitlines() == [
        "\033[1ma.py:2:6:\033[0m \033[31mAMP001\033[0m [*] `torch.cuda.amp.autocast(...)` -> `torch.amp.autocast(...)` "
        'with device "cuda", positional arguments named enabled',
        "\033[1mb.py:2:5:\033[0m \033[31mAMP002\033[0m [*] `torch.cuda.amp.GradScaler(...)` -> "
        '`torch.amp.GradScaler(...)` with device "cuda"',
        "target torch: the newest (none declared); the fixes need torch >= 2.3 (AMP002)",
        "2 findings (2 fixable with `ampfix rewrite`, 0 more with --unsafe-fixes).",
        shown.splitlines()[4],
    ]
    summary = shown.splitlines()[4]
    assert summary.startswith("\033[2mscanned 3 files in ")
    assert summary.endswith(" s; findings by rule: AMP001 1, AMP002 1; 0 errors\033[0m")


def test_no_color_keeps_the_summary_and_drops_the_colours(tree: Path):
    shown = without_progress(on_a_terminal(["rewrite", "."], tree, NO_COLOR="1"))
    assert "\033" not in shown
    assert shown.splitlines()[-1].endswith("; changed 2 files; findings by rule: AMP001 1, AMP002 1; 0 errors")
    assert "rewrote 2 files (2 fixes); 0 findings left." in shown


def test_quiet_prints_the_findings_only(tree: Path):
    shown = on_a_terminal(["check", "--quiet", "."], tree, NO_COLOR="1")
    assert "\r" not in shown  # no progress line, however long the run
    assert [line.split(" ")[1] for line in shown.splitlines()] == ["AMP001", "AMP002"]


class _TerminalStream(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_line_on_a_long_run_and_cleared_at_the_end(tree: Path, monkeypatch: pytest.MonkeyPatch, capsys):
    monkeypatch.setattr(console._Terminal, "PROGRESS_AFTER_S", 0.0)  # "long" from the start
    monkeypatch.setattr(console._Terminal, "REDRAW_EVERY_S", 0.0)
    stderr = _TerminalStream()
    monkeypatch.setattr(sys, "stderr", stderr)
    assert console.run_files([tree], "check") == 1
    drawn = stderr.getvalue()
    assert "\r\033[Kampfix: 3 files scanned, 2 naming amp processed " in drawn
    assert drawn.endswith("\r\033[K")  # the line is wiped before the report
    assert "AMP001" in capsys.readouterr().out


@pytest.mark.parametrize("quiet, tty", [(True, True), (False, False)])
def test_no_progress_line_when_quiet_or_not_a_terminal(tree: Path, monkeypatch: pytest.MonkeyPatch,
                                                        quiet: bool, tty: bool):
    monkeypatch.setattr(console._Terminal, "PROGRESS_AFTER_S", 0.0)
    stderr = _TerminalStream() if tty else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    console.run_files([tree], "check", quiet=quiet)
    assert stderr.getvalue() == ""


def test_a_short_run_draws_no_progress(tree: Path, monkeypatch: pytest.MonkeyPatch):
    stderr = _TerminalStream()
    monkeypatch.setattr(sys, "stderr", stderr)
    console.run_files([tree], "check")  # well under a second
    assert stderr.getvalue() == ""
