"""The engine on real code nobody here wrote: old releases on PyPI that still use the deprecated API.

    python benchmarks/corpus.py                   # download what is missing, unpack, measure
    python benchmarks/corpus.py --offline         # measure the cache only; never touch the network
    python benchmarks/corpus.py --details         # also list every line that is not fixed, by category
    python benchmarks/corpus.py --only fastai --json /tmp/corpus.json

Each package==version below is fetched once with `pip download --no-deps` into
benchmarks/.corpus/downloads/ (gitignored), and its .py and .ipynb files are unpacked into
benchmarks/.corpus/src/. Every .py file is then decoded as `ampfix.io.files` decodes it and run
through the engine in this process (`ampfix.engine.fix_source`, default safe options), then once
more on its output. A notebook goes through the notebook codec as `ampfix check` reads it
(`ampfix.io.notebooks`: its code cells as one module, IPython syntax masked): the oracle and the
line accounting run on that module, the output is the new notebook decoded again (it must read back
and parse), and the second run is on that.

What is measured, per package:

- **found**: lines holding a deprecated use, found by an oracle that shares no code with the
  engine (`DeprecatedUses` below, on the stdlib `ast`): an import from or of `torch.cuda.amp` /
  `torch.cpu.amp` (or `from torch.cuda import amp`), any name or attribute chain that resolves,
  through the file's imports with a plain per-function scope rule, to something under those
  modules (a `torch` no binding explains, in a file with a star import, is read as torch; so is a
  `torch` taken from another module, a re-export such as thinc's `from ..compat import torch`; a name
  bound by `__import__("torch")` / `importlib.import_module(...)` as the module it names, and so is one
  bound by any call whose first argument names torch, a lazy import such as `LazyImport("torch")`), any string whose whole value is such a dotted path, and any string that parses as an
  expression holding such a chain (string annotations). It over-approximates (a name
  bound several ways counts as deprecated if one way is), so an "unreported" line is a lead to
  read, and the --details listing shows each one.
- **findings**, **changed sites**, **followed**: the engine's own count: its findings (errors left
  out), the fixes a reviewer sees in the diff (fixed findings whose text changes: what the summary
  calls fixes), and the uses that only follow their moved import under their own word.
- **elsewhere**: findings decided by a fact from another function or module, told apart by measuring again
  without it (`decided_elsewhere`): once with the project's other modules withheld (`project=None`:
  `ampfix/io/project_modules.py` answers nothing; each package's unpacked tree is its project), once with every
  reference's flow cut at its first step (`ampfix/syntax/flow.py`'s `ModuleFlows.follow` answers "not followed":
  what the engine decided before it followed references). A finding is counted where either run does not give it the same
  outcome (its line, column, code, fixed, fixable, unsafe; the message may differ). **by flow** / **by modules**:
  those each withholding alone changes (a finding may be in both); **elsewhere fixed**: the counted findings that
  are fixed (the rest are held or left for a fact from elsewhere, e.g. an import other modules take, or now name
  the call or escape that decides them). Only files with findings are measured again.
- **fixed**: the same oracle on the output finds no deprecated use on the line(s) that line
  became (lines are mapped through a line diff; a line inside a changed block maps to the block).
- **left, reported**: not fixed, and the engine gave a finding that is not marked fixed on that
  line; counted by reason (the finding's code and its message with names masked).
- **unreported**: not fixed and no such finding. Target 0.
- **AMP900**: internal errors (the file is left untouched; its lines count here, not as left).
- **broken**: outputs that `ast.parse` rejects. Target 0.
- **2nd run**: files whose output a second `fix_source` changes again. Target 0.
- **false fixed**: lines still deprecated in the output where a finding on that very line says
  fixed and none says left (a rewrite report that overstates). Target 0.
- **check != fix**: files where `check_source` and `fix_source` disagree on the findings'
  (line, code, fixable) — `check` promises what `rewrite` does.
- the autocast state functions (`torch.get_autocast_gpu_dtype()` and the other 13 names torch 2.4
  deprecated, `DEPRECATED_STATE_FUNCTIONS`): found through the same resolution, and counted again apart
  (found, fixed, left by reason, unreported) below each table, beside the namespace figures, and per
  package in a second table with the notebooks' own figures (notebooks, found, fixed, left, unreported,
  cells that may hold a use and do not parse); the lines left follow by package and reason.
- cross-checks: `grep` counts the lines whose text matches `(cuda|cpu).amp`,
  `cuda import amp` or a state function's name; `code miss` counts those among them whose match lies in code (not in a
  comment or string, by `tokenize`) that the oracle did not find: an oracle blind spot, target 0.
  Files the engine (AMP901) or the oracle cannot parse are counted as `unparsable`.

The figures come twice: at the newest torch (default options), then at each package's own declared
floor, the torch requirement of its release metadata (`declared_floor`: the wheel's METADATA or the
sdist's PKG-INFO / egg-info requires.txt, Requires-Dist read as `ampfix.io.declared_torch` reads a
project's dependencies), as `ampfix rewrite` with no flag would target it in that project. There,
**held (floor)** counts the lines left because a rule needs a newer torch than the floor: their own
category, out of `left+rep.` (a release with no torch floor is measured at the newest torch again).

Downloads take ~31 MB; the run is one process (keep it light on shared machines).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import io
import json
import re
import subprocess
import sys
import tarfile
import time
import tokenize
import zipfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_CACHE = HERE / ".corpus"

# (requirement, "wheel" | "sdist"): releases checked to still use the deprecated API (grep of
# what was downloaded). Wheels where a pure-Python one exists; sdists carry tests and examples too.
PACKAGES: tuple[tuple[str, str], ...] = (
    ("transformers==4.25.1", "wheel"),
    ("accelerate==0.20.3", "wheel"),
    ("fastai==2.7.12", "wheel"),
    ("speechbrain==0.5.14", "wheel"),
    ("nemo_toolkit==1.20.0", "wheel"),
    ("composer==0.16.0", "wheel"),
    ("colossalai==0.3.0", "sdist"),
    ("pytorch-lightning==1.9.5", "wheel"),
    ("ultralytics==8.0.100", "wheel"),
    ("espnet==202301", "wheel"),
    ("mmengine==0.7.4", "wheel"),
    ("monai==1.2.0", "wheel"),
    ("fairscale==0.4.13", "sdist"),
    ("pytorch-ignite==0.4.11", "wheel"),
    ("allennlp==2.10.1", "wheel"),
    # Added for issues 17 and 19: the shapes those issues name, on code nobody here wrote.
    ("yolov5==7.0.13", "wheel"),  # yolov5's pip package: `from ...common import *` provides torch, `from torch.cuda import amp`
    ("timm==0.9.2", "wheel"),  # fast_norm: torch.get_autocast_gpu_dtype() / is_autocast_cpu_enabled() beside cuda.amp
    ("transformers==4.40.2", "wheel"),  # the FlashAttention-2 classes: torch.get_autocast_gpu_dtype() in 27 models
    ("pytorch-lightning==1.5.10", "wheel"),  # native AMP and apex plugins side by side
    ("gpytorch==1.11", "sdist"),  # ships 49 example notebooks in its sdist
    ("pytorch-pfn-extras==0.6.7", "sdist"),  # a framework's AMP helpers (runtime, trainer, tests)
)

# The autocast state functions torch 2.4 deprecated (each warns a DeprecationWarning on torch 2.13), written
# here from torch's warnings, not taken from the engine's rules (the oracle stays independent).
DEPRECATED_STATE_FUNCTIONS = tuple(
    [f"torch.{verb}_autocast_{device}_dtype" for verb in ("get", "set") for device in ("gpu", "cpu", "xla", "ipu")]
    + [f"torch.{verb}_autocast_{device}_enabled" for verb in ("is", "set") for device in ("cpu", "xla", "ipu")])
# What is deprecated: everything below the two modules, and the state functions (and anything below them).
DEPRECATED_MODULES = ("torch.cuda.amp", "torch.cpu.amp", *DEPRECATED_STATE_FUNCTIONS)
_STATE = r"(?:get|set)_autocast_(?:gpu|cpu|xla|ipu)_dtype|(?:is|set)_autocast_(?:cpu|xla|ipu)_enabled"
_TEXT_MATCH = re.compile(rf"\b(?:cuda|cpu)\s*\.\s*amp\b|\bcuda\s+import\s+amp\b|\b(?:{_STATE})\b")
_CODE_MATCH = re.compile(rf"(?:cuda|cpu)\.amp\b|cuda import amp\b|\b(?:{_STATE})\b")
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")


# ---------------------------------------------------------------------------------------------
# Fetching and unpacking

UNPACKED = (".py", ".ipynb")
COMPLETE = ".complete-ipynb"  # a tree unpacked with its notebooks (trees marked `.complete` had .py files only)


def fetch(requirement: str, kind: str, cache: Path, offline: bool) -> Path:
    """The unpacked source tree of one release (only its .py and .ipynb files), downloading it if needed."""
    name = requirement.replace("==", "-")
    tree = cache / "src" / name
    if (tree / COMPLETE).exists():
        return tree
    downloads = cache / "downloads" / name
    archives = sorted(downloads.glob("*")) if downloads.is_dir() else []
    if not archives:
        if offline:
            raise SystemExit(f"{requirement}: not in the cache ({downloads}) and --offline was given")
        # An sdist for this package only: `:all:` would also build pip's build tools from source.
        package = requirement.split("==")[0]
        binary = ["--only-binary", ":all:"] if kind == "wheel" else ["--no-binary", package]
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", *binary, "-q",
                        "-d", str(downloads), requirement], check=True)
        archives = sorted(downloads.glob("*"))
    if len(archives) != 1:
        raise SystemExit(f"{requirement}: expected one archive in {downloads}, found {len(archives)}")
    _unpack_python_files(archives[0], tree)
    (tree / COMPLETE).touch()
    return tree


def _unpack_python_files(archive: Path, tree: Path) -> None:
    tree.mkdir(parents=True, exist_ok=True)
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(tree, [m for m in zf.namelist() if m.endswith(UNPACKED) and ".." not in m])
    else:
        with tarfile.open(archive) as tf:
            members = [m for m in tf.getmembers() if m.isfile() and m.name.endswith(UNPACKED)]
            tf.extractall(tree, members, filter="data")


def declared_floor(requirement: str, cache: Path) -> tuple[tuple[int, int] | None, str]:
    """The torch floor a release declares in its metadata, and what was read (for the table)."""
    from ampfix.io.declared_torch import floor_of_requirements

    downloads = cache / "downloads" / requirement.replace("==", "-")
    archives = sorted(downloads.glob("*")) if downloads.is_dir() else []
    if len(archives) != 1:
        return None, "no archive"
    lines = _requires_dist(archives[0])
    declared = floor_of_requirements(lines, archives[0])
    named = dict.fromkeys(line.split(";")[0].strip() for line in lines  # once each, markers dropped
                          if re.match(r"torch\s*([(<>=!~;\[]|$)", line, re.IGNORECASE))
    said = "; ".join(named) or "torch not required"
    return declared.floor, declared.problem or said


def _requires_dist(archive: Path) -> list[str]:
    """The Requires-Dist lines of a wheel's METADATA or an sdist's PKG-INFO; else its egg-info requires.txt."""
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as zf:
            texts = {name: zf.read(name).decode("utf-8", "replace") for name in zf.namelist()
                     if name.endswith(".dist-info/METADATA")}
    else:
        with tarfile.open(archive) as tf:
            texts = {}
            for member in tf.getmembers():
                if member.isfile() and (member.name.count("/") == 1 and member.name.endswith("/PKG-INFO")
                                        or member.name.endswith(".egg-info/requires.txt")):
                    handle = tf.extractfile(member)
                    if handle is not None:
                        texts[member.name] = handle.read().decode("utf-8", "replace")
    for name, text in sorted(texts.items()):
        if name.endswith(("METADATA", "PKG-INFO")):
            lines = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]
            if lines:
                return lines
    for name, text in sorted(texts.items()):
        if name.endswith("requires.txt"):  # `[extra]` section headers are not requirements
            return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("[")]
    return []


# ---------------------------------------------------------------------------------------------
# The oracle: deprecated uses by line, independently of the engine


def _is_deprecated(qname: str | None, modules: tuple[str, ...] = DEPRECATED_MODULES) -> bool:
    return qname is not None and any(qname == m or qname.startswith(m + ".") for m in modules)


def _is_state_function(qname: str | None) -> bool:
    return _is_deprecated(qname, DEPRECATED_STATE_FUNCTIONS)


class DeprecatedUses(ast.NodeVisitor):
    """Lines with a deprecated use. Scopes: the module and each function (classes and
    comprehensions are not scopes here); a name bound in a function is local to it, as in Python.
    Each scope maps a name to the set of (what it is bound to, the import's line); the target is
    None for anything but an import."""

    def __init__(self, modules: tuple[str, ...] = DEPRECATED_MODULES) -> None:
        self.modules = modules  # what counts as deprecated (benchmarks/apex_corpus.py: apex's removed modules)
        self.qnames: dict[int, set[str]] = defaultdict(set)  # line -> the deprecated names used on it
        self.lines: set[int] = set()
        self.state_lines: set[int] = set()  # those with an autocast state function (a subset of `lines`)
        self.via_import: dict[int, set[int]] = defaultdict(set)  # use line -> its import's line(s)
        self._scopes: list[dict[str, set[tuple[str | None, int | None]]]] = []
        self._star = False

    def scan(self, tree: ast.Module) -> set[int]:
        # `from x import *` anywhere: a name no binding explains may be provided by it (research code gets
        # `torch` from `from models.common import *`); read as the module it spells, torch's only.
        self._star = any(isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names)
                         for node in ast.walk(tree))
        self._scopes.append(_bindings(tree.body))
        self.generic_visit(tree)
        return self.lines

    def _visit_function(self, node) -> None:
        for decorator in getattr(node, "decorator_list", ()):
            self.visit(decorator)
        for default in (*node.args.defaults, *node.args.kw_defaults):
            if default is not None:
                self.visit(default)
        for arg in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs,
                    node.args.vararg, node.args.kwarg):
            if arg is not None and arg.annotation is not None:
                self.visit(arg.annotation)
        if getattr(node, "returns", None) is not None:
            self.visit(node.returns)
        local = _bindings(node.body if isinstance(node.body, list) else [node.body])
        for arg in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs,
                    node.args.vararg, node.args.kwarg):
            if arg is not None:
                local.setdefault(arg.arg, set()).add((None, None))
        self._scopes.append(local)
        for statement in node.body if isinstance(node.body, list) else [node.body]:
            self.visit(statement)
        self._scopes.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _visit_function

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if _is_deprecated(alias.name, self.modules):
                self.lines.add(alias.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            return
        for alias in node.names:
            if _is_deprecated(f"{node.module}.{alias.name}", self.modules):
                self._add(alias.lineno, f"{node.module}.{alias.name}")

    def _add(self, line: int, qname: str | None) -> None:
        self.lines.add(line)
        if _is_state_function(qname):
            self.state_lines.add(line)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if self._found(node):
            return  # the chain is counted once, at its start
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self._found(node)

    def _found(self, node: ast.expr) -> bool:
        qname, import_lines = self._resolve(node)
        if not _is_deprecated(qname, self.modules):
            return False
        assert qname is not None
        self._add(node.lineno, qname)
        self.qnames[node.lineno].add(qname)
        self.via_import[node.lineno].update(import_lines)
        return True

    def visit_Constant(self, node: ast.Constant) -> None:
        if not isinstance(node.value, str) or ("amp" not in node.value and "_autocast_" not in node.value):
            return
        text = node.value.strip()
        if _DOTTED.fullmatch(text) and _is_deprecated(text, self.modules):  # "torch.cuda.amp.autocast"
            self._add(node.lineno, text)
            return
        try:  # a string annotation: "Optional[amp.GradScaler]" with `from torch.cuda import amp`
            expression = ast.parse(text, mode="eval") if len(text) < 300 else None
        except (SyntaxError, ValueError):
            return
        chains = [n for n in ast.walk(expression) if isinstance(n, ast.Attribute)] if expression else []
        qnames = [self._resolve(chain)[0] for chain in chains]
        if any(_is_deprecated(q, self.modules) for q in qnames):
            self.lines.add(node.lineno)
            if any(_is_state_function(q) for q in qnames):
                self.state_lines.add(node.lineno)

    def _resolve(self, node: ast.expr) -> tuple[str | None, list[int]]:
        """The dotted name the chain resolves to, and the lines of the imports it goes through."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None, []
        for scope in reversed(self._scopes):
            if node.id in scope:
                resolved = [(".".join([target, *reversed(parts)]), line)
                            for target, line in scope[node.id] if target is not None]
                # Several bindings: deprecated if any is (the oracle errs towards finding more).
                deprecated = [(q, line) for q, line in resolved if _is_deprecated(q, self.modules)]
                if deprecated:
                    return deprecated[0][0], [line for _, line in deprecated]
                return (resolved[0][0] if resolved else None), []
        if self._star and node.id == "torch":
            return ".".join(["torch", *reversed(parts)]), []
        return None, []


def _bindings(body: list[ast.stmt]) -> dict[str, set[tuple[str | None, int | None]]]:
    """What each name is bound to in one scope (not descending into nested functions)."""
    bound: dict[str, set[tuple[str | None, int | None]]] = defaultdict(set)
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname].add((alias.name, alias.lineno))
                else:
                    head = alias.name.split(".")[0]
                    bound[head].add((head, alias.lineno))
            continue
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                target = f"{node.module}.{alias.name}" if not node.level and alias.name != "*" else None
                if alias.name == "torch" and (node.level or not _is_deprecated(node.module, ("torch",))):
                    target = "torch"  # a re-export: thinc's `from ..compat import torch`
                bound[alias.asname or alias.name].add((target, alias.lineno))
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound[node.name].add((None, None))
            stack.extend(node.decorator_list)
            if isinstance(node, ast.ClassDef):
                stack.extend(node.body)  # class bodies are not scopes here
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            module = _dynamic_import(node.value)  # torch = __import__("torch"); m = importlib.import_module(...)
            if module is not None:
                bound[node.targets[0].id].add((module, node.lineno))
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound[node.id].add((None, None))
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound[node.name].add((None, None))
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return dict(bound)


