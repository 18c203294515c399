"""The target torch read from the project holding each file, driven through the CLI: which target each
project gets, what the summary says, what the rewrite writes (docs/rules.md, "The target torch")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ampfix.cli.app import app

# One use per floor that matters: autocast (torch 1.10), GradScaler (2.3), custom_fwd (2.4).
LIBRARY = (
    "import torch\n"
    "scaler = torch.cuda.amp.GradScaler()\n"
    "with torch.cuda.amp.autocast():\n"
    "    pass\n"
    "@torch.cuda.amp.custom_fwd\n"
    "def forward(ctx, x):\n"
    "    return x\n"
)
AUTOCAST_ONLY = LIBRARY.replace("with torch.cuda.amp.autocast():", 'with torch.amp.autocast("cuda"):')
UP_TO_2_3 = AUTOCAST_ONLY.replace("torch.cuda.amp.GradScaler()", 'torch.amp.GradScaler("cuda")')
EVERYTHING = UP_TO_2_3.replace("@torch.cuda.amp.custom_fwd", '@torch.amp.custom_fwd(device_type="cuda")')

SUMMARY = "rewrote {files} ({fixes}); {left} left."
# A project that declares no torch: the newest, said with what a GradScaler's fix (2.3) or an autocast's (1.10) needs.
NEEDS_SCALER = "target torch: the newest (none declared); the output needs torch >= 2.3 (AMP002)"
NEEDS_AUTOCAST = "target torch: the newest (none declared); the output needs torch >= 1.10 (AMP001)"


def run(root: Path, monkeypatch: pytest.MonkeyPatch, *args: str):
    monkeypatch.chdir(root)
    return CliRunner().invoke(app, list(args))


def project(root: Path, files: dict[str, str]) -> Path:
    (root / ".git").mkdir(parents=True)  # the search for metadata stops at a repository root
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def held(path: str, line: int, col: int, code: str, name: str, need: str, target: str, source: str,
         suggestion: str) -> str:
    return (f"{path}:{line}:{col}: {code} `{name}` left: needs torch >= {need}; the target is torch {target}; "
            f"raise the torch requirement in {source} or pass --target-torch; suggested: {suggestion}")


def held_scaler(path: str, target: str, source: str) -> str:
    return held(path, 2, 10, "AMP002", "torch.cuda.amp.GradScaler", "2.3", target, source,
                'torch.amp.GradScaler("cuda", ...)')


def held_custom_fwd(path: str, target: str, source: str) -> str:
    return held(path, 5, 2, "AMP003", "torch.cuda.amp.custom_fwd", "2.4", target, source,
                'torch.amp.custom_fwd(..., device_type="cuda")')


def test_pyproject_dependencies_floor_holds_back_what_torch_2_0_lacks(tmp_path: Path, monkeypatch):
    root = project(tmp_path, {"pyproject.toml": '[project]\nname = "lib"\ndependencies = ["torch>=2.0,<3"]\n',
                              "lib/model.py": LIBRARY})
    result = run(root, monkeypatch, "rewrite", "lib")
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        held_scaler("lib/model.py", "2.0", "pyproject.toml"),
        "lib/model.py:3:6: AMP001 fixed: `torch.cuda.amp.autocast(...)` -> `torch.amp.autocast(...)` with device "
        '"cuda"',
        held_custom_fwd("lib/model.py", "2.0", "pyproject.toml"),
        "target torch 2.0, from pyproject.toml",
        SUMMARY.format(files="1 file", fixes="1 fix", left="2 findings"),
    ]
    assert (root / "lib/model.py").read_text() == AUTOCAST_ONLY


def test_requirements_txt_pin(tmp_path: Path, monkeypatch):
    root = project(tmp_path, {"requirements.txt": "numpy\ntorch==2.3.1  # cu121\n", "train.py": LIBRARY})
    result = run(root, monkeypatch, "rewrite", ".")
    assert result.exit_code == 1
    assert result.stdout.splitlines()[-3:] == [
        held_custom_fwd("train.py", "2.3", "requirements.txt"),
        "target torch 2.3, from requirements.txt",
        SUMMARY.format(files="1 file", fixes="2 fixes", left="1 finding"),
    ]
    assert (root / "train.py").read_text() == UP_TO_2_3


def test_setup_py_literal_install_requires(tmp_path: Path, monkeypatch):
    root = project(tmp_path, {"setup.py": "from setuptools import setup\nsetup(install_requires=['torch>=2.4'])\n",
                              "pkg/m.py": LIBRARY})
    result = run(root, monkeypatch, "rewrite", "pkg")
    assert result.exit_code == 1  # changed
    assert result.stdout.splitlines()[-2:] == ["target torch 2.4, from setup.py",
                                               SUMMARY.format(files="1 file", fixes="3 fixes", left="0 findings")]
    assert (root / "pkg/m.py").read_text() == EVERYTHING


def test_setup_cfg_install_requires(tmp_path: Path, monkeypatch):
    root = project(tmp_path, {"setup.cfg": "[options]\ninstall_requires =\n    torch~=2.2\n", "m.py": LIBRARY})
    result = run(root, monkeypatch, "check", "m.py")
    assert result.exit_code == 1
    assert result.stdout.splitlines()[0] == held_scaler("m.py", "2.2", "setup.cfg")
    assert result.stdout.splitlines()[-2:] == [
        "target torch 2.2, from setup.cfg",
        "3 findings (1 fixable with `ampfix rewrite`, 0 more with --unsafe-fixes).",
    ]


def test_a_monorepo_gets_a_target_per_project_and_names_each_once(tmp_path: Path, monkeypatch):
    root = project(tmp_path, {
        "old/pyproject.toml": '[project]\nname = "old"\ndependencies = ["torch>=2.0"]\n',
        "old/a.py": LIBRARY, "old/sub/b.py": LIBRARY,
        "new/pyproject.toml": '[project]\nname = "new"\ndependencies = ["torch>=2.4"]\n',
        "new/c.py": LIBRARY,
    })
    result = run(root, monkeypatch, "rewrite", ".")
    assert result.exit_code == 1
    assert result.stdout.splitlines()[-3:] == [
        "target torch 2.4, from new/pyproject.toml",
        "target torch 2.0, from old/pyproject.toml",
        SUMMARY.format(files="3 files", fixes="5 fixes", left="4 findings"),
    ]
    assert (root / "new/c.py").read_text() == EVERYTHING
    assert (root / "old/a.py").read_text() == (root / "old/sub/b.py").read_text() == AUTOCAST_ONLY


def test_no_metadata_is_the_newest_torch_said_with_what_the_output_now_needs(tmp_path: Path, monkeypatch):
    root = project(tmp_path, {"m.py": LIBRARY})
    result = run(root, monkeypatch, "rewrite", "m.py")
    assert result.stdout.splitlines() == [
        "m.py:2:10: AMP002 fixed: `torch.cuda.amp.GradScaler(...)` -> `torch.amp.GradScaler(...)` with device \"cuda\"",
        "m.py:3:6: AMP001 fixed: `torch.cuda.amp.autocast(...)` -> `torch.amp.autocast(...)` with device \"cuda\"",
        "m.py:5:2: AMP003 fixed: `@torch.cuda.amp.custom_fwd` -> `@torch.amp.custom_fwd(device_type=\"cuda\")`",
        # custom_fwd's twin came with torch 2.4: a project that runs older torch must declare it.
        "target torch: the newest (none declared); the output needs torch >= 2.4 (AMP003)",
        SUMMARY.format(files="1 file", fixes="3 fixes", left="0 findings"),
    ]
    assert (root / "m.py").read_text() == EVERYTHING


def test_an_unparsable_requirement_is_said_with_its_file_and_the_target_is_the_newest(tmp_path: Path, monkeypatch):
    root = project(tmp_path, {"requirements.txt": "torch >= two\n", "m.py": LIBRARY})
    result = run(root, monkeypatch, "rewrite", "m.py")
    assert result.exit_code == 1
    # pip cannot install from that requirement: it promises no torch, so nothing is held back; the summary says why.
    assert result.stdout.splitlines()[-2] == (
        "target torch: the newest; requirements.txt: cannot parse the requirement 'torch >= two' "
        "(Expected semicolon (after name with no version specifier) or end); the output needs torch >= 2.4 (AMP003)")
    assert (root / "m.py").read_text() == EVERYTHING


def test_a_requirement_without_a_lower_bound_is_said(tmp_path: Path, monkeypatch):
    root = project(tmp_path, {"requirements.txt": "torch<3\n", "m.py": LIBRARY})
    result = run(root, monkeypatch, "check", "m.py")
    assert result.stdout.splitlines()[-2] == (
        "target torch: the newest; requirements.txt: the torch requirement has no lower bound; the fixes need torch "
        ">= 2.4 (AMP003)")


def test_the_flag_then_the_key_win_over_the_metadata(tmp_path: Path, monkeypatch):
    root = project(tmp_path, {"pyproject.toml": '[project]\nname = "lib"\ndependencies = ["torch>=2.0"]\n',
                              "m.py": LIBRARY})
    flagged = run(root, monkeypatch, "check", "--target-torch", "2.3", "m.py")
    assert flagged.stdout.splitlines()[-2] == "target torch 2.3, from --target-torch"
    # Held back by the flag: the message stays as it was (no metadata to raise).
    assert flagged.stdout.splitlines()[-3] == (
        "m.py:5:2: AMP003 `torch.cuda.amp.custom_fwd` left: needs torch >= 2.4; the target is torch 2.3; "
        'suggested: torch.amp.custom_fwd(..., device_type="cuda")')
    (root / "pyproject.toml").write_text('[project]\nname = "lib"\ndependencies = ["torch>=2.0"]\n'
                                         '[tool.ampfix]\ntarget-torch = "2.4"\n')
    keyed = run(root, monkeypatch, "check", "m.py")
    assert keyed.stdout.splitlines()[-2] == "target torch 2.4, from pyproject.toml [tool.ampfix]"


def test_quiet_says_no_target_and_json_carries_it_per_finding(tmp_path: Path, monkeypatch):
    root = project(tmp_path, {"pyproject.toml": '[project]\nname = "lib"\ndependencies = ["torch>=2.0"]\n',
                              "m.py": LIBRARY})
    quiet = run(root, monkeypatch, "check", "--quiet", "m.py")
    assert not any(line.startswith("target torch") for line in quiet.stdout.splitlines())
    rows = json.loads(run(root, monkeypatch, "check", "--output-format", "json", "m.py").stdout)
    assert {(row["target_torch"], row["target_source"]) for row in rows} == {("2.0", "pyproject.toml")}
    sarif = json.loads(run(root, monkeypatch, "check", "--output-format", "sarif", "m.py").stdout)
    assert sarif["runs"][0]["properties"]["targetTorch"] == [
        {"version": "2.0", "source": "pyproject.toml", "problem": None,
         "text": "target torch 2.0, from pyproject.toml"}]


def test_stdin_takes_the_target_of_the_stdin_filename(tmp_path: Path, monkeypatch):
    root = project(tmp_path, {"lib/pyproject.toml": '[project]\nname = "lib"\ndependencies = ["torch>=2.3"]\n'})
    monkeypatch.chdir(root)
    result = CliRunner().invoke(app, ["rewrite", "--stdin-filename", "lib/m.py", "-"], input=LIBRARY)
    assert result.stdout == UP_TO_2_3


def test_rules_shows_what_is_held_back_at_the_folders_target(tmp_path: Path, monkeypatch):
    root = project(tmp_path / "lib", {"pyproject.toml": '[project]\nname = "lib"\ndependencies = ["torch>=2.3"]\n'})
    lines = run(root, monkeypatch, "rules").stdout.splitlines()
    assert lines[:3] == [
        "target torch 2.3, from pyproject.toml",
        "held back at torch 2.3 (reported, not rewritten): AMP003, AMP004, AMP005, AMP007, AMP008, AMP009",
        "",
    ]
    assert lines[3].split() == ["code", "old", "new", "torch", "fix"]
    flagged = run(root, monkeypatch, "rules", "--target-torch", "2.4").stdout.splitlines()
    assert flagged[:2] == ["target torch 2.4, from --target-torch",
                           "held back at torch 2.4 (reported, not rewritten): none"]
    rows = json.loads(run(root, monkeypatch, "rules", "--output-format", "json").stdout)
    assert {row["code"] for row in rows if row["held_back"]} == {"AMP003", "AMP004", "AMP005", "AMP007", "AMP008",
                                                                    "AMP009"}
    bare = project(tmp_path / "bare", {})
    assert run(bare, monkeypatch, "rules").stdout.startswith("code ")  # no metadata: the newest, unsaid


# A library at torch>=2.0, rewritten with no flag: fixtures/projects/library_torch20 (its expected output beside
# it). The same proof `--target-torch` has: the output runs under the torch oracle with the original's AMP objects,
# and every torch.amp name it uses is one whose rule minimum is at or below the declared floor.
LIBRARY_20 = Path(__file__).resolve().parent.parent / "fixtures" / "projects" / "library_torch20"
RECORDER = Path(__file__).resolve().parent / "amp_recorder.py"


def _new_api_names(source: str) -> set[str]:
    """The dotted torch.amp names `source` uses: attribute chains (each prefix below torch.amp) and from-imports."""
    import ast

    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("torch.amp"):
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Attribute):
            parts, current = [], node
            while isinstance(current, ast.Attribute):
                parts.append(current.attr)
                current = current.value
            if isinstance(current, ast.Name):
                dotted = ".".join([current.id, *reversed(parts)])
                if dotted.startswith("torch.amp."):
                    names.add(dotted)
    return names


def _minimums() -> dict[str, tuple[int, int]]:
    """Each torch.amp name the rules write, with the oldest torch it exists in (the rule's minimum)."""
    from ampfix.families import ALL_RULES

    return {target.new: rule.min_torch for rule in ALL_RULES if rule.min_torch is not None
            for target in rule.symbols.values() if target is not None}


def test_a_library_at_torch_2_0_rewritten_with_no_flag_runs_on_torch_2_0s_api(tmp_path: Path, monkeypatch):
    import shutil
    import subprocess
    import sys

    root = tmp_path / "library_torch20"
    shutil.copytree(LIBRARY_20, root)
    (root / ".git").mkdir()
    result = run(root, monkeypatch, "rewrite", ".")
    assert result.exit_code == 1
    assert result.stdout.splitlines()[-2:] == ["target torch 2.0, from pyproject.toml",
                                               SUMMARY.format(files="1 file", fixes="3 fixes", left="5 findings")]
    written = (root / "lib" / "amp_utils.py").read_text()
    assert written == (LIBRARY_20.parent / "library_torch20_amp_utils.expected.py").read_text()

    used = _new_api_names(written)
    minimums = _minimums()
    assert used == {"torch.amp.autocast"}  # the check below must have something to check
    for name in used:  # a name no rule writes is a KeyError: unknown to the table, so unproven
        assert minimums[name] <= (2, 0), f"{name} needs torch {minimums[name]}"

    out_json = tmp_path / "records.json"
    original = LIBRARY_20 / "lib" / "amp_utils.py"
    for script in (original, root / "lib" / "amp_utils.py"):  # one process each: they must not see each other
        subprocess.run([sys.executable, str(RECORDER), str(out_json.with_suffix(f".{script == original}.json")),
                        str(script)], check=True, timeout=300, capture_output=True)
    before = json.loads(out_json.with_suffix(".True.json").read_text())[str(original)]
    after = json.loads(out_json.with_suffix(".False.json").read_text())[str(root / "lib" / "amp_utils.py")]
    assert before["error"] is None and after["error"] is None, (before["error"], after["error"])
    assert before["records"] and after["records"] == before["records"]


def test_a_use_held_back_with_its_newer_import_says_how_to_raise_the_floor_too(tmp_path: Path, monkeypatch):
    """allennlp's shape: `amp.autocast` is AMP001 (torch 1.10), but its module import is AMP010 (2.3)."""
    root = project(tmp_path, {"requirements.txt": "torch>=1.10\n",
                              "m.py": "from torch.cuda import amp\nwith amp.autocast():\n    pass\n"})
    result = run(root, monkeypatch, "check", "m.py")
    hint = "raise the torch requirement in requirements.txt or pass --target-torch"
    assert result.stdout.splitlines() == [
        f"m.py:1:24: AMP010 `torch.cuda.amp` import left: needs torch >= 2.3; the target is torch 1.10; {hint}",
        f"m.py:2:6: AMP001 `torch.cuda.amp.autocast` left: needs torch >= 2.3; the target is torch 1.10; {hint}; "
        'suggested: torch.amp.autocast("cuda", enabled=..., dtype=..., cache_enabled=...)',
        "target torch 1.10, from requirements.txt",
        "2 findings (0 fixable with `ampfix rewrite`, 0 more with --unsafe-fixes).",
    ]


# A library at torch>=1.3 whose own tests patch deprecated paths by string (`mock.patch("torch.cuda.amp.autocast")`,
# `mock.patch.dict(sys.modules, {"torch.cuda.amp": None})`): fixtures/projects/patched_by_its_tests. A string does
# what the code it patches does: held back at the floor with that code, rewritten with it at --target-torch 2.13
# (the expected output beside it); the project's tests pass before and after, in both.
PATCHED = Path(__file__).resolve().parent.parent / "fixtures" / "projects" / "patched_by_its_tests"
PROJECT_TESTS = Path(__file__).resolve().parent / "project_tests.py"
FLOOR_HINT = "raise the torch requirement in setup.py or pass --target-torch"


def test_strings_a_librarys_tests_patch_move_with_the_code_they_patch(tmp_path: Path, monkeypatch):
    import shutil
    import subprocess
    import sys

    copies = {}
    for name, flags in (("floor", ()), ("newest", ("--target-torch", "2.13"))):
        root = copies[name] = tmp_path / name
        shutil.copytree(PATCHED, root)
        (root / ".git").mkdir()
        result = run(root, monkeypatch, "rewrite", "--unsafe-fixes", *flags, ".")
        assert result.exit_code == 1, result.stdout  # findings left, or files changed
        copies[name + " output"] = result.stdout.splitlines()
    assert copies["floor output"][:2] == [
        "tests/test_engine.py:10:21: AMP001 string names the deprecated `torch.cuda.amp.autocast`; left: "
        f'needs torch >= 1.10; the target is torch 1.3; {FLOOR_HINT}; suggested: "torch.amp.autocast"',
        "tests/test_engine.py:18:40: AMP010 string names the deprecated `torch.cuda.amp`; left: "
        f'needs torch >= 2.3; the target is torch 1.3; {FLOOR_HINT}; suggested: "torch.amp"',
    ]
    assert copies["floor output"][-2:] == ["target torch 1.3, from setup.py",
                                           SUMMARY.format(files="0 files", fixes="0 fixes", left="4 findings")]
    assert copies["newest output"][-1] == SUMMARY.format(files="2 files", fixes="4 fixes", left="0 findings")
    for path in sorted(p.relative_to(PATCHED) for p in PATCHED.rglob("*.py")):
        expected = PATCHED.parent / "patched_by_its_tests.expected_2_13" / path
        assert (copies["floor"] / path).read_bytes() == (PATCHED / path).read_bytes(), path
        assert (copies["newest"] / path).read_bytes() == (expected if expected.exists() else PATCHED / path).read_bytes()

    ran = subprocess.run([sys.executable, str(PROJECT_TESTS), str(PATCHED), str(copies["floor"]),
                          str(copies["newest"])], check=True, timeout=300, capture_output=True, text=True)
    outcomes = json.loads(ran.stdout)
    assert [sorted(tests) for tests in outcomes.values()] == [[
        "test_engine.py::test_forward_enters_autocast", "test_engine.py::test_without_the_amp_module_there_is_no_amp"]
    ] * 3
    failed = {root: {test: error for test, error in tests.items() if error} for root, tests in outcomes.items()}
    assert failed == {str(root): {} for root in (PATCHED, copies["floor"], copies["newest"])}


# Names a project module binds and others import (fixtures/projects/reexported_names): `from .compat import torch`
# and `from pkg.compat import torch as th` are torch itself, read through the project's module, so their chains are
# rewritten here; `from .utils import autocast` is the deprecated class, whose uses move with utils.py's import:
# reported at the import, not rewritten; and utils.py's import and uses stay, since train.py takes the name from it.
# The project's tests pass after.
REEXPORTED = Path(__file__).resolve().parent.parent / "fixtures" / "projects" / "reexported_names"


def test_names_a_project_module_binds_are_resolved_through_it(tmp_path: Path, monkeypatch):
    import shutil
    import subprocess
    import sys

    root = tmp_path / "reexported_names"
    shutil.copytree(REEXPORTED, root)
    (root / ".git").mkdir()
    result = run(root, monkeypatch, "rewrite", ".")
    assert result.stdout.splitlines()[:3] == [
        'pkg/scaling.py:5:12: AMP002 fixed: `torch.cuda.amp.GradScaler(...)` -> `torch.amp.GradScaler(...)` with '
        'device "cuda"',
        "pkg/train.py:2:1: AMP001 left: `autocast` is the deprecated `torch.cuda.amp.autocast`: imported from "
        "`.utils`, which binds it to `torch.cuda.amp.autocast` (pkg/utils.py:1); its uses here move with that import, "
        "so migrate the two modules together; suggested: torch.amp.autocast",
        'pkg/train.py:6:10: AMP001 fixed: `torch.cuda.amp.autocast(...)` -> `torch.amp.autocast(...)` with device '
        '"cuda"',
    ]
    elsewhere = ("`autocast` is imported from this module by pkg/train.py:2, whose uses move with this import: "
                 "migrate them together")
    assert result.stdout.splitlines()[3:] == [
        f"pkg/utils.py:1:28: AMP010 `torch.cuda.amp.autocast` import left: {elsewhere}",
        f"pkg/utils.py:7:12: AMP001 `torch.cuda.amp.autocast` left: {elsewhere}; suggested: "
        'torch.amp.autocast("cuda", enabled=..., dtype=..., cache_enabled=...)',
        NEEDS_SCALER,
        SUMMARY.format(files="2 files", fixes="2 fixes", left="3 findings"),
    ]
    # What a pre-commit hook given utils.py alone sees: the project's other modules are read for it.
    alone = run(root, monkeypatch, "check", "pkg/utils.py").stdout.splitlines()
    assert alone[0] == f"pkg/utils.py:1:28: AMP010 `torch.cuda.amp.autocast` import left: {elsewhere}"
    for path in sorted(p.relative_to(REEXPORTED) for p in REEXPORTED.rglob("*.py")):
        expected = REEXPORTED.parent / "reexported_names.expected" / path
        assert (root / path).read_bytes() == (expected if expected.exists() else REEXPORTED / path).read_bytes(), path

    ran = subprocess.run([sys.executable, str(PROJECT_TESTS), str(REEXPORTED), str(root)], check=True, timeout=300,
                         capture_output=True, text=True)
    outcomes = json.loads(ran.stdout)
    assert [len(tests) for tests in outcomes.values()] == [3, 3]
    assert {root: [t for t, error in tests.items() if error] for root, tests in outcomes.items()} == {
        str(REEXPORTED): [], str(root): []}


def test_a_module_outside_the_project_or_bound_in_a_branch_explains_nothing(tmp_path: Path, monkeypatch):
    root = project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/compat.py": "try:\n    import torch\nexcept ImportError:\n    torch = None\n",
        "pkg/m.py": "from .compat import torch\nfrom .missing import torch as t2\nwith torch.cuda.amp.autocast():\n"
                    "    pass\nwith t2.cuda.amp.autocast():\n    pass\n",
    })
    lines = run(root, monkeypatch, "check", ".").stdout.splitlines()
    assert [line.split()[1] for line in lines[:2]] == ["AMP013", "AMP013"]
    assert "`torch` is imported from `.compat` on line 1, which the check cannot follow" in lines[0]
    assert "`t2` is imported from `.missing` on line 2, which the check cannot follow" in lines[1]


