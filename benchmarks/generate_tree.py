"""Generate a deterministic tree of realistic PyTorch project files for the benchmarks.

    python benchmarks/generate_tree.py OUT_DIR [--files 2500] [--seed 0] [--tiny]

Files are 50 to 1,500 lines (models, training loops, utilities, configs, tests, scripts). About
4% hold real deprecated AMP uses, in every spelling (`torch.cuda.amp.autocast(...)`, `from
torch.cuda.amp import autocast, GradScaler`, `from torch.cuda import amp`, `import torch as th;
th.cuda.amp...`, `import torch.cuda.amp as ...`, `torch.cpu.amp`, custom_fwd / custom_bwd); about
10% mention AMP without a deprecated use (`use_amp`, `args.amp`, the new `torch.amp.autocast`);
the rest is plain torch code. `--tiny` writes small files (5 lines each: 90% plain, 9% naming
`amp`, 1% with a deprecated use) for the memory test.

The same seed and file count give byte-identical trees. `OUT_DIR/manifest.json` records what was
generated: the files with deprecated uses, the files holding the token `amp`, the line count.
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import sys
from pathlib import Path

LICENSE = '''# Copyright (c) {year}, {org}. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
'''

WORDS = (
    "encoder decoder attention block layer embedding projection residual norm conv pool head "
    "backbone adapter router expert token patch frame audio spectrogram vocoder acoustic text "
    "prompt latent noise scheduler sampler tokenizer vision fusion cross self local global "
    "sparse dense gated rotary relative position channel feature mask cache beam loss metric"
).split()
ORGS = ("NVIDIA CORPORATION", "The HuggingFace Team", "Meta Platforms, Inc.", "OpenMMLab")
DIRS = {
    "models": ("collections/asr/models", "collections/nlp/models", "collections/tts/models",
               "collections/vision/models", "models/unets", "models/transformers"),
    "modules": ("collections/asr/modules", "collections/nlp/modules", "core/modules",
                "models/attention", "collections/common/parts"),
    "training": ("core/training", "collections/common/callbacks", "training", "pipelines"),
    "utils": ("utils", "core/utils", "collections/common/data", "collections/asr/data",
              "collections/nlp/data"),
    "configs": ("core/config", "collections/asr/config", "configs"),
    "tests": ("tests/unit", "tests/collections/asr", "tests/collections/nlp", "tests/core"),
    "scripts": ("scripts/speech", "scripts/nlp", "examples/asr", "examples/nlp", "tools"),
}
KIND_WEIGHTS = {"models": 20, "modules": 22, "training": 8, "utils": 18, "configs": 8, "tests": 16, "scripts": 8}


class Gen:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def name(self, n: int = 2) -> str:
        return "_".join(self.rng.choice(WORDS) for _ in range(n))

    def cls(self) -> str:
        return "".join(w.capitalize() for w in self.name(self.rng.randint(2, 3)).split("_"))

    def dim(self) -> int:
        return self.rng.choice((64, 128, 256, 384, 512, 768, 1024, 2048, 4096))

    # units: each returns lines of valid code at module level ----------------------------------
    def module_class(self) -> list[str]:
        name, d, h = self.cls(), self.dim(), self.rng.choice((4, 8, 12, 16))
        layers = self.rng.randint(1, 4)
        out = [
            f"class {name}(nn.Module):",
            f'    """{self.name(3).replace("_", " ").capitalize()} module.',
            "",
            "    Args:",
            f"        d_model: hidden size (default {d}).",
            f"        n_heads: number of attention heads (default {h}).",
            "        dropout: dropout probability.",
            '    """',
            "",
            f"    def __init__(self, d_model: int = {d}, n_heads: int = {h}, dropout: float = 0.1) -> None:",
            "        super().__init__()",
            "        self.d_model = d_model",
            "        self.n_heads = n_heads",
            "        self.head_dim = d_model // n_heads",
        ]
        names = [f"{self.rng.choice(WORDS)}_{i}" for i in range(layers)]
        for layer in names:
            out.append(f"        self.{layer} = nn.Linear(d_model, d_model, bias={self.rng.choice((True, False))})")
        out += [
            "        self.norm = nn.LayerNorm(d_model, eps=1e-5)",
            "        self.dropout = nn.Dropout(dropout)",
            "        self.reset_parameters()",
            "",
            "    def reset_parameters(self) -> None:",
            "        for module in self.modules():",
            "            if isinstance(module, nn.Linear):",
            "                nn.init.xavier_uniform_(module.weight)",
            "                if module.bias is not None:",
            "                    nn.init.zeros_(module.bias)",
            "",
            "    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:",
            "        residual = x",
            "        batch, length, _ = x.shape",
        ]
        for layer in names:
            out.append(f"        x = F.gelu(self.{layer}(x))")
        out += [
            "        if mask is not None:",
            "            x = x.masked_fill(~mask.unsqueeze(-1), 0.0)",
            "        x = self.dropout(x)",
            "        return self.norm(x + residual)",
            "",
            "    def extra_repr(self) -> str:",
            '        return f"d_model={self.d_model}, n_heads={self.n_heads}"',
        ]
        return out

    def attention(self) -> list[str]:
        name = self.cls()
        return [
            f"class {name}Attention(nn.Module):",
            f"    def __init__(self, dim: int = {self.dim()}, heads: int = 8, causal: bool = False):",
            "        super().__init__()",
            "        self.heads = heads",
            "        self.scale = (dim // heads) ** -0.5",
            "        self.qkv = nn.Linear(dim, dim * 3)",
            "        self.out = nn.Linear(dim, dim)",
            "        self.causal = causal",
            "",
            "    def forward(self, x, cache=None):",
            "        b, n, d = x.shape",
            "        q, k, v = self.qkv(x).chunk(3, dim=-1)",
            "        q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2) for t in (q, k, v))",
            "        if cache is not None:",
            "            k = torch.cat([cache[0], k], dim=2)",
            "            v = torch.cat([cache[1], v], dim=2)",
            "        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale",
            "        if self.causal:",
            "            i, j = scores.shape[-2:]",
            "            causal_mask = torch.ones(i, j, dtype=torch.bool, device=x.device).triu(j - i + 1)",
            "            scores = scores.masked_fill(causal_mask, float('-inf'))",
            "        attn = scores.softmax(dim=-1)",
            "        out = torch.matmul(attn, v).transpose(1, 2).reshape(b, n, d)",
            "        return self.out(out), (k, v)",
        ]

    def util_function(self) -> list[str]:
        name = self.name(self.rng.randint(2, 3))
        arg, body = self.rng.choice((
            ("items", [
                "    result = []",
                "    for i, item in enumerate(items):",
                "        if item is None:",
                "            continue",
                "        if isinstance(item, (list, tuple)):",
                "            result.extend(item)",
                "        else:",
                "            result.append(item)",
                "    return result",
            ]),
            ("path", [
                "    if not os.path.exists(path):",
                f'        raise FileNotFoundError(f"{name}: {{path}} does not exist")',
                '    with open(path, "r", encoding="utf-8") as handle:',
                "        lines = [line.strip() for line in handle if line.strip()]",
                '    logging.info("read %d lines from %s", len(lines), path)',
                "    return lines",
            ]),
            ("items, pad_value: int = 0", [
                "    lengths = torch.as_tensor([len(x) for x in items])",
                "    max_len = int(lengths.max())",
                "    padded = torch.full((len(items), max_len), pad_value, dtype=torch.long)",
                "    for i, seq in enumerate(items):",
                "        padded[i, : len(seq)] = torch.as_tensor(seq)",
                "    return padded, lengths",
            ]),
            ("metrics", [
                "    stats = {}",
                "    for key, value in sorted(metrics.items()):",
                "        if torch.is_tensor(value):",
                "            value = value.detach().float().mean().item()",
                "        stats[key] = round(float(value), 6)",
                "    return stats",
            ]),
        ))
        return [f"def {name}({arg}):", f'    """{name.replace("_", " ").capitalize()}."""', *body]

    def config(self) -> list[str]:
        name = self.cls()
        out = ["@dataclass", f"class {name}Config:", f'    """Configuration of the {name} model."""', ""]
        for _ in range(self.rng.randint(6, 18)):
            field_name = self.name(2)
            kind = self.rng.randrange(4)
            if kind == 0:
                out.append(f"    {field_name}: int = {self.dim()}")
            elif kind == 1:
                out.append(f"    {field_name}: float = {self.rng.choice((0.0, 0.1, 0.5, 1e-4, 3e-4))}")
            elif kind == 2:
                out.append(f"    {field_name}: bool = {self.rng.choice((True, False))}")
            else:
                out.append(f'    {field_name}: str = "{self.rng.choice(WORDS)}"')
        out += ["", "    def validate(self) -> None:", "        for key, value in vars(self).items():",
                "            if value is None:", '                raise ValueError(f"{key} is required")']
        return out

    def train_loop(self) -> list[str]:
        name = self.name(2)
        return [
            f"def train_{name}(model, loader, optimizer, scheduler=None, epochs: int = 1, clip: float = 1.0):",
            '    """Train for a number of epochs; return the mean loss of the last one."""',
            "    device = next(model.parameters()).device",
            "    model.train()",
            "    mean_loss = 0.0",
            "    for epoch in range(epochs):",
            "        total, count = 0.0, 0",
            "        for step, batch in enumerate(loader):",
            "            inputs, targets = (t.to(device, non_blocking=True) for t in batch)",
            "            optimizer.zero_grad(set_to_none=True)",
            "            logits = model(inputs)",
            "            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))",
            "            loss.backward()",
            "            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)",
            "            optimizer.step()",
            "            if scheduler is not None:",
            "                scheduler.step()",
            "            total += loss.item()",
            "            count += 1",
            "            if step % 100 == 0:",
            '                logging.info("epoch %d step %d loss %.4f", epoch, step, loss.item())',
            "        mean_loss = total / max(count, 1)",
            "    return mean_loss",
        ]

    def test_function(self) -> list[str]:
        name, d = self.name(2), self.dim()
        return [
            f"def test_{name}_shapes():",
            "    torch.manual_seed(0)",
            f"    x = torch.randn(2, 16, {d})",
            f"    layer = nn.Linear({d}, {d})",
            "    y = layer(x)",
            "    assert y.shape == x.shape",
            "    assert torch.isfinite(y).all()",
            "",
            "",
            f"def test_{name}_grad():",
            f"    x = torch.randn(4, {d}, requires_grad=True)",
            "    (x ** 2).sum().backward()",
            "    assert x.grad is not None",
            "    torch.testing.assert_close(x.grad, 2 * x)",
        ]

    def script_main(self) -> list[str]:
        return [
            "def parse_args(argv=None):",
            "    parser = argparse.ArgumentParser(description=__doc__)",
            '    parser.add_argument("--data", required=True)',
            '    parser.add_argument("--batch-size", type=int, default=32)',
            '    parser.add_argument("--lr", type=float, default=3e-4)',
            '    parser.add_argument("--epochs", type=int, default=10)',
            '    parser.add_argument("--seed", type=int, default=1234)',
            "    return parser.parse_args(argv)",
            "",
            "",
            "def main(argv=None):",
            "    args = parse_args(argv)",
            "    torch.manual_seed(args.seed)",
            '    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")',
            '    logging.info("arguments: %s", vars(args))',
            "",
            "",
            'if __name__ == "__main__":',
            "    main()",
        ]

    def docstring_block(self) -> list[str]:
        words = [self.rng.choice(WORDS) for _ in range(self.rng.randint(30, 90))]
        text, lines = "", []
        for w in words:
            if len(text) + len(w) > 88:
                lines.append(text.rstrip())
                text = ""
            text += w + " "
        lines.append(text.rstrip())
        name = self.name(2)
        return [f"def {name}_notes():", '    """' + lines[0].capitalize(), *(f"    {ln}" for ln in lines[1:]),
                '    """', "    return None"]

    # AMP -------------------------------------------------------------------------------------
    def amp_use(self, spelling: str) -> tuple[list[str], list[str]]:
        """(extra imports, a unit) with deprecated uses in the given spelling."""
        name = self.name(2)
        step_head = [f"def {name}_step(model, batch, optimizer, scaler, use_amp: bool = True):",
                     "    inputs, targets = batch"]
        step_tail = ["        loss = F.mse_loss(model(inputs), targets)",
                     "    scaler.scale(loss).backward()",
                     "    scaler.step(optimizer)",
                     "    scaler.update()",
                     "    return loss.detach()"]
        if spelling == "dotted":
            return [], [
                *step_head,
                "    with torch.cuda.amp.autocast(enabled=use_amp, dtype=torch.float16):",
                *step_tail, "", "",
                f"def make_{name}_scaler(enabled: bool = True):",
                "    return torch.cuda.amp.GradScaler(init_scale=2.0 ** 16, enabled=enabled)",
            ]
        if spelling == "from_import":
            return ["from torch.cuda.amp import GradScaler, autocast"], [
                *step_head, "    with autocast(use_amp):", *step_tail, "", "",
                f"def make_{name}_scaler():", "    return GradScaler()",
            ]
        if spelling == "module_import":
            return ["from torch.cuda import amp"], [
                *step_head, "    with amp.autocast(enabled=use_amp):", *step_tail, "", "",
                f"def make_{name}_scaler():", "    return amp.GradScaler(growth_interval=1000)",
            ]
        if spelling == "alias":
            return ["import torch as th"], [
                *step_head, "    with th.cuda.amp.autocast():", *step_tail, "", "",
                f"def make_{name}_scaler():", "    return th.cuda.amp.GradScaler()",
            ]
        if spelling == "import_as":
            return ["import torch.cuda.amp as cuda_amp"], [
                *step_head, "    with cuda_amp.autocast(dtype=torch.bfloat16):", *step_tail,
            ]
        if spelling == "cpu":
            return [], [
                f"def {name}_cpu_inference(model, inputs):",
                "    with torch.no_grad(), torch.cpu.amp.autocast(dtype=torch.bfloat16):",
                "        return model(inputs)",
            ]
        if spelling == "custom_fwd":
            return ["from torch.cuda.amp import custom_bwd, custom_fwd"], [
                f"class {self.cls()}Function(torch.autograd.Function):",
                "    @staticmethod",
                "    @custom_fwd(cast_inputs=torch.float32)",
                "    def forward(ctx, x, weight):",
                "        ctx.save_for_backward(x, weight)",
                "        return x @ weight",
                "",
                "    @staticmethod",
                "    @custom_bwd",
                "    def backward(ctx, grad):",
                "        x, weight = ctx.saved_tensors",
                "        return grad @ weight.t(), x.t() @ grad",
            ]
        raise ValueError(spelling)

    def amp_mention(self, token: bool) -> list[str]:
        """Code that talks about AMP without a deprecated use; with `token`, it spells `amp`."""
        name = self.name(2)
        if not token:
            return [
                f"def {name}_precision(use_amp: bool = False, amp_dtype: str = \"float16\"):",
                '    """Pick the autocast dtype; mixed precision only when use_amp is set."""',
                "    if not use_amp:",
                "        return torch.float32",
                "    return {\"float16\": torch.float16, \"bfloat16\": torch.bfloat16}[amp_dtype]",
            ]
        return self.rng.choice((
            [
                f"def {name}_forward(model, inputs, args):",
                "    # amp: the new device-generic API",
                '    with torch.amp.autocast("cuda", enabled=args.amp):',
                "        return model(inputs)",
            ],
            [
                f"def {name}_scaler(args):",
                '    scaler = torch.amp.GradScaler("cuda", enabled=args.amp)',
                "    return scaler",
            ],
            [
                f"def {name}_flags(parser):",
                '    parser.add_argument("--amp", action="store_true", help="enable amp")',
                "    return parser",
            ],
        ))


