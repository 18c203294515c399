"""ampfix as a flake8 plugin, run by the real flake8: `flake8 --select AMP` reports what `ampfix check` reports,
at the same lines and columns, with the same codes, from the same `[tool.ampfix]`; torch never imported."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from ampfix.cli.app import app

ROOT = Path(__file__).resolve().parent.parent
# flake8 in-process (-j 1: no worker processes), then whether torch or LibCST was imported.
FLAKE8 = ("import sys; from flake8.main.cli import main; code = main(sys.argv[1:]); "
          "print('imported:', 'torch' in sys.modules, 'libcst' in sys.modules); sys.exit(code)")


def _flake8(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", FLAKE8, "--select", "AMP", "-j", "1", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def _check_lines(cwd: Path, *paths: str) -> list[str]:
    """`ampfix check`'s finding lines, without the fix marks (flake8 has no place for them)."""
    import os

    old = os.getcwd()
    os.chdir(cwd)
    try:
        out = CliRunner().invoke(app, ["check", "-q", *paths]).stdout
    finally:
        os.chdir(old)
    return [re.sub(r"^(\S+ AMP\d+) \[(\*|unsafe)\]", r"\1", line) for line in out.splitlines()]


def test_flake8_reports_what_ampfix_check_reports(tmp_path: Path):
    for path in (ROOT / "fixtures/demo/train.py", ROOT / "fixtures/demo/ops.py", ROOT / "fixtures/format/crlf.in.py"):
        shutil.copyfile(path, tmp_path / path.name)
    names = sorted(path.name for path in tmp_path.iterdir())
    run = _flake8(tmp_path, *names)
    assert run.returncode == 1, run.stderr
    lines = run.stdout.splitlines()
    assert lines[-1] == "imported: False False"
    expected = _check_lines(tmp_path, *names)
    assert len(expected) == 12
    assert sorted(lines[:-1]) == sorted(expected)
    assert "train.py:26:14: AMP001 `torch.cuda.amp.autocast(...)` -> `torch.amp.autocast(...)` with device \"cuda\", " \
           "positional arguments named enabled" in lines


def test_the_plugin_reads_tool_ampfix_and_counts_columns_in_characters(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text('[tool.ampfix]\ntarget-torch = "2.2"\nignore = ["AMP010"]\n'
                                             'extend-exclude = ["legacy/"]\n')
    (tmp_path / "m.py").write_text('import torch\nx = "é"; s = torch.cuda.amp.GradScaler()\n'
                                   "from torch.cuda.amp import autocast\n", encoding="utf-8")
    (tmp_path / "legacy").mkdir()
    (tmp_path / "legacy" / "old.py").write_text("import torch\ns = torch.cuda.amp.GradScaler()\n")
    run = _flake8(tmp_path, "m.py", "legacy/old.py")  # flake8 names each file: excluded as with --force-exclude
    assert run.stdout.splitlines() == [
        "m.py:2:14: AMP002 `torch.cuda.amp.GradScaler` left: needs torch >= 2.3; the target is torch 2.2; "
        'suggested: torch.amp.GradScaler("cuda", ...)',
        "imported: False False",
    ]
    assert run.stdout.splitlines()[:-1] == _check_lines(tmp_path, "--force-exclude", "m.py", "legacy/old.py")