def test_stdin_reads_the_project_of_its_file_name_and_none_without_one(tmp_path: Path, monkeypatch):
    root = project(tmp_path, {"pkg/__init__.py": "", "pkg/compat.py": "import torch\n"})
    monkeypatch.chdir(root)
    source = "from .compat import torch\nwith torch.cuda.amp.autocast():\n    pass\n"
    named = CliRunner().invoke(app, ["check", "--stdin-filename", "pkg/x.py", "-"], input=source)
    assert named.stdout.splitlines()[0] == (
        'pkg/x.py:2:6: AMP001 [*] `torch.cuda.amp.autocast(...)` -> `torch.amp.autocast(...)` with device "cuda"')
    unnamed = CliRunner().invoke(app, ["check", "-"], input=source)
    assert unnamed.stdout.splitlines()[0].startswith("-:2:6: AMP013 ")


# A GradScaler subclass constructed in the project's other modules (fixtures/projects/subclass_keywords,
# subclass_positional): rebased where every construction passes keywords only or nothing, left where one passes an
# argument by position (named, with its file and line; --unsafe-fixes leaves it too). The projects' tests pass after.
PROJECTS = Path(__file__).resolve().parent.parent / "fixtures" / "projects"
REBASED = ("pkg/scaling.py:4:22: AMP002 fixed: class derives from `torch.cuda.amp.GradScaler` -> `torch.amp.GradScaler`: "
           "every construction of `CountingScaler` in the project passes keywords only or nothing (line 13, "
           "pkg/evaluate.py:6, pkg/evaluate.py:10 and 2 more), so none binds `device`")