HEADER_IMPORTS = {
    "models": ["import math", "from typing import Optional", "", "import torch",
               "import torch.nn as nn", "import torch.nn.functional as F"],
    "modules": ["import math", "from typing import Optional, Tuple", "", "import torch",
                "import torch.nn as nn", "import torch.nn.functional as F"],
    "training": ["import logging", "import os", "from typing import Optional", "", "import torch",
                 "import torch.nn as nn", "import torch.nn.functional as F"],
    "utils": ["import logging", "import os", "from typing import List, Optional", "", "import torch",
              "import torch.nn.functional as F"],
    "configs": ["from dataclasses import dataclass, field", "from typing import Optional", "",
                "import torch"],
    "tests": ["import pytest", "from typing import Optional", "", "import torch", "import torch.nn as nn",
              "import torch.nn.functional as F"],
    "scripts": ['"""Command line entry point."""', "import argparse", "import logging", "import os",
                "from typing import Optional", "", "import torch", "import torch.nn as nn",
                "import torch.nn.functional as F"],
}
UNITS = {
    "models": ("module_class", "attention", "module_class", "util_function", "docstring_block"),
    "modules": ("module_class", "attention", "util_function", "docstring_block"),
    "training": ("train_loop", "util_function", "module_class", "docstring_block"),
    "utils": ("util_function", "util_function", "docstring_block", "config"),
    "configs": ("config", "config", "util_function"),
    "tests": ("test_function", "test_function", "module_class"),
    "scripts": ("util_function", "train_loop", "docstring_block"),
}
SPELLINGS = ("dotted", "from_import", "module_import", "alias", "import_as", "cpu", "custom_fwd")