def _dynamic_import(value: ast.expr) -> str | None:
    """The module an `__import__("a.b")` (binds `a`, or `a.b` with a fromlist) or an
    `importlib.import_module("a.b")` / `import_module("a.b")` call binds, or any other call whose first
    argument names torch or a module below it (a project's lazy import); None for anything else."""
    if not (isinstance(value, ast.Call) and value.args and isinstance(value.args[0], ast.Constant)
            and isinstance(value.args[0].value, str)):
        return None
    name, func = value.args[0].value, value.func
    if isinstance(func, ast.Name) and func.id == "__import__":
        fromlist = len(value.args) >= 4 or any(k.arg == "fromlist" for k in value.keywords)
        return name if fromlist else name.split(".")[0]
    if (isinstance(func, ast.Name) and func.id == "import_module"
            or isinstance(func, ast.Attribute) and func.attr == "import_module"
            and isinstance(func.value, ast.Name) and func.value.id == "importlib"):
        return name
    if name == "torch" or name.startswith("torch."):  # a lazy import: neural-compressor's `LazyImport("torch")`
        return name
    return None


def deprecated_lines(source: str) -> DeprecatedUses | None:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    uses = DeprecatedUses()
    uses.scan(tree)
    return uses


def text_matches(source: str) -> tuple[set[int], set[int]]:
    """Lines whose text matches the grep, and those where the match is in code (tokenize)."""
    text = {n for n, line in enumerate(source.splitlines(), 1) if _TEXT_MATCH.search(line)}
    if not text:
        return text, set()
    code_by_line: dict[int, list[str]] = defaultdict(list)
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type in (tokenize.NAME, tokenize.OP):
                code_by_line[token.start[0]].append(token.string)
    except (tokenize.TokenError, SyntaxError):
        return text, set()
    code = {n for n, tokens in code_by_line.items() if _CODE_MATCH.search(" ".join(tokens).replace(" . ", "."))}
    return text, code


