"""What `ampfix run` costs on small ops: the per-op overhead of the runner, and a test suite of many small ops.

A real test suite (kornia's, issue 40) is thousands of ops on tensors of a few elements, where the runner's
per-op work (the device mode's dispatch, device marks, the memory count, site lookups) is all there is.
Two measurements, each interleaved (plain, runner, plain, runner, ...) with the same thread count (1), the
medians compared as ratios:

Times are CPU times (user and system, of every process of the run): on a shared machine the wall time
measures the other processes' load as much as this one's work; one thread makes the two the same work.

* **per op**: one process runs a loop of small ops (arithmetic, reductions, indexing, factories with
  ``device=``, ``.to(device)``, ``torch.where``, a small backward) on tensors of 4x4 elements, on ``cpu``
  plainly and on ``cuda`` under ``ampfix run``; the time per op inside the loop, in microseconds;
* **pytest**: a generated suite of ``--tests`` tests of such ops, ``python -m pytest -q`` against
  ``python -m ampfix run -m pytest -- -q``: the whole wall time, start-up included.

    python benchmarks/bench_small_ops.py [--repeats 5] [--ops 20000] [--tests 400] [--baseline main]

``--baseline REF`` runs the runner of that commit too, in the same rounds (its ampfix package unpacked from git,
first on the path): the change's ratio measured side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

OPS = """\
import torch


def small_ops(device, x, y, index):
    a = x + y
    b = (a * 2).relu().sum(dim=0)
    c = a[index]
    d = torch.zeros(4, 4, device=device)
    e = torch.where(a > 0, a, d)
    f = torch.cat([a, e]).reshape(2, 16).mean()
    g = torch.as_tensor([1.0, 2.0, 3.0, 4.0], device=device)
    h = x.to(device) @ y.t() + g
    return b, c, f, h
OPS_PER_CALL = 16  # the torch calls small_ops makes (the loss and backward below add 3)
"""

PER_OP_SCRIPT = OPS + """\
import json, sys, time
device = sys.argv[1]
count = int(sys.argv[2])
torch.manual_seed(0)
x = torch.randn(4, 4, device=device, requires_grad=True)
y = torch.randn(4, 4, device=device)
index = torch.tensor([0, 2])
for _ in range(50):
    small_ops(device, x, y, index)
started = time.process_time()
for _ in range(count // (OPS_PER_CALL + 3)):
    b, c, f, h = small_ops(device, x, y, index)
    (h.sum() + f).backward()
seconds = time.process_time() - started
print(json.dumps({"us_per_op": seconds / count * 1e6}))
"""

TEST_MODULE = OPS + """\
import pytest


@pytest.mark.parametrize("seed", range({tests}))
def test_small_ops(seed, device):
    torch.manual_seed(seed)
    x = torch.randn(4, 4, device=device, requires_grad=True)
    y = torch.randn(4, 4, device=device)
    for _ in range(20):  # a test of kornia's runs hundreds of small ops (gradcheck: thousands)
        b, c, f, h = small_ops(device, x, y, torch.tensor([0, 2]))
        (h.sum() + f).backward()
    assert x.grad.device == x.device and h.device.type == torch.device(device).type
"""

CONFTEST = """\
import pytest


def pytest_addoption(parser):
    parser.addoption("--device", default="cpu")


@pytest.fixture
def device(request):
    return request.config.getoption("--device")
"""

ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}


def runner(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "ampfix", "run", "--threads", "1", *arguments]


# label -> the folder holding the ampfix package to run (None: the installed one)
Runners = dict[str, "str | None"]


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str], cwd: Path, source: str | None = None) -> tuple[float, str]:
    """The CPU time (user and system) of the command and every process it waited for: on a loaded machine the
    wall time measures the other processes' load as much as this one's work. ``source``: the folder of the
    ampfix package to run (a baseline unpacked from git), first on the path."""
    environ = ONE_THREAD if source is None else {**ONE_THREAD, "PYTHONPATH": source}
    started = children_cpu_s()
    completed = subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=environ, check=False)
    if completed.returncode != 0:
        raise SystemExit(f"{command} failed:\n{completed.stdout[-2000:]}\n{completed.stderr[-2000:]}")
    return children_cpu_s() - started, completed.stdout


def per_op(folder: Path, repeats: int, ops: int, runners: Runners) -> None:
    script = folder / "per_op.py"
    script.write_text(PER_OP_SCRIPT)
    times: dict[str, list[float]] = {"plain": [], **{label: [] for label in runners}}
    for _ in range(repeats):
        times["plain"].append(json.loads(timed([sys.executable, str(script), "cpu", str(ops)], folder)[1])["us_per_op"])
        for label, source in runners.items():
            output = timed(runner(str(script), "cuda", str(ops)), folder, source)[1]
            times[label].append(json.loads(output.splitlines()[0])["us_per_op"])
    plain_us = statistics.median(times["plain"])
    print(f"per op, CPU time, medians of {repeats}: plain {plain_us:.1f} us")
    for label in runners:
        emulated_us = statistics.median(times[label])
        print(f"  {label}: {emulated_us:.1f} us, {emulated_us - plain_us:.1f} us more ({emulated_us / plain_us:.2f}x)")


def pytest_suite(folder: Path, repeats: int, tests: int, runners: Runners) -> None:
    suite = folder / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(CONFTEST)
    (suite / "test_small_ops.py").write_text(TEST_MODULE.replace("{tests}", str(tests)))
    common = ["-q", "-p", "no:cacheprovider"]
    times: dict[str, list[float]] = {"plain": [], **{label: [] for label in runners}}
    for _ in range(repeats):
        times["plain"].append(timed([sys.executable, "-m", "pytest", *common, "--device", "cpu"], suite)[0])
        for label, source in runners.items():
            command = runner("-m", "pytest", "--", *common, "--device", "cuda")
            times[label].append(timed(command, suite, source)[0])
    plain_s = statistics.median(times["plain"])
    print(f"pytest, {tests} tests, CPU time, medians of {repeats}: plain {plain_s:.2f} s")
    for label in runners:
        emulated_s = statistics.median(times[label])
        print(f"  {label}: {emulated_s:.2f} s ({emulated_s / plain_s:.2f}x)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ops", type=int, default=20000)
    parser.add_argument("--tests", type=int, default=400)
    parser.add_argument("--baseline", metavar="REF", help="also run the runner of this git commit (unpacked here)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        runners: Runners = {"runner": None}
        if args.baseline:
            source = folder / "baseline"
            source.mkdir()
            archive = subprocess.run(["git", "archive", args.baseline, "ampfix"], capture_output=True, check=True)
            subprocess.run(["tar", "x", "-C", str(source)], input=archive.stdout, check=True)
            runners = {f"runner at {args.baseline}": str(source), **runners}
        per_op(folder, args.repeats, args.ops, runners)
        pytest_suite(folder, args.repeats, args.tests, runners)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