def target_lines(rng: random.Random) -> int:
    # Log-normal around 180 lines, clipped to 50..1500: most files short, a long tail.
    return max(50, min(1450, int(rng.lognormvariate(5.2, 0.8))))


def make_file(rng: random.Random, kind: str, role: str) -> str:
    gen = Gen(rng)
    want = target_lines(rng)
    imports = list(HEADER_IMPORTS[kind])
    body: list[list[str]] = []
    if role.startswith("amp:"):
        extra, unit = gen.amp_use(role[4:])
        imports += extra
        body.append(unit)
    elif role == "mention_token":
        body.append(gen.amp_mention(token=True))
    elif role == "mention":
        body.append(gen.amp_mention(token=False))
    size = len(imports) + 16 + sum(len(u) + 2 for u in body)
    while size < want:
        unit = getattr(gen, rng.choice(UNITS[kind]))()
        body.insert(rng.randrange(len(body) + 1), unit)
        size += len(unit) + 2
    if kind == "scripts":
        body.append(gen.script_main())
    head = LICENSE.format(year=rng.choice((2020, 2021, 2022, 2023, 2024)), org=rng.choice(ORGS))
    logger = "logger = logging.getLogger(__name__)" if "import logging" in imports else ""
    parts = [head.rstrip("\n"), "", *imports, "", logger, ""]
    for unit in body:
        parts += ["", *unit, ""]
    return "\n".join(parts).rstrip("\n") + "\n"