def line_map(old: str, new: str) -> dict[int, set[int]]:
    """Old line number -> the new lines it became.

    Inside a changed block of the same length, line i became line i; in one of another length
    (an import split in two), each new line goes to the old line it is most similar to."""
    mapping: dict[int, set[int]] = defaultdict(set)
    old_lines, new_lines = old.splitlines(), new.splitlines()
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal" or i2 - i1 == j2 - j1:
            for i in range(i1, i2):
                mapping[i + 1].add(j1 + 1 + i - i1)
        elif i2 > i1:
            for j in range(j1, j2):
                closest = max(range(i1, i2), key=lambda i: difflib.SequenceMatcher(
                    None, old_lines[i], new_lines[j], autojunk=False).ratio())
                mapping[closest + 1].add(j + 1)
    return mapping


# ---------------------------------------------------------------------------------------------
# Measuring


_MASK = re.compile(r"`[^`]*`")


def reason_of(finding) -> str:
    message = _MASK.sub("`X`", finding.message)
    message = re.sub(r"\blines? \d+(?:, \d+)*", "line N", message)
    message = re.sub(r"\d+ positional", "N positional", message)
    return f"{finding.code} {message}"


@dataclass
class PackageResult:
    name: str
    files: int = 0
    candidates: int = 0  # files the engine found something in
    findings: int = 0  # the engine's findings, errors left out
    sites: int = 0  # fixed findings whose text changes: the summary's fixes
    followed: int = 0  # fixed uses that only follow their moved import (no text of their own)
    elsewhere: int = 0  # findings decided by a fact from another function or module (`decided_elsewhere`)
    by_flow: int = 0  # ... that a flow cut at its first step decides otherwise
    by_modules: int = 0  # ... that withholding the project's other modules decides otherwise
    elsewhere_fixed: int = 0  # ... of them fixed
    elsewhere_lines: int = 0  # deprecated lines (the oracle's) fixed, with such a fixed finding on them
    found: int = 0
    fixed: int = 0
    left: int = 0
    held: int = 0  # left because a rule needs a newer torch than the target (the declared floor)
    unreported: int = 0
    amp900_files: int = 0
    amp900_lines: int = 0
    broken: int = 0
    second_run_changed: int = 0
    check_fix_differ: int = 0
    claimed_fixed: int = 0  # lines a finding says were fixed, still deprecated, nothing open on them
    unparsable: int = 0
    grep_lines: int = 0
    code_miss: int = 0
    seconds: float = 0.0
    floor: str = "newest"  # the target torch measured at
    reasons: Counter = field(default_factory=Counter)
    details: list[dict] = field(default_factory=list)
    # The same figures for the lines with an autocast state function (counted in the columns above too).
    state_found: int = 0
    state_fixed: int = 0
    state_left: int = 0
    state_unreported: int = 0
    state_reasons: Counter = field(default_factory=Counter)
    # The same figures for notebooks (their code cells as `ampfix check` reads them; counted above too).
    notebooks: int = 0
    nb_found: int = 0
    nb_fixed: int = 0
    nb_left: int = 0
    nb_unreported: int = 0
    nb_cells_unparsable: int = 0  # cells that may hold a use and do not parse (AMP901 findings)