NOT_REBASED = ("pkg/scaling.py:4:22: AMP002 left: class derives from `torch.cuda.amp.GradScaler`: `CountingScaler(...)` "
               "at pkg/train.py:8 passes an argument by position, which would bind to `device` of "
               '`torch.amp.GradScaler`; suggested: torch.amp.GradScaler("cuda", ...)')


def test_a_scaler_subclass_is_rebased_where_every_construction_in_the_project_passes_keywords(tmp_path: Path,
                                                                                            monkeypatch):
    import subprocess
    import sys

    outputs = {name: _rewritten_copy(tmp_path, monkeypatch, name, *flags)
               for name, flags in (("subclass_keywords", ()), ("subclass_positional", ("--unsafe-fixes",)))}
    assert outputs == {
        "subclass_keywords": [REBASED, NEEDS_SCALER, SUMMARY.format(files="1 file", fixes="1 fix", left="0 findings")],
        "subclass_positional": [
            NOT_REBASED,
            'pkg/train.py:7:10: AMP001 fixed: `torch.cuda.amp.autocast(...)` -> `torch.amp.autocast(...)` with device '
            '"cuda"',
            NEEDS_AUTOCAST,
            SUMMARY.format(files="1 file", fixes="1 fix", left="1 finding"),
        ],
    }
    copies = [str(p) for name in outputs for p in (PROJECTS / name, tmp_path / name)]
    ran = subprocess.run([sys.executable, str(PROJECT_TESTS), *copies], check=True, timeout=300, capture_output=True,
                         text=True)
    outcomes = json.loads(ran.stdout)
    assert [len(tests) for tests in outcomes.values()] == [2, 2, 1, 1]
    assert {root: [t for t, error in tests.items() if error] for root, tests in outcomes.items()} == {
        root: [] for root in copies}