def tiny_file(rng: random.Random, index: int) -> tuple[str, str]:
    """(role, text): 90% plain, 9% naming `amp` without a deprecated use, 1% with one."""
    draw = rng.random()
    if draw < 0.01:
        return "amp", (f"import torch\n\n\ndef f_{index}(x):\n    with torch.cuda.amp.autocast():\n"
                       "        return x * 2\n")
    if draw < 0.10:
        return "mention_token", f"import torch\n\n\ndef f_{index}(x, args):\n    # amp\n    return x * args.amp\n"
    return "plain", f"import torch\n\n\ndef f_{index}(x):\n    return torch.relu(x) * {rng.randint(1, 9)}\n"


def generate(out: Path, files: int = 2500, seed: int = 0, tiny: bool = False) -> dict:
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    kinds = list(KIND_WEIGHTS)
    weights = [KIND_WEIGHTS[k] for k in kinds]
    manifest: dict = {"files": files, "seed": seed, "tiny": tiny, "deprecated": [], "amp_token": [], "lines": 0}
    used_names: set[str] = set()
    for index in range(files):
        if tiny:
            rel = f"pkg{index // 1000:03d}/sub{(index // 100) % 10}/mod_{index}.py"
            role, text = tiny_file(rng, index)
            if role == "amp":
                manifest["deprecated"].append(rel)
            if role in ("amp", "mention_token"):
                manifest["amp_token"].append(rel)
        else:
            kind = rng.choices(kinds, weights)[0]
            directory = rng.choice(DIRS[kind])
            draw = rng.random()
            if draw < 0.04:
                role = "amp:" + SPELLINGS[index % len(SPELLINGS)]
            elif draw < 0.09:
                role = "mention_token"
            elif draw < 0.14:
                role = "mention"
            else:
                role = "plain"
            stem = f"{'test_' if kind == 'tests' else ''}{Gen(rng).name(2)}"
            rel = f"{directory}/{stem}.py"
            n = 1
            while rel in used_names:
                n += 1
                rel = f"{directory}/{stem}_{n}.py"
            text = make_file(rng, kind, role)
            ast.parse(text)  # every generated file is valid Python
            if role.startswith("amp:"):
                manifest["deprecated"].append(rel)
            if role.startswith("amp:") or role == "mention_token":
                manifest["amp_token"].append(rel)
        used_names.add(rel)
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        manifest["lines"] += text.count("\n")
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--files", type=int, default=2500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tiny", action="store_true", help="tiny files (for the memory test)")
    args = parser.parse_args(argv)
    manifest = generate(args.out, args.files, args.seed, args.tiny)
    print(f"{args.files} files, {manifest['lines']} lines, {len(manifest['deprecated'])} with deprecated uses, "
          f"{len(manifest['amp_token'])} holding the token `amp`", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
