"""The runner's test modules on each torch release: `python benchmarks/torch_matrix.py 2.2.2 2.5.1 2.14.1`.

For each release: a venv (kept under --venvs, default /tmp/torchvenvs/tRELEASE, reused when its torch is that
release), torch==RELEASE from the registry (a CUDA build, run on the CPU; ~5 GB, 1-2 minutes; releases up to
2.2 with numpy<2), ampfix installed into it without dependencies (`pip install --no-deps -e .`), beside what
ampfix and the tests import (libcst, typer, rich, pathspec, packaging, pytest, numpy). Then the runner's test
modules (tests/test_runner*.py: they run the scripts of fixtures/run under `ampfix run` and `ampfix verify`),
and a table: release, passed, failed, skipped (a skip is not a pass), seconds, and the machine's load average
(1 minute) when the release started and ended: on a shared machine the seconds say little without it. A release the machine's pip configuration caps out (torch 2.15
here: /etc/xdg/pip/constraints.txt) is installed with PIP_CONFIG_FILE=/dev/null, for that one command.

Heavy: run it alone, under `nice`; --remove deletes each venv once measured (disk: ~5 GB each).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# What ampfix imports (pyproject's dependencies) and what the runner's test modules import.
TEST_REQUIREMENTS = ["libcst>=1.1", "typer>=0.12", "rich>=13", "pathspec>=0.12", "packaging>=21", "pytest>=8"]
RUNNER_TESTS = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "tests").glob("test_runner*.py"))


def _numpy_for(release: str) -> str:
    """torch up to 2.2 was built against numpy 1.x."""
    major, minor = (int(part) for part in release.split(".")[:2])
    return "numpy<2" if (major, minor) <= (2, 2) else "numpy"


def _installed_torch(python: Path) -> str | None:
    if not python.exists():
        return None
    done = subprocess.run([str(python), "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    return done.stdout.strip().split("+")[0] if done.returncode == 0 else None


def _pip(python: Path, *arguments: str) -> None:
    command = [str(python), "-m", "pip", "install", "-q", *arguments]
    if subprocess.run(command).returncode == 0:
        return
    # The machine's pip configuration may cap torch below this release: ask the registry itself, once.
    print(f"torch_matrix: retrying without the pip configuration: {' '.join(arguments)}", file=sys.stderr)
    subprocess.run(command, check=True, env={**os.environ, "PIP_CONFIG_FILE": os.devnull})


def prepare(release: str, venvs: Path) -> Path:
    venv = venvs / f"t{release}"
    python = venv / "bin" / "python"
    if _installed_torch(python) != release:
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        _pip(python, f"torch=={release}", _numpy_for(release))
    _pip(python, *TEST_REQUIREMENTS)
    _pip(python, "--no-deps", "-e", str(ROOT))
    return python


def run_tests(python: Path, tests: list[str]) -> tuple[int, int, int, float, str]:
    started = time.monotonic()
    done = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
                          cwd=ROOT, capture_output=True, text=True)
    seconds = time.monotonic() - started
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr.strip()[-200:]
    counts = {kind: int(number) for number, kind in re.findall(r"(\d+) (passed|failed|errors?|skipped)", summary)}
    failed = counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0)
    return counts.get("passed", 0), failed, counts.get("skipped", 0), seconds, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("releases", nargs="+", help="torch releases, e.g. 2.2.2 2.5.1 2.14.1")
    parser.add_argument("--venvs", type=Path, default=Path("/tmp/torchvenvs"), help="where the venvs are kept")
    parser.add_argument("--tests", nargs="+", default=RUNNER_TESTS, help="test modules (default: tests/test_runner*.py)")
    parser.add_argument("--remove", action="store_true", help="delete each venv once its release is measured")
    parser.add_argument("--log", type=Path, help="write each release's pytest output to LOG.RELEASE")
    arguments = parser.parse_args()
    rows = []
    for release in arguments.releases:
        python = prepare(release, arguments.venvs)
        load_before = os.getloadavg()[0]
        passed, failed, skipped, seconds, output = run_tests(python, arguments.tests)
        load = f"{load_before:.1f}-{os.getloadavg()[0]:.1f}"
        if arguments.log:
            Path(f"{arguments.log}.{release}").write_text(output)
        rows.append((release, passed, failed, skipped, seconds, load))
        print(f"torch {release}: {passed} passed, {failed} failed, {skipped} skipped, {seconds:.0f} s, load {load}",
              file=sys.stderr, flush=True)
        if arguments.remove:
            shutil.rmtree(python.parent.parent, ignore_errors=True)
    print("| torch | passed | failed | skipped | seconds | load |")
    print("|---|---|---|---|---|---|")
    for release, passed, failed, skipped, seconds, load in rows:
        print(f"| {release} | {passed} | {failed} | {skipped} | {seconds:.0f} | {load} |")
    return 0 if all(failed == 0 and passed for _, passed, failed, *_ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
