"""The same GPU cases on a real CUDA device and under `ampfix run`: errors, device reads, memory figures, dtypes.

Each case is a fixture of ``fixtures/run/gpu`` that prints one line per thing it reads (a device, a
dtype, an exception's type and message, a memory figure). On a machine with a CUDA GPU, each case runs
twice, as ``python CASE`` (the GPU) and as ``ampfix run CASE`` (the CPU emulation), and the lines are
compared one by one; a line that differs is printed with both sides. Where no CUDA GPU is available,
only the emulated side runs and the script says so: the fixtures' expected values then stand on the
caching allocator's documented rules (tests/test_runner_devices.py).

    python benchmarks/gpu_parity.py [--case NAME ...]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

CASES_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "run" / "gpu"
# case -> (the runner options that give it the GPU it was written for, the GPUs a real machine needs for it;
# None: no real GPU has its size, so it runs emulated only)
CASES: dict[str, tuple[list[str], int | None]] = {
    "devices_read.py": ([], 1),
    "gpu_refusals.py": (["--gpus", "2"], 2),
    "memory.py": ([], 1),
    "out_of_memory.py": (["--gpu-memory", "64MiB"], None),
    # float16 as a GPU computes it (issue 41): rounding, overflow, subnormals, underflow with and without a
    # scaler, an explicit bfloat16 request; skipped steps, scale trajectory and a NaN from attention. The runner's
    # own fixtures, whose values tests/test_runner_float16.py holds the emulation to (derived by hand in each).
    "../float16_values.py": ([], 1),
    "../float16_training.py": ([], 1),
}
# Lines whose value is the machine's own (the host's or the GPU's total memory): compared by label only.
MACHINE_LINES = ("mem_get_info:",)


def gpu_count() -> int:
    probe = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    completed = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    return int(completed.stdout.strip() or 0) if completed.returncode == 0 else 0


def run(command: list[str], env: dict[str, str]) -> list[str]:
    completed = subprocess.run(command, capture_output=True, text=True, env=env, cwd=CASES_DIR, timeout=600)
    return completed.stdout.splitlines()


def compare(case: str, gpu: list[str], emulated: list[str]) -> list[str]:
    differences = []
    for index in range(max(len(gpu), len(emulated))):
        real = gpu[index] if index < len(gpu) else "<no line>"
        ours = emulated[index] if index < len(emulated) else "<no line>"
        if real.startswith(MACHINE_LINES) and ours.split(":")[0] == real.split(":")[0]:
            continue
        if real != ours:
            differences.append(f"{case}:{index + 1}\n  GPU:       {real}\n  ampfix run: {ours}")
    return differences


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="run only these cases")
    args = parser.parse_args()
    cases = args.case or sorted(CASES)
    gpus = gpu_count()
    cuda = gpus > 0
    if not cuda:
        print("no CUDA GPU on this machine: only the emulated side runs; the expected values stand on the "
              "caching allocator's documented rules (tests/test_runner_devices.py)")
    env = dict(os.environ)
    total = 0
    for case in cases:
        options, needs = CASES[case]
        emulated = run([sys.executable, "-m", "ampfix", "run", *options, case], env)
        if not cuda or needs is None or needs > gpus:
            why = "no CUDA GPU" if not cuda else "no GPU of its size" if needs is None else f"needs {needs} GPUs"
            print(f"{case}: {len(emulated)} lines under ampfix run; not compared ({why})")
            continue
        gpu = run([sys.executable, case], env)
        differences = compare(case, gpu, emulated)
        total += len(differences)
        print(f"{case}: {len(gpu)} lines on the GPU, {len(differences)} differ")
        for difference in differences:
            print(difference)
    if cuda:
        print(f"{total} line(s) differ in all")
    return 1 if total else 0


if __name__ == "__main__":
    raise SystemExit(main())
