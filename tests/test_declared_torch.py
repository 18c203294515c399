"""The torch floor a project declares (`ampfix.io.declared_torch`): where it is read, and how."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from ampfix.io.declared_torch import declared_torch, lowest_allowed


@pytest.mark.parametrize(("specifier", "floor"), [
    (">=2.0", (2, 0)),
    (">=2.0,<3", (2, 0)),
    ("~=2.2", (2, 2)),
    ("~=2.2.1", (2, 2)),
    ("==2.1.*", (2, 1)),
    ("==2.1.3", (2, 1)),
    (">2.0", (2, 0)),  # 2.0.1 is allowed
    (">2.0.*", None),  # not a valid clause for packaging: parsed as no bound
    (">=1.13,!=2.0.*", (1, 13)),
    (">=2.0,!=2.0.*", (2, 1)),
    ("<3", None),
    ("", None),
    (">=2.0,<2.0", None),  # allows nothing
])
def test_the_floor_is_the_lowest_release_the_specifier_allows(specifier: str, floor):
    try:
        parsed = SpecifierSet(specifier)
    except Exception:
        assert floor is None
        return
    assert lowest_allowed(parsed) == floor


def _project(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_pyproject_dependencies(tmp_path: Path):
    root = _project(tmp_path, {
        ".git/HEAD": "",
        "pyproject.toml": '[project]\nname = "lib"\ndependencies = ["numpy", "torch>=2.0,<3"]\n',
        "src/lib/train.py": "",
    })
    declared = declared_torch(root / "src/lib/train.py")
    assert (declared.floor, declared.source) == ((2, 0), root / "pyproject.toml")
    assert declared.describe() == f"torch 2.0, from {root / 'pyproject.toml'}"


def test_an_extra_lowers_the_floor_and_a_marker_is_read(tmp_path: Path):
    root = _project(tmp_path, {".git/HEAD": "", "pyproject.toml": (
        '[project]\nname = "lib"\ndependencies = ["torch>=2.2; python_version >= \'3.9\'"]\n'
        '[project.optional-dependencies]\nold = ["torch~=1.13.0"]\n')})
    assert declared_torch(root).floor == (1, 13)


def test_requirements_beside_a_pyproject_without_torch(tmp_path: Path):
    root = _project(tmp_path, {
        ".git/HEAD": "",
        "pyproject.toml": '[project]\nname = "app"\ndependencies = ["numpy"]\n',
        "requirements.txt": "# pinned\n-r base.txt\ntorchvision==0.15.2\ntorch==2.0.1  # cuda 11.8\n",
        "train.py": "",
    })
    declared = declared_torch(root / "train.py")
    assert (declared.floor, declared.source) == ((2, 0), root / "requirements.txt")


def test_setup_py_literal_install_requires_directly_and_through_a_name(tmp_path: Path):
    direct = _project(tmp_path / "a", {".git/HEAD": "", "setup.py": (
        "from setuptools import setup\nsetup(name='a', install_requires=['torch>=1.12', 'tqdm'])\n")})
    named = _project(tmp_path / "b", {".git/HEAD": "", "setup.py": (
        "from setuptools import setup\nREQUIRES = ['torch>=2.1']\nsetup(name='b', install_requires=REQUIRES)\n")})
    assert declared_torch(direct).floor == (1, 12)
    assert declared_torch(named).floor == (2, 1)


def test_setup_cfg_install_requires(tmp_path: Path):
    root = _project(tmp_path, {".git/HEAD": "", "setup.cfg": (
        "[metadata]\nname = c\n[options]\ninstall_requires =\n    numpy\n    torch>=1.10\n")})
    declared = declared_torch(root)
    assert (declared.floor, declared.source) == ((1, 10), root / "setup.cfg")


def test_a_monorepo_gets_the_floor_of_the_nearest_project(tmp_path: Path):
    root = _project(tmp_path, {
        ".git/HEAD": "",
        "pyproject.toml": '[project]\nname = "all"\ndependencies = ["torch>=2.4"]\n',
        "pkg_old/pyproject.toml": '[project]\nname = "old"\ndependencies = ["torch>=1.13"]\n',
        "pkg_old/old/model.py": "",
        "pkg_new/pyproject.toml": '[project]\nname = "new"\ndependencies = ["torch>=2.3"]\n',
        "pkg_new/new/model.py": "",
        "scripts/run.py": "",
    })
    assert declared_torch(root / "pkg_old/old/model.py").floor == (1, 13)
    assert declared_torch(root / "pkg_new/new/model.py").floor == (2, 3)
    assert declared_torch(root / "scripts/run.py").floor == (2, 4)


def test_a_project_that_names_no_torch_stops_the_search(tmp_path: Path):
    root = _project(tmp_path, {
        ".git/HEAD": "",
        "pyproject.toml": '[project]\nname = "all"\ndependencies = ["torch>=2.4"]\n',
        "tools/pyproject.toml": '[project]\nname = "tools"\ndependencies = ["rich"]\n',
        "tools/t.py": "",
    })
    declared = declared_torch(root / "tools/t.py")
    assert (declared.floor, declared.source) == (None, None)
    assert declared.describe() == "no torch requirement found"


def test_no_metadata_up_to_the_repository_root(tmp_path: Path):
    _project(tmp_path, {"pyproject.toml": '[project]\nname = "outer"\ndependencies = ["torch>=2.0"]\n'})
    root = _project(tmp_path / "repo", {".git/HEAD": "", "src/x.py": ""})
    assert declared_torch(root / "src/x.py").source is None


def test_no_lower_bound_declares_no_floor(tmp_path: Path):
    root = _project(tmp_path, {".git/HEAD": "", "requirements.txt": "torch<3\n"})
    declared = declared_torch(root)
    assert (declared.floor, declared.source) == (None, root / "requirements.txt")
    assert declared.describe().endswith("the torch requirement has no lower bound")


def test_an_unparsable_requirement_is_said_not_guessed(tmp_path: Path):
    root = _project(tmp_path, {".git/HEAD": "", "requirements.txt": "torch >= two\n"})
    declared = declared_torch(root)
    assert declared.floor is None and declared.source == root / "requirements.txt"
    assert declared.problem == ("cannot parse the requirement 'torch >= two' "
                                "(Expected semicolon (after name with no version specifier) or end)")  # one line


def test_a_broken_pyproject_that_mentions_torch_is_said(tmp_path: Path):
    root = _project(tmp_path, {".git/HEAD": "", "pyproject.toml": '[project\ndependencies = ["torch>=2"]\n'})
    declared = declared_torch(root)
    assert declared.floor is None and declared.problem is not None
    assert declared.problem.startswith("cannot be read (ValueError")


# The precedence (docs/rules.md, "The target torch"): the package's own metadata, which pip enforces on everyone
# who installs it, before the requirements files, which describe an environment.
@pytest.mark.parametrize("metadata", [
    {"setup.py": "from setuptools import setup\nsetup(name='p', install_requires=['torch>=1.13.0'])\n"},
    {"setup.cfg": "[options]\ninstall_requires =\n    torch>=1.13.0\n"},
    {"pyproject.toml": '[project]\nname = "p"\ndependencies = ["torch>=1.13.0"]\n'},
])
def test_the_packages_floor_wins_over_a_requirements_file_without_one(tmp_path: Path, metadata: dict[str, str]):
    root = _project(tmp_path, {".git/HEAD": "", "requirements.txt": "numpy\ntorch\n", **metadata})
    declared = declared_torch(root)
    assert (declared.floor, declared.source) == ((1, 13), root / next(iter(metadata)))


def test_the_packages_floor_wins_over_a_newer_environment_pin(tmp_path: Path):
    root = _project(tmp_path, {".git/HEAD": "", "requirements.txt": "torch==2.5.1\n",
                               "setup.py": "from setuptools import setup\nsetup(install_requires=['torch>=2.0'])\n"})
    assert (declared_torch(root).floor, declared_torch(root).source) == ((2, 0), root / "setup.py")


def test_a_package_without_a_torch_bound_takes_the_environments_pin(tmp_path: Path):
    root = _project(tmp_path, {".git/HEAD": "", "requirements-ci.txt": "torch==2.1.2\n",
                               "pyproject.toml": '[project]\nname = "p"\ndependencies = ["torch"]\n'})
    declared = declared_torch(root)
    assert (declared.floor, declared.source) == ((2, 1), root / "requirements-ci.txt")


def test_no_bound_anywhere_names_the_packages_metadata(tmp_path: Path):
    root = _project(tmp_path, {".git/HEAD": "", "requirements.txt": "torch\n",
                               "setup.py": "from setuptools import setup\nsetup(install_requires=['torch'])\n"})
    declared = declared_torch(root)
    assert (declared.floor, declared.source) == (None, root / "setup.py")
    assert declared.describe() == f"{root / 'setup.py'}: the torch requirement has no lower bound"


PACKAGE_FLOOR = Path(__file__).resolve().parent.parent / "fixtures" / "projects" / "package_floor_setup_py"


def test_a_package_promising_torch_1_13_keeps_its_grad_scaler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """setup.py says torch>=1.13.0, requirements.txt a bare torch: `torch.amp.GradScaler("cuda")` does not exist
    before torch 2.3, so it is held back; autocast (1.10) is rewritten."""
    import shutil

    from typer.testing import CliRunner

    from ampfix.cli.app import app

    root = tmp_path / "package"
    shutil.copytree(PACKAGE_FLOOR, root)
    (root / ".git").mkdir()
    monkeypatch.chdir(root)
    result = CliRunner().invoke(app, ["rewrite", "."])
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        "pkg/train.py:5:14: AMP002 `torch.cuda.amp.GradScaler` left: needs torch >= 2.3; the target is torch "
        "1.13; raise the torch requirement in setup.py or pass --target-torch; suggested: "
        'torch.amp.GradScaler("cuda", ...)',
        "pkg/train.py:6:10: AMP001 fixed: `torch.cuda.amp.autocast(...)` -> `torch.amp.autocast(...)` with device "
        '"cuda"',
        "target torch 1.13, from setup.py",
        "rewrote 1 file (1 fix); 1 finding left.",
    ]
    expected = PACKAGE_FLOOR.parent / "package_floor_setup_py_train.expected.py"
    assert (root / "pkg" / "train.py").read_text() == expected.read_text()
