"""The checks kept between runs (ampfix/io/result_cache.py) and the code's stamp (ampfix/io/code_stamp.py): a warm
`check` replays what the engine found without running it, and runs it where the file's bytes, the options, the
project's answer to one of its questions or ampfix's code changed; a corrupt entry, a file that no longer names
AMP, a question whose answer cannot be compared are each handled; `--no-cache` keeps nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ampfix.cli.app import app
from ampfix.core.project import Calls, Export
from ampfix.engine import Finding
from ampfix.io import code_stamp, files, result_cache

from cached_project import PAST, copied_project

ELSEWHERE = ("`autocast` is imported from this module by pkg/train.py:2, whose uses move with this import: migrate "
             "them together")
HELD = [f"pkg/utils.py:1:28: AMP010 `torch.cuda.amp.autocast` import left: {ELSEWHERE}",
        f"pkg/utils.py:7:12: AMP001 `torch.cuda.amp.autocast` left: {ELSEWHERE}; suggested: "
        'torch.amp.autocast("cuda", enabled=..., dtype=..., cache_enabled=...)',
        "target torch: the newest (none declared)",  # the project declares no torch; nothing fixable
        "2 findings (0 fixable with `ampfix rewrite`, 0 more with --unsafe-fixes)."]
FIXED = ["pkg/utils.py:1:1: AMP010 [*] `from torch.cuda.amp import autocast` -> `from torch.amp import autocast`",
         "pkg/utils.py:7:12: AMP001 [*] `torch.cuda.amp.autocast(...)` -> `torch.amp.autocast(...)` with device "
         '"cuda", positional arguments named enabled',
         "target torch: the newest (none declared); the fixes need torch >= 1.10 (AMP001)",
         "2 findings (2 fixable with `ampfix rewrite`, 0 more with --unsafe-fixes)."]


root = pytest.fixture(name="root")(copied_project)


@pytest.fixture
def engine_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files the engine checked, by the first line of their source."""
    ran: list[str] = []
    real = files.check_source

    def counted(source, options, project=None):
        ran.append(source.splitlines()[0] if source else "")
        return real(source, options, project)

    monkeypatch.setattr(files, "check_source", counted)
    return ran


