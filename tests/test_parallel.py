"""The process pool: the same results in the same order as one process, and a bounded window."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from ampfix.io import files
from ampfix.core.options import Options

DEPRECATED = "import torch\nwith torch.cuda.amp.autocast({arg}):\n    x = {i}\n"
CLEAN_CANDIDATE = "import torch\n# amp is on by default\nwith torch.amp.autocast('cuda'):\n    x = {i}\n"
PLAIN = "import torch\nx = torch.zeros({i})\n"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """Well over MIN_FILES_FOR_POOL candidates (and over one window), in nested folders."""
    for i in range(90):
        folder = tmp_path / f"pkg{i % 7}" / f"sub{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        kind = i % 5
        if kind in (0, 1):
            text = DEPRECATED.format(arg="True" if kind else "", i=i)
        elif kind == 2:
            text = CLEAN_CANDIDATE.format(i=i)
        elif kind == 3:
            text = PLAIN.format(i=i)
        else:
            text = f"import torch\nwith torch.cuda.amp.autocast(\n    x = {i}\n"  # a syntax error
        (folder / f"m{i:03d}.py").write_text(text)
    (tmp_path / "pkg0" / "latin.py").write_bytes(b"x = 'amp \xff'\n")  # not valid UTF-8: an error result
    return tmp_path


@pytest.mark.parametrize("mode", ["check", "diff"])
def test_pool_gives_the_results_of_one_process_in_the_same_order(tree: Path, mode: str, monkeypatch):
    sequential = list(files.process_paths([tree], Options(), mode, jobs=1))
    pooled_calls = []
    real_pooled = files._pooled

    def spy(*args, **kwargs):
        pooled_calls.append(args[2])
        return real_pooled(*args, **kwargs)

    monkeypatch.setattr(files, "_pooled", spy)
    parallel = list(files.process_paths([tree], Options(), mode, jobs=2))
    assert pooled_calls == [2], "the pool was not used"
    assert len(sequential) > files.MIN_FILES_FOR_POOL + files.IN_FLIGHT * 2 * files.CHUNK_SIZE
    assert parallel == sequential
    assert [r.path for r in sequential] == sorted(r.path for r in sequential)  # discovery order
    assert any(r.findings for r in sequential) and any(r.error for r in sequential)


def test_few_candidates_stay_in_one_process(tmp_path: Path, monkeypatch):
    for i in range(files.MIN_FILES_FOR_POOL - 1):
        (tmp_path / f"m{i}.py").write_text(DEPRECATED.format(arg="", i=i))
    monkeypatch.setattr(files, "_pooled", lambda *a: pytest.fail("pool started for too few candidates"))
    assert len(list(files.process_paths([tmp_path], Options(), "check", jobs=2))) == files.MIN_FILES_FOR_POOL - 1


def test_the_pool_reads_ahead_only_a_bounded_window(tree: Path):
    candidates = list(files._candidates([tree], False))
    pulled = 0

    def counting():
        nonlocal pulled
        for item in itertools.cycle(candidates):  # endless: only a bounded prefix may be consumed
            pulled += 1
            yield item

    results = files._pooled(counting(), (Options(), "check"), 2)
    first = [next(results) for _ in range(len(candidates))]
    window = (files.IN_FLIGHT * 2 + 1) * files.CHUNK_SIZE
    assert pulled <= len(candidates) + window
    results.close()  # stops the pool without waiting for the endless input
    assert [r.path for r in first] == [str(c.path) for c in candidates]


def test_without_a_working_pool_the_files_are_processed_in_this_process(tree: Path, monkeypatch):
    import concurrent.futures

    def broken(*args, **kwargs):
        raise OSError("no /dev/shm")

    sequential = list(files.process_paths([tree], Options(), "check", jobs=1))
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", broken)
    assert list(files.process_paths([tree], Options(), "check", jobs=2)) == sequential


def test_the_collector_is_back_on_after_each_file(tree: Path):
    import gc

    seen = []
    for _result in files.process_paths([tree], Options(), "check", jobs=1):
        seen.append(gc.isenabled())
    assert seen and all(seen) and gc.isenabled()


def test_one_process_reads_each_file_once(tree: Path, monkeypatch):
    import os

    opened: list[str] = []
    real_open = os.open

    def counting_open(path, flags, *args, **kwargs):
        if str(path).startswith(str(tree)):
            opened.append(str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting_open)
    results = list(files.process_paths([tree], Options(), "check", jobs=1))
    assert results and len(opened) == len(set(opened)) == sum(1 for _ in tree.rglob("*.py"))
