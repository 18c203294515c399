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
