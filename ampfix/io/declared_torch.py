"""The oldest torch a project promises to run on, read from its own metadata.

A library that declares `torch>=2.0` must keep working on torch 2.0 after a rewrite, so its target
torch is that floor, as ruff reads `requires-python`. The project of a file is the nearest folder
above it that holds `pyproject.toml`, `setup.py`, `setup.cfg` or a `requirements*.txt` (a monorepo gets
one target per project); the search stops at a repository root. Within that folder the package's own
metadata comes first, since it is what pip enforces on everyone who installs the package:
`[project].dependencies` (and `[project].optional-dependencies`, whose extras install the same package
for the same users), then a literal `install_requires` in `setup.py`, then in `setup.cfg`; only then
`requirements*.txt`, which describe an environment (a CI job, a developer's machine), not a promise.
The first of them that gives a floor wins. One that names torch with no lower bound (`torch`) does
not end the search: a requirements file that pins the environment's torch still holds back what that
torch lacks; with no floor anywhere, the first such requirement is the one reported.

The floor is the lowest release every specifier allows (`>=2.0,<3` -> 2.0, `~=2.2` -> 2.2,
`==2.1.*` -> 2.1, `>2.0` -> 2.0, since 2.0.1 is allowed). Several torch requirements (one per
marker, an extra) give the lowest of their floors: the code must run on each. A requirement with
no lower bound (`torch`, `torch<3`) declares no floor. `packaging` parses the strings; it is
imported only once a torch requirement is found.

Read for every file that reaches the engine when neither `--target-torch` nor `target-torch` in
`[tool.ampfix]` is set (`ampfix.io.files`): cached per folder, so a run reads each project's
metadata once per process.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

TorchVersion = tuple[int, int]

PROJECT_FILES = ("pyproject.toml", "setup.py", "setup.cfg")
REPOSITORY_MARKERS = (".git", ".hg")
# A requirement line names torch when its project name is torch; cheap to test before parsing.
_NAMES_TORCH = re.compile(r"^\s*torch\s*(\[|[<>=!~;@\s]|$)", re.IGNORECASE)


@dataclass(frozen=True)
class DeclaredTorch:
    """What a project's metadata says of torch."""

    floor: TorchVersion | None  # None: no lower bound declared, or nothing readable
    source: Path | None  # the file the requirement was read from; None: no project metadata names torch
    problem: str | None = None  # why a requirement naming torch could not be used

    def describe(self) -> str:
        if self.source is None:
            return "no torch requirement found"
        if self.problem is not None:
            return f"{self.source}: {self.problem}"
        if self.floor is None:
            return f"{self.source}: the torch requirement has no lower bound"
        return f"torch {self.floor[0]}.{self.floor[1]}, from {self.source}"


NOTHING_DECLARED = DeclaredTorch(None, None)


@dataclass(frozen=True)
class Target:
    """A file's target torch and where it came from, as reports say it."""

    version: TorchVersion | None  # None: the newest torch
    source: str | None  # "--target-torch", "pyproject.toml [tool.ampfix]", a metadata file; None: nothing set it
    problem: str | None = None  # why the metadata named in `source` gave no target

    def describe(self) -> str:
        if self.version is not None:
            return f"target torch {self.version[0]}.{self.version[1]}, from {self.source}"
        if self.source is None:
            return "target torch: the newest (none declared)"
        why = self.problem or "the torch requirement has no lower bound"
        return f"target torch: the newest; {self.source}: {why}"


def declared_torch(path: Path) -> DeclaredTorch:
    """What the project holding `path` (a file or a folder) declares of torch."""
    folder = path if path.is_dir() else path.parent
    return _for_folder(folder.resolve())


def declared_torch_of_file(path: Path) -> DeclaredTorch:
    """`declared_torch` for a file, cached by its folder as named (no stat, no resolve per file)."""
    return _for_named_folder(str(path.parent))


@cache
def _for_named_folder(folder: str) -> DeclaredTorch:
    return _for_folder(Path(folder).resolve())


def forget() -> None:
    """Forget what was read: a run in a long-lived process (tests, an editor) sees edited metadata."""
    _for_named_folder.cache_clear()
    _for_folder.cache_clear()


@cache
def _for_folder(folder: Path) -> DeclaredTorch:
    # Recursive, so that each folder is looked at once per run: the folders of a tree share their
    # ancestors, and each look lists the folder (requirements*.txt) and may parse a pyproject.toml.
    found = _project_requirement(folder)
    if found is not None:
        return found
    if folder.parent == folder or any((folder / marker).exists() for marker in REPOSITORY_MARKERS):
        return NOTHING_DECLARED
    return _for_folder(folder.parent)


