"""The project walks' byte answers kept between runs (ampfix/io/project_index.py): a warm run finds what a cold run and
`--no-cache` find, sees a changed, added or removed file, saves no racy answer, rebuilds a corrupt or foreign cache,
and runs without one where its folder cannot be written."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import ampfix
from ampfix.cli.app import app
from ampfix.io import project_index, project_modules

from cached_project import PAST, copied_project

SOURCES = ["pkg/__init__.py", "pkg/compat.py", "pkg/scaling.py", "pkg/train.py", "pkg/utils.py", "tests/test_pkg.py"]
SUMMARY = "2 findings (0 fixable with `ampfix rewrite`, 0 more with --unsafe-fixes)."


def findings(importers: str) -> list[str]:
    """What `check pkg/utils.py` prints when `importers` take `autocast` from it."""
    elsewhere = (f"`autocast` is imported from this module by {importers}, whose uses move with this import: "
                 "migrate them together")
    return [f"pkg/utils.py:1:28: AMP010 `torch.cuda.amp.autocast` import left: {elsewhere}",
            f"pkg/utils.py:7:12: AMP001 `torch.cuda.amp.autocast` left: {elsewhere}; suggested: "
            'torch.amp.autocast("cuda", enabled=..., dtype=..., cache_enabled=...)',
            "target torch: the newest (none declared)", SUMMARY]  # the project declares no torch


root = pytest.fixture(name="root")(copied_project)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files the walks read, by path below the project."""
    read: list[str] = []
    real = project_index._read

    def recording(path: str) -> bytes:
        read.append(Path(path).relative_to(Path.cwd().resolve()).as_posix())
        return real(path)

    monkeypatch.setattr(project_index, "_read", recording)
    return read


