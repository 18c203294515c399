"""The runner's float16 (the default: the matmul family in float32 from float16 operands, rounded once) against the
CPU's own float16 kernels (``--amp-dtype float16-cpu``) on a real training script: bench_runner.py's transformer,
trained with a GradScaler whose scale starts high (2**24) and grows every 10 clean steps, so steps are skipped at
the start and again after each growth that no longer fits.

Both runs must skip the same steps with the same scale trajectory; the losses differ only where the float32 sums run
in another order (the CPU float16 kernel's against the CPU float32 kernel's), and the largest relative difference
is printed.

    python benchmarks/float16_parity.py [--steps 40] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_runner import MODELS  # noqa: E402

SCRIPT = """\
import json, math
import torch
import torch.nn as nn
import torch.nn.functional as F

{definition}
torch.manual_seed(0)
model = build().cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
scaler = torch.amp.GradScaler("cuda", init_scale=2.0**24, growth_interval=10)
history = []
for step in range({steps}):
    x, y = ({batch}).cuda(), ({labels}).cuda()
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cuda"):
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scale = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    history.append({{"loss": loss.item(), "scale": scale, "skipped": scaler.get_scale() < scale}})
print(json.dumps(history))
"""

VARIANTS = {"float16 (default)": [], "float16-cpu": ["--amp-dtype", "float16-cpu"]}


def run(script: Path, options: list[str], threads: int) -> list[dict]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    command = [sys.executable, "-m", "ampfix.runner", "run", "--threads", str(threads), *options, str(script)]
    completed = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if completed.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{completed.stderr}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ampfix-float16-") as folder:
        script = Path(folder) / "transformer_float16.py"
        script.write_text(SCRIPT.format(steps=args.steps, **MODELS["small transformer"]))
        runs = {label: run(script, options, args.threads) for label, options in VARIANTS.items()}
    ours, theirs = runs["float16 (default)"], runs["float16-cpu"]
    skipped = [[i + 1 for i, step in enumerate(history) if step["skipped"]] for history in (ours, theirs)]
    scales = [[step["scale"] for step in history] for history in (ours, theirs)]
    finite = [(a["loss"], b["loss"]) for a, b in zip(ours, theirs) if a["loss"] == a["loss"] and b["loss"] == b["loss"]]
    worst = max((abs(a - b) / max(abs(b), 1e-30) for a, b in finite), default=0.0)
    print(f"steps {args.steps}; skipped (default) {skipped[0]}; skipped (float16-cpu) {skipped[1]}")
    print(f"same skipped steps: {skipped[0] == skipped[1]}; same scale trajectory: {scales[0] == scales[1]}")
    print(f"scales (default): {sorted(set(scales[0]), reverse=True)}")
    print(f"losses: largest relative difference {worst:.2e} over {len(finite)} steps; "
          f"bit for bit: {sum(a == b for a, b in finite)}; first losses {ours[0]['loss']!r} / {theirs[0]['loss']!r}, "
          f"last {ours[-1]['loss']!r} / {theirs[-1]['loss']!r}")


if __name__ == "__main__":
    main()