def _project_requirement(folder: Path) -> DeclaredTorch | None:
    """The folder's torch requirement; NOTHING_DECLARED for a project that names none; None for a
    folder that is not a project (the search goes on above it)."""
    requirements = sorted(folder.glob("requirements*.txt"))
    if not requirements and not any((folder / name).is_file() for name in PROJECT_FILES):
        return None
    # The package's metadata first (what pip enforces), then the environments' requirements files.
    readers = [
        (folder / "pyproject.toml", _from_pyproject),
        (folder / "setup.py", _from_setup_py),
        (folder / "setup.cfg", _from_setup_cfg),
        *[(path, _from_requirements_txt) for path in requirements],
    ]
    unbounded = NOTHING_DECLARED  # the first requirement naming torch with no lower bound
    for path, reader in readers:
        if not path.is_file():
            continue
        try:
            lines = reader(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, SyntaxError) as error:
            if _mentions_torch(path):
                return DeclaredTorch(None, path, f"cannot be read ({type(error).__name__}: {error})")
            continue
        found = floor_of_requirements(lines, path)
        if found.floor is not None or found.problem is not None:
            return found
        if unbounded is NOTHING_DECLARED:
            unbounded = found
    return unbounded


def floor_of_requirements(lines: list[str], source: Path) -> DeclaredTorch:
    """The torch floor of requirement strings (PEP 508, as in `dependencies` or a wheel's
    Requires-Dist), read from `source`; NOTHING_DECLARED when none names torch."""
    torch_lines = [line for line in lines if _NAMES_TORCH.match(line)]
    return _floor_of(torch_lines, source) if torch_lines else NOTHING_DECLARED


def _mentions_torch(path: Path) -> bool:
    try:
        return b"torch" in path.read_bytes()
    except OSError:
        return False


def _floor_of(lines: list[str], source: Path) -> DeclaredTorch:
    from packaging.requirements import InvalidRequirement, Requirement

    floors: list[TorchVersion | None] = []
    for line in lines:
        try:
            requirement = Requirement(line)
        except InvalidRequirement as error:
            # packaging's message goes on with the line and a caret under the fault: one line is kept
            why = str(error).splitlines()[0] if str(error) else type(error).__name__
            return DeclaredTorch(None, source, f"cannot parse the requirement {line.strip()!r} ({why})")
        if requirement.name.lower() != "torch":
            continue
        floors.append(lowest_allowed(requirement.specifier))
    if not floors:
        return NOTHING_DECLARED
    if any(floor is None for floor in floors):
        return DeclaredTorch(None, source)
    return DeclaredTorch(min(floor for floor in floors if floor is not None), source)


def lowest_allowed(specifier: object) -> TorchVersion | None:
    """The (major, minor) of the lowest release `specifier` (a packaging SpecifierSet) allows; None
    when it has no lower bound. Candidates are each bound's own release and the next minor and
    major releases after it; the lowest candidate every clause allows wins."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    assert isinstance(specifier, SpecifierSet)
    bounds = []
    for clause in specifier:
        if clause.operator in (">=", ">", "==", "~=", "==="):
            text = clause.version.removesuffix(".*")
            try:
                bounds.append(Version(text))
            except InvalidVersion:
                continue
    if not bounds:
        return None
    candidates = set()
    for bound in bounds:
        major, minor = (bound.release + (0, 0))[:2]
        micro = (bound.release + (0, 0, 0))[2]
        candidates |= {
            Version(f"{major}.{minor}.{micro}"), Version(f"{major}.{minor}.{micro + 1}"),
            Version(f"{major}.{minor + 1}.0"), Version(f"{major + 1}.0.0"),
        }
    allowed = sorted(version for version in candidates if specifier.contains(version, prereleases=True))
    if not allowed:
        return None
    lowest = allowed[0]
    return (lowest.release + (0, 0))[0], (lowest.release + (0, 0))[1]


def _from_pyproject(text: str) -> list[str]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib

    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(str(error)) from error
    project = document.get("project")
    if not isinstance(project, dict):
        return []
    lines = _strings(project.get("dependencies"))
    extras = project.get("optional-dependencies")
    if isinstance(extras, dict):
        for group in extras.values():
            lines += _strings(group)
    return lines


def _strings(value: object) -> list[str]:
    if isinstance(value, list):
        return [item for item in value if isinstance(item, str)]
    return []


def _from_requirements_txt(text: str) -> list[str]:
    lines = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if line and not line.startswith(("#", "-")):
            lines.append(line)
    return lines


def _from_setup_py(text: str) -> list[str]:
    """`install_requires` when it is a literal list of strings in the `setup(...)` call, or a
    module-level name bound once to such a list."""
    tree = ast.parse(text)
    literals: dict[str, list[str]] = {}
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target = statement.targets[0]
            if isinstance(target, ast.Name) and _literal_strings(statement.value) is not None:
                literals[target.id] = _literal_strings(statement.value) or []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            if keyword.arg != "install_requires":
                continue
            value = keyword.value
            if isinstance(value, ast.Name):
                return literals.get(value.id, [])
            return _literal_strings(value) or []
    return []


def _literal_strings(node: ast.expr) -> list[str] | None:
    if not isinstance(node, (ast.List, ast.Tuple)):
        return None
    strings = [item.value for item in node.elts if isinstance(item, ast.Constant) and isinstance(item.value, str)]
    return strings if len(strings) == len(node.elts) else None


def _from_setup_cfg(text: str) -> list[str]:
    import configparser

    parser = configparser.ConfigParser()
    try:
        parser.read_string(text)
    except configparser.Error as error:
        raise ValueError(str(error)) from error
    if not parser.has_option("options", "install_requires"):
        return []
    return _from_requirements_txt(parser.get("options", "install_requires"))