def check(*args: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(app, ["check", *args])
    return result.exit_code, result.stdout.splitlines()


def index_of(root: Path) -> project_index.Index:
    """The cache of `root` as the next run loads it."""
    return project_index.Index(root.resolve(), project_modules._rules_hash(), True)


def answers(root: Path) -> dict[str, bool]:
    index = index_of(root)
    column = index.answers[("importer",)]
    return {rel: column[i] == project_index._TRUE for i, rel in enumerate(index.rels)}


def test_a_warm_run_finds_what_a_cold_run_and_no_cache_find_reading_only_the_files_it_parses(root: Path, reads):
    assert check("--no-cache", "pkg/utils.py") == (1, findings("pkg/train.py:2"))
    assert reads == SOURCES
    assert not (root.parent / "cache").exists()
    reads.clear()
    assert check("pkg/utils.py") == (1, findings("pkg/train.py:2"))  # cold: every file read, the answers kept
    assert reads == SOURCES
    assert answers(root) == {rel: rel == "pkg/train.py" for rel in SOURCES}
    reads.clear()
    assert check("pkg/utils.py") == (1, findings("pkg/train.py:2"))  # warm: only the file it parses
    assert reads == ["pkg/train.py"]
    # The whole project, warm, as without the cache.
    assert check(".") == check("--no-cache", ".")


def test_a_changed_an_added_and_a_removed_file_are_each_seen(root: Path, reads):
    assert check("pkg/utils.py") == (1, findings("pkg/train.py:2"))
    compat = root / "pkg" / "compat.py"
    size = compat.stat().st_size
    text = "from .utils import autocast\n"
    compat.write_text(text + "#" * (size - len(text) - 1) + "\n")  # the same size, a new mtime set explicitly
    assert compat.stat().st_size == size
    os.utime(compat, (PAST + 7, PAST + 7))
    reads.clear()
    assert check("pkg/utils.py") == check("--no-cache", "pkg/utils.py") == (
        1, findings("pkg/compat.py:1, pkg/train.py:2"))
    assert reads[0:2] == ["pkg/compat.py", "pkg/train.py"]  # the changed file answered afresh

    (root / "pkg" / "extra.py").write_text("from pkg.utils import autocast\n")
    assert check("pkg/utils.py") == check("--no-cache", "pkg/utils.py") == (
        1, findings("pkg/compat.py:1, pkg/extra.py:1, pkg/train.py:2"))

    (root / "pkg" / "train.py").unlink()
    os.utime(root / "pkg" / "extra.py", (PAST, PAST))
    assert check("pkg/utils.py") == check("--no-cache", "pkg/utils.py") == (
        1, findings("pkg/compat.py:1, pkg/extra.py:1"))
    assert answers(root) == {"pkg/__init__.py": False, "pkg/compat.py": True, "pkg/extra.py": True,
                             "pkg/scaling.py": False, "pkg/utils.py": False, "tests/test_pkg.py": False}


def test_an_answer_for_a_file_changed_within_2_s_is_not_saved(root: Path, reads):
    now = time.time()
    os.utime(root / "pkg" / "scaling.py", (now, now))
    assert check("pkg/utils.py") == (1, findings("pkg/train.py:2"))
    assert sorted(answers(root)) == sorted(set(SOURCES) - {"pkg/scaling.py"})
    reads.clear()
    assert check("pkg/utils.py") == (1, findings("pkg/train.py:2"))
    assert reads == ["pkg/scaling.py", "pkg/train.py"]  # answered afresh


def test_a_corrupt_cache_or_one_of_another_version_is_ignored_and_rewritten(root: Path, reads, monkeypatch):
    assert check("pkg/utils.py") == (1, findings("pkg/train.py:2"))
    file = index_of(root).file
    assert file is not None and file.is_file()
    for garbage in (b"\x00garbage\xff" * 50, file.read_bytes()[:-3]):  # garbage bytes; a truncated file
        file.write_bytes(garbage)
        reads.clear()
        assert check("pkg/utils.py") == (1, findings("pkg/train.py:2"))
        assert reads == SOURCES
        assert answers(root) == {rel: rel == "pkg/train.py" for rel in SOURCES}

    file.unlink()
    with monkeypatch.context() as other:  # a cache another version of ampfix wrote
        other.setattr(ampfix, "__version__", "0.0.1")
        assert check("pkg/utils.py") == (1, findings("pkg/train.py:2"))
        assert answers(root) == {rel: rel == "pkg/train.py" for rel in SOURCES}  # as 0.0.1 loads it
    assert file.is_file()
    reads.clear()
    assert check("pkg/utils.py") == (1, findings("pkg/train.py:2"))
    assert reads == SOURCES
    assert index_of(root).header()[0] == ampfix.__version__
    assert answers(root) == {rel: rel == "pkg/train.py" for rel in SOURCES}


def test_no_cache_writes_nothing_and_a_cache_folder_that_cannot_be_made_is_no_error(root: Path, tmp_path: Path,
                                                                                      monkeypatch: pytest.MonkeyPatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    assert check("--no-cache", "pkg/utils.py") == (1, findings("pkg/train.py:2"))
    assert check("--no-cache", ".")[0] == 1
    diff = CliRunner().invoke(app, ["rewrite", "--no-cache", "--diff", "pkg/utils.py"])
    assert (diff.exit_code, diff.output.splitlines()[-1]) == (  # a diff: the findings on stderr
        1, "would rewrite 0 files (0 fixes); 2 findings left.")
    assert list(cache.iterdir()) == []
    # A folder below a regular file cannot be made (whoever runs: chmod does not stop root).
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("AMPFIX_CACHE_DIR", str(blocker / "cache"))
    for _ in range(2):
        assert check("pkg/utils.py") == (1, findings("pkg/train.py:2"))
    assert blocker.read_text() == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "cache", "project"]
    assert list(cache.iterdir()) == []


def test_the_cache_folder_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("AMPFIX_CACHE_DIR", str(tmp_path / "given"))
    assert project_index.cache_folder() == tmp_path / "given"
    monkeypatch.delenv("AMPFIX_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert project_index.cache_folder() == tmp_path / "xdg" / "ampfix"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")  # not absolute: ignored, as the XDG spec says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert project_index.cache_folder() == tmp_path / "home" / ".cache" / "ampfix"


def test_the_walk_goes_as_os_walk_with_sorted_names_and_the_same_folders_skipped(tmp_path: Path):
    for name in ["b.py", "a.py", "notes.txt", "z/y.py", "z/a/x.py", "m/n.py", ".hidden/h.py", "venv/v.py",
                 "__pycache__/c.py", "build/b.py", "pkg.py/inside.py"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    (tmp_path / "linked").symlink_to(tmp_path / "z", target_is_directory=True)  # not walked into
    (tmp_path / "link.py").symlink_to(tmp_path / "a.py")  # read through
    (tmp_path / "broken.py").symlink_to(tmp_path / "missing.py")  # no file: skipped
    os.mkfifo(tmp_path / "fifo.py")  # not a regular file: skipped (reading it would block)
    walked = [Path(path).relative_to(tmp_path).as_posix() for path, _ in project_index.stat_walk(str(tmp_path))]
    assert walked == ["a.py", "b.py", "link.py", "m/n.py", "pkg.py/inside.py", "z/y.py", "z/a/x.py"]