SUBCLASS = "import torch\n\n\nclass S(torch.cuda.amp.GradScaler):\n    pass\n"
DERIVES = "class derives from `torch.cuda.amp.GradScaler`: "
DEVICE = f"[unsafe] {DERIVES}a positional construction of the subclass would bind to `device` of `torch.amp.GradScaler`"
UNSAFE = " (an unsafe fix exists: --unsafe-fixes); suggested: torch.amp.GradScaler(\"cuda\", ...)"


@pytest.mark.parametrize(("files", "said"), [
    ({"pkg/s.py": SUBCLASS + "s = S(2.0)\n"},
     f'{DERIVES}`S(...)` on line 6 passes an argument by position, which would bind to `device` of `torch.amp.GradScaler`; '
     'suggested: torch.amp.GradScaler("cuda", ...)'),
    ({"pkg/s.py": SUBCLASS + "s = S()\n", "pkg/t.py": "from .s import S as Scaler\n\nt = Scaler(2.0)\n"},
     f'{DERIVES}`S(...)` at pkg/t.py:3 passes an argument by position, which would bind to `device` of '
     '`torch.amp.GradScaler`; suggested: torch.amp.GradScaler("cuda", ...)'),
    ({"pkg/s.py": SUBCLASS + "\n\ndef scaler_class():\n    return S\n",
      "pkg/t.py": "from .s import scaler_class\n\nt = scaler_class()(2.0)\n"},
     f'{DERIVES}`S(...)` at pkg/t.py:3 passes an argument by position, which would bind to `device` of '
     '`torch.amp.GradScaler`; suggested: torch.amp.GradScaler("cuda", ...)'),
    ({"pkg/s.py": SUBCLASS},
     f"{DEVICE}; no construction of `S` is seen in the project{UNSAFE}"),
    ({"setup.py": "", "pkg/__init__.py": "", "pkg/s.py": SUBCLASS + "s = S(enabled=False)\n"},
     f"{DEVICE}; `S` is a public name of a module the project ships (setup.py): code outside the project may "
     f"construct it{UNSAFE}"),
    ({"pkg/s.py": SUBCLASS + "__all__ = [\"S\"]\ns = S(enabled=False)\n"},
     f"{DEVICE}; a string on line 6 names `S` (`__all__`, `getattr`), which is not followed{UNSAFE}"),
    ({"pkg/s.py": SUBCLASS.replace("pass", "@classmethod\n    def make(cls, scale):\n        return cls(scale)")},
     f"{DEVICE}; it is constructed through `cls` on line 7{UNSAFE}"),
    ({"pkg/s.py": SUBCLASS + "s = S()\n", "pkg/t.py": "from .s import S\n\n\nclass T(S):\n    pass\n"},
     f"{DEVICE}; in pkg/t.py, a class on line 4 derives from it{UNSAFE}"),
    ({"pkg/s.py": SUBCLASS + "s = S()\n", "pkg/t.py": "from .s import *\n\nt = S(2.0)\n"},
     f"{DEVICE}; in pkg/t.py, `S` on line 3 may be the star import's on line 1, which is not followed{UNSAFE}"),
    ({"pkg/s.py": SUBCLASS + "s = S()\n", "pkg/t.py": "from . import s\n\nREGISTRY = {\"amp\": s.S}\n"},
     f"{DEVICE}; in pkg/t.py, it is put in a dict on line 3{UNSAFE}"),
])
def test_a_scaler_subclass_is_left_where_a_construction_passes_a_position_or_the_class_escapes(
        tmp_path: Path, monkeypatch, files: dict[str, str], said: str):
    root = project(tmp_path, files)
    lines = run(root, monkeypatch, "check", "pkg/s.py").stdout.splitlines()
    assert lines[0] == f"pkg/s.py:4:9: AMP002 {said}"