def _outcomes(result) -> set[tuple]:
    return {(f.line, f.col, f.code, f.fixed, f.fixable, f.unsafe) for f in result.findings}


class _FlowWithheld:
    """Every reference's flow cut at its first step, as if the engine did not follow references
    (`ampfix.syntax.flow`): patched on the class for the duration, so every planner asking sees it."""

    def __enter__(self):
        from ampfix.syntax import flow

        self._flow, self._follow = flow, flow.ModuleFlows.follow
        flow.ModuleFlows.follow = lambda _self, node, scope: flow.Flow(calls=(), escape="not followed")
        return self

    def __exit__(self, *exc) -> None:
        self._flow.ModuleFlows.follow = self._follow


def decided_elsewhere(source: str, options, project, fixed) -> tuple[list, set, set]:
    """The findings of `fixed` (the engine's result on `source` with `project`) whose outcome a fact from another
    function or module decides: (those findings, the ones only the flow decides otherwise, the ones only the
    project's modules do). The engine is run again without each fact; nothing in it is changed."""
    from ampfix.engine import fix_source

    if not fixed.findings:
        return [], set(), set()
    with _FlowWithheld():
        no_flow = _outcomes(fix_source(source, options, project))
    no_modules = _outcomes(fix_source(source, options, None)) if project is not None else None
    flow_decided, module_decided, decided = set(), set(), []
    for index, f in enumerate(fixed.findings):
        key = (f.line, f.col, f.code, f.fixed, f.fixable, f.unsafe)
        by_flow, by_modules = key not in no_flow, no_modules is not None and key not in no_modules
        if by_flow:
            flow_decided.add(index)
        if by_modules:
            module_decided.add(index)
        if by_flow or by_modules:
            decided.append(f)
    return decided, flow_decided, module_decided


