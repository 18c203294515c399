"""How much slower is a CUDA-written script under `ampfix run` than its CPU twin run directly?

For a small CNN and a tiny MLP, two versions of one training script are generated:

* the CUDA-written one (``.to("cuda")``, ``torch.cuda.amp.autocast()``, ``torch.cuda.amp.GradScaler()``),
  run with ``python -m ampfix.runner run``;
* its CPU twin (``torch.amp.autocast("cpu", dtype=torch.bfloat16)``, ``torch.amp.GradScaler("cpu")``),
  run directly with ``python`` — the same math the runner makes the CUDA one do.

Both run the same steps in one process with the same thread count, seeded alike. Each is run
``--repeats`` times, alternating; the medians of the training-loop time (measured inside the
script) and of the whole process (torch import included) are compared as ratios runner / direct.
The final losses are compared too: the runner should not change the numbers.

    python benchmarks/bench_runner.py [--repeats 3] [--threads 1] [--mlp-steps 300] [--cnn-steps 40]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

MODELS = {
    "tiny MLP": {
        "definition": (
            "def build():\n"
            "    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))\n"
        ),
        "batch_shape": "(32, 64)",
    },
    "small CNN": {
        "definition": (
            "def build():\n"
            "    return nn.Sequential(\n"
            "        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),\n"
            "        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),\n"
            "        nn.Flatten(), nn.Linear(32 * 8 * 8, 10),\n"
            "    )\n"
        ),
        "batch_shape": "(16, 3, 32, 32)",
    },
}

FLAVOURS = {
    "cuda": {
        "device": '"cuda"',
        "scaler": "torch.cuda.amp.GradScaler()",
        "autocast": "torch.cuda.amp.autocast()",
    },
    "cpu": {
        "device": '"cpu"',
        "scaler": 'torch.amp.GradScaler("cpu")',
        "autocast": 'torch.amp.autocast("cpu", dtype=torch.bfloat16)',
    },
}

SCRIPT = """\
import json, time
import torch
import torch.nn as nn
import torch.nn.functional as F

{definition}
torch.manual_seed(0)
device = {device}
model = build().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
scaler = {scaler}
inputs = torch.randn({steps}, *{batch_shape})
labels = torch.randint(0, 10, ({steps}, {batch_shape}[0]))
start = time.perf_counter()
for step in range({steps}):
    x = inputs[step].to(device, non_blocking=True)
    y = labels[step].to(device, non_blocking=True)
    optimizer.zero_grad(set_to_none=True)
    with {autocast}:
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
print(json.dumps({{"loop_s": time.perf_counter() - start, "final_loss": loss.item()}}))
"""


@dataclass
class Timing:
    loop_s: float
    total_s: float
    final_loss: float


def write_script(folder: Path, model: str, flavour: str, steps: int) -> Path:
    name = f"{model.replace(' ', '_')}_{flavour}.py"
    path = folder / name
    path.write_text(SCRIPT.format(steps=steps, **MODELS[model], **FLAVOURS[flavour]))
    return path


def timed(command: list[str], env: dict[str, str]) -> Timing:
    started = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    total = time.perf_counter() - started
    if completed.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{completed.stderr}")
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    return Timing(result["loop_s"], total, result["final_loss"])


def measure(model: str, steps: int, repeats: int, threads: int, folder: Path) -> dict[str, object]:
    direct_script = write_script(folder, model, "cpu", steps)
    runner_script = write_script(folder, model, "cuda", steps)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    direct_command = [sys.executable, str(direct_script)]
    runner_command = [sys.executable, "-m", "ampfix.runner", "run", str(runner_script), "--threads", str(threads)]
    direct, runner = [], []
    for _ in range(repeats):  # alternate, so a noisy moment hurts both sides alike
        direct.append(timed(direct_command, env))
        runner.append(timed(runner_command, env))
    direct_loop = statistics.median(t.loop_s for t in direct)
    runner_loop = statistics.median(t.loop_s for t in runner)
    direct_total = statistics.median(t.total_s for t in direct)
    runner_total = statistics.median(t.total_s for t in runner)
    return {
        "workload": model,
        "steps": steps,
        "direct_loop_s": direct_loop,
        "runner_loop_s": runner_loop,
        "loop_ratio": runner_loop / direct_loop,
        "direct_total_s": direct_total,
        "runner_total_s": runner_total,
        "total_ratio": runner_total / direct_total,
        "same_final_loss": direct[0].final_loss == runner[0].final_loss,
    }


def print_table(rows: list[dict[str, object]], repeats: int, threads: int) -> None:
    print(f"ampfix run overhead vs. the CPU twin run directly (median of {repeats}, {threads} thread(s))")
    header = f"{'workload':<10} {'steps':>5} {'direct loop':>12} {'runner loop':>12} {'ratio':>6} {'direct total':>13} {'runner total':>13} {'ratio':>6}  same loss"
    print(header)
    for row in rows:
        print(
            f"{row['workload']:<10} {row['steps']:>5} {row['direct_loop_s']:>11.3f}s {row['runner_loop_s']:>11.3f}s "
            f"{row['loop_ratio']:>5.2f}x {row['direct_total_s']:>12.2f}s {row['runner_total_s']:>12.2f}s "
            f"{row['total_ratio']:>5.2f}x  {'yes' if row['same_final_loss'] else 'NO'}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--mlp-steps", type=int, default=300)
    parser.add_argument("--cnn-steps", type=int, default=40)
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ampfix-bench-") as folder:
        rows = [
            measure("small CNN", args.cnn_steps, args.repeats, args.threads, Path(folder)),
            measure("tiny MLP", args.mlp_steps, args.repeats, args.threads, Path(folder)),
        ]
    print_table(rows, args.repeats, args.threads)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
