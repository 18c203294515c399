"""What `ampfix run` costs: against the bfloat16 CPU twin, against plain float32, and CUDA's op policy against the CPU's.

float16 rows (issue 41): the CUDA-written script under the runner by default (float16 as a GPU computes it), with
``--amp-dtype float16-cpu`` (the CPU's own float16 kernels), with ``--amp-dtype bfloat16`` (the stand-in, the
"runner, CUDA policy" column), and with AMP off (``runner, float32``), all in the same round-robin.

For a small CNN and a small GPT-style transformer, three versions of one training script are generated:

* the CUDA-written one (``.to("cuda")``, ``torch.cuda.amp.autocast()``, ``torch.cuda.amp.GradScaler()``),
  run with ``python -m ampfix.runner run`` twice: with CUDA's op policy (the default) and with
  ``--autocast-policy cpu`` (CPU autocast's own lists: the same math as the twin);
* its bfloat16 CPU twin (``torch.amp.autocast("cpu", dtype=torch.bfloat16)``, ``torch.amp.GradScaler("cpu")``),
  run directly with ``python``;
* the same twin with autocast and the scaler disabled: the plain float32 run;
* the CUDA-written one under the runner as it was before each tensor carried its device (commit
  ``BASELINE_REF``, unpacked from git): what the device bookkeeping and the memory count cost.

All run the same steps in one process with the same thread count, seeded alike, ``--repeats`` times,
round-robin. The medians of the training-loop time (measured inside the script) are compared as
ratios. The final losses are compared too: under the CPU policy the runner must give the twin's
numbers bit for bit.

A last measurement isolates the cost of CUDA's policy from the machine's noise: the transformer's
training step in one process, alternating every 5 steps between the CPU's lists and CUDA's.

    python benchmarks/bench_runner.py [--repeats 3] [--threads 1] [--cnn-steps 40] [--transformer-steps 20]
                                      [--policy-rounds 8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

MODELS = {
    "small CNN": {
        "definition": (
            "def build():\n"
            "    return nn.Sequential(\n"
            "        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),\n"
            "        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),\n"
            "        nn.Flatten(), nn.Linear(32 * 8 * 8, 10),\n"
            "    )\n"
        ),
        "batch": "torch.randn(16, 3, 32, 32)",
        "labels": "torch.randint(0, 10, (16,))",
    },
    # nanoGPT's block, small: attention written out (q @ k.T, masked softmax), LayerNorm, GELU MLP.
    "small transformer": {
        "definition": (
            "class Block(nn.Module):\n"
            "    def __init__(self, width, heads):\n"
            "        super().__init__()\n"
            "        self.heads = heads\n"
            "        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)\n"
            "        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)\n"
            "        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))\n"
            "    def forward(self, x):\n"
            "        b, t, c = x.shape\n"
            "        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)\n"
            "        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))\n"
            "        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))\n"
            "        att = att.masked_fill(torch.ones(t, t).tril().to(x.device) == 0, float('-inf'))\n"
            "        y = F.softmax(att, dim=-1) @ v\n"
            "        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, c))\n"
            "        return x + self.mlp(self.ln2(x))\n"
            "class GPT(nn.Module):\n"
            "    def __init__(self, vocab=256, width=128, heads=4, layers=4, context=64):\n"
            "        super().__init__()\n"
            "        self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(context, width)\n"
            "        self.blocks = nn.Sequential(*[Block(width, heads) for _ in range(layers)])\n"
            "        self.ln, self.head = nn.LayerNorm(width), nn.Linear(width, vocab)\n"
            "    def forward(self, idx):\n"
            "        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))\n"
            "        return self.head(self.ln(self.blocks(x))).flatten(0, 1)\n"
            "def build():\n"
            "    return GPT()\n"
        ),
        "batch": "torch.randint(0, 256, (8, 64))",
        "labels": "torch.randint(0, 256, (8 * 64,))",
    },
}

FLAVOURS = {
    "cuda": {
        "device": '"cuda"',
        "scaler": "torch.cuda.amp.GradScaler()",
        "autocast": "torch.cuda.amp.autocast()",
    },
    # The CUDA-written script with AMP switched off: what float16's cost is measured against under the runner.
    "cuda float32": {
        "device": '"cuda"',
        "scaler": "torch.cuda.amp.GradScaler(enabled=False)",
        "autocast": "torch.cuda.amp.autocast(enabled=False)",
    },
    "cpu bfloat16": {
        "device": '"cpu"',
        "scaler": 'torch.amp.GradScaler("cpu")',
        "autocast": 'torch.amp.autocast("cpu", dtype=torch.bfloat16)',
    },
    "cpu float32": {
        "device": '"cpu"',
        "scaler": 'torch.amp.GradScaler("cpu", enabled=False)',
        "autocast": 'torch.amp.autocast("cpu", enabled=False)',
    },
}

SCRIPT = """\
import json, math, time
import torch
import torch.nn as nn
import torch.nn.functional as F