_PROJECT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")  # ampfix.io.project_modules' markers


def project_root(path: Path, release: Path) -> Path:
    """The project a file of an unpacked release belongs to, as the CLI finds it (the nearest folder with a project
    file), but never above the release's folder: the cache lies inside this checkout, whose own pyproject.toml the
    CLI's walk would reach. An sdist's files are under its `name-version/` folder, next to its setup.py, which
    says the project ships its modules (a public GradScaler subclass may be constructed by code outside it)."""
    for folder in path.parents:
        if any((folder / marker).exists() for marker in _PROJECT_MARKERS):
            return folder
        if folder == release:
            break
    return release


def measure_file(path: Path, rel: str, result: PackageResult, options, root: Path | None = None) -> None:
    from ampfix.io.codec import NOTEBOOK_SUFFIX
    from ampfix.syntax.encoding import DECODE_ERRORS, decode_source  # the CLI's decoding: BOM, coding cookie

    if path.name.endswith(NOTEBOOK_SUFFIX):
        measure_notebook(path, rel, result, options)
        return
    data = path.read_bytes()
    try:
        source, _ = decode_source(data)
    except DECODE_ERRORS:
        result.unparsable += 1
        return
    result.files += 1
    from ampfix.io.project_modules import FileModules

    project = FileModules(path, project_root(path, root)) if root is not None else None
    measure_source(source, rel, result, options, project=project)


