"""What a newcomer meets (issue 45), through the real command line: `ampfix run` parses as launchers do, a
missing torch names the install, a refusal's traceback reads as on a GPU, summaries stay one line a phrase."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ARGV_SCRIPT = "import os, sys\nprint(sys.argv[1:], os.environ['PYTHONHASHSEED'])\n"
REFUSING_SCRIPT = """\
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4).cuda()

    def forward(self, x):
        return self.linear(x)


model = Model()
batch = torch.randn(2, 4)  # left on the host
model(batch)
"""
REFUSAL = "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"


def ampfix(*args: str, cwd: Path, python: str = sys.executable, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if key != "COLUMNS"} | env
    return subprocess.run([python, "-m", "ampfix", *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env=environment)


@pytest.fixture
def argv_script(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(ARGV_SCRIPT)
    return tmp_path


@pytest.mark.parametrize(
    ("args", "seen"),
    [
        # The script's own --seed is the script's; ampfix's comes before the script.
        (["--seed", "5", "train.py", "--seed", "3", "--foo"], "['--seed', '3', '--foo'] 5"),
        (["train.py", "--seed", "3", "--json", "x.json"], "['--seed', '3', '--json', 'x.json'] 0"),
        (["train.py", "--help"], "['--help'] 0"),
        # The form the docs showed: a `--` right after the script is dropped; any other is the script's.
        (["--seed=2", "train.py", "--", "--seed", "3"], "['--seed', '3'] 2"),
        (["train.py", "a", "--", "b"], "['a', '--', 'b'] 0"),
        # A module as `python -m` runs it: every word after the module is the module's.
        (["-m", "train", "--seed", "3", "-x"], "['--seed', '3', '-x'] 0"),
        (["--module=train", "--", "tests/"], "['tests/'] 0"),
    ],
)
def test_run_takes_its_options_before_the_script_and_gives_the_script_the_rest(
    argv_script: Path, args: list[str], seen: str
) -> None:
    completed = ampfix("run", *args, cwd=argv_script)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout == seen + "\n"


def test_an_unknown_option_before_the_script_is_ampfixs_error(argv_script: Path) -> None:
    completed = ampfix("run", "--foo", "train.py", cwd=argv_script)
    assert completed.returncode == 2 and completed.stdout == ""
    assert "No such option: --foo" in completed.stderr


def _environment_without_torch(folder: Path) -> str:
    """A virtual environment holding what this one holds (ampfix included) but torch: what README's first
    install (no `[runner]` extra) gives. Its python."""
    venv.create(folder, with_pip=False)
    own = Path(sysconfig.get_paths()["purelib"])
    theirs = folder / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    for entry in own.iterdir():
        if entry.name != "torch" and not entry.name.startswith(("torch-", "torchgen", "functorch")):
            (theirs / entry.name).symlink_to(entry)
    return str(folder / "bin" / "python")


def test_run_without_torch_says_how_to_install_it(tmp_path: Path) -> None:
    python = _environment_without_torch(tmp_path / "venv")
    (tmp_path / "train.py").write_text("import torch\n")
    completed = ampfix("run", "train.py", cwd=tmp_path, python=python)
    assert completed.returncode == 1
    lines = completed.stderr.splitlines()
    assert lines[lines.index("ModuleNotFoundError: No module named 'torch'") + 1:][:2] == [
        "ampfix run: train.py exited 1",
        'why: torch is not installed where ampfix runs: pip install "ampfix[runner]"',
    ]


def test_a_refusals_traceback_ends_in_torch_as_on_a_gpu_and_the_summary_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(REFUSING_SCRIPT)
    completed = ampfix("run", "train.py", cwd=tmp_path)  # stderr a pipe, no COLUMNS: never wrapped
    assert completed.returncode == 1
    traceback, summary = completed.stderr.split("ampfix run: train.py exited 1\n")
    frames = [line.split('"')[1] for line in traceback.splitlines() if line.startswith('  File "')]
    assert not [file for file in frames if os.sep + os.path.join("ampfix", "runner") in file], traceback
    # The script's own frames are kept, its call and its forward; none of the runner's.
    assert [os.path.basename(file) for file in frames if file.endswith("train.py")] == ["train.py", "train.py"]
    assert frames[-1].endswith(os.path.join("torch", "nn", "modules", "linear.py"))  # where a GPU raises it
    assert traceback.splitlines()[-1] == f"RuntimeError: {REFUSAL}"
    assert summary.splitlines()[0] == (
        "why: the runner reproduces a GPU's own refusal here: the script fails the same way on CUDA")
    assert f"fails on a GPU train.py:10 {REFUSAL} (×1)" in summary.splitlines()


def test_a_width_in_columns_still_wraps_the_summary(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(REFUSING_SCRIPT)
    completed = ampfix("run", "train.py", cwd=tmp_path, COLUMNS="60")
    lines = [line.rstrip() for line in completed.stderr.splitlines()]
    assert "why: the runner reproduces a GPU's own refusal here: the" in lines  # 60 columns wide at most


# -- check and rewrite: ruff's habits, and the torch they worked at ------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
DEPRECATED = "import torch\nwith torch.cuda.amp.autocast():\n    pass\ns = torch.cuda.amp.GradScaler()\n"
AUTOCAST_FINDING = '`torch.cuda.amp.autocast(...)` -> `torch.amp.autocast(...)` with device "cuda"'
SCALER_FINDING = '`torch.cuda.amp.GradScaler(...)` -> `torch.amp.GradScaler(...)` with device "cuda"'


@pytest.fixture
def deprecated(tmp_path: Path) -> Path:
    (tmp_path / "a.py").write_text(DEPRECATED)
    return tmp_path


def test_check_with_no_path_checks_the_current_folder_and_says_the_torch_it_assumed(deprecated: Path) -> None:
    completed = ampfix("check", cwd=deprecated)
    assert (completed.returncode, completed.stdout) == (1, (
        f"a.py:2:6: AMP001 [*] {AUTOCAST_FINDING}\n"
        f"a.py:4:5: AMP002 [*] {SCALER_FINDING}\n"
        "target torch: the newest (none declared); the fixes need torch >= 2.3 (AMP002)\n"
        "2 findings (2 fixable with `ampfix rewrite`, 0 more with --unsafe-fixes).\n"
    ))


def test_check_fix_rewrites_as_rewrite_does_then_all_checks_pass(deprecated: Path) -> None:
    fixed = ampfix("check", "--fix", cwd=deprecated)
    assert (fixed.returncode, fixed.stdout) == (1, (
        f"a.py:2:6: AMP001 fixed: {AUTOCAST_FINDING}\n"
        f"a.py:4:5: AMP002 fixed: {SCALER_FINDING}\n"
        "target torch: the newest (none declared); the output needs torch >= 2.3 (AMP002)\n"
        "rewrote 1 file (2 fixes); 0 findings left.\n"
    ))
    assert (deprecated / "a.py").read_text() == (
        'import torch\nwith torch.amp.autocast("cuda"):\n    pass\ns = torch.amp.GradScaler("cuda")\n')
    clean = ampfix("check", cwd=deprecated)
    assert (clean.returncode, clean.stdout) == (0, "All checks passed!\n")


def test_a_use_held_back_by_the_target_says_left_once(deprecated: Path) -> None:
    completed = ampfix("rewrite", "--diff", "--target-torch", "2.2", "a.py", cwd=deprecated)
    assert completed.stderr.splitlines() == [
        f"a.py:2:6: AMP001 would fix: {AUTOCAST_FINDING}",
        "a.py:4:5: AMP002 `torch.cuda.amp.GradScaler` left: needs torch >= 2.3; the target is torch 2.2; suggested: "
        'torch.amp.GradScaler("cuda", ...)',
        "target torch 2.2, from --target-torch",  # a declared target: the output runs on it, nothing more to say
        "would rewrite 1 file (1 fix); 1 finding left.",
    ]


def test_the_demo_takes_its_target_from_its_own_requirements() -> None:
    completed = ampfix("check", "fixtures/demo", cwd=ROOT)
    lines = completed.stdout.splitlines()
    assert lines[-2] == "target torch 2.4, from fixtures/demo/requirements.txt"
    # The reference left on ops.py:29: its suggested partial said once, not again after "suggested:".
    (left,) = [line for line in lines if line.startswith("fixtures/demo/ops.py:29:")]
    assert left == (
        "fixtures/demo/ops.py:29:20: AMP001 [unsafe] `torch.cuda.amp.autocast` is referenced without a call; its "
        "calls cannot be given the device here; `DEFAULT_AUTOCAST` is bound at the top of a module or class on line "
        '29, where another module may read it; functools.partial(torch.amp.autocast, "cuda", dtype=th.float16, '
        "cache_enabled=True) keeps the old defaults, and a positional call raises TypeError instead of shifting its "
        "arguments (an unsafe fix exists: --unsafe-fixes)"
    )


def test_select_names_the_rule_codes_in_order(tmp_path: Path) -> None:
    completed = ampfix("check", "--select", "AMP999", cwd=tmp_path)
    assert completed.returncode == 2
    listed = completed.stderr.split("(AMP001, ")[1].split(")")[0].split(", ")
    assert ["AMP001", *listed] == sorted(["AMP001", *listed]) and "AMP012, AMP013" in ", ".join(listed)


def _help(*args: str, cwd: Path) -> str:
    """The help as the installed console script prints it, 80 columns wide."""
    script = str(Path(sys.executable).parent / "ampfix")
    environment = os.environ | {"COLUMNS": "80"}
    return subprocess.run([script, *args], cwd=cwd, capture_output=True, text=True, timeout=60,
                          env=environment).stdout


def test_help_is_whole_and_names_paths_plainly(tmp_path: Path) -> None:
    root = _help("--help", cwd=tmp_path)
    assert "..." not in root.split("Commands:")[1]
    assert ("  rules    The rule table: code, old -> new, minimum torch, fix; what is held\n"
            "           back at the target torch.\n") in root
    check = _help("check", "--help", cwd=tmp_path)
    assert check.startswith("Usage: ampfix check [OPTIONS] [PATH]...\n")
    assert ("  PATH...  Files or folders (folders: every *.py and *.ipynb below); `-` reads\n"
            "           stdin. Default: the current folder.\n") in check
    assert "  --fix " in check
    assert _help("rewrite", "--help", cwd=tmp_path).startswith("Usage: ampfix rewrite [OPTIONS] PATH...\n")


# -- the run's own progress and pace ---------------------------------------------------------------------------


class _Terminal:
    def __init__(self) -> None:
        self.written: list[str] = []

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> None:
        self.written.append(text)

    def flush(self) -> None:
        pass


def test_a_long_run_on_a_terminal_reports_its_steps_and_a_pipe_gets_nothing(monkeypatch) -> None:
    import io
    import time
    from types import SimpleNamespace

    from ampfix.runner.child import progress

    monkeypatch.setattr(progress, "PROGRESS_EVERY_S", 0.01)
    terminal, recorder = _Terminal(), SimpleNamespace(optimizer_steps=12)
    assert progress.start(recorder, terminal) and not progress.start(recorder, io.StringIO())
    deadline = time.monotonic() + 10
    while not terminal.written and time.monotonic() < deadline:
        time.sleep(0.01)
    assert terminal.written[0].startswith("ampfix run: 12 optimizer steps after 0 s (")
    assert progress.progress_line(30, 12.4) == "ampfix run: 30 optimizer steps after 12 s (2.42 steps/s)"
    assert progress.progress_line(0, 31) == "ampfix run: 0 optimizer steps after 31 s"


def test_the_summary_and_the_json_give_the_runs_duration_and_pace(argv_script: Path) -> None:
    import json

    completed = ampfix("run", "--json", "report.json", "train.py", cwd=argv_script)
    report = json.loads((argv_script / "report.json").read_text())
    assert report["seconds"] > 0 and report["steps_per_second"] is None  # no optimizer step: no pace
    shown = [line.rstrip() for line in completed.stderr.splitlines()]  # a grid's rows padded to its width
    assert f"optimizer steps      0 in {report['seconds']:.1f} s" in shown
