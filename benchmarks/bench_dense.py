"""A dense file: one deprecated use every two lines. `ampfix rewrite FILE` (the console script, on a
fresh copy each time) against the LibCST floor (parse and print the same file, in a fresh process),
at several sizes.

    .venv/bin/python benchmarks/bench_dense.py [--lines 5000,20000,50000] [--repeat 3]

The file is functions of ten lines holding five uses each (autocast calls with positional
arguments, GradScaler calls, a custom_fwd decorator), all through `import torch`.
Prints, per size: uses, the floor, the rewrite (medians, seconds), their ratio and the rewrite's peak RSS.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FUNCTION = '''\
@torch.cuda.amp.custom_fwd
def step_{n}(model, x, flag):
    with torch.cuda.amp.autocast(flag, torch.float16):
        y = model(x)
    scaler = torch.cuda.amp.GradScaler(2.0 ** 16)
    ctx = torch.cpu.amp.autocast(dtype=torch.bfloat16)
    with torch.cuda.amp.autocast(enabled=False):
        z = model(y)
    return scaler, ctx, z
'''

FLOOR = "import libcst, sys; libcst.parse_module(open(sys.argv[1], 'rb').read()).code"
AMPFIX = Path(sys.executable).with_name("ampfix")


def dense_source(lines: int) -> tuple[str, int]:
    header = "import torch\n\n\n"
    per_function = FUNCTION.count("\n") + 1  # one blank line between functions
    count = max(1, (lines - 3) // per_function)
    body = "\n".join(FUNCTION.format(n=n) for n in range(count))
    return header + body, count * 5


def timed(command: list[str], ok: tuple[int, ...] = (0,)) -> tuple[float, float]:
    """Wall seconds and the child's own peak RSS in MB (os.wait4 gives each child's rusage)."""
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    _, status, usage = os.wait4(child.pid, 0)
    elapsed = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    if code not in ok:
        raise SystemExit(f"{command[:2]} exited {code}: {child.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
    child.stderr.close()  # type: ignore[union-attr]
    return elapsed, usage.ru_maxrss / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", default="5000,20000,50000")
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    print(f"{'lines':>7} {'uses':>7} {'floor s':>8} {'rewrite s':>9} {'ratio':>6} {'peak MB':>8}")
    with tempfile.TemporaryDirectory(prefix="ampfix-dense-") as tmp:
        for lines in (int(n) for n in options.lines.split(",")):
            source, uses = dense_source(lines)
            path = Path(tmp) / f"dense_{lines}.py"
            path.write_text(source, encoding="utf-8")
            floors, rewrites, peaks = [], [], []
            copy = Path(tmp) / f"copy_{lines}.py"
            for _ in range(options.repeat):  # interleaved, so that load changes hit both alike
                floors.append(timed([sys.executable, "-c", FLOOR, str(path)])[0])
                shutil.copyfile(path, copy)
                elapsed, peak = timed([str(AMPFIX), "rewrite", str(copy)], ok=(1,))  # 1: files were rewritten
                rewrites.append(elapsed)
                peaks.append(peak)
            floor, rewrite = statistics.median(floors), statistics.median(rewrites)
            print(f"{source.count(chr(10)) + 1:>7} {uses:>7} {floor:>8.2f} {rewrite:>9.2f} {rewrite / floor:>5.2f}x "
                  f"{max(peaks):>8.0f}")
            if b"torch.cuda.amp" in copy.read_bytes():
                raise SystemExit("the rewrite left deprecated uses: the benchmark measures nothing")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