def measure_notebook(path: Path, rel: str, result: PackageResult, options) -> None:
    """A notebook as `ampfix check` reads it (ampfix.io.notebooks, the codec of ampfix.io.files): its code
    cells as one module, IPython syntax masked. The oracle and the line accounting run on that module; the
    output and the second run go through the codec (the new notebook decoded again). Counted in the
    package's columns, and again apart (`nb_*`)."""
    from ampfix.io.codec import DecodeError
    from ampfix.io.notebooks import NOTEBOOK

    try:
        decoded = NOTEBOOK.decode(path.read_bytes(), options.retargets)
    except DecodeError as error:
        result.unparsable += 1
        result.details.append({"category": "notebook not read", "file": rel, "line": 1, "text": "",
                               "message": error.message})
        return
    result.files += 1
    result.notebooks += 1
    for finding in decoded.findings:  # a cell that may hold a use and does not parse: left out, reported
        result.nb_cells_unparsable += 1
        result.details.append({"category": "notebook cell not parsed", "file": rel, "line": finding.line,
                               "text": f"cell {finding.cell}", "message": finding.message})
    before = (result.found, result.fixed, result.left, result.unreported)
    measure_source(decoded.source, rel, result, options, notebook=decoded)
    after = (result.found, result.fixed, result.left, result.unreported)
    result.nb_found, result.nb_fixed, result.nb_left, result.nb_unreported = (
        total + now - then for total, now, then in
        zip((result.nb_found, result.nb_fixed, result.nb_left, result.nb_unreported), after, before))


def _output_checked(fixed, options, notebook, project=None):
    """The output's problem (None: it parses), its line, and a second run's result (None where there is none).
    A notebook's output is the new notebook, decoded again by its codec."""
    from ampfix.engine import fix_source
    from ampfix.io.codec import DecodeError
    from ampfix.io.notebooks import NOTEBOOK

    if notebook is None:
        new_source = fixed.new_source
    else:
        converted = notebook.converted(fixed)
        if converted.new_text is None:
            return None, 1, None
        try:
            new_source = NOTEBOOK.decode(converted.new_text.encode("utf-8"), options.retargets).source
        except DecodeError as error:
            return f"the new notebook cannot be read: {error.message}", 1, None
    try:
        ast.parse(new_source)
    except (SyntaxError, ValueError) as error:
        return str(error), getattr(error, "lineno", 1) or 1, None
    return None, 1, fix_source(new_source, options, project)


def measure_source(source: str, rel: str, result: PackageResult, options, notebook=None, project=None) -> None:
    """One module through the engine and the oracle. `notebook`: the decoded notebook `source` is the module of;
    `project`: the package's other modules, as the CLI reads them (`ampfix.io.project_modules`)."""
    from ampfix.engine import INTERNAL_ERROR_CODE, SYNTAX_ERROR_CODE, check_source, fix_source

    lines = source.splitlines()

    def detail(category: str, line: int, **extra) -> None:
        text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
        result.details.append({"category": category, "file": rel, "line": line, "text": text, **extra})

    uses = deprecated_lines(source)
    grep_lines, code_lines = text_matches(source)
    result.grep_lines += len(grep_lines)
    if uses is None:
        result.unparsable += 1
    found = uses.lines if uses is not None else set()
    for line in sorted(code_lines - found):
        result.code_miss += 1
        detail("oracle missed (code matches the grep)", line)

    held_back = _held_back_at(options.target_torch)
    start = time.perf_counter()
    fixed = fix_source(source, options, project)
    checked = check_source(source, options, project)
    problem, problem_line, again = (_output_checked(fixed, options, notebook, project) if fixed.changed
                                    else (None, 1, None))
    result.seconds += time.perf_counter() - start

    if fixed.findings:
        result.candidates += 1
    engine = [f for f in fixed.findings if f.code not in (SYNTAX_ERROR_CODE, INTERNAL_ERROR_CODE)]
    result.findings += len(engine)
    result.sites += sum(1 for f in engine if f.fixed and not f.follows)
    result.followed += sum(1 for f in engine if f.fixed and f.follows)
    elsewhere, by_flow, by_modules = decided_elsewhere(source, options, project, fixed)
    result.elsewhere += len(elsewhere)
    result.by_flow += len(by_flow)
    result.by_modules += len(by_modules)
    result.elsewhere_fixed += sum(1 for f in elsewhere if f.fixed)
    owed = {f.line for f in elsewhere if f.fixed}
    if any(f.code == SYNTAX_ERROR_CODE for f in fixed.findings):
        return  # counted above as unparsable (the oracle cannot parse it either)
    internal = [f for f in fixed.findings if f.code == INTERNAL_ERROR_CODE]
    if notebook is not None and fixed.changed:  # the cells told apart after the rewrite, or an AMP900
        internal += [f for f in notebook.converted(fixed).findings if f.code == INTERNAL_ERROR_CODE]
    if internal:
        result.amp900_files += 1
        result.amp900_lines += len(found)
        detail("AMP900", internal[0].line, message=internal[0].message)
    fixed_keys = {(f.line, f.code, f.fixable) for f in fixed.findings if f.code != INTERNAL_ERROR_CODE}
    if {(f.line, f.code, f.fixable) for f in checked.findings} != fixed_keys:
        result.check_fix_differ += 1
        detail("check and fix disagree", 1)
    if fixed.changed:
        if problem is not None:
            result.broken += 1
            detail("broken output", problem_line, message=problem)
        if again is not None and again.changed:
            result.second_run_changed += 1
            detail("changed by a second run", 1, diff=again.diff(rel)[:2000])

    result.found += len(found)
    state = uses.state_lines if uses is not None else set()
    result.state_found += len(state)
    if internal:
        return
    if fixed.changed:
        after_uses = deprecated_lines(fixed.new_source)
        after = after_uses.lines if after_uses is not None else set()
        mapping = line_map(source, fixed.new_source)
    else:
        after, mapping = found, {n: {n} for n in found}
    open_findings: dict[int, list] = defaultdict(list)
    for finding in fixed.findings:
        if not finding.fixed:
            open_findings[finding.line].append(finding)
    for line in sorted(found):
        # A use of a name whose import is reported and left counts as reported there (the engine
        # reports a name with no twin once, at its import).
        at_import = [f for i in sorted(uses.via_import.get(line, ())) for f in open_findings.get(i, ())]
        if not any(n in after for n in mapping.get(line, ())):
            result.fixed += 1
            result.elsewhere_lines += line in owed
            result.state_fixed += line in state
            continue
        claimed = [f for f in fixed.findings if f.line == line and f.fixed]
        if claimed and not open_findings.get(line):
            result.claimed_fixed += 1
            detail("a finding says fixed, the line still has a deprecated use", line,
                   message=claimed[0].message)
        if open_findings.get(line) or at_import:
            finding = (open_findings.get(line) or at_import)[0]
            if held_back(finding):
                result.held += 1
                detail("held back by the floor", line, message=finding.message)
                continue
            result.left += 1
            reason = ("" if open_findings.get(line) else "(at its import) ") + reason_of(finding)
            result.reasons[reason] += 1
            if line in state:
                result.state_left += 1
                result.state_reasons[reason] += 1
            detail(f"left: {reason}", line, message=finding.message)
        else:
            result.unreported += 1
            result.state_unreported += line in state
            detail("unreported", line, findings=[f"{f.code} fixed={f.fixed} {f.message}"
                                                 for f in fixed.findings if f.line == line])