def test_a_private_scaler_subclass_of_a_shipped_package_is_rebased_and_a_cpu_one_never(tmp_path: Path, monkeypatch):
    private = SUBCLASS.replace("class S(", "class _S(") + "s = _S(enabled=False)\n"
    cpu = SUBCLASS.replace("cuda", "cpu") + "s = S(enabled=False)\n"
    root = project(tmp_path, {"setup.py": "", "pkg/__init__.py": "", "pkg/s.py": private, "pkg/c.py": cpu})
    lines = run(root, monkeypatch, "check", "pkg/s.py", "pkg/c.py").stdout.splitlines()
    assert lines[:2] == [
        "pkg/s.py:4:10: AMP002 [*] class derives from `torch.cuda.amp.GradScaler` -> `torch.amp.GradScaler`: every "
        "construction of `_S` in the project passes keywords only or nothing (line 6), so none binds `device`",
        "pkg/c.py:4:9: AMP002 class derives from `torch.cpu.amp.GradScaler`: `torch.amp.GradScaler` builds on 'cuda' "
        "by default where `torch.cpu.amp.GradScaler` built on 'cpu'; suggested: torch.amp.GradScaler(\"cpu\", ...)",
    ]


# A project module taken whole (fixtures/projects/module_attributes): `from pkg import utils`, `import pkg.utils`,
# `from . import utils`, then `utils.autocast(...)`, where utils.py says `from torch.cuda.amp import autocast`. The
# reads are reported where the file is read (train.py; evaluate.py spells no `amp`, so the check never opens it), and
# utils.py keeps its import and its use for all three, naming each read: rewritten alone, it would hand the readers
# `torch.amp.autocast` without a device. The project's tests pass after.
ATTRIBUTE_READ = ("`{chain}` is the deprecated `torch.cuda.amp.autocast`: `autocast` is read from the project's module "
                  "`pkg.utils`, which binds it to `torch.cuda.amp.autocast` (pkg/utils.py:1); it moves with that "
                  "import, so migrate the two modules together; suggested: torch.amp.autocast")
READERS = ("`autocast` is imported from this module by pkg/evaluate.py:5 (`utils.autocast`), pkg/train.py:9 "
           "(`utils.autocast`), pkg/train.py:11 (`pkg.utils.autocast`), whose uses move with this import: migrate them "
           "together")


def _rewritten_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, *flags: str) -> list[str]:
    """`ampfix rewrite FLAGS .` on a copy of the fixture project `name` (a repository root), whose files must then be
    its `<name>.expected` files where one exists and its own elsewhere; the lines it printed."""
    import shutil

    root = tmp_path / name
    shutil.copytree(PROJECTS / name, root)
    (root / ".git").mkdir()
    result = run(root, monkeypatch, "rewrite", *flags, ".")
    assert result.exit_code == 1
    for path in sorted(p.relative_to(PROJECTS / name) for p in (PROJECTS / name).rglob("*.py")):
        expected = PROJECTS / f"{name}.expected" / path
        assert (root / path).read_bytes() == (expected if expected.exists() else PROJECTS / name / path).read_bytes(), path
    return result.stdout.splitlines()