def check(*args: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(app, ["check", *args])
    return result.exit_code, result.stdout.splitlines()


def entries(root: Path) -> list[str]:
    folder = root.parent / "cache" / "results"
    return sorted(os.listdir(folder)) if folder.is_dir() else []


def test_a_warm_check_replays_the_findings_without_the_engine(root: Path, engine_runs: list[str]):
    assert check("pkg/utils.py") == (1, HELD)
    assert engine_runs == ["from torch.cuda.amp import autocast"]
    assert len(entries(root)) == 1
    assert check("pkg/utils.py") == (1, HELD)
    assert check("pkg/utils.py", "pkg/compat.py") == (1, HELD)  # compat.py names no AMP: no entry, no engine
    assert engine_runs == ["from torch.cuda.amp import autocast"]
    assert len(entries(root)) == 1


def test_a_changed_answer_of_the_project_runs_the_engine(root: Path, engine_runs: list[str]):
    assert check("pkg/utils.py") == (1, HELD)
    train = root / "pkg" / "train.py"
    train.write_text(train.read_text().replace("from .utils import autocast\n", "from torch.cuda.amp import autocast\n"))
    assert check("pkg/utils.py") == (1, FIXED)  # nobody takes `autocast` from utils.py any more
    assert check("--no-cache", "pkg/utils.py") == (1, FIXED)
    assert len(engine_runs) == 3
    assert check("pkg/utils.py") == (1, FIXED)  # the new entry, replayed
    assert len(engine_runs) == 3


def test_changed_bytes_or_options_run_the_engine(root: Path, engine_runs: list[str]):
    assert check("pkg/utils.py") == (1, HELD)
    utils = root / "pkg" / "utils.py"
    utils.write_text("# a first line\n" + utils.read_text())
    shifted = [line.replace("pkg/utils.py:1:", "pkg/utils.py:2:").replace("pkg/utils.py:7:", "pkg/utils.py:8:")
               for line in HELD]
    assert check("pkg/utils.py") == (1, shifted)
    assert engine_runs == ["from torch.cuda.amp import autocast", "# a first line"]
    at_1_9 = check("--target-torch", "1.9", "pkg/utils.py")
    assert at_1_9 == check("--no-cache", "--target-torch", "1.9", "pkg/utils.py")
    assert at_1_9 != (1, shifted)
    assert len(engine_runs) == 4


def test_a_file_that_no_longer_names_amp_is_checked_as_such(root: Path, engine_runs: list[str]):
    assert check("pkg/utils.py") == (1, HELD)
    (root / "pkg" / "utils.py").write_text("x = 1\n")
    assert check("pkg/utils.py") == (0, ["All checks passed!"])


def test_a_corrupt_or_foreign_entry_is_not_read(root: Path, engine_runs: list[str]):
    assert check("pkg/utils.py") == (1, HELD)
    (entry,) = entries(root)
    slot = root.parent / "cache" / "results" / entry
    kept = slot.read_bytes()
    slot.write_bytes(kept[:-1] + bytes([kept[-1] ^ 1]))  # one bit: the checksum no longer matches
    assert check("pkg/utils.py") == (1, HELD)
    slot.write_bytes(b"not an entry")
    assert check("pkg/utils.py") == (1, HELD)
    assert len(engine_runs) == 3
    assert check("pkg/utils.py") == (1, HELD)  # the entry the last run wrote again
    assert len(engine_runs) == 3


def test_no_cache_keeps_and_reads_no_entry(root: Path, engine_runs: list[str]):
    assert check("--no-cache", "pkg/utils.py") == (1, HELD)
    assert not (root.parent / "cache").exists()
    assert check("pkg/utils.py") == (1, HELD)
    assert check("--no-cache", "pkg/utils.py") == (1, HELD)
    assert len(engine_runs) == 3


def test_stdin_keeps_and_replays_nothing(root: Path, engine_runs: list[str]):
    assert check("pkg/utils.py") == (1, HELD)  # kept, and the run's cache still current in this process
    utils = (root / "pkg" / "utils.py").read_text()
    named = CliRunner().invoke(app, ["check", "-", "--stdin-filename", "pkg/utils.py"], input=utils)
    assert (named.exit_code, named.stdout.splitlines()) == (1, HELD)
    assert len(engine_runs) == 2  # the same bytes under the same name: checked, not replayed
    assert len(entries(root)) == 1


class _Project:
    """A project that answers each question with a fixed answer."""

    def importers(self, name: str) -> tuple[str, ...]:
        return ("pkg/a.py:1",)

    def exported(self, level: int, module: str | None, name: str) -> Export | None:
        return Export("torch.cuda.amp.autocast", "pkg/compat.py:1")

    def constructions(self, name: str) -> Calls | None:
        return Calls(("pkg/b.py:3",), positional=None, escape="why")

    def tree_of(self, place: str) -> None:
        return None


def test_answers_are_kept_as_plain_values_and_a_tree_is_not_kept(tmp_path: Path):
    recording = result_cache.Recording(_Project())  # type: ignore[arg-type]
    assert recording.importers("autocast") == ("pkg/a.py:1",)
    assert recording.importers("autocast") == ("pkg/a.py:1",)
    assert recording.exported(1, "compat", "torch") == Export("torch.cuda.amp.autocast", "pkg/compat.py:1")
    assert recording.constructions("Scaler") == Calls(("pkg/b.py:3",), None, "why")
    assert recording.answers == {
        ("importers", ("autocast",)): ("pkg/a.py:1",),
        ("exported", (1, "compat", "torch")): ("Export", "torch.cuda.amp.autocast", "pkg/compat.py:1"),
        ("constructions", ("Scaler",)): ("Calls", ("pkg/b.py:3",), None, "why")}
    cache = result_cache.ResultCache(tmp_path / "cache")
    path = tmp_path / "a.py"
    finding = Finding(1, 1, "AMP001", "a message", True)
    cache.keep(path, b"key", recording, (finding,), None)
    assert cache.replay(path, b"key", _Project()) == ((finding,), None)  # type: ignore[arg-type]
    assert cache.replay(path, b"another key", _Project()) is None  # type: ignore[arg-type]
    assert recording.tree_of("pkg/b.py:3") is None
    cache.keep(tmp_path / "b.py", b"key", recording, (), None)
    assert not cache.has_entry(tmp_path / "b.py")


def _package(tmp_path: Path) -> Path:
    package = tmp_path / "package"
    (package / "sub").mkdir(parents=True)
    for name, text in (("__init__.py", ""), ("sub/rules.py", "RULES = 1\n")):
        (package / name).write_text(text)
        os.utime(package / name, (PAST, PAST))
    return package


def test_the_code_hash_follows_the_code_and_facts_are_kept_with_it(tmp_path: Path):
    package, folder = _package(tmp_path), tmp_path / "cache"
    computed: list[str] = []

    def fact() -> frozenset[str]:
        computed.append("fact")
        return frozenset({"autocast"})

    first = code_stamp._Stamp(folder, package)
    assert first.facts == {}
    hashed = first.hash
    first.facts["names"] = fact()
    first.save()
    again = code_stamp._Stamp(folder, package)  # the next run: read, not computed
    assert (again.hash, again.facts) == (hashed, {"names": frozenset({"autocast"})})
    rules = package / "sub" / "rules.py"
    rules.write_text("RULES = 2\n")  # the same size
    os.utime(rules, (PAST + 5, PAST + 5))
    changed = code_stamp._Stamp(folder, package)
    assert changed.facts == {}
    assert changed.hash != hashed
    assert computed == ["fact"]


def test_a_stamp_is_not_kept_while_a_file_of_the_code_is_racy(tmp_path: Path):
    package, folder = _package(tmp_path), tmp_path / "cache"
    (package / "sub" / "rules.py").write_text("RULES = 3\n")  # its mtime: now
    stamp = code_stamp._Stamp(folder, package)
    assert len(stamp.hash) == 16
    assert not folder.exists()


def test_a_module_appearing_beside_a_script_is_seen_by_a_warm_check(root: Path, engine_runs: list[str]):
    """A script's own folder is first on its sys.path (`python tools/run.py`): a module or package appearing there
    changes what its imports name, and the kept check asks again."""
    run = root / "tools" / "run.py"
    run.parent.mkdir()
    run.write_text("from compat import torch\n\nwith torch.cuda.amp.autocast():\n    pass\n")
    os.utime(run, (PAST, PAST))
    unfollowed = check("tools/run.py")
    assert unfollowed[1][0].startswith("tools/run.py:3:6: AMP013 `torch.cuda.amp.autocast`: `torch` is imported from "
                                       "`compat` on line 1, which the check cannot follow")
    assert check("tools/run.py") == unfollowed and len(engine_runs) == 1  # replayed
    (root / "tools" / "compat.py").write_text("import torch\n")
    fixed = (1, ['tools/run.py:3:6: AMP001 [*] `torch.cuda.amp.autocast(...)` -> `torch.amp.autocast(...)` with device '
                 '"cuda"', "target torch: the newest (none declared); the fixes need torch >= 1.10 (AMP001)",
                 "1 finding (1 fixable with `ampfix rewrite`, 0 more with --unsafe-fixes)."])
    assert check("tools/run.py") == fixed and len(engine_runs) == 2
    (root / "tools" / "compat").mkdir()  # a package beside it: Python takes it before the module
    (root / "tools" / "compat" / "__init__.py").write_text("torch = None\n")
    assert check("tools/run.py") == unfollowed and len(engine_runs) == 3