def _held_back_at(target: tuple[int, int] | None):
    """Whether a finding is left because a fix needs a newer torch than `target` (as `rewrite` says it)."""
    from ampfix.io.files import held_back_at

    return (lambda finding: False) if target is None else held_back_at(target)


def measure_package(name: str, tree: Path, options) -> PackageResult:
    from ampfix.io.files import FileResult, discover

    result = PackageResult(name)
    if options.target_torch is not None:
        result.floor = ".".join(map(str, options.target_torch))
    for path in discover([tree]):
        if isinstance(path, FileResult):  # a folder that cannot be read
            raise SystemExit(f"{path.path}: {path.error}")
        measure_file(path, str(path.relative_to(tree)), result, options, tree.resolve())
    return result


# ---------------------------------------------------------------------------------------------
# Reporting

COLUMNS = (("package", "name", "<"), ("target", "floor", ">"), ("files", "files", ">"),
           ("w/ findings", "candidates", ">"),
           ("findings", "findings", ">"), ("changed sites", "sites", ">"), ("followed", "followed", ">"),
           ("elsewhere", "elsewhere", ">"), ("by flow", "by_flow", ">"), ("by modules", "by_modules", ">"),
           ("elsewhere fixed", "elsewhere_fixed", ">"), ("lines owed", "elsewhere_lines", ">"),
           ("found", "found", ">"), ("fixed", "fixed", ">"), ("fixed %", None, ">"),
           ("left+rep.", "left", ">"), ("held (floor)", "held", ">"), ("unrep.", "unreported", ">"),
           ("AMP900 files/lines", None, ">"), ("broken", "broken", ">"),
           ("2nd run", "second_run_changed", ">"), ("check!=fix", "check_fix_differ", ">"),
           ("false fixed", "claimed_fixed", ">"),
           ("unparsable", "unparsable", ">"), ("grep", "grep_lines", ">"),
           ("code miss", "code_miss", ">"), ("engine s", None, ">"))


def _cells(r: PackageResult) -> list[str]:
    cells = []
    for title, attr, _ in COLUMNS:
        if title == "fixed %":
            cells.append(f"{100 * r.fixed / r.found:.1f}" if r.found else "-")
        elif title.startswith("AMP900"):
            cells.append(f"{r.amp900_files}/{r.amp900_lines}")
        elif title == "engine s":
            cells.append(f"{r.seconds:.2f}")
        else:
            cells.append(str(getattr(r, attr)))
    return cells


def render(results: list[PackageResult], total: PackageResult) -> str:
    rows = [[c[0] for c in COLUMNS]] + [_cells(r) for r in results] + [_cells(total)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]

    def line(row: list[str]) -> str:
        return "| " + " | ".join(cell.ljust(w) if c[2] == "<" else cell.rjust(w)
                                 for cell, w, c in zip(row, widths, COLUMNS)) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if c[2] == ">" else "-" * (w + 2)
                          for w, c in zip(widths, COLUMNS)) + "|"
    return "\n".join([line(rows[0]), rule, *map(line, rows[1:-1]), line(rows[-1])])


APART = (("package", "name"), ("state found", "state_found"), ("state fixed", "state_fixed"),
         ("state left", "state_left"), ("state unrep.", "state_unreported"), ("notebooks", "notebooks"),
         ("nb found", "nb_found"), ("nb fixed", "nb_fixed"), ("nb left", "nb_left"), ("nb unrep.", "nb_unreported"),
         ("cells not parsed", "nb_cells_unparsable"))


