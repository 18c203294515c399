"""The hooks of .pre-commit-hooks.yaml, run by the real pre-commit (`try-repo`) in a temporary git
repository.

pre-commit builds the hooks' environment by pip-installing the hook repository: here a snapshot
of this checkout (its tracked files and its untracked, not ignored ones, so the work in progress
is what runs), with the pip settings of the environment the tests run in. Each `try-repo` builds
a fresh environment (~10 s): one test, three runs. pre-commit itself says whether a hook modified
files.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEPRECATED = "import torch\nwith torch.cuda.amp.autocast(True):\n    pass\n"
MIGRATED = 'import torch\nwith torch.amp.autocast("cuda", enabled=True):\n    pass\n'
IDENTITY = {"GIT_AUTHOR_NAME": "ampfix tests", "GIT_AUTHOR_EMAIL": "tests@ampfix.invalid",
            "GIT_COMMITTER_NAME": "ampfix tests", "GIT_COMMITTER_EMAIL": "tests@ampfix.invalid"}
ENV = {**os.environ, **IDENTITY}


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", *args],
                          cwd=cwd, env=ENV, capture_output=True, text=True, check=True)
    return done.stdout


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    snapshot = tmp_path_factory.mktemp("hook-repo")
    listed = git("ls-files", "--cached", "--others", "--exclude-standard", "-z", cwd=ROOT).split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the working tree is not part of it
            (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, snapshot / name)
    git("init", "-q", cwd=snapshot)
    git("add", "-A", cwd=snapshot)
    git("commit", "-q", "-m", "snapshot", cwd=snapshot)
    return snapshot


def try_repo(hook_repo: Path, cwd: Path, *hook: str) -> tuple[int, dict[str, str]]:
    """Run the hook (or every hook) of `hook_repo` on all files of `cwd`: the exit code, and each
    hook's report (its name -> the lines pre-commit printed for it, status first)."""
    done = subprocess.run([sys.executable, "-m", "pre_commit", "try-repo", str(hook_repo), *hook, "--all-files",
                           "--color", "never"], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=600)
    report = done.stdout.split("=" * 79)[-1]  # after the configuration try-repo prints
    sections: dict[str, str] = {}
    name = None
    for line in report.splitlines():
        header = re.fullmatch(r"(.+?)\.{3,}(Passed|Failed)", line)
        if header:
            name = header.group(1)
            sections[name] = header.group(2) + "\n"
        elif name is not None:
            sections[name] += line + "\n"
    assert sections, done.stdout + done.stderr
    return done.returncode, sections


def test_the_hooks_in_pre_commit(hook_repo: Path, tmp_path: Path):
    (tmp_path / "old.py").write_text(DEPRECATED)
    (tmp_path / "clean.py").write_text("import os\n")
    (tmp_path / "legacy").mkdir()
    (tmp_path / "legacy" / "vendored.py").write_text(DEPRECATED)
    # pre-commit names every file; the configured exclude still applies (--force-exclude).
    (tmp_path / "pyproject.toml").write_text('[tool.ampfix]\nextend-exclude = ["legacy/"]\n')
    git("init", "-q", cwd=tmp_path)
    git("add", "-A", cwd=tmp_path)

    code, hooks = try_repo(hook_repo, tmp_path, "ampfix-check")
    assert code == 1
    assert hooks == {"ampfix (check only)": (
        "Failed\n- hook id: ampfix-check\n- exit code: 1\n\n"
        'old.py:2:6: AMP001 [*] `torch.cuda.amp.autocast(...)` -> `torch.amp.autocast(...)` with device "cuda", '
        "positional arguments named enabled\n"
        "1 finding (1 fixable with `ampfix rewrite`, 0 more with --unsafe-fixes).\n\n"
    )}
    assert (tmp_path / "old.py").read_text() == DEPRECATED

    code, hooks = try_repo(hook_repo, tmp_path, "ampfix")
    assert code == 1
    assert hooks["ampfix"] == (
        "Failed\n- hook id: ampfix\n- exit code: 1\n- files were modified by this hook\n\n"
        'old.py:2:6: AMP001 fixed: `torch.cuda.amp.autocast(...)` -> `torch.amp.autocast(...)` with device "cuda", '
        "positional arguments named enabled\n"
        "rewrote 1 file (1 fix); 0 findings left.\n\n"
    )
    assert (tmp_path / "old.py").read_text() == MIGRATED
    assert (tmp_path / "legacy" / "vendored.py").read_text() == DEPRECATED

    code, hooks = try_repo(hook_repo, tmp_path)  # both hooks
    assert (code, hooks) == (0, {"ampfix (check only)": "Passed\n", "ampfix": "Passed\n"})
    assert (tmp_path / "old.py").read_text() == MIGRATED
