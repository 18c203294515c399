"""The bounded fuzz run: deprecated AMP uses inserted into generated programs, torch's own source and runnable
programs, under every option set; the engine's invariants must hold on each (tests/fuzz_cases.py says which).

Derandomized (hypothesis's seed is fixed by the test's name), without the example database: the same examples
on every run, a few hundred in all, well under a minute on one core. benchmarks/fuzz.py runs the same
generators for as long as asked (--examples, --seed) and reduces each distinct failure to a reproducer.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fuzz_cases as fc

pytestmark = pytest.mark.filterwarnings(
    "ignore::SyntaxWarning",  # generated programs hold things like `1()`, which the compiler warns about
    "ignore:Generating overly large repr",  # the strategy over torch's files has a long repr
)


def bounded(examples: int) -> settings:
    return settings(max_examples=examples, derandomize=True, database=None, deadline=None,
                    suppress_health_check=list(HealthCheck))


OPTION_SET_NAMES = st.sampled_from(sorted(fc.OPTION_SETS))


def _assert_uses_located(mutant: fc.Mutant) -> None:
    """The harness itself: each use is where it says (else an invariant would look at the wrong lines)."""
    lines = fc.split_lines(mutant.source)
    for use in mutant.uses:
        head = use.text.splitlines()[0].strip()
        assert head in lines[use.first - 1], f"use {head!r} is not on line {use.first}:\n{mutant.source}"
        for n in use.imports:
            assert lines[n - 1].lstrip().startswith(("import ", "from ")), f"line {n} is no import:\n{mutant.source}"


def _assert_invariants(mutant: fc.Mutant, option_set: str) -> fc.Outcome:
    _assert_uses_located(mutant)
    outcome = fc.failures(mutant, fc.OPTION_SETS[option_set])
    assert not outcome.failures, (
        f"under {option_set}:\n" + "\n".join(map(str, outcome.failures)) + f"\nprogram:\n{mutant.source}"
    )
    return outcome


@bounded(150)
@given(mutant=fc.generated_mutants(), option_set=OPTION_SET_NAMES)
def test_generated_programs(mutant: fc.Mutant, option_set: str) -> None:
    _assert_invariants(mutant, option_set)


EVERY_SPELLING = fc.every_spelling()


@pytest.mark.parametrize("option_set", sorted(fc.OPTION_SETS))
def test_every_spelling_in_every_template(option_set: str) -> None:
    """Each template with each spelling of its names, in a small host."""
    problems = [f"{failure}\n{mutant.source}" for mutant in EVERY_SPELLING
                for failure in fc.failures(mutant, fc.OPTION_SETS[option_set]).failures]
    assert not problems, "\n".join(problems[:20])


TORCH_FILES = fc.torch_source_files()


def test_torch_source_is_there() -> None:
    # torch is a test dependency: an empty list would make the next test vacuous.
    assert len(TORCH_FILES) > 500


@bounded(80)
@given(mutant=fc.file_mutants(TORCH_FILES, "torch"), option_set=OPTION_SET_NAMES)
def test_torch_source_files(mutant: fc.Mutant, option_set: str) -> None:
    _assert_invariants(mutant, option_set)


def test_runnable_programs_build_the_same_amp_objects() -> None:
    """The torch oracle: each runnable program and its rewrite under every option set build the same AMP
    objects (moved to the CPU under --device cpu/auto). Programs are collected first, then run in two recorder
    processes (the originals in one, the rewrites in the other)."""
    mutants: list[fc.Mutant] = []

    @bounded(30)
    @given(mutant=fc.runnable_mutants())
    def collect(mutant: fc.Mutant) -> None:
        mutants.append(mutant)

    collect()
    pairs = []
    for mutant in mutants:
        for option_set in fc.OPTION_SETS:
            outcome = _assert_invariants(mutant, option_set)
            assert outcome.fixed is not None
            pairs.append(fc.oracle_pair(mutant, outcome.fixed, option_set))
    assert sum(pair.before != pair.after for pair in pairs) > len(pairs) // 2, "few programs were rewritten"
    failures = fc.oracle_failures(pairs)
    assert not failures, "\n\n".join(
        f"under {pairs[k].option_set}: " + "; ".join(map(str, problems))
        + f"\nprogram:\n{pairs[k].before}\nrewritten:\n{pairs[k].after}"
        for k, problems in failures.items()
    )


def test_unsafe_fixes_keep_a_cpu_scaler_subclass_on_the_cpu() -> None:
    """Once a fuzz finding: --unsafe-fixes rebased a torch.cpu.amp.GradScaler subclass onto torch.amp.GradScaler,
    whose device defaults to 'cuda' (fixtures/unsafe_fixes/cpu_scaler_subclass)."""
    source = (fc.ROOT / "fixtures" / "unsafe_fixes" / "cpu_scaler_subclass.in.py").read_text(encoding="utf-8")
    fixed = fc.fix_source(source, fc.OPTION_SETS["unsafe_fixes"])
    assert fc.oracle_failures([fc.oracle_pair(fc.Mutant(source), fixed, "unsafe_fixes")]) == {}
