"""The apex migration on real code: old releases on PyPI whose trainers and examples trained with NVIDIA apex.

    python benchmarks/apex_corpus.py                  # download what is missing, unpack, measure
    python benchmarks/apex_corpus.py --offline        # the cache only
    python benchmarks/apex_corpus.py --details        # every file that trains with apex, what is left and why
    python benchmarks/apex_corpus.py --apex-opt-level O1   # the opt level a project declares (docs/apex.md)

Releases are fetched as benchmarks/corpus.py fetches them (`pip download --no-deps`), into
benchmarks/.corpus/apex/ (gitignored; `--cache DIR` for another folder), never into the repository's history. apex's own canonical example
(examples/simple/distributed/distributed_data_parallel.py, not on PyPI) is measured too when a copy lies in
`<cache>/extra/` (any .py file there).

What is measured, on every .py file that uses one of apex's removed modules (`apex.amp`, `apex.parallel`,
`apex.fp16_utils`), found by the oracle of benchmarks/corpus.py (stdlib `ast`, no code shared with the engine)
given those modules:

- **trains with apex**: the file calls `apex.amp.initialize` or `apex.amp.scale_loss`. Those whose every
  initialize is given no optimizer and that hold no scale_loss (a model run in mixed precision for inference)
  are counted apart too, and the shares are printed without them.
- **no apex.amp left**: after `fix_source` (default options, then --unsafe-fixes) the oracle finds no use of
  `apex.amp` in the output (imports included). The rest are counted by the reason the engine gave: the
  `not rewritten: ...` part of the initialize (or scale_loss) finding.
- **unreported**: lines of the output where the oracle finds a use of a removed apex module and `check_source` on
  the output gives no AMP1xx finding on that line. Target 0.
- **AMP900** (internal errors) and **broken** outputs (`ast.parse` rejects them). Target 0.
- **decided elsewhere**: findings whose outcome a fact from another function or module decides, told apart as
  benchmarks/corpus.py tells them (`decided_elsewhere`: the file measured again with the project's other modules
  withheld, and with every reference's flow cut at its first step), per mode.

Each release's unpacked tree is its project: a file's questions about its other modules are answered from it
(`ampfix.io.project_modules.FileModules`), as `ampfix check` answers them in a checkout.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from corpus import DeprecatedUses, decided_elsewhere, fetch, project_root

# Beside benchmarks/corpus.py's cache (benchmarks/.corpus/, gitignored); `--cache DIR` for a shared one.
DEFAULT_CACHE = Path(__file__).resolve().parent / ".corpus" / "apex"

# (requirement, "wheel" | "sdist"): releases checked (grep of what was downloaded) to train with apex.amp.
PACKAGES: tuple[tuple[str, str], ...] = (
    ("transformers==3.0.2", "sdist"),  # trainer.py (the sdist ships no examples/)
    ("transformers==2.11.0", "sdist"),
    ("simpletransformers==0.40.0", "wheel"),
    ("allennlp==1.0.0", "wheel"),
    ("pytorch-lightning==1.2.10", "wheel"),
    ("nemo_toolkit==0.10.1", "wheel"),
    ("flair==0.4.5", "wheel"),
    ("espnet==0.9.0", "wheel"),
    ("farm==0.4.9", "wheel"),
    ("pytorch-lightning==0.9.0", "wheel"),
    ("catalyst==20.2.4", "wheel"),
    # SentenceTransformer.fit: initialize in a loop over several objectives. 0.3.4 is the last release that uses
    # apex.amp (0.3.5 moved to torch.cuda.amp); 0.2.6.2's fit holds the same apex code, so it is not added too.
    ("sentence-transformers==0.3.4", "sdist"),
    # Trainer classes whose set-up and step are methods of one class (classy_vision's ClassificationTask,
    # DeepSpeed's engine) and a distillation library's training loops. vissl 0.1.5 also trains with apex.amp,
    # but its wheel bundles a copy of classy_vision, which would count twice.
    ("classy_vision==0.4.0", "sdist"),
    ("deepspeed==0.3.16", "sdist"),
    ("torchdistill==0.1.0", "sdist"),
    # A fork of transformers 3.x's Trainer whose adapter fusion adds a regularization loss with a plain
    # `.backward()` beside scale_loss (branch apexhunt). flair 0.5.1 and 0.6.1 also train with apex.amp, but their
    # trainers are 0.4.5's again, so they are not counted twice.
    ("adapter-transformers==1.0.1", "wheel"),
)

AMP = ("apex.amp",)
REMOVED = ("apex.amp", "apex.parallel", "apex.fp16_utils")
TRAINING = ("apex.amp.initialize", "apex.amp.scale_loss")
SET_UP, STEP = TRAINING
_MASK = re.compile(r"`[^`]*`")
_AMP_CODES = ("AMP100", "AMP101", "AMP102", "AMP103", "AMP104")


@dataclass
class Result:
    name: str
    apex_files: int = 0  # files using a removed apex module
    training: int = 0  # ... that train with apex.amp
    whole: int = 0  # ... that hold both initialize and scale_loss (the rest hold half a set-up: its other half is in another module)
    inference: int = 0  # ... whose every initialize is given no optimizer, with no scale_loss: mixed precision for inference
    clean: dict[str, int] = field(default_factory=lambda: {"default": 0, "unsafe": 0})
    clean_whole: dict[str, int] = field(default_factory=lambda: {"default": 0, "unsafe": 0})
    unreported: int = 0
    amp900: int = 0
    broken: int = 0
    reasons: dict[str, Counter] = field(default_factory=lambda: {"default": Counter(), "unsafe": Counter()})
    # per mode: [findings decided elsewhere, by flow, by the project's modules, of them fixed]
    elsewhere: dict[str, list[int]] = field(default_factory=lambda: {"default": [0] * 4, "unsafe": [0] * 4})
    details: list[str] = field(default_factory=list)


def _uses(source: str, modules: tuple[str, ...]) -> DeprecatedUses | None:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    uses = DeprecatedUses(modules)
    uses.scan(tree)
    return uses


def _why_left(findings) -> str:
    """The reason the engine gave for not rewriting: the `not rewritten: ...` of a finding, names masked."""
    amp_first = sorted(findings, key=lambda f: f.code not in _AMP_CODES)  # the pattern's reason, not apex.parallel's
    for finding in amp_first:
        _, found, why = finding.message.partition("not rewritten: ")
        if found and not finding.fixed:
            return _MASK.sub("`X`", why)
    codes = sorted({f.code for f in findings if not f.fixed and f.code.startswith("AMP1")})
    return "no pattern reason given; open: " + ", ".join(codes)


def _initialize_without_optimizer(source: str, uses: DeprecatedUses) -> bool:
    """Is every call of apex.amp.initialize given no optimizer (`initialize(model, opt_level=...)`,
    `optimizers=None`)? Such a file runs a model in mixed precision; it trains nothing with apex."""
    lines = {line for line, names in uses.qnames.items() if any(q.startswith(SET_UP) for q in names)}
    calls = [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
             and node.func.lineno in lines and (getattr(node.func, "attr", None) or getattr(node.func, "id", None))
             == SET_UP.rpartition(".")[2]]
    given = [node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "optimizers"), None)
             for node in calls]
    return bool(calls) and all(g is None or isinstance(g, ast.Constant) and g.value is None for g in given)


def measure(path: Path, rel: str, result: Result, root: Path | None = None, level: str | None = None) -> None:
    from ampfix.core.options import Options
    from ampfix.engine import INTERNAL_ERROR_CODE, check_source, fix_source
    from ampfix.io.project_modules import FileModules

    project = FileModules(path, project_root(path, root)) if root is not None else None

    try:
        source = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return
    uses = _uses(source, REMOVED)
    if uses is None or not uses.lines:
        return
    result.apex_files += 1
    called = {q for names in uses.qnames.values() for q in names}
    training = any(q.startswith(TRAINING) for q in called)
    whole = any(q.startswith(SET_UP) for q in called) and any(q.startswith(STEP) for q in called)
    result.training += training
    result.whole += whole
    inference = training and not any(q.startswith(STEP) for q in called) and _initialize_without_optimizer(source, uses)
    result.inference += inference
    for mode, options in (("default", Options(apex_opt_level=level)),
                          ("unsafe", Options(unsafe_fixes=True, apex_opt_level=level))):
        try:  # the CLI turns an exception into AMP900 per file; the engine called directly raises it
            fixed = fix_source(source, options, project)
            internal = [f.message for f in fixed.findings if f.code == INTERNAL_ERROR_CODE]
            decided, by_flow, by_modules = decided_elsewhere(source, options, project, fixed)
        except Exception as error:  # noqa: BLE001 - any internal error is what is counted
            internal = [f"{type(error).__name__}: {error}"]
        if internal:
            result.amp900 += 1
            result.details.append(f"AMP900 {rel} ({mode}): {internal[0]}")
            continue
        for index, count in enumerate((len(decided), len(by_flow), len(by_modules), sum(f.fixed for f in decided))):
            result.elsewhere[mode][index] += count
        for f in decided:
            result.details.append(f"decided elsewhere {rel}:{f.line} ({mode}): {f.code} fixed={f.fixed} {f.message[:200]}")
        output = fixed.new_source
        after = _uses(output, REMOVED)
        if after is None:
            result.broken += 1
            result.details.append(f"broken {rel} ({mode})")
            continue
        open_lines = {f.line for f in check_source(output, options, project).findings if f.code.startswith("AMP1")}
        for line in sorted(after.lines - open_lines):
            result.unreported += 1
            result.details.append(f"unreported {rel}:{line} ({mode}): {output.splitlines()[line - 1].strip()}")
        if not training:
            continue
        amp_after = _uses(output, AMP)
        if amp_after is not None and not amp_after.lines:
            result.clean[mode] += 1
            result.clean_whole[mode] += whole
            result.details.append(f"clean {rel} ({mode})")
        else:
            why = _why_left(fixed.findings)
            result.reasons[mode][why] += 1
            result.details.append(f"left {rel} ({mode}{'' if whole else ', half a set-up'}): {why}")


def measure_tree(name: str, tree: Path, level: str | None = None) -> Result:
    result = Result(name)
    root = tree.resolve()
    for path in sorted(tree.rglob("*.py")):
        measure(path, str(path.relative_to(tree)), result, root, level)
    return result


def _percent(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--offline", action="store_true")
    parser.add_argument("--details", action="store_true")
    parser.add_argument("--apex-opt-level", choices=("O1", "O2"), help="the opt level declared (docs/apex.md)")
    args = parser.parse_args(argv)
    trees = [(req, fetch(req, kind, args.cache / kind, args.offline)) for req, kind in PACKAGES]
    if (args.cache / "extra").is_dir():
        trees.append(("apex examples (extra/)", args.cache / "extra"))
    results = [measure_tree(name, tree, args.apex_opt_level) for name, tree in trees]
    print("| release | apex files | train with apex.amp | no apex.amp left (default) | (--unsafe-fixes) "
          "| unreported | AMP900 | broken |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    total = Result("**total**")
    for r in [*results, total]:
        if r is not total:
            for attr in ("apex_files", "training", "whole", "inference", "unreported", "amp900", "broken"):
                setattr(total, attr, getattr(total, attr) + getattr(r, attr))
            for mode in ("default", "unsafe"):
                total.clean[mode] += r.clean[mode]
                total.clean_whole[mode] += r.clean_whole[mode]
                total.reasons[mode].update(r.reasons[mode])
                total.elsewhere[mode] = [a + b for a, b in zip(total.elsewhere[mode], r.elsewhere[mode])]
            total.details.extend(f"{r.name}: {d}" for d in r.details)
        print(f"| {r.name} | {r.apex_files} | {r.training} | {_percent(r.clean['default'], r.training)} "
              f"| {_percent(r.clean['unsafe'], r.training)} | {r.unreported} | {r.amp900} | {r.broken} |")
    print(f"\nof the {total.training} files that train with apex.amp, {total.whole} hold both initialize and scale_loss; "
          f"the other {total.training - total.whole} hold half a set-up whose other half is in another module.")
    trained = total.training - total.inference
    print(f"{total.inference} of those half set-ups train nothing (initialize given no optimizer, no scale_loss: "
          f"mixed precision for inference); without them, no apex.amp left: {_percent(total.clean['default'], trained)} "
          f"(default), {_percent(total.clean['unsafe'], trained)} (--unsafe-fixes)")
    print(f"no apex.amp left in the files holding both: {_percent(total.clean_whole['default'], total.whole)} (default), "
          f"{_percent(total.clean_whole['unsafe'], total.whole)} (--unsafe-fixes)")
    for mode in ("default", "unsafe"):
        decided, by_flow, by_modules, fixed = total.elsewhere[mode]
        print(f"findings decided by a fact from another function or module ({mode}): {decided} (by flow {by_flow}, "
              f"by the project's modules {by_modules}; {fixed} of them fixed)")
    for mode in ("default", "unsafe"):
        print(f"\nwhy apex.amp is left ({mode}), files:")
        for why, count in total.reasons[mode].most_common():
            print(f"  {count:3d}  {why}")
    if args.details:
        print()
        print("\n".join(sorted(total.details)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
