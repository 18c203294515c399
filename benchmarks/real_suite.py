"""A real project's test suite on this CPU: run plainly, then under `ampfix run -m pytest`; per-test differences.

Fetches nothing: give a checkout (a snapshot of the repository) and an interpreter that has its test
dependencies, torch and ampfix. Measured on:

* pytorch/ignite at de08e799c, its engine's ``tests/ignite/engine/test_create_supervised.py`` (its AMP,
  GradScaler and device-mismatch tests are ``skipif(not torch.cuda.is_available())``)::

      python benchmarks/real_suite.py --project IGNITE

* kornia at b4f5a78a1 (its ``conftest.py`` takes ``--device``; issue 40's subset)::

      python benchmarks/real_suite.py --project KORNIA --python VENV/bin/python \\
          --plain-args "--device cpu" --runner-args "--device cuda" --same-test cuda=cpu \\
          --tests "tests/filters tests/geometry tests/color tests/losses tests/augmentation tests/enhance \\
                   tests/morphology tests/metrics tests/image tests/feature"

Both runs use one thread (``OMP_NUM_THREADS=1`` for the plain one; the runner's own ``--threads 1``). It prints
pytest's closing line for both, passed (xpassed included) and failed counts, the ratios of the runner's run over the
plain one (measured here, back to back): wall time, and CPU time (user and system of every process of the run,
what a loaded machine's other work disturbs least), the runner's "fails on a GPU" sites with their counts, and
the tests whose outcome differs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# A parametrized test's id may hold spaces: the outcome is the last word before pytest's "[ 5%]".
OUTCOME = re.compile(r"^(?P<test>\S+::.+) (?P<outcome>PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS) +\[ *\d+%\]$")
PASSING = ("PASSED", "XPASS")


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(command: list[str], project: Path) -> tuple[str, dict[str, str], float, float]:
    started, started_cpu = time.perf_counter(), children_cpu_s()
    completed = subprocess.run(command, capture_output=True, text=True, cwd=project, timeout=7200,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
    seconds, cpu_seconds = time.perf_counter() - started, children_cpu_s() - started_cpu
    lines = completed.stdout.splitlines()
    outcomes = {}
    for line in lines:
        match = OUTCOME.match(line)
        if match:
            outcomes[match["test"]] = match["outcome"]
    closing = next((line for line in reversed(lines) if " in " in line and ("passed" in line or "failed" in line)),
                   "(no closing line)")
    return closing.strip("= "), outcomes, seconds, cpu_seconds


def counts(outcomes: dict[str, str]) -> str:
    passed = sum(outcome in PASSING for outcome in outcomes.values())
    failed = sum(outcome in ("FAILED", "ERROR") for outcome in outcomes.values())
    return f"{passed} passed, {failed} failed"


def renamed_ids(outcomes: dict[str, str], same_test: str) -> dict[str, str]:
    """The runner's outcomes by the plain run's test ids: a word of a parametrized id (between "[", "-", "]")
    replaced (``cuda=cpu``)."""
    if not same_test:
        return outcomes
    old, new = same_test.split("=", 1)
    word = re.compile(rf"(?<=[\[-]){re.escape(old)}(?=[-\]])")
    return {word.sub(new, test): outcome for test, outcome in outcomes.items()}


def refusal_sites(report_path: Path) -> list[str]:
    if not report_path.exists():
        return ["(no report)"]
    report = json.loads(report_path.read_text())
    return [f"{item['count']:>6}  {item['file']}:{item['line']}  {item['message']}"
            for item in sorted(report.get("gpu_refusals", []), key=lambda item: -item.get("count", 0))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", type=Path, required=True)
    parser.add_argument("--tests", default="tests/ignite/engine/test_create_supervised.py")
    parser.add_argument("--python", default=sys.executable, help="the interpreter with the project's test deps")
    parser.add_argument("--plain-args", default="", help="pytest arguments of the plain run only")
    parser.add_argument("--runner-args", default="", help="pytest arguments of the runner's run only")
    parser.add_argument("--only-runner", action="store_true", help="skip the plain run (differences not listed)")
    parser.add_argument("--same-test", default="", metavar="RUNNER=PLAIN",
                        help="a word of the runner's test ids that the plain run's ids have in its place "
                             "(kornia's parametrized ids: cuda=cpu)")
    args = parser.parse_args()
    # --color=no: a project's own addopts may force colour, and the outcome lines would not match OUTCOME.
    pytest_args = [*shlex.split(args.tests), "-v", "-p", "no:cacheprovider", "--color=no"]
    plain = None
    if not args.only_runner:
        plain = run([args.python, "-m", "pytest", *pytest_args, *shlex.split(args.plain_args)], args.project)
        print(f"plain CPU:        {plain[0]} ({counts(plain[1])})")
    with tempfile.TemporaryDirectory() as folder:
        report_path = Path(folder) / "report.json"
        emulated = run([args.python, "-m", "ampfix", "run", "--threads", "1", "--json", str(report_path), "-m",
                        "pytest", "--", *pytest_args, *shlex.split(args.runner_args)], args.project)
        sites = refusal_sites(report_path)
    print(f"ampfix run -m:    {emulated[0]} ({counts(emulated[1])})")
    if plain is not None:
        print(f"wall time: {emulated[2]:.1f} s against {plain[2]:.1f} s ({emulated[2] / plain[2]:.2f}x); CPU time: "
              f"{emulated[3]:.1f} s against {plain[3]:.1f} s ({emulated[3] / plain[3]:.2f}x)")
    else:
        print(f"wall time: {emulated[2]:.1f} s; CPU time: {emulated[3]:.1f} s")
    print("fails on a GPU (count, site, message):")
    for line in sites:
        print(f"  {line}")
    if plain is not None:
        renamed = renamed_ids(emulated[1], args.same_test)
        changed = sorted(test for test in renamed if renamed[test] != plain[1].get(test))
        print(f"{len(changed)} tests whose outcome differs:")
        for test in changed:
            print(f"  {plain[1].get(test, '?'):>7} -> {renamed[test]:<7} {test}")
    failed = [test for test, outcome in emulated[1].items() if outcome in ("FAILED", "ERROR")]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