def render_apart(results: list[PackageResult], total: PackageResult) -> str:
    """The state functions' and the notebooks' own figures, per package (the main table counts them too)."""
    rows = [[title for title, _ in APART]] + [[str(getattr(r, attr)) for _, attr in APART] for r in [*results, total]]
    widths = [max(len(row[i]) for row in rows) for i in range(len(APART))]
    lines = ["| " + " | ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))) + " |"
             for row in rows]
    rule = "|" + "|".join("-" * (w + 2) if i == 0 else "-" * (w + 1) + ":" for i, w in enumerate(widths)) + "|"
    return "\n".join([lines[0], rule, *lines[1:]])


def totals(results: list[PackageResult]) -> PackageResult:
    total = PackageResult("**total**", floor="")
    for r in results:
        for attr, value in vars(r).items():
            if isinstance(value, (int, float)) and attr != "name":
                setattr(total, attr, getattr(total, attr) + value)
        total.reasons.update(r.reasons)
        total.state_reasons.update(r.state_reasons)
        total.details.extend({"package": r.name, **d} for d in r.details)
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--offline", action="store_true", help="use the cache only")
    parser.add_argument("--only", action="append", default=[], help="a package name (repeatable)")
    parser.add_argument("--unsafe-fixes", action="store_true")
    parser.add_argument("--details", action="store_true", help="list every line not fixed, and every error")
    parser.add_argument("--json", type=Path, help="write every result and detail here")
    args = parser.parse_args(argv)

    from dataclasses import replace

    from ampfix.core.options import Options

    options = Options(unsafe_fixes=args.unsafe_fixes)
    chosen = [(req, kind) for req, kind in PACKAGES
              if not args.only or req.split("==")[0] in args.only]
    trees = [(requirement, fetch(requirement, kind, args.cache, args.offline)) for requirement, kind in chosen]
    floors = {requirement: declared_floor(requirement, args.cache) for requirement, _ in trees}
    started = time.perf_counter()
    passes = {}
    for name, floor_of in (("newest", lambda requirement: None), ("floor", lambda requirement: floors[requirement][0])):
        results = []
        for requirement, tree in trees:
            results.append(measure_package(requirement, tree, replace(options, target_torch=floor_of(requirement))))
            print(f"measured {requirement} ({name})", file=sys.stderr)
        passes[name] = (results, totals(results))
    wall = time.perf_counter() - started

    what = "--unsafe-fixes" if args.unsafe_fixes else "default (safe) options"
    print("the torch each release declares (its metadata's Requires-Dist):")
    for requirement, (floor, said) in floors.items():
        print(f"  {requirement}: {'-' if floor is None else '.'.join(map(str, floor))}  ({said})")
    for name, title in (("newest", "at the newest torch"), ("floor", "at each release's declared floor")):
        results, total = passes[name]
        print()
        print(f"ampfix engine on {len(results)} releases, {what}, {title}; lines with a deprecated use")
        print()
        print(render(results, total))
        print()
        print("left and reported, by reason (code, message with names masked):")
        for reason, count in total.reasons.most_common():
            print(f"  {count:4d}  {reason}")
        print(f"of which the autocast state functions (torch.get_autocast_gpu_dtype() and siblings): found "
              f"{total.state_found}, fixed {total.state_fixed}, left and reported {total.state_left}, "
              f"unreported {total.state_unreported}; left by reason:")
        for reason, count in total.state_reasons.most_common():
            print(f"  {count:4d}  {reason}")
        print()
        print("per package: the autocast state functions, the notebooks, and the lines left by reason")
        print()
        print(render_apart(results, total))
        print()
        for r in results:
            for reason, count in r.reasons.most_common():
                print(f"  {r.name}: {count:3d}  {reason}")
    newest_total = passes["newest"][1]
    if args.details:
        print()
        for name in passes:
            for d in sorted(passes[name][1].details, key=lambda d: (d["category"], d["package"], d["file"], d["line"])):
                if name == "floor" and d["category"] != "held back by the floor":
                    continue  # the rest is the newest pass's, listed above it
                print(f"[{d['category']}] {d['package']} {d['file']}:{d['line']}: {d['text']}")
                for key in ("message", "findings", "diff"):
                    if d.get(key):
                        print(f"    {key}: {d[key]}")
    print()
    print(f"wall time {wall:.1f} s for both passes, downloads excluded (engine: fix, check and the second fix, "
          f"{sum(total.seconds for _, total in passes.values()):.1f} s); python {sys.version.split()[0]}")
    if args.json:
        args.json.write_text(json.dumps({
            name: {"packages": [{k: v for k, v in vars(r).items() if k not in ("details",)} for r in results],
                   "details": total.details}
            for name, (results, total) in passes.items()} | {"wall_s": wall, "floors": floors}, indent=1, default=str))
    targets_met = (newest_total.amp900_files == 0 and newest_total.broken == 0 and newest_total.unreported == 0
                   and newest_total.found and newest_total.fixed / newest_total.found >= 0.92)
    print("targets at the newest torch (0 AMP900, 0 broken, 0 unreported, >= 92% fixed):",
          "met" if targets_met else "NOT met")
    floor_total = passes["floor"][1]
    floor_met = floor_total.amp900_files == 0 and floor_total.broken == 0 and floor_total.unreported == 0
    print("targets at the floors (0 AMP900, 0 broken, 0 unreported):", "met" if floor_met else "NOT met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
