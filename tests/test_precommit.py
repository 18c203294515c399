"""The hooks of .pre-commit-hooks.yaml, run by the real pre-commit in a temporary git repository whose
`.pre-commit-config.yaml` names this checkout as its hook repository, as a user's config names ampfix's.

pre-commit builds the hooks' environment by pip-installing the hook repository: here a snapshot
of this checkout (its tracked files and its untracked, not ignored ones, so the work in progress
is what runs), with the pip settings of the environment the tests run in. The environment is built
once, in a PRE_COMMIT_HOME of the tests', from the end of collection on (`prepare_in_background`), and
reused by the three runs, as it is between a user's commits. pre-commit itself says whether a hook
modified files.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from runner_jobs import session_folder

from ampfix import __version__

ROOT = Path(__file__).resolve().parents[1]
DEPRECATED = "import torch\nwith torch.cuda.amp.autocast(True):\n    pass\n"
MIGRATED = 'import torch\nwith torch.amp.autocast("cuda", enabled=True):\n    pass\n'
IDENTITY = {"GIT_AUTHOR_NAME": "ampfix tests", "GIT_AUTHOR_EMAIL": "tests@ampfix.invalid",
            "GIT_COMMITTER_NAME": "ampfix tests", "GIT_COMMITTER_EMAIL": "tests@ampfix.invalid"}
ENV = {**os.environ, **IDENTITY}


def _readme_snippet() -> str:
    """The README's `.pre-commit-config.yaml`, as a user copies it."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return text.split("```yaml\n# .pre-commit-config.yaml\n", 1)[1].split("```", 1)[0]


def _snippet_value(key: str) -> str:
    found = re.search(rf"^ *(?:- )?{key}: (\S+)$", README_SNIPPET, re.MULTILINE)
    assert found is not None, f"the README's pre-commit snippet has no {key}"
    return found.group(1)


README_SNIPPET = _readme_snippet()
README_URL, README_REV = _snippet_value("repo"), _snippet_value("rev")


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", *args],
                          cwd=cwd, env=ENV, capture_output=True, text=True, check=True)
    return done.stdout


def _snapshot(snapshot: Path) -> Path:
    listed = git("ls-files", "--cached", "--others", "--exclude-standard", "-z", cwd=ROOT).split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the working tree is not part of it
            (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, snapshot / name)
    git("init", "-q", cwd=snapshot)
    git("add", "-A", cwd=snapshot)
    git("commit", "-q", "-m", "snapshot", cwd=snapshot)
    git("tag", README_REV, cwd=snapshot)  # as the release the README's snippet names is tagged
    return snapshot


