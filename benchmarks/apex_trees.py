"""The apex migration on whole project trees, as a new user runs it: `ampfix rewrite` from each project's folder.

    python benchmarks/apex_trees.py --mirror NVIDIA/apex=GITDIR --mirror NVIDIA/DeepLearningExamples=GITDIR ...
    python benchmarks/apex_trees.py --apex-opt-level O1          # the project's declared opt level (docs/apex.md)
    python benchmarks/apex_trees.py --details                    # every training file: clean, or what is left and why

The successor of benchmarks/apex_corpus.py for issue 44: that one runs the engine file by file on PyPI releases;
this one runs the CLI on the trees the issue measured (NVIDIA's DeepLearningExamples model folders, apex's own
examples, dinov2, vissl), each at a fixed commit. A tree is not fetched by this script: give `--mirror
OWNER/NAME=GITDIR` (a clone or bare mirror holding the commit; its folders are taken with `git archive`), or lay
them in `<cache>/<name>-<short>/` by hand. Each listed folder is one project (a DeepLearningExamples model is a
project of its own: the repository is a collection, not one program), copied to a temporary folder with a `.git`
marker at its top, then, from there:

- `ampfix rewrite [--unsafe-fixes] [--apex-opt-level L] --output-format json .` (the default mode, then
  --unsafe-fixes, each on a fresh copy), and `ampfix check` with the same flags on the rewritten copy;
- per file that uses a removed apex module before (benchmarks/corpus.py's oracle, stdlib `ast`, as
  benchmarks/apex_corpus.py): **trains with apex.amp** (calls `initialize` or `scale_loss`), **no apex.amp left**
  (the oracle finds no use of `apex.amp` in the rewritten file), **broken** (the rewritten file does not parse),
  **unreported** (a line of the rewritten file where the oracle finds a removed apex module and the check gives no
  AMP1xx finding on it), **AMP900**; a training file with apex.amp left is counted by the reason its rewrite
  finding gave (`not rewritten: ...`, names masked), as apex_corpus.py counts them.

Not part of the test suite: it reads trees nobody here wrote, and takes a minute or two.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from apex_corpus import AMP, REMOVED, TRAINING, _uses, _why_left  # noqa: E402

DEFAULT_CACHE = HERE / ".corpus" / "apex_trees"
AMPFIX = [sys.executable, "-m", "ampfix"]


@dataclass(frozen=True)
class Tree:
    name: str
    repo: str  # OWNER/NAME on GitHub
    commit: str
    projects: tuple[str, ...]  # the folders measured, each a project of its own ("" : the whole tree)


TREES: tuple[Tree, ...] = (
    # The last commit before apex moved its own examples to torch.amp (c54dbd3a, 2025-09-05).
    Tree("apex", "NVIDIA/apex", "eae1ddf1f3982c41632fe332a04b0d41953d5234",
         ("examples/imagenet", "examples/dcgan", "examples/simple/distributed")),
    # Every PyTorch model folder that uses a removed apex module (grep of the tree; MXNet's `amp` is not apex's).
    Tree("DeepLearningExamples", "NVIDIA/DeepLearningExamples", "729963dd47e7c8bd462ad10bfac7a7b0b604e6dd",
         ("CUDA-Optimized/FastSpeech", "PyTorch/Classification/GPUNet", "PyTorch/Detection/SSD",
          "PyTorch/LanguageModeling/BART", "PyTorch/LanguageModeling/BERT", "PyTorch/LanguageModeling/Transformer-XL",
          "PyTorch/Recommendation/DLRM", "PyTorch/Segmentation/MaskRCNN", "PyTorch/SpeechRecognition/Jasper",
          "PyTorch/SpeechSynthesis/Tacotron2", "PyTorch/Translation/GNMT", "PyTorch/Translation/Transformer",
          "Tools/PyTorch/TimeSeriesPredictionPlatform")),
    Tree("dinov2", "facebookresearch/dinov2", "b8931f7bf91576930313be2c6d6af376033b35f0", ("",)),
    # vissl trains with apex.amp through classy_vision's task (another package): no file of its own is counted. Its
    # package and tools only (the snapshot measured lacks a tutorial notebook's blob).
    Tree("vissl", "facebookresearch/vissl", "09270ed25a6c2cf71263d955b64cbe076d34ac45", ("vissl", "tools")),
)


@dataclass
class Counts:
    apex_files: int = 0
    training: int = 0
    clean: int = 0
    broken: int = 0
    unreported: int = 0
    amp900: int = 0
    reasons: Counter = field(default_factory=Counter)
    details: list[str] = field(default_factory=list)


def tree_of(tree: Tree, cache: Path, mirrors: dict[str, str]) -> Path:
    folder = cache / f"{tree.name}-{tree.commit[:8]}"
    if (folder / ".complete").exists():
        return folder
    if tree.repo not in mirrors:
        raise SystemExit(f"{tree.repo}: not in {folder}; give --mirror {tree.repo}=GITDIR (a clone holding "
                         f"{tree.commit})")
    folder.mkdir(parents=True, exist_ok=True)
    paths = [p for p in tree.projects if p] or []
    archive = subprocess.run(["git", "--git-dir", mirrors[tree.repo], "archive", tree.commit, "--", *paths],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    (folder / ".complete").touch()
    return folder


def _ampfix(command: str, root: Path, flags: list[str]) -> list[dict]:
    done = subprocess.run([*AMPFIX, command, *flags, "--no-cache", "--output-format", "json", "."], cwd=root,
                          capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"ampfix {command} in {root}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return json.loads(done.stdout or "[]")


def measure_project(project: Path, label: str, flags: list[str], counts: Counts) -> None:
    before = {path.relative_to(project).as_posix(): path.read_text(encoding="utf-8", errors="replace")
              for path in sorted(project.rglob("*.py"))}
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "project"
        shutil.copytree(project, root)
        (root / ".git").mkdir()
        rewritten = _ampfix("rewrite", root, flags)
        checked = _ampfix("check", root, flags)
        after = {rel: (root / rel).read_text(encoding="utf-8", errors="replace") for rel in before}
    by_path: dict[str, list] = {}
    for row in rewritten:
        by_path.setdefault(row["path"], []).append(SimpleNamespace(**row))
    open_lines = {(row["path"], row["line"]) for row in checked if row["code"].startswith("AMP1")}
    for rel, source in before.items():
        uses = _uses(source, REMOVED)
        if uses is None or not uses.lines:
            continue
        counts.apex_files += 1
        name = f"{label}/{rel}" if label else rel
        findings = by_path.get(rel, [])
        if any(f.code == "AMP900" for f in findings):
            counts.amp900 += 1
            counts.details.append(f"AMP900 {name}")
        output = after[rel]
        left = _uses(output, REMOVED)
        if left is None:
            counts.broken += 1
            counts.details.append(f"broken {name}")
            continue
        for line in sorted(left.lines):
            if (rel, line) not in open_lines:
                counts.unreported += 1
                counts.details.append(f"unreported {name}:{line}: {output.splitlines()[line - 1].strip()}")
        if not any(q.startswith(TRAINING) for names in uses.qnames.values() for q in names):
            continue
        counts.training += 1
        amp_left = _uses(output, AMP)
        if amp_left is not None and not amp_left.lines:
            counts.clean += 1
            counts.details.append(f"clean {name}")
        else:
            why = _why_left(findings)
            counts.reasons[why] += 1
            counts.details.append(f"left {name}: {why}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--mirror", action="append", default=[], metavar="OWNER/NAME=GITDIR")
    parser.add_argument("--apex-opt-level", choices=("O1", "O2"))
    parser.add_argument("--details", action="store_true")
    args = parser.parse_args(argv)
    mirrors = dict(item.split("=", 1) for item in args.mirror)
    declared = ["--apex-opt-level", args.apex_opt_level] if args.apex_opt_level else []
    modes = {"default": declared, "unsafe": ["--unsafe-fixes", *declared]}
    print(f"declared opt level: {args.apex_opt_level or 'none'}\n")
    print("| tree | apex files | train with apex.amp | no apex.amp left (default) | (--unsafe-fixes) | unreported "
          "| AMP900 | broken |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    totals = {mode: Counts() for mode in modes}
    for tree in TREES:
        folder = tree_of(tree, args.cache, mirrors)
        per_mode = {mode: Counts() for mode in modes}
        for mode, flags in modes.items():
            for project in tree.projects:
                measure_project(folder / project, project, flags, per_mode[mode])
        _row(tree.name, per_mode)
        for mode, counts in per_mode.items():
            total = totals[mode]
            for attr in ("apex_files", "training", "clean", "broken", "unreported", "amp900"):
                setattr(total, attr, getattr(total, attr) + getattr(counts, attr))
            total.reasons.update(counts.reasons)
            total.details.extend(f"{tree.name} ({mode}): {d}" for d in counts.details)
    _row("**total**", totals)
    for mode, total in totals.items():
        print(f"\nwhy apex.amp is left ({mode}), files:")
        for why, count in total.reasons.most_common():
            print(f"  {count:3d}  {why}")
    if args.details:
        print()
        print("\n".join(d for total in totals.values() for d in total.details))
    return 0


def _row(name: str, per_mode: dict[str, Counts]) -> None:
    default, unsafe = per_mode["default"], per_mode["unsafe"]

    def share(counts: Counts) -> str:
        return f"{counts.clean}/{counts.training} ({100 * counts.clean / counts.training:.0f}%)" \
            if counts.training else "-"

    print(f"| {name} | {default.apex_files} | {default.training} | {share(default)} | {share(unsafe)} "
          f"| {default.unreported + unsafe.unreported} | {default.amp900 + unsafe.amp900} "
          f"| {default.broken + unsafe.broken} |")


if __name__ == "__main__":
    sys.exit(main())