# References whose calls are in other modules (fixtures/projects/references_across_modules): utils.py's
# `get_autocast(precision)` returns `torch.cuda.amp.autocast`, and train.py and evaluate.py call what it returns;
# config.py's module-level `amp_autocast = torch.cuda.amp.autocast if ... else nullcontext` is entered there and in
# evaluate.py; none passes a positional argument: the partial with the old defaults is a default fix. Beside them, a
# keyword `partial` (`from functools import partial`) kept in `self` and entered in another method.
RETURNED = [
    "pkg/config.py:7:16: AMP001 fixed: `torch.cuda.amp.autocast` is referenced without a call and only called without "
    'positional arguments (line 11, pkg/evaluate.py:9): functools.partial(torch.amp.autocast, "cuda", '
    "dtype=torch.float16, cache_enabled=True) keeps the old defaults",
    'pkg/trainer.py:10:37: AMP001 fixed: `functools.partial(torch.cuda.amp.autocast, ...)` -> '
    '`functools.partial(torch.amp.autocast, "cuda", ...)` (keywords only); every call of it passes keywords only, and '
    "the old defaults it lacks are written (cache_enabled=True)",
    "pkg/utils.py:10:16: AMP001 fixed: `torch.cuda.amp.autocast` is referenced without a call and only called without "
    'positional arguments (pkg/evaluate.py:7, pkg/train.py:6): functools.partial(torch.amp.autocast, "cuda", '
    "dtype=torch.float16, cache_enabled=True) keeps the old defaults",
    NEEDS_AUTOCAST,
    SUMMARY.format(files="3 files", fixes="3 fixes", left="0 findings"),
]


def test_references_read_through_other_modules_of_the_project(tmp_path: Path, monkeypatch):
    import shutil
    import subprocess
    import sys

    from ampfix.core.options import Options
    from ampfix.engine import fix_source

    assert _rewritten_copy(tmp_path, monkeypatch, "module_attributes") == [
        'pkg/train.py:8:14: AMP002 fixed: `torch.cuda.amp.GradScaler(...)` -> `torch.amp.GradScaler(...)` with device '
        '"cuda"',
        "pkg/train.py:9:10: AMP001 left: " + ATTRIBUTE_READ.format(chain="utils.autocast"),
        "pkg/train.py:11:10: AMP001 left: " + ATTRIBUTE_READ.format(chain="pkg.utils.autocast"),
        f"pkg/utils.py:1:28: AMP010 `torch.cuda.amp.autocast` import left: {READERS}",
        f"pkg/utils.py:7:12: AMP001 `torch.cuda.amp.autocast` left: {READERS}; suggested: "
        'torch.amp.autocast("cuda", enabled=..., dtype=..., cache_enabled=...)',
        NEEDS_SCALER,
        SUMMARY.format(files="1 file", fixes="1 fix", left="4 findings"),
    ]
    assert _rewritten_copy(tmp_path, monkeypatch, "references_across_modules") == RETURNED
    assert _rewritten_copy(tmp_path, monkeypatch, "aliased_imports") == ALIASED

    # What the held-back imports prevent: utils.py rewritten as a file alone, its readers fail.
    alone = tmp_path / "aliased_imports_alone"
    shutil.copytree(PROJECTS / "aliased_imports", alone)
    utils = alone / "pkg" / "utils.py"
    rewritten = fix_source(utils.read_text(), Options())
    assert rewritten.changed and all(finding.fixed for finding in rewritten.findings)
    utils.write_text(rewritten.new_source)

    copies = [str(p) for name in ("module_attributes", "references_across_modules", "aliased_imports")
              for p in (PROJECTS / name, tmp_path / name)]
    ran = subprocess.run([sys.executable, str(PROJECT_TESTS), *copies, str(alone)], check=True, timeout=300,
                         capture_output=True, text=True)
    outcomes = json.loads(ran.stdout)
    assert [len(tests) for tests in outcomes.values()] == [2, 2, 3, 3, 2, 2, 2]
    failed = {r: [t for t, error in tests.items() if error] for r, tests in outcomes.items()}
    assert failed == {**{r: [] for r in copies}, str(alone): ["test_pkg.py::test_step_and_evaluate_run"]}
    assert "device" in outcomes[str(alone)]["test_pkg.py::test_step_and_evaluate_run"]


# A deprecated name bound under a name of its own (fixtures/projects/aliased_imports: `from torch.cuda.amp import
# autocast as amp_autocast`), taken by that name by other modules (`from .utils import Scaler, amp_autocast`,
# `utils.amp_autocast`): no rule names `amp_autocast`, so the project is searched for that one name.
ALIASED_READERS = ("`amp_autocast` is imported from this module by pkg/evaluate.py:5 (`utils.amp_autocast`), "
                   "pkg/train.py:1, whose uses move with this import: migrate them together")
ALIASED = [
    "pkg/utils.py:1:28: AMP010 `torch.cuda.amp.GradScaler` import left: `Scaler` is imported from this module by "
    "pkg/train.py:1, whose uses move with this import: migrate them together",
    f"pkg/utils.py:2:28: AMP010 `torch.cuda.amp.autocast` import left: {ALIASED_READERS}",
    f"pkg/utils.py:10:12: AMP001 `torch.cuda.amp.autocast` left: {ALIASED_READERS}; suggested: "
    'torch.amp.autocast("cuda", enabled=..., dtype=..., cache_enabled=...)',
    "target torch: the newest (none declared)",  # nothing fixed: the code needs nothing newer
    SUMMARY.format(files="0 files", fixes="0 fixes", left="3 findings"),
]


GET_AUTOCAST = ("import contextlib\n\nimport torch\n\n\ndef get_autocast(precision):\n    if precision:\n"
                "        return torch.cuda.amp.autocast\n    return contextlib.nullcontext\n")
LEFT = ("pkg/utils.py:8:16: AMP001 [unsafe] `torch.cuda.amp.autocast` is referenced without a call; its calls cannot be "
        "given the device here; ")


@pytest.mark.parametrize(("caller", "said"), [
    ("from .utils import get_autocast\n\n\ndef f(p):\n    with get_autocast(p)(True):\n        pass\n",
     "the call at pkg/train.py:5 passes an argument by position"),
    ("from . import utils\n\n\ndef f(p):\n    return utils.get_autocast(p)\n",
     "it is returned on line 8, by `get_autocast`; in pkg/train.py, it is returned on line 5"),
    ("from .utils import get_autocast\n\nhandlers = [get_autocast]\n",
     "it is returned on line 8, by `get_autocast`; in pkg/train.py, `get_autocast` on line 3 is read, not called"),
])
def test_a_reference_returned_to_another_module_is_left_where_a_call_there_is_positional_or_it_escapes(
        tmp_path: Path, monkeypatch, caller: str, said: str):
    root = project(tmp_path, {"pkg/__init__.py": "", "pkg/utils.py": GET_AUTOCAST, "pkg/train.py": caller})
    lines = run(root, monkeypatch, "check", "pkg/utils.py").stdout.splitlines()
    assert lines[0].startswith(LEFT + said + "; functools.partial(torch.amp.autocast, "), lines[0]