{definition}
torch.manual_seed(0)
device = {device}
model = build().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
scaler = {scaler}
inputs = [{batch} for _ in range({steps})]
labels = [{labels} for _ in range({steps})]
start, start_cpu = time.perf_counter(), time.process_time()
for step in range({steps}):
    x = inputs[step].to(device, non_blocking=True)
    y = labels[step].to(device, non_blocking=True)
    optimizer.zero_grad(set_to_none=True)
    with {autocast}:
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
print(json.dumps({{"loop_s": time.perf_counter() - start, "loop_cpu_s": time.process_time() - start_cpu,
                  "final_loss": loss.item()}}))
"""


# The policy's own cost, with the machine's noise cancelled: one process, the transformer's training
# step under CPU autocast, alternating every few steps between the CPU's lists and CUDA's.
POLICY_AB_SCRIPT = """\
import json, math, statistics, time
import torch
import torch.nn as nn
import torch.nn.functional as F
from ampfix.runner.gpu.cuda_autocast import CudaPolicy

{definition}
torch.manual_seed(0)
model = build()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
policy = CudaPolicy()
policy.install()
batch, labels = {batch}, {labels}


def steps(cuda, count):
    started = time.perf_counter()
    for _ in range(count):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            before = policy.switch(cuda)
            loss = F.cross_entropy(model(batch), labels)
            policy.restore(before)
        loss.backward()
        optimizer.step()
    return time.perf_counter() - started


steps(False, 2), steps(True, 2)
rounds = {{False: [], True: []}}
for _ in range({rounds}):
    for cuda in (False, True):
        rounds[cuda].append(steps(cuda, 5))
