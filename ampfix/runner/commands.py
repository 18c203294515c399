"""``ampfix run`` and ``ampfix verify``: options in, exit status out. The work is in :mod:`api`.

The CLI registers these with ``context_settings={"allow_extra_args": True,
"ignore_unknown_options": True}``, so whatever follows the script (after ``--``) reaches the
script as its arguments through ``ctx.args``. Importing this module must not import torch or
libcst: it only starts child processes.
"""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from ampfix.runner import api, render

class AmpDtype(str, enum.Enum):
    bfloat16 = "bfloat16"
    float16 = "float16"
    keep = "keep"


ScriptArgument = Annotated[Path, typer.Argument(help="The script to run (as __main__).", show_default=False)]
MaxStepsOption = Annotated[
    Optional[int], typer.Option("--max-steps", min=1, help="End the script cleanly (exit 0) after N optimizer steps.")
]
AmpDtypeOption = Annotated[
    AmpDtype,
    typer.Option("--amp-dtype", help='The dtype "cuda" autocast runs in on the CPU; keep: the requested one.'),
]
SeedOption = Annotated[int, typer.Option("--seed", help="Seed for torch, random, numpy and PYTHONHASHSEED.")]
ThreadsOption = Annotated[int, typer.Option("--threads", min=1, help="Torch / OpenMP thread count (fixed for reproducibility).")]
JsonOption = Annotated[Optional[Path], typer.Option("--json", help="Write the report as JSON to this file.")]


def _options(max_steps: int | None, amp_dtype: AmpDtype, seed: int, threads: int) -> api.RunOptions:
    return api.RunOptions(max_steps=max_steps, amp_dtype=amp_dtype.value, seed=seed, threads=threads)


def _write_json(path: Path | None, data: dict[str, Any]) -> None:
    if path is not None:
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def run_command(
    ctx: typer.Context,
    script: ScriptArgument,
    max_steps: MaxStepsOption = None,
    amp_dtype: AmpDtypeOption = AmpDtype.bfloat16,
    seed: SeedOption = 0,
    threads: ThreadsOption = 1,
    json_path: JsonOption = None,
) -> None:
    """Run a CUDA-written script on the CPU, with mixed precision really exercised, and report what AMP did.

    The script's own arguments go after `--`: ampfix run train.py --max-steps 5 -- --epochs 1
    """
    report = api.run_script(script, ctx.args, _options(max_steps, amp_dtype, seed, threads))
    render.render_run(report, Console(stderr=True))
    _write_json(json_path, report.to_json())
    if report.exit_code is None:
        raise typer.Exit(2)
    raise typer.Exit(report.exit_code)


def verify_command(
    ctx: typer.Context,
    script: ScriptArgument,
    rewritten: Annotated[
        Optional[Path],
        typer.Option("--rewritten", help="A hand migration to check instead of ampfix's own rewrite."),
    ] = None,
    max_steps: MaxStepsOption = None,
    amp_dtype: AmpDtypeOption = AmpDtype.bfloat16,
    seed: SeedOption = 0,
    threads: ThreadsOption = 1,
    json_path: JsonOption = None,
) -> None:
    """Run a script and its rewrite side by side on the CPU and compare them step by step.

    Exit 0 when they behave the same, 1 when not, 2 when either could not run. The rewrite is
    ampfix's own unless --rewritten names a hand migration; script arguments go after `--`.
    """
    report = api.verify_scripts(script, rewritten, ctx.args, _options(max_steps, amp_dtype, seed, threads))
    render.render_verify(report, Console(stderr=True))
    _write_json(json_path, report.to_json())
    raise typer.Exit(report.exit_code)