@pytest.mark.parametrize(("reader", "said"), [
    ("from .config import ctx\n\nwith ctx(True):\n    pass\n",
     "the call at pkg/train.py:3 passes an argument by position"),
    ("from . import config\n\nhooks = {\"amp\": config.ctx}\n",
     "`ctx` is bound at the top of the module on line 3; in pkg/train.py, it is put in a dict on line 3"),
    ("x = 1\n", "`ctx` is bound at the top of a module or class on line 3, where another module may read it"),
])
def test_a_module_level_reference_read_elsewhere_is_left_where_a_call_there_is_positional_or_it_escapes(
        tmp_path: Path, monkeypatch, reader: str, said: str):
    config = "import torch\n\nctx = torch.cuda.amp.autocast\n"
    root = project(tmp_path, {"pkg/__init__.py": "", "pkg/config.py": config, "pkg/train.py": reader})
    lines = run(root, monkeypatch, "check", "pkg/config.py").stdout.splitlines()
    assert lines[0].startswith(LEFT.replace("utils.py:8:16", "config.py:3:7") + said + "; functools.partial("), lines[0]


# Scripts in one folder, no `__init__.py` (fixtures/projects/scripts_*), each run as `python train.py`: Python puts
# the script's own folder first on sys.path, so `from engine import train_one_epoch` is engine.py beside it. The
# project's questions are answered from those files as from a package's: a reference passed to a function of
# engine.py (by keyword, by position, and read from the module) is followed to that function's calls of it; a
# function returning the old autocast, to the calls of what it returns; a subclass, to its constructions; a compat
# module, to the torch it binds. scripts_shadowed: `helpers` is both a package and a module in one folder (Python
# takes the package), and a module beside tools/evaluate.py, which its own folder puts before the package. Each
# copy is rewritten, then every script runs before and after, building AMP objects with the same arguments.
SCRIPT_PARTIAL = ('functools.partial(torch.amp.autocast, "cuda", dtype=torch.float16, cache_enabled=True) keeps the '
                  "old defaults")
ONLY_CALLED = "`torch.cuda.amp.autocast` is referenced without a call and only called without positional arguments"
SCRIPTS = {
    "scripts_arguments": (["train.py"], [
        f"train.py:10:20: AMP001 fixed: {ONLY_CALLED} (engine.py:7, engine.py:17): {SCRIPT_PARTIAL}",
        f"train.py:12:39: AMP001 fixed: {ONLY_CALLED} (engine.py:12): {SCRIPT_PARTIAL}",
        NEEDS_AUTOCAST,
        SUMMARY.format(files="1 file", fixes="2 fixes", left="0 findings"),
    ]),
    "scripts_returned": (["train.py"], [
        f"utils.py:9:16: AMP001 fixed: {ONLY_CALLED} (train.py:10, train.py:12): {SCRIPT_PARTIAL}",
        NEEDS_AUTOCAST,
        SUMMARY.format(files="1 file", fixes="1 fix", left="0 findings"),
    ]),
    "scripts_subclass": (["main.py"], [
        "scaling.py:4:22: AMP002 fixed: class derives from `torch.cuda.amp.GradScaler` -> `torch.amp.GradScaler`: "
        "every construction of `CountingScaler` in the project passes keywords only or nothing (main.py:7, "
        "main.py:9), so none binds `device`",
        NEEDS_SCALER,
        SUMMARY.format(files="1 file", fixes="1 fix", left="0 findings"),
    ]),
    "scripts_compat": (["train.py"], [
        'train.py:6:14: AMP002 fixed: `torch.cuda.amp.GradScaler(...)` -> `torch.amp.GradScaler(...)` with device '
        '"cuda"',
        'train.py:7:10: AMP001 fixed: `torch.cuda.amp.autocast(...)` -> `torch.amp.autocast(...)` with device "cuda"',
        NEEDS_SCALER,
        SUMMARY.format(files="1 file", fixes="2 fixes", left="0 findings"),
    ]),
    "scripts_shadowed": (["train.py", "tools/evaluate.py"], [
        "helpers.py:2:1: AMP010 fixed: `from torch.cuda.amp import autocast` -> `from torch.amp import autocast`",
        "helpers/__init__.py:3:28: AMP010 `torch.cuda.amp.autocast` import left: `autocast` is imported from "
        "this module by train.py:3, whose uses move with this import: migrate them together",
        "tools/helpers.py:3:28: AMP010 `torch.cuda.amp.autocast` import left: `autocast` is imported from this "
        "module by tools/evaluate.py:3, whose uses move with this import: migrate them together",
        "target torch: the newest (none declared)",
        SUMMARY.format(files="1 file", fixes="1 fix", left="2 findings"),
    ]),
}


def test_scripts_in_one_folder_take_the_modules_beside_them_as_python_runs_them(tmp_path: Path, monkeypatch):
    import subprocess
    import sys

    outputs = {name: _rewritten_copy(tmp_path, monkeypatch, name) for name in SCRIPTS}
    assert outputs == {name: lines for name, (_, lines) in SCRIPTS.items()}
    runs = {name: [(str(PROJECTS / name / script), str(tmp_path / name / script)) for script in scripts]
            for name, (scripts, _) in SCRIPTS.items()}
    records = tmp_path / "records.json"
    subprocess.run([sys.executable, str(RECORDER), "--as-script", str(records),
                    *(path for pairs in runs.values() for pair in pairs for path in pair)],
                   check=True, timeout=300, capture_output=True)
    recorded = json.loads(records.read_text())
    for name, pairs in runs.items():
        for before, after in ((recorded[original], recorded[copy]) for original, copy in pairs):
            assert before["error"] is None and after["error"] is None, (before["error"], after["error"])
            assert before["records"] and after["records"] == before["records"]
            assert before["deprecation_warnings"]
            # scripts_shadowed's autocast is held back with the import the scripts take it from
            assert bool(after["deprecation_warnings"]) == (name == "scripts_shadowed"), name


def test_a_name_python_takes_from_another_folder_is_not_the_one_beside_it(tmp_path: Path, monkeypatch):
    """A module of a package run with `python -m` takes `helpers` from its package root before its own folder; a
    script below the project root takes it from its own folder before the root's `src/`."""
    helpers = "from torch.cuda.amp import autocast\n"
    root = project(tmp_path, {"pkg/__init__.py": "", "pkg/helpers.py": helpers, "helpers/__init__.py": helpers,
                              "pkg/train.py": "from helpers import autocast\n", "src/helpers.py": helpers,
                              "tools/helpers.py": helpers, "tools/run.py": "from helpers import autocast\n"})
    lines = run(root, monkeypatch, "check", ".").stdout.splitlines()
    assert [line.split(": AMP010 ")[0] for line in lines if "imported from this module by" in line] == [
        "helpers/__init__.py:1:28", "tools/helpers.py:1:28"]


ENGINE = ("import contextlib\n\n\ndef train_one_epoch(model, amp_autocast=contextlib.nullcontext):\n"
          "    with amp_autocast():\n        return model\n")
PASSED = ("train.py:5:5: AMP001 [unsafe] `torch.cuda.amp.autocast` is referenced without a call; its calls cannot be "
          "given the device here; ")


