"""A real project's GPU-only tests on this CPU: its suite run plainly, then under `ampfix run -m pytest`.

Measured on pytorch/ignite at de08e799c (its engine's ``tests/ignite/engine/test_create_supervised.py``,
whose AMP, GradScaler and device-mismatch tests are ``skipif(not torch.cuda.is_available())``). Give
the checkout (a snapshot of the repository; its tests import ``ignite`` and ``tests`` from its root):

    python benchmarks/real_suite.py --project PATH [--tests tests/ignite/engine/test_create_supervised.py]

It prints pytest's closing line for both runs and the tests whose outcome differs. Each run is timed;
the ratio is the runner's over the plain run, measured here side by side.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

OUTCOME = re.compile(r"^(?P<test>\S+::\S+) (?P<outcome>PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)")


def run(command: list[str], project: Path) -> tuple[str, dict[str, str], float]:
    started = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True, cwd=project, timeout=1800)
    seconds = time.perf_counter() - started
    lines = completed.stdout.splitlines()
    outcomes = {}
    for line in lines:
        match = OUTCOME.match(line)
        if match:
            outcomes[match["test"]] = match["outcome"]
    closing = next((line for line in reversed(lines) if " in " in line and ("passed" in line or "failed" in line)),
                   "(no closing line)")
    return closing.strip("= "), outcomes, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", type=Path, required=True)
    parser.add_argument("--tests", default="tests/ignite/engine/test_create_supervised.py")
    args = parser.parse_args()
    # --color=no: a project's own addopts may force colour, and the outcome lines would not match OUTCOME.
    pytest_args = [args.tests, "-v", "-p", "no:cacheprovider", "--color=no"]
    plain = run([sys.executable, "-m", "pytest", *pytest_args], args.project)
    emulated = run([sys.executable, "-m", "ampfix", "run", "-m", "pytest", "--", *pytest_args], args.project)
    print(f"plain CPU:        {plain[0]}")
    print(f"ampfix run -m:    {emulated[0]}")
    print(f"time: {emulated[2]:.1f} s against {plain[2]:.1f} s ({emulated[2] / plain[2]:.2f}x)")
    changed = sorted(test for test in emulated[1] if emulated[1][test] != plain[1].get(test))
    for test in changed:
        print(f"  {plain[1].get(test, '?'):>7} -> {emulated[1][test]:<7} {test}")
    failed = [test for test, outcome in emulated[1].items() if outcome in ("FAILED", "ERROR")]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
