"""[tool.ampfix], excludes, .gitignore and stdin, on real files in temporary folders."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ampfix.cli import console
from ampfix.cli.app import app
from ampfix.io.config import enabled_rules

DEPRECATED = "import torch\nwith torch.cuda.amp.autocast(True):\n    pass\n"
MIGRATED = 'import torch\nwith torch.amp.autocast("cuda", enabled=True):\n    pass\n'
BOTH = "import torch\ns = torch.cuda.amp.GradScaler()\nwith torch.cuda.amp.autocast():\n    pass\n"


def invoke(*args: str, input: bytes | None = None):
    return CliRunner().invoke(app, list(args), input=input)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def pyproject(folder: Path, table: str) -> Path:
    path = folder / "pyproject.toml"
    path.write_text("[project]\nname = 'x'\n\n[tool.ampfix]\n" + table)
    return path


def write(path: str, text: str = DEPRECATED) -> Path:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text)
    return Path(path)


def paths_in(stdout: str) -> list[str]:
    return sorted({line.split(":")[0] for line in stdout.splitlines() if ": AMP" in line})


# --- configuration -------------------------------------------------------------------------

def test_settings_come_from_the_nearest_pyproject_with_a_tool_ampfix_table(project: Path):
    pyproject(project, 'target-torch = "2.2"\n')
    (project / "sub").mkdir()
    (project / "sub" / "pyproject.toml").write_text("[project]\nname = 'sub'\n")  # no table: passed over
    path = write("sub/pkg/a.py", BOTH)
    result = invoke("rewrite", "sub/pkg")
    assert result.exit_code == 1
    assert path.read_text() == (
        'import torch\ns = torch.cuda.amp.GradScaler()\nwith torch.amp.autocast("cuda"):\n    pass\n'
    )
    assert "needs torch >= 2.3; the target is torch 2.2" in result.stdout


def test_a_flag_overrides_the_file(project: Path):
    pyproject(project, 'target-torch = "2.2"\nunsafe-fixes = true\n')
    path = write("a.py", "import torch\nclass S(torch.cuda.amp.GradScaler):\n    pass\n")
    assert invoke("rewrite", "--target-torch", "2.4", "--no-unsafe-fixes", "a.py").exit_code == 1
    assert path.read_text() == "import torch\nclass S(torch.cuda.amp.GradScaler):\n    pass\n"
    assert invoke("rewrite", "--target-torch", "2.4", "a.py").exit_code == 1  # the file's unsafe-fixes
    assert path.read_text() == "import torch\nclass S(torch.amp.GradScaler):\n    pass\n"


def test_select_and_ignore_by_code_or_prefix(project: Path):
    pyproject(project, 'ignore = ["AMP001"]\n')
    path = write("a.py", BOTH)
    result = invoke("rewrite", "a.py")
    assert path.read_text() == (
        'import torch\ns = torch.amp.GradScaler("cuda")\nwith torch.cuda.amp.autocast():\n    pass\n'
    )
    assert "AMP001" not in result.stdout and "AMP002 fixed" in result.stdout
    assert result.exit_code == 1
    path.write_text(BOTH)
    result = invoke("check", "--select", "AMP00", "--ignore", "AMP002", "a.py")  # the flag replaces the file's
    assert [line.split(" ")[1] for line in result.stdout.splitlines()[:-2]] == ["AMP001"]
    assert result.stdout.splitlines()[-2] == "target torch: the newest (none declared); the fixes need torch >= 1.10 (AMP001)"


def test_an_ignored_name_keeps_its_import_with_it(project: Path):
    source = "from torch.cuda.amp import GradScaler, autocast\ns = GradScaler()\nwith autocast():\n    pass\n"
    path = write("a.py", source)
    result = invoke("rewrite", "--ignore", "AMP001", "a.py")
    assert path.read_text() == (
        "from torch.amp import GradScaler\nfrom torch.cuda.amp import autocast\n"
        's = GradScaler("cuda")\nwith autocast():\n    pass\n'
    )
    assert "a.py:1:40: AMP010 `torch.cuda.amp.autocast` import left: " in result.stdout


def test_the_most_specific_selector_wins():
    assert enabled_rules(None, []) is None
    apex = {"AMP100", "AMP101", "AMP102", "AMP103", "AMP104", "AMP105", "AMP106", "AMP107", "AMP108", "AMP109",
            "AMP110", "AMP111"}
    assert enabled_rules(["AMP"], ["AMP00"]) == {"AMP010", "AMP011", "AMP012", "AMP013", *apex}
    assert enabled_rules(["AMP001"], ["AMP00"]) == {"AMP001"}
    assert enabled_rules(["AMP001"], ["AMP001"]) == frozenset()
    assert enabled_rules(None, ["AMP01"]) == {"AMP001", "AMP002", "AMP003", "AMP004", "AMP005", "AMP006", "AMP007",
                                              "AMP008", "AMP009", *apex}
    assert enabled_rules(["AMP1"], []) == apex


@pytest.mark.parametrize("table, message", [
    ('colour = "red"\n', "[tool.ampfix]: unknown key 'colour'"),
    ('target-torch = 2.3\n', "[tool.ampfix] target-torch: expected a version as a string \"X.Y\", got 2.3"),
    ('select = ["AMP9"]\n', "[tool.ampfix] select: 'AMP9' is not a rule code or a prefix of one"),
    ('exclude = "build"\n', "[tool.ampfix] exclude: expected a list of strings, got 'build'"),
    ('unsafe-fixes = "yes"\n', "[tool.ampfix] unsafe-fixes: expected true or false, got 'yes'"),
])
@pytest.mark.parametrize("command", ["check", "rewrite"])
def test_a_bad_configuration_is_an_error_naming_file_and_key_and_nothing_is_rewritten(
        project: Path, table: str, message: str, command: str, capsys):
    config = pyproject(project, table)
    path = write("a.py")
    code = console.fast_path([command, "a.py"])  # what pre-commit runs
    assert code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"ampfix: error: {config}: {message}" + captured.err.split(message, 1)[1]
    assert captured.err.endswith("\n") and captured.err.count("\n") == 1
    assert path.read_text() == DEPRECATED
    assert invoke(command, "a.py").exit_code == 2  # through typer too


def test_toml_that_does_not_parse_is_an_error(project: Path, capsys):
    (project / "pyproject.toml").write_text("[tool.ampfix\n")
    write("a.py")
    assert console.fast_path(["rewrite", "a.py"]) == 2
    assert capsys.readouterr().err.startswith(f"ampfix: error: {project / 'pyproject.toml'}: not valid TOML: ")
    assert Path("a.py").read_text() == DEPRECATED


# --- excludes and .gitignore ------------------------------------------------------------------

def test_exclude_patterns_are_gitignore_style_and_relative_to_the_pyproject(project: Path):
    pyproject(project, 'extend-exclude = ["legacy/", "*_pb2.py", "/top.py"]\n')
    for name in ("legacy/a.py", "pkg/legacy/b.py", "pkg/c_pb2.py", "top.py", "pkg/top.py", "pkg/d.py",
                 "build/e.py"):
        write(name)
    result = invoke("check", ".")
    assert paths_in(result.stdout) == ["pkg/d.py", "pkg/top.py"]  # build/: the built-in list still holds


def test_exclude_replaces_the_built_in_list(project: Path):
    pyproject(project, 'exclude = ["legacy/"]\n')
    write("build/e.py")
    write("legacy/a.py")
    write(".git/hooks/h.py")  # version-control folders are never walked
    assert paths_in(invoke("check", ".").stdout) == ["build/e.py"]


def test_a_file_named_on_the_command_line_is_processed_unless_force_exclude(project: Path):
    pyproject(project, 'extend-exclude = ["legacy/"]\n')
    write("legacy/a.py")
    write("b.py")
    assert paths_in(invoke("check", "legacy/a.py", "b.py").stdout) == ["b.py", "legacy/a.py"]
    assert paths_in(invoke("check", "--force-exclude", "legacy/a.py", "b.py").stdout) == ["b.py"]
    assert invoke("rewrite", "--force-exclude", "legacy/a.py").exit_code == 0
    assert Path("legacy/a.py").read_text() == DEPRECATED
    # A folder named explicitly is walked, though excluded; with --force-exclude it is not.
    assert paths_in(invoke("check", "legacy").stdout) == ["legacy/a.py"]
    assert invoke("check", "--force-exclude", "legacy").exit_code == 0
    # The built-in list counts too (as ruff's default excludes do).
    write("build/gen.py")
    assert paths_in(invoke("check", "--force-exclude", "build/gen.py", "b.py").stdout) == ["b.py"]


def test_the_fast_path_takes_force_exclude(project: Path, capsys):
    pyproject(project, 'extend-exclude = ["legacy/"]\n')
    write("legacy/a.py")
    assert console.fast_path(["check", "--force-exclude", "legacy/a.py"]) == 0
    assert console.fast_path(["check", "legacy/a.py"]) == 1
    assert console.fast_path(["check", "--force-exclude"]) is None  # no path: typer says what is missing


def git_init(folder: Path) -> None:
    subprocess.run(["git", "init", "-q"], cwd=folder, check=True)


def test_folders_honour_gitignore_files_and_info_exclude(project: Path):
    git_init(project)
    Path(".gitignore").write_text("generated/\n*.tmp.py\n!keep.tmp.py\n")
    Path(".git/info/exclude").write_text("local.py\n")
    write("pkg/.gitignore", "/private.py\n")
    for name in ("generated/a.py", "pkg/b.tmp.py", "pkg/keep.tmp.py", "local.py", "pkg/private.py",
                 "pkg/sub/private.py", "pkg/ok.py"):
        write(name)
    assert paths_in(invoke("check", ".").stdout) == ["pkg/keep.tmp.py", "pkg/ok.py", "pkg/sub/private.py"]
    # Started below the repository's root, the .gitignore files above still count.
    assert paths_in(invoke("check", "pkg").stdout) == ["pkg/keep.tmp.py", "pkg/ok.py", "pkg/sub/private.py"]
    # Named explicitly: processed.
    assert paths_in(invoke("check", "generated/a.py", "generated").stdout) == ["generated/a.py"]


def test_gitignore_files_outside_a_repository_do_not_count(project: Path):
    Path(".gitignore").write_text("*.py\n")
    write("a.py")
    assert paths_in(invoke("check", ".").stdout) == ["a.py"]


# --- stdin ---------------------------------------------------------------------------------

def test_rewrite_stdin_prints_the_new_text_and_the_findings_on_stderr(project: Path):
    result = invoke("rewrite", "-", input=DEPRECATED.encode())
    assert result.exit_code == 1
    assert result.stdout == MIGRATED
    assert result.stderr.startswith("-:2:6: AMP001 fixed: ")


def test_rewrite_stdin_with_nothing_to_change_prints_the_input_byte_for_byte(project: Path):
    data = b"\xef\xbb\xbfimport os\r\n# caf\xc3\xa9\r\n"
    result = invoke("rewrite", "-", input=data)
    assert (result.exit_code, result.stdout_bytes) == (0, data)


def test_check_stdin_uses_the_stdin_filename_for_messages_and_configuration(project: Path):
    (project / "pkg").mkdir()
    pyproject(project / "pkg", 'ignore = ["AMP002"]\n')
    result = invoke("check", "--stdin-filename", "pkg/mod.py", "-", input=BOTH.encode())
    assert result.exit_code == 1
    assert paths_in(result.stdout) == ["pkg/mod.py"]
    assert "AMP002" not in result.stdout and "pkg/mod.py:3:6: AMP001" in result.stdout


def test_stdin_under_force_exclude_is_passed_through(project: Path):
    pyproject(project, 'extend-exclude = ["legacy/"]\n')
    result = invoke("rewrite", "--force-exclude", "--stdin-filename", "legacy/a.py", "-", input=DEPRECATED.encode())
    assert (result.exit_code, result.stdout) == (0, DEPRECATED)


def test_stdin_diff_and_a_bad_stdin(project: Path):
    diff = invoke("rewrite", "--diff", "--stdin-filename", "a.py", "-", input=DEPRECATED.encode())
    assert diff.stdout.startswith("--- a/a.py\n+++ b/a.py\n")
    broken = invoke("rewrite", "-", input=b"import torch.cuda.amp\ndef f(:\n")
    assert broken.exit_code == 2
    assert broken.stdout == "import torch.cuda.amp\ndef f(:\n"  # the input, untouched
    assert invoke("check", "-", "a.py").exit_code == 2


def test_stdin_through_the_console_script(project: Path):
    """The real entry point, stdin and stdout as a pipe (not CliRunner's stand-ins)."""
    done = subprocess.run([sys.executable, "-m", "ampfix", "rewrite", "-"], input=DEPRECATED.encode(),
                          capture_output=True, check=False)
    assert (done.returncode, done.stdout) == (1, MIGRATED.encode())


def test_every_option_is_a_key_and_a_flag_of_check_and_rewrite():
    """An option is declared once, as a field of Options with its parser: [tool.ampfix] has its key
    and both commands its flag, each named after the field."""
    import dataclasses

    import typer

    from ampfix.core.options import Options
    from ampfix.io.config import KEYS

    declared = [option.name for option in dataclasses.fields(Options) if "parse" in option.metadata]
    assert {"target_torch", "unsafe_fixes", "device", "device_expr", "keep_dtype"} <= set(declared)
    assert all(KEYS[name.replace("_", "-")] == (name, Options.__dataclass_fields__[name].metadata["parse"])
               for name in declared)
    group = typer.main.get_command(app)
    for command in ("check", "rewrite"):
        flags = {flag for param in group.commands[command].params for flag in param.opts}
        assert {f"--{name.replace('_', '-')}" for name in declared} <= flags, command
