"""Start-up: what a run imports, and the fast path that pre-commit takes (no timing asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ampfix.cli import console
from ampfix.cli.app import app

CLEAN = "import os\n\n\ndef f(x):\n    return os.path.join(x, 'a')\n"
DEPRECATED = "import torch\nwith torch.cuda.amp.autocast(True):\n    pass\n"
HEAVY = {"libcst", "rich", "torch", "typer", "pydantic", "pydantic_core"}

PROBE = """
import sys
sys.argv = ["ampfix", *{args!r}]
{entry}
try:
    main()
except SystemExit as exit:
    code = exit.code
print("MODULES", __import__("json").dumps(sorted({{m.split(".")[0] for m in sys.modules}} & {heavy!r})))
"""


def _imported(entry: str, args: list[str]) -> list[str]:
    code = PROBE.format(args=args, entry=entry, heavy=HEAVY)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("MODULES "))
    return json.loads(line[len("MODULES "):])


@pytest.mark.parametrize("args", [["check", "{file}"], ["check", "--output-format", "json", "{file}"],
                                  ["rewrite", "--diff", "{file}"]])
def test_the_cli_checks_a_clean_file_without_libcst_or_rich(tmp_path: Path, args: list[str]):
    (tmp_path / "clean.py").write_text(CLEAN)
    args = [a.format(file=tmp_path / "clean.py") for a in args]
    imported = _imported("from ampfix.cli.app import main", args)
    assert not {"libcst", "rich", "torch"} & set(imported), imported


def test_the_entry_point_fast_path_imports_no_typer_either(tmp_path: Path):
    (tmp_path / "clean.py").write_text(CLEAN)
    (tmp_path / "old.py").write_text(DEPRECATED)
    assert _imported("from ampfix.__main__ import main", ["check", str(tmp_path / "clean.py")]) == []
    # A candidate is parsed with `ast`; `check` never needs LibCST.
    assert _imported("from ampfix.__main__ import main", ["check", str(tmp_path)]) == []


def test_rewrite_imports_libcst_only_when_a_file_changes(tmp_path: Path):
    (tmp_path / "old.py").write_text(DEPRECATED)
    assert "libcst" in _imported("from ampfix.__main__ import main", ["rewrite", str(tmp_path)])
    assert "libcst" not in _imported("from ampfix.__main__ import main", ["rewrite", str(tmp_path)])


@pytest.mark.parametrize("args", [
    [], ["check"], ["rules"], ["--version"], ["check", "--help"], ["check", "--", "a.py"],
    ["check", "--unsafe-fixes", "a.py"], ["check", "a.py", "--target-torch", "2.3"], ["rewrite", "--diff", "a.py"],
    ["run", "a.py"], ["check", "-"],
])
def test_the_fast_path_leaves_anything_with_a_flag_or_another_command_to_typer(args: list[str]):
    assert console.fast_path(args) is None


@pytest.mark.parametrize("command", ["check", "rewrite"])
def test_the_fast_path_prints_and_exits_as_the_typer_command(tmp_path: Path, command: str, capsys):
    def make_tree(root: Path) -> Path:
        (root / "pkg").mkdir(parents=True)
        (root / "pkg" / "old.py").write_text(DEPRECATED)
        (root / "pkg" / "clean.py").write_text(CLEAN)
        (root / "bad.py").write_bytes(b"import torch\nx = torch.cuda.amp.autocast(\n")
        return root

    typer_tree, fast_tree = make_tree(tmp_path / "a"), make_tree(tmp_path / "b")
    typer_run = CliRunner().invoke(app, [command, str(typer_tree / "pkg"), str(typer_tree / "bad.py")])
    fast_code = console.fast_path([command, str(fast_tree / "pkg"), str(fast_tree / "bad.py")])
    fast_out = capsys.readouterr().out
    assert fast_code == typer_run.exit_code == 2
    assert fast_out == typer_run.stdout.replace(str(typer_tree), str(fast_tree))
    assert (fast_tree / "pkg" / "old.py").read_text() == (typer_tree / "pkg" / "old.py").read_text()


def test_the_hook_command_with_a_tool_ampfix_table_stays_light(tmp_path: Path):
    """`ampfix check --force-exclude FILES` with [tool.ampfix] present: configuration costs tomllib,
    not typer; pathspec only when there is a pattern to match (here: none, then one)."""
    (tmp_path / "clean.py").write_text(CLEAN)
    (tmp_path / "pyproject.toml").write_text('[tool.ampfix]\ntarget-torch = "2.3"\n')
    args = ["check", "--force-exclude", str(tmp_path / "clean.py")]
    entry = "from ampfix.__main__ import main"
    heavy_or_matcher = HEAVY | {"pathspec"}
    code = PROBE.format(args=args, entry=entry, heavy=heavy_or_matcher)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "MODULES []"
    (tmp_path / "pyproject.toml").write_text('[tool.ampfix]\nextend-exclude = ["legacy/"]\n')
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == 'MODULES ["pathspec"]'


def test_a_project_torch_requirement_costs_a_file_without_amp_nothing(tmp_path: Path):
    """The target torch is read from project metadata only for a file that reaches the engine: the hook on
    a file without AMP, in a project declaring torch>=2.0, imports neither packaging nor tomllib for it."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "clean.py").write_text(CLEAN)
    (tmp_path / "requirements.txt").write_text("torch>=2.0\n")
    args = ["check", "--force-exclude", str(tmp_path / "clean.py")]
    code = PROBE.format(args=args, entry="from ampfix.__main__ import main", heavy=HEAVY | {"packaging", "tomllib"})
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "MODULES []"
    (tmp_path / "old.py").write_text(DEPRECATED)  # the same probe on a file with AMP: the requirement is parsed
    done = subprocess.run([sys.executable, "-c", code.replace("clean.py", "old.py")], capture_output=True, text=True,
                          check=True)
    assert done.stdout.splitlines()[-1] == 'MODULES ["packaging"]'
