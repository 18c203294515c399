"""The long fuzz run: deprecated AMP uses inserted into generated programs and real files, under every option set.

    python benchmarks/fuzz.py --examples 20000 --seed 1
    python benchmarks/fuzz.py --examples 2000 --seed 7 --corpus benchmarks/.corpus/src --json /tmp/fuzz.json

What is generated, and the invariants checked, are tests/fuzz_cases.py's (tests/test_fuzz.py runs a bounded,
derandomized part of the same in the suite). The examples are split between the sources:

- ``hypothesmith``: programs generated from Python's grammar, with 1-3 uses inserted;
- ``torch``: the installed torch's own .py files (up to --max-bytes), mutated the same way;
- ``corpus``: the .py files of the old releases benchmarks/corpus.py downloads (--corpus; skipped when absent);
- ``every-spelling``: each template with each spelling of its names, in a small host (deterministic; run in
  full before the drawn examples, and not counted against --examples);
- ``runnable``: small programs of runnable statement templates, which the torch oracle (tests/amp_recorder.py)
  runs before and after the rewrite, in batches.

Each example is one program under one option set: every program drawn is checked under each of
fuzz_cases.OPTION_SETS. Printed: the examples
run by source and option set, the failures by invariant kind, and for each distinct failure (kind, the kind of
use, the option set, the message with names masked) a minimal reproducer: the first failing program, reduced
by deleting statements while the same kind of failure remains.

Generation uses hypothesis with a fixed seed (--seed), without shrinking (a failure does not stop the run) and
without its example database, so a run is repeatable on the same torch and corpus.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import traceback
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import fuzz_cases as fc  # noqa: E402
from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

# Share of the examples by source (a missing corpus gives its share to torch's source).
SHARES = {"hypothesmith": 0.4, "torch": 0.25, "corpus": 0.2, "runnable": 0.15}
ORACLE_BATCH = 400  # runnable programs per pair of recorder processes


@dataclass
class Found:
    """A distinct failure: how often it was seen, and the first (smallest) program that shows it."""

    kind: str
    option_set: str
    source: str
    count: int = 0
    mutant: fc.Mutant | None = None
    detail: str = ""
    reduced: fc.Mutant | None = None


@dataclass
class Run:
    examples: Counter = field(default_factory=Counter)  # (source, option set) -> examples
    failing_examples: Counter = field(default_factory=Counter)  # source -> examples with a failure
    failures: Counter = field(default_factory=Counter)  # kind -> failures
    found: dict[tuple, Found] = field(default_factory=dict)
    pending_oracle: list[tuple[fc.Mutant, fc.OraclePair]] = field(default_factory=list)

    def record(self, source: str, option_set: str, mutant: fc.Mutant, failures: list[fc.Failure]) -> None:
        for failure in failures:
            self.failures[failure.kind] += 1
            # The oracle's detail is already what differs; other details name the program's own things.
            detail = failure.detail if failure.kind.startswith("oracle-") else _mask(failure.detail)
            key = (failure.kind, option_set, _use_kind(mutant, failure), detail)
            found = self.found.setdefault(key, Found(failure.kind, option_set, source))
            found.count += 1
            if found.mutant is None or len(mutant.source) < len(found.mutant.source):
                found.mutant, found.detail = mutant, failure.detail


_NAMES = re.compile(r"'[^']*'|\"[^\"]*\"|\b\d+\b|fz_\w+")


def _mask(detail: str) -> str:
    return _NAMES.sub("X", detail)[:200]


def _use_kind(mutant: fc.Mutant, failure: fc.Failure) -> str:
    """The template of the use a failure names (silent-*), else the templates of every use (none for the
    oracle, whose detail says which objects differ)."""
    if failure.template or failure.kind.startswith("oracle-"):
        return failure.template
    return " | ".join(sorted({u.template for u in mutant.uses}))


def _run_source(name: str, strategy, count: int, run_seed: int, run: Run, progress) -> None:
    """`count` examples from `strategy`: each program drawn is checked under every option set (the engine is
    cheap next to generating a program, so one program gives as many examples as there are option sets)."""
    if count <= 0:
        return

    @seed(run_seed)
    @settings(max_examples=-(-count // len(fc.OPTION_SETS)), database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(mutant=strategy)
    def one(mutant: fc.Mutant) -> None:
        for option_set, options in fc.OPTION_SETS.items():
            outcome = fc.failures(mutant, options)
            run.examples[(name, option_set)] += 1
            if outcome.failures:
                run.failing_examples[name] += 1
            run.record(name, option_set, mutant, outcome.failures)
            if name == "runnable" and outcome.fixed is not None and not outcome.failures:
                run.pending_oracle.append((mutant, fc.oracle_pair(mutant, outcome.fixed, option_set)))
            progress()
        if len(run.pending_oracle) >= ORACLE_BATCH:
            _flush_oracle(run)

    try:
        one()
    except Exception as error:  # noqa: BLE001 - a bug of the harness (the generators): counted, the run goes on
        run.failures["harness-error"] += 1
        run.found[("harness-error", name)] = Found("harness-error", "-", name, 1, None,
                                                   "".join(traceback.format_exception(error))[-3000:])
    _flush_oracle(run)


def _flush_oracle(run: Run) -> None:
    if not run.pending_oracle:
        return
    pairs = [pair for _, pair in run.pending_oracle]
    for index, failures in fc.oracle_failures(pairs).items():
        mutant, pair = run.pending_oracle[index]
        run.failing_examples["runnable"] += 1
        run.record("runnable", pair.option_set, mutant, failures)
    run.pending_oracle.clear()


ORACLE_REDUCTION_TRIES = 12  # each try runs the recorder twice (seconds)


def _reduce(found: Found) -> fc.Mutant | None:
    if found.mutant is None:
        return None
    options = fc.OPTION_SETS[found.option_set]
    if not found.kind.startswith("oracle-"):
        return fc.reduce(found.mutant, lambda c: any(f.kind == found.kind for f in fc.failures(c, options).failures))

    def oracle_still_fails(candidate: fc.Mutant) -> bool:
        outcome = fc.failures(candidate, options)
        if outcome.failures or outcome.fixed is None:
            return False
        failures = fc.oracle_failures([fc.oracle_pair(candidate, outcome.fixed, found.option_set)])
        return any(f.kind == found.kind and f.detail == found.detail for f in failures.get(0, ()))

    return fc.reduce(found.mutant, oracle_still_fails, budget=ORACLE_REDUCTION_TRIES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--corpus", type=Path, default=HERE / ".corpus" / "src",
                        help="the unpacked corpus releases (benchmarks/corpus.py's cache)")
    parser.add_argument("--max-bytes", type=int, default=12_000, help="the largest real file mutated")
    parser.add_argument("--json", type=Path, help="also write the figures and reproducers here")
    args = parser.parse_args(argv)
    # Generated programs hold things like `1()`, which the compiler warns about; the strategy over the
    # files has a long repr that hypothesis warns it would build.
    warnings.filterwarnings("ignore", category=SyntaxWarning)
    warnings.filterwarnings("ignore", message="Generating overly large repr")

    torch_files = fc.torch_source_files(args.max_bytes)
    corpus = fc.corpus_files(args.corpus, args.max_bytes)
    shares = dict(SHARES)
    if not corpus:
        shares["torch"] += shares.pop("corpus")
    counts = {name: int(args.examples * share) for name, share in shares.items()}
    counts["hypothesmith"] += args.examples - sum(counts.values())
    strategies = {
        "hypothesmith": fc.generated_mutants(),
        "torch": fc.file_mutants(torch_files, "torch"),
        "corpus": fc.file_mutants(corpus, "corpus") if corpus else None,
        "runnable": fc.runnable_mutants(),
    }
    print(f"fuzz: {args.examples} examples, seed {args.seed}; torch files {len(torch_files)}, "
          f"corpus files {len(corpus)} ({args.corpus})", flush=True)
    run = Run()
    start = time.perf_counter()
    done = [0]

    def progress() -> None:
        done[0] += 1
        if done[0] % 500 == 0:
            print(f"  {done[0]} examples, {sum(run.failures.values())} failures, "
                  f"{time.perf_counter() - start:.0f} s", flush=True)

    for mutant in fc.every_spelling():
        for option_set, options in fc.OPTION_SETS.items():
            outcome = fc.failures(mutant, options)
            run.examples[("every-spelling", option_set)] += 1
            if outcome.failures:
                run.failing_examples["every-spelling"] += 1
            run.record("every-spelling", option_set, mutant, outcome.failures)
    for k, (name, count) in enumerate(counts.items()):
        strategy = strategies[name]
        if strategy is not None:
            _run_source(name, strategy, count, args.seed * 100 + k, run, progress)
    elapsed = time.perf_counter() - start
    for found in run.found.values():
        found.reduced = _reduce(found)
    print(render(run, elapsed))
    if args.json:
        args.json.write_text(json.dumps(figures(run, elapsed), indent=1), encoding="utf-8")
    return 1 if run.failures else 0


def figures(run: Run, elapsed: float) -> dict:
    by_source: dict[str, dict[str, int]] = defaultdict(dict)
    for (source, option_set), n in sorted(run.examples.items()):
        by_source[source][option_set] = n
    return {
        "examples": sum(run.examples.values()),
        "seconds": round(elapsed, 1),
        "by_source": by_source,
        "failing_examples": dict(run.failing_examples),
        "failures_by_kind": dict(run.failures),
        "distinct": [
            {"kind": f.kind, "options": f.option_set, "source": f.source, "count": f.count, "detail": f.detail,
             "label": f.mutant.label if f.mutant else "",
             "reproducer": f.reduced.source if f.reduced else None}
            for f in run.found.values()
        ],
    }


def render(run: Run, elapsed: float) -> str:
    option_sets = sorted(fc.OPTION_SETS)
    sources = sorted({s for s, _ in run.examples})
    every = sum(n for (source, _), n in run.examples.items() if source == "every-spelling")
    lines = [f"examples run: {sum(run.examples.values()) - every} drawn + {every} every-spelling, in {elapsed:.0f} s",
             "",
             f"{'source':<14}" + "".join(f"{o:>14}" for o in option_sets) + f"{'total':>8}{'failing':>9}"]
    for source in sources:
        row = [run.examples[(source, o)] for o in option_sets]
        lines.append(f"{source:<14}" + "".join(f"{n:>14}" for n in row) + f"{sum(row):>8}"
                     f"{run.failing_examples[source]:>9}")
    lines += ["", "failures by invariant kind:"]
    lines += [f"  {kind}: {n}" for kind, n in run.failures.most_common()] or ["  none"]
    for number, found in enumerate(run.found.values(), 1):
        lines += ["", f"--- distinct failure {number}: {found.kind} under {found.option_set} "
                      f"(seen {found.count}x, first from {found.mutant.label if found.mutant else '?'})",
                  f"    {found.detail[:500]}", "    reproducer:"]
        text = found.reduced.source if found.reduced else ""
        lines += ["    | " + line for line in text.splitlines()]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