print(json.dumps({{"cpu_s": statistics.median(rounds[False]), "cuda_s": statistics.median(rounds[True])}}))
"""


@dataclass
class Timing:
    loop_s: float
    loop_cpu_s: float  # the loop's CPU time: what other processes' load disturbs least
    total_s: float
    final_loss: float


BASELINE_LABEL = "runner before devices"
RUNNER_FLOAT32, RUNNER_FLOAT16, RUNNER_FLOAT16_CPU = "runner, float32", "runner, float16", "runner, float16-cpu"
# (label, script flavour, extra runner options or None for a direct run)
VARIANTS = [
    ("float32", "cpu float32", None),
    ("bfloat16 twin", "cpu bfloat16", None),
    ("runner, CPU policy", "cuda", ["--autocast-policy", "cpu", "--amp-dtype", "bfloat16"]),
    ("runner, CUDA policy", "cuda", ["--amp-dtype", "bfloat16"]),  # the bfloat16 stand-in
    # The runner as it was before each tensor carried its device (issue 28): the same policy, no device
    # bookkeeping, no memory count. Run from that commit's own ampfix package (see baseline_runner).
    (BASELINE_LABEL, "cuda", []),
    # float16 (issue 41): the default (as a GPU computes it, gpu/numerics), the CPU's own float16 kernels, and
    # the same script with AMP off under the runner: the default's goal is at most 1.5x that float32 run.
    (RUNNER_FLOAT32, "cuda float32", []),
    (RUNNER_FLOAT16, "cuda", []),
    (RUNNER_FLOAT16_CPU, "cuda", ["--amp-dtype", "float16-cpu"]),
]
# The last commit whose runner made "cuda" mean the CPU (devices read as cpu, no memory figures).
BASELINE_REF = "e9ead87"


def write_script(folder: Path, model: str, flavour: str, steps: int) -> Path:
    path = folder / f"{model.replace(' ', '_')}_{flavour.replace(' ', '_')}.py"
    path.write_text(SCRIPT.format(steps=steps, **MODELS[model], **FLAVOURS[flavour]))
    return path


def timed(command: list[str], env: dict[str, str]) -> Timing:
    started = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    total = time.perf_counter() - started
    if completed.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{completed.stderr}")
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    return Timing(result["loop_s"], result["loop_cpu_s"], total, result["final_loss"])


def baseline_runner(folder: Path) -> Path:
    """A Python whose ``ampfix`` is BASELINE_REF's (unpacked from git), with this environment's torch.

    A venv of its own: this environment's editable install of ampfix would win over any PYTHONPATH, in the
    runner's child processes too. The venv's .pth names the baseline first, then this environment's packages
    (a directory a .pth names is only added to the path: the editable install's own .pth there is not run)."""
    root = Path(__file__).resolve().parent.parent
    archive = subprocess.run(["git", "-C", str(root), "archive", BASELINE_REF, "ampfix"], capture_output=True,
                             check=True).stdout
    target = folder / "baseline"
    target.mkdir(exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    venv = folder / "baseline-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    own = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    ours = sysconfig.get_paths()["purelib"]
    Path(own, "baseline.pth").write_text(f"{target}\n{ours}\n")
    return python


def measure(model: str, steps: int, repeats: int, threads: int, folder: Path, baseline: Path) -> dict[str, object]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    commands = {}
    for label, flavour, runner_options in VARIANTS:
        script = str(write_script(folder, model, flavour, steps))
        python = str(baseline) if label == BASELINE_LABEL else sys.executable
        if runner_options is None:
            commands[label] = [python, script]
        else:
            commands[label] = [python, "-m", "ampfix.runner", "run", "--threads", str(threads), *runner_options, script]
    timings: dict[str, list[Timing]] = {label: [] for label in commands}
    for _ in range(repeats):  # round-robin, so a noisy moment hurts every variant alike
        for label, command in commands.items():
            timings[label].append(timed(command, env))
    loop = {label: statistics.median(t.loop_s for t in runs) for label, runs in timings.items()}
    cpu = {label: statistics.median(t.loop_cpu_s for t in runs) for label, runs in timings.items()}
    total = {label: statistics.median(t.total_s for t in runs) for label, runs in timings.items()}
    loss = {label: runs[0].final_loss for label, runs in timings.items()}
    return {
        "workload": model,
        "steps": steps,
        "loop_s": loop,
        "total_s": total,
        "final_loss": loss,
        "runner_vs_twin": loop["runner, CPU policy"] / loop["bfloat16 twin"],
        "devices_vs_before": loop["runner, CUDA policy"] / loop[BASELINE_LABEL],
        "devices_vs_before_cpu": cpu["runner, CUDA policy"] / cpu[BASELINE_LABEL],
        "cuda_runner_vs_twin_cpu": cpu["runner, CUDA policy"] / cpu["bfloat16 twin"],
        "cuda_runner_vs_twin": loop["runner, CUDA policy"] / loop["bfloat16 twin"],
        "cuda_policy_vs_cpu_policy": loop["runner, CUDA policy"] / loop["runner, CPU policy"],
        "runner_vs_float32": loop["runner, CUDA policy"] / loop["float32"],
        "twin_vs_float32": loop["bfloat16 twin"] / loop["float32"],
        "cpu_policy_same_loss_as_twin": loss["runner, CPU policy"] == loss["bfloat16 twin"],
        "float16_vs_float32": loop[RUNNER_FLOAT16] / loop[RUNNER_FLOAT32],
        "float16_cpu_vs_float32": loop[RUNNER_FLOAT16_CPU] / loop[RUNNER_FLOAT32],
        "bfloat16_vs_float32": loop["runner, CUDA policy"] / loop[RUNNER_FLOAT32],
        "float16_cpu_vs_float16": loop[RUNNER_FLOAT16_CPU] / loop[RUNNER_FLOAT16],
        "float16_vs_float32_cpu": cpu[RUNNER_FLOAT16] / cpu[RUNNER_FLOAT32],
        "float16_cpu_vs_float32_cpu": cpu[RUNNER_FLOAT16_CPU] / cpu[RUNNER_FLOAT32],
        # Where the float32 sums of the default's matmuls run in another order than the CPU's float16 kernels'.
        "float16_loss_vs_float16_cpu": abs(loss[RUNNER_FLOAT16] - loss[RUNNER_FLOAT16_CPU])
        / max(abs(loss[RUNNER_FLOAT16_CPU]), 1e-30),
    }


def policy_in_one_process(model: str, rounds: int, threads: int, folder: Path) -> float:
    """CUDA's policy over the CPU's: medians of alternating 5-step rounds in one process."""
    path = folder / "policy_ab.py"
    path.write_text(POLICY_AB_SCRIPT.format(rounds=rounds, **MODELS[model]))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    completed = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, check=False)
    if completed.returncode != 0:
        raise SystemExit(f"{path} failed:\n{completed.stderr}")
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    return result["cuda_s"] / result["cpu_s"]


def native_bfloat16() -> str:
    """What the CPU offers for bfloat16 arithmetic (x86 flags, Arm features), from /proc/cpuinfo."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return "unknown (no /proc/cpuinfo)"
    found = sorted(flags & {"avx512_bf16", "amx_bf16", "bf16"})
    return ", ".join(found) if found else "none (bfloat16 is emulated in float32 arithmetic)"


def print_table(rows: list[dict[str, object]], repeats: int, threads: int) -> None:
    print(f"ampfix run overhead (median training-loop time of {repeats}, {threads} thread(s)); "
          f"native bfloat16 on this CPU: {native_bfloat16()}")
    labels = [label for label, _, _ in VARIANTS]
    print(f"{'workload':<18} {'steps':>5} " + " ".join(f"{label:>20}" for label in labels))
    for row in rows:
        print(f"{row['workload']:<18} {row['steps']:>5} " + " ".join(f"{row['loop_s'][label]:>19.3f}s" for label in labels))
    print()
    print(f"{'workload':<18} {'runner/twin':>12} {'CUDA runner/twin':>17} {'devices/before':>15} {'CUDA/CPU policy':>16} "
          f"{'runner/float32':>15} {'twin/float32':>13}  CPU policy = twin loss")
    for row in rows:
        print(
            f"{row['workload']:<18} {row['runner_vs_twin']:>11.2f}x {row['cuda_runner_vs_twin']:>16.2f}x "
            f"{row['devices_vs_before']:>14.2f}x {row['cuda_policy_vs_cpu_policy']:>15.2f}x "
            f"{row['runner_vs_float32']:>14.2f}x {row['twin_vs_float32']:>12.2f}x  "
            f"{'yes' if row['cpu_policy_same_loss_as_twin'] else 'NO'}"
        )
    print("\nfloat16 under the runner (issue 41; goal: the default at most 1.5x the float32 run)")
    print(f"{'workload':<18} {'float16/float32':>16} {'float16-cpu/float32':>20} {'bfloat16/float32':>17} "
          f"{'float16-cpu/float16':>20}  final loss, float16 vs float16-cpu (relative)")
    for row in rows:
        print(f"{row['workload']:<18} {row['float16_vs_float32']:>15.2f}x {row['float16_cpu_vs_float32']:>19.2f}x "
              f"{row['bfloat16_vs_float32']:>16.2f}x {row['float16_cpu_vs_float16']:>19.2f}x  "
              f"{row['float16_loss_vs_float16_cpu']:.2e}")
    print("\nthe same in CPU time (time.process_time() of the loop: other processes' load disturbs it least)")
    print(f"{'workload':<18} {'CUDA runner/twin':>17} {'devices/before':>15} {'float16/float32':>16} "
          f"{'float16-cpu/float32':>20}")
    for row in rows:
        print(f"{row['workload']:<18} {row['cuda_runner_vs_twin_cpu']:>16.2f}x {row['devices_vs_before_cpu']:>14.2f}x "
              f"{row['float16_vs_float32_cpu']:>15.2f}x {row['float16_cpu_vs_float32_cpu']:>19.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cnn-steps", type=int, default=40)
    parser.add_argument("--transformer-steps", type=int, default=20)
    parser.add_argument("--policy-rounds", type=int, default=8)
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ampfix-bench-") as folder:
        baseline = baseline_runner(Path(folder))
        rows = [
            measure("small CNN", args.cnn_steps, args.repeats, args.threads, Path(folder), baseline),
            measure("small transformer", args.transformer_steps, args.repeats, args.threads, Path(folder), baseline),
        ]
        in_process = policy_in_one_process("small transformer", args.policy_rounds, args.threads, Path(folder))
    print_table(rows, args.repeats, args.threads)
    print(f"\nsmall transformer, CUDA policy / CPU policy in one process ({args.policy_rounds} alternating "
          f"rounds of 5 steps, medians): {in_process:.2f}x")
    if args.json is not None:
        args.json.write_text(json.dumps({"rows": rows, "policy_in_one_process": in_process}, indent=2) + "\n")


if __name__ == "__main__":
    main()