@pytest.mark.parametrize(("engine", "call", "said"), [
    (ENGINE.replace("amp_autocast():", "amp_autocast(True):"), "train_one_epoch(m, amp_autocast=a)",
     "the call at engine.py:5 passes an argument by position"),
    (ENGINE.replace("with amp_autocast():", "with run(amp_autocast):"), "train_one_epoch(m, a)",
     "it is passed to `train_one_epoch` on line 6; in engine.py, it is passed to `run` on line 5, which is not a "
     "function of this module"),
    (ENGINE.replace("def train", "@contextlib.contextmanager\ndef train"), "train_one_epoch(m, amp_autocast=a)",
     "it is passed to `train_one_epoch` on line 6, which is not a function of this module"),
    (ENGINE, "train_one_epoch(m, *rest, amp_autocast=a)",
     "it is passed to `train_one_epoch` on line 6, which is not a function of this module"),
    (ENGINE, "train_one_epoch(m, autocast=a)",
     "it is passed to `train_one_epoch` on line 6; no parameter of `train_one_epoch` (engine.py:4) is known to take "
     "it"),
])
def test_a_reference_passed_to_a_function_of_a_sibling_script_is_left_where_it_calls_it_by_position_or_it_escapes(
        tmp_path: Path, monkeypatch, engine: str, call: str, said: str):
    train = f"import torch\n\nfrom engine import train_one_epoch\n\na = torch.cuda.amp.autocast\n{call}\n"
    root = project(tmp_path, {"engine.py": engine, "train.py": train})
    lines = run(root, monkeypatch, "check", "train.py").stdout.splitlines()
    assert lines[0].startswith(PASSED + said + "; functools.partial(torch.amp.autocast, "), lines[0]


def test_a_reference_passed_to_a_function_that_never_reads_it_is_rewritten(tmp_path: Path, monkeypatch):
    root = project(tmp_path, {"engine.py": "def train_one_epoch(model, amp_autocast=None):\n    return model\n",
                              "train.py": "import torch\n\nimport engine\n\n"
                                          "engine.train_one_epoch(1, torch.cuda.amp.autocast)\n"})
    lines = run(root, monkeypatch, "check", "train.py").stdout.splitlines()
    assert lines[0] == ("train.py:5:27: AMP001 [*] `torch.cuda.amp.autocast` is referenced without a call and its value "
                        'is never read: functools.partial(torch.amp.autocast, "cuda", dtype=torch.float16, '
                        "cache_enabled=True) keeps the old defaults")


# `--device cpu` and a GradScaler subclass constructed with keywords only in another script
# (fixtures/projects/subclass_device_cpu): rebased onto torch.amp.GradScaler it would build on "cuda", that class's
# default, where the CPU was asked for; so it is left and reported, and the script's autocast moves to the CPU. Run
# before and after, the scaler is the one it was (the same arguments, on "cuda", still deprecated).
ON_CUDA_BY_DEFAULT = ("class derives from `torch.cuda.amp.GradScaler`: `torch.amp.GradScaler` builds on 'cuda' by "
                      "default, where the target device is `{device}`, and the subclass's constructions cannot be "
                      "given it here; suggested: torch.amp.GradScaler({device}, ...)")


def test_a_scaler_subclass_is_not_rebased_onto_cuda_where_another_device_is_asked_for(tmp_path: Path, monkeypatch):
    import subprocess
    import sys

    assert _rewritten_copy(tmp_path, monkeypatch, "subclass_device_cpu", "--device", "cpu") == [
        "scaling.py:4:22: AMP002 left: " + ON_CUDA_BY_DEFAULT.format(device='"cpu"'),
        'train.py:9:10: AMP001 fixed: `torch.cuda.amp.autocast(...)` -> `torch.amp.autocast(...)` with device "cpu"',
        NEEDS_AUTOCAST,
        SUMMARY.format(files="1 file", fixes="1 fix", left="1 finding"),
    ]
    original, copy = PROJECTS / "subclass_device_cpu" / "train.py", tmp_path / "subclass_device_cpu" / "train.py"
    records = tmp_path / "records.json"
    subprocess.run([sys.executable, str(RECORDER), "--as-script", str(records), str(original), str(copy)],
                   check=True, timeout=300, capture_output=True)
    before, after = (json.loads(records.read_text())[str(path)] for path in (original, copy))
    assert before["error"] is None and after["error"] is None, (before["error"], after["error"])
    scalers = [[r for r in run["records"] if r["api"] == "GradScaler"] for run in (before, after)]
    assert scalers[0] == scalers[1] and [r["device"] for r in scalers[0]] == ["cuda"]
    assert [r["device_type"] for r in after["records"] if r["api"] == "autocast"] == ["cpu"]
    assert [w for w in after["deprecation_warnings"] if "GradScaler" in w]

    # the same for --device-expr, and for a subclass whose own `__init__` passes keywords only (NeMo's)
    nemo = (PROJECTS.parent / "grad_scaler" / "subclass_keyword_only_init.in.py").read_text()
    root = project(tmp_path / "nemo", {"nemo.py": nemo})
    for flags, device in ((("--device", "cpu"), '"cpu"'), (("--device-expr", "cfg.device"), "cfg.device")):
        lines = run(root, monkeypatch, "check", *flags, "nemo.py").stdout.splitlines()
        assert lines[0] == "nemo.py:4:18: AMP002 " + ON_CUDA_BY_DEFAULT.format(device=device)
    assert run(root, monkeypatch, "check", "nemo.py").stdout.splitlines()[0].startswith(
        "nemo.py:4:18: AMP002 [*] class derives from `torch.cuda.amp.GradScaler` -> `torch.amp.GradScaler`: its "
        "`__init__` passes only keywords")
    # with no device asked for, a file written with single quotes (its device is spelled 'cuda') is rebased
    (root / "quoted.py").write_text(SUBCLASS + "s = S(enabled=False)\nname = 'scaler'\n")
    assert run(root, monkeypatch, "check", "quoted.py").stdout.splitlines()[0] == (
        "quoted.py:4:9: AMP002 [*] class derives from `torch.cuda.amp.GradScaler` -> `torch.amp.GradScaler`: every "
        "construction of `S` in the project passes keywords only or nothing (line 6), so none binds `device`")


@pytest.mark.parametrize("name", ["scripts_arguments", "scripts_returned", "scripts_compat", "references_across_modules"])
def test_the_project_views_other_fixes_give_the_target_device(tmp_path: Path, monkeypatch, name: str):
    import shutil

    root = tmp_path / name
    shutil.copytree(PROJECTS / name, root)
    (root / ".git").mkdir()
    for flags, device in ((("--device", "cpu"), '"cpu"'), (("--device-expr", "cfg.device"), "cfg.device")):
        fixes = [line for line in run(root, monkeypatch, "check", *flags, ".").stdout.splitlines() if " [*] " in line]
        assert fixes and all((f"partial(torch.amp.autocast, {device}," in line or f"with device {device}" in line)
                             and '"cuda"' not in line for line in fixes), fixes