def _build(base: Path) -> tuple[Path, Path]:
    """The hook repository's snapshot, and a PRE_COMMIT_HOME holding its hooks' environment."""
    hook_repo, home, user = _snapshot(base / "hook-repo"), base / "home", base / "user"
    user.mkdir()
    (user / ".pre-commit-config.yaml").write_text(config(hook_repo))
    git("init", "-q", cwd=user)
    done = subprocess.run([sys.executable, "-m", "pre_commit", "install-hooks"], cwd=user,
                          env={**ENV, "PRE_COMMIT_HOME": str(home)}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return hook_repo, home


_built: Future[tuple[Path, Path]] | None = None


def prepare_in_background(session: pytest.Session) -> None:
    """Start building the hooks' environment (conftest.py calls this once the test is collected): pip spends most
    of its ~50 s waiting on the package indexes, so the build overlaps the tests that run before this one."""
    global _built
    if _built is None:
        _built = ThreadPoolExecutor(max_workers=1).submit(_build, session_folder(session, "pre-commit"))


@pytest.fixture(scope="module")
def hook_environment(request: pytest.FixtureRequest) -> tuple[Path, Path]:
    prepare_in_background(request.session)
    assert _built is not None
    return _built.result()


def pre_commit_run(cwd: Path, home: Path, *hook: str) -> tuple[int, dict[str, str]]:
    """Run the hook (or every hook) of the config in `cwd` on all its files: the exit code, and each hook's
    report (its name -> the lines pre-commit printed for it, status first)."""
    done = subprocess.run([sys.executable, "-m", "pre_commit", "run", *hook, "--all-files", "--color", "never"],
                          cwd=cwd, env={**ENV, "PRE_COMMIT_HOME": str(home)}, capture_output=True, text=True,
                          timeout=600)
    sections: dict[str, str] = {}
    name = None
    for line in done.stdout.splitlines():
        header = re.fullmatch(r"(.+?)\.{3,}(Passed|Failed)", line)
        if header:
            name = header.group(1)
            sections[name] = header.group(2) + "\n"
        elif name is not None:
            sections[name] += line + "\n"
    assert sections, done.stdout + done.stderr
    return done.returncode, sections


def config(hook_repo: Path) -> str:
    """A user's `.pre-commit-config.yaml` taking both hooks of the hook repository at its tag."""
    return (f"repos:\n- repo: {hook_repo}\n  rev: {README_REV}\n  hooks:\n  - id: ampfix-check\n  - id: ampfix\n")


def test_the_hooks_in_pre_commit(hook_environment: tuple[Path, Path], tmp_path: Path):
    hook_repo, home = hook_environment
    (tmp_path / ".pre-commit-config.yaml").write_text(config(hook_repo))
    (tmp_path / "old.py").write_text(DEPRECATED)
    (tmp_path / "clean.py").write_text("import os\n")
    (tmp_path / "legacy").mkdir()
    (tmp_path / "legacy" / "vendored.py").write_text(DEPRECATED)
    # pre-commit names every file; the configured exclude still applies (--force-exclude).
    (tmp_path / "pyproject.toml").write_text('[tool.ampfix]\nextend-exclude = ["legacy/"]\n')
    git("init", "-q", cwd=tmp_path)
    git("add", "-A", cwd=tmp_path)

    code, hooks = pre_commit_run(tmp_path, home, "ampfix-check")
    assert code == 1
    assert hooks == {"ampfix (check only)": (
        "Failed\n- hook id: ampfix-check\n- exit code: 1\n\n"
        'old.py:2:6: AMP001 [*] `torch.cuda.amp.autocast(...)` -> `torch.amp.autocast(...)` with device "cuda", '
        "positional arguments named enabled\n"
        "target torch: the newest (none declared); the fixes need torch >= 1.10 (AMP001)\n"
        "1 finding (1 fixable with `ampfix rewrite`, 0 more with --unsafe-fixes).\n\n"
    )}
    assert (tmp_path / "old.py").read_text() == DEPRECATED

    code, hooks = pre_commit_run(tmp_path, home, "ampfix")
    assert code == 1
    assert hooks["ampfix"] == (
        "Failed\n- hook id: ampfix\n- exit code: 1\n- files were modified by this hook\n\n"
        'old.py:2:6: AMP001 fixed: `torch.cuda.amp.autocast(...)` -> `torch.amp.autocast(...)` with device "cuda", '
        "positional arguments named enabled\n"
        "target torch: the newest (none declared); the output needs torch >= 1.10 (AMP001)\n"
        "rewrote 1 file (1 fix); 0 findings left.\n\n"
    )
    assert (tmp_path / "old.py").read_text() == MIGRATED
    assert (tmp_path / "legacy" / "vendored.py").read_text() == DEPRECATED

    code, hooks = pre_commit_run(tmp_path, home)  # both hooks
    assert (code, hooks) == (0, {"ampfix (check only)": "Passed\n", "ampfix": "Passed\n"})
    assert (tmp_path / "old.py").read_text() == MIGRATED


def test_the_readmes_snippet_copied_as_is_works(hook_environment: tuple[Path, Path], tmp_path: Path):
    """The README's snippet in a fresh repository: its `repo:` (the path of a clone of ampfix, which the user fills
    in) is the snapshot of this checkout, tagged with the snippet's rev; nothing else changed."""
    hook_repo, home = hook_environment
    assert README_REV == f"v{__version__}"  # the release the README names is this version's tag
    (tmp_path / ".pre-commit-config.yaml").write_text(README_SNIPPET.replace(README_URL, str(hook_repo)))
    (tmp_path / "old.py").write_text(DEPRECATED)
    git("init", "-q", cwd=tmp_path)
    git("add", "-A", cwd=tmp_path)
    environment = {**ENV, "PRE_COMMIT_HOME": str(home)}
    tried = subprocess.run([sys.executable, "-m", "pre_commit", "try-repo", str(hook_repo), "ampfix-check", "--ref",
                            README_REV, "--all-files", "--color", "never"], cwd=tmp_path, env=environment,
                           capture_output=True, text=True, timeout=600)
    assert tried.returncode == 1 and "- hook id: ampfix-check\n- exit code: 1\n" in tried.stdout, tried.stdout

    code, hooks = pre_commit_run(tmp_path, home)  # the snippet's one hook: rewrites, then passes
    assert code == 1 and hooks["ampfix"].startswith("Failed\n- hook id: ampfix\n- exit code: 1\n- files were "
                                                    "modified by this hook\n")
    assert (tmp_path / "old.py").read_text() == MIGRATED
    assert pre_commit_run(tmp_path, home) == (0, {"ampfix": "Passed\n"})
