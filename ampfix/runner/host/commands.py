"""``ampfix run`` and ``ampfix verify``: options in, exit status out. The work is in :mod:`api`.

``run`` parses as launchers do (``python -m``, ``torchrun``, ``coverage run``): ampfix's options
come before the script (or ``-m MODULE``), and every word after it is the script's, through
``ctx.args`` (:class:`LauncherCommand`); a ``--`` right after the script is dropped, the form
these docs once showed. ``verify`` takes its options anywhere and the script's after ``--``.
Importing this module must not import torch or libcst: it only starts child processes.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from typer.core import TyperCommand

from ampfix.runner.host import api, render


MODULE_OPTIONS = ("-m", "--module")


def split_at_script(args: list[str], value_options: frozenset[str]) -> tuple[list[str], list[str]]:
    """The launcher's words (its options, then the script or ``-m MODULE``) and the script's (every word
    after it, less one ``--`` right after it). ``value_options``: the options that take the next word as
    their value. A ``--`` before the script ends the launcher's options; the next word is the script."""
    index = 0
    while index < len(args):
        word = args[index]
        if word == "--":
            return args[:index + 2], _without_separator(args[index + 2:])
        if not word.startswith("-") or word == "-":  # the script
            return args[:index + 1], _without_separator(args[index + 1:])
        name = word.split("=", 1)[0]
        takes_next = "=" not in word and (name in value_options or name in MODULE_OPTIONS)
        if name in MODULE_OPTIONS or (word.startswith("-m") and not word.startswith("--")):
            end = index + (2 if takes_next else 1)
            return args[:end], _without_separator(args[end:])
        index += 2 if takes_next else 1
    return list(args), []


def _without_separator(script_args: list[str]) -> list[str]:
    return script_args[1:] if script_args[:1] == ["--"] else script_args


class LauncherCommand(TyperCommand):
    """A command whose options stop at its script: what follows is the script's, whatever it looks like."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        value_options = frozenset(  # typer's options (its own click's): those that are no flag take a value
            name for param in self.params if param.param_type_name == "option" and not getattr(param, "is_flag", True)
            for name in (*param.opts, *param.secondary_opts)
        )
        own, script_args = split_at_script(list(args), value_options)
        super().parse_args(ctx, own)
        ctx.args = script_args
        return script_args


def summary_console() -> Console:
    """Where the summaries go (stderr: the script owns stdout). On a terminal, wrapped to its width; elsewhere (a
    CI log, `2>&1 | cat`) plain lines, never wrapped, unless COLUMNS asks for a width: a phrase or a path split
    across lines cannot be searched for."""
    console = Console(stderr=True)
    if console.is_terminal or os.environ.get("COLUMNS"):
        return console
    return Console(stderr=True, soft_wrap=True, width=UNWRAPPED_WIDTH)


# Wide enough for any line the summaries print: rich lays a table out within the width it is given.
UNWRAPPED_WIDTH = 10_000


class AmpDtype(str, enum.Enum):
    float16 = "float16"
    bfloat16 = "bfloat16"
    float16_cpu = "float16-cpu"
    keep = "keep"
    explicit = "explicit"


class AutocastPolicy(str, enum.Enum):
    cuda = "cuda"
    cpu = "cpu"


class RewriteDevice(str, enum.Enum):
    """The device the rewrite under verify targets, as `ampfix rewrite --device` names it."""

    cuda = "cuda"
    cpu = "cpu"


# verify captures both sides' output, so a script that hangs would hang it in silence: it gets a
# limit by default. run streams the script's output and may be a real training run: none.
VERIFY_TIMEOUT_S = 600.0

ScriptArgument = Annotated[Path, typer.Argument(help="The script to run (as __main__).", show_default=False)]
MaxStepsOption = Annotated[
    int | None, typer.Option("--max-steps", min=1, help="End the script cleanly (exit 0) after N optimizer steps.")
]
_AMP_DTYPE_HELP = (
    'The dtype "cuda" autocast runs in on the CPU. float16: as a GPU computes it (float16 matmuls summed in '
    "float32, rounded once); float16-cpu: on the CPU's own float16 kernels (slow); bfloat16: faster, read as "
    "float16, without float16's overflow and underflow; keep: the requested one; explicit: the one the script "
    "gives, else the CPU's default."
)
AmpDtypeOption = Annotated[AmpDtype, typer.Option("--amp-dtype", help=_AMP_DTYPE_HELP)]
_AUTOCAST_POLICY_HELP = (
    'Whose op lists "cuda" autocast follows on the CPU: cuda (the dtypes a GPU gives) or cpu (CPU autocast\'s).'
)
AutocastPolicyOption = Annotated[AutocastPolicy, typer.Option("--autocast-policy", help=_AUTOCAST_POLICY_HELP)]
SeedOption = Annotated[int, typer.Option("--seed", help="Seed for torch, random, numpy and PYTHONHASHSEED.")]
ThreadsOption = Annotated[int, typer.Option(
    "--threads", min=1, help="Torch / OpenMP thread count (fixed for reproducibility).")]
JsonOption = Annotated[Path | None, typer.Option("--json", help="Write the report as JSON to this file.")]


GpusOption = Annotated[int, typer.Option(
    "--gpus", min=1, help="Emulated GPUs: torch.cuda.device_count(), cuda:0 .. cuda:N-1.")]
GpuMemoryOption = Annotated[str | None, typer.Option(
    "--gpu-memory", metavar="SIZE",
    help="Each GPU's memory (24GiB, 80GB, 512MiB): past it, torch.OutOfMemoryError as CUDA raises it. "
         "Default: no limit.")]
DeviceChecksOption = Annotated[bool, typer.Option(
    "--device-checks/--no-device-checks",
    help="Fail where a GPU fails (two devices in one op, numpy of a GPU's tensor); --no-device-checks lets "
         "them run and lists them.")]
_SIZE_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
               "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_size(text: str) -> int:
    """'24GiB' -> 25769803776; '80GB' -> 80000000000; a bare number is bytes."""
    stripped = text.strip().upper().replace(" ", "")
    number = stripped.rstrip("KMGTIB")
    unit = stripped[len(number):]
    if unit not in _SIZE_UNITS or not number:
        raise typer.BadParameter(f"{text!r}: a size such as 24GiB, 80GB or 512MiB", param_hint="--gpu-memory")
    try:
        size = int(float(number) * _SIZE_UNITS[unit])
    except ValueError:
        raise typer.BadParameter(f"{text!r}: a size such as 24GiB, 80GB or 512MiB",
                                 param_hint="--gpu-memory") from None
    if size < 1:
        raise typer.BadParameter(f"{text!r}: at least one byte", param_hint="--gpu-memory")
    return size


TimeoutOption = Annotated[
    float, typer.Option("--timeout", min=0, metavar="SECONDS",
                        help="Stop the script after this long and exit 2; 0: never.")
]


def _options(
    max_steps: int | None, amp_dtype: AmpDtype, autocast_policy: AutocastPolicy, seed: int, threads: int,
    gpus: int = 1, gpu_memory: str | None = None, device_checks: bool = True,
) -> api.RunOptions:
    return api.RunOptions(
        max_steps=max_steps, amp_dtype=amp_dtype.value, autocast_policy=autocast_policy.value, seed=seed,
        threads=threads, gpus=gpus, gpu_memory=None if gpu_memory is None else parse_size(gpu_memory),
        device_checks=device_checks,
    )


def _check_json_path(command: str, path: Path | None) -> None:
    """A report that cannot be written is found before the script runs, not after."""
    if path is None:
        return
    problem = _json_path_problem(path)
    if problem is not None:
        summary_console().print(f"ampfix {command}: cannot write the report to {path}: {problem}", style="red",
                                   highlight=False)
        raise typer.Exit(2)


def _json_path_problem(path: Path) -> str | None:
    if path.is_dir():
        return "it is a folder"
    folder = path.parent
    if not folder.is_dir():
        return f"no such folder: {folder}"
    if path.exists() and not os.access(path, os.W_OK):
        return "the file is not writable"
    if not path.exists() and not os.access(folder, os.W_OK | os.X_OK):
        return f"the folder {folder} is not writable"
    return None


def _write_json(path: Path | None, data: dict[str, Any]) -> None:
    if path is not None:
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


class Terminated(SystemExit):
    """SIGTERM / SIGHUP to ampfix, raised where it is waiting so that the scripts it started are ended."""


@contextlib.contextmanager
def _ending_signals_raise() -> Iterator[None]:
    """Python's default for SIGTERM ends the process at once, leaving the children and the temporary
    folders behind; as an exception it unwinds through the runner's cleanup instead."""

    def raise_terminated(signal_number: int, frame: Any) -> None:
        raise Terminated(128 + signal_number)

    names = [name for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)]
    previous = {name: signal.signal(getattr(signal, name), raise_terminated) for name in names}
    try:
        yield
    finally:
        for name, handler in previous.items():
            signal.signal(getattr(signal, name), handler)


def _seconds(timeout: float) -> float | None:
    return timeout or None


def run_command(
    ctx: typer.Context,
    script: Annotated[Path | None, typer.Argument(help="The script to run (as __main__).", show_default=False)] = None,
    module: Annotated[str | None, typer.Option(
        "-m", "--module", metavar="MODULE",
        help="Run a module as `python -m MODULE` does (a test suite: -m pytest tests/).")] = None,
    max_steps: MaxStepsOption = None,
    amp_dtype: AmpDtypeOption = AmpDtype.float16,
    autocast_policy: AutocastPolicyOption = AutocastPolicy.cuda,
    gpus: GpusOption = 1,
    gpu_memory: GpuMemoryOption = None,
    device_checks: DeviceChecksOption = True,
    seed: SeedOption = 0,
    threads: ThreadsOption = 1,
    timeout: TimeoutOption = 0,
    json_path: JsonOption = None,
) -> None:
    """Run a CUDA-written script (or module) on the CPU as a GPU would, with mixed precision really exercised,
    and report what AMP did.

    ampfix's options come before the script; every word after the script is the script's, as with
    `python`: ampfix run --max-steps 5 train.py --epochs 1; a module's too: ampfix run -m pytest tests/ -x
    """
    if script is None and module is None:
        summary_console().print("ampfix run: give a script, or -m MODULE", style="red", highlight=False)
        raise typer.Exit(2)
    arguments = list(ctx.args)
    _check_json_path("run", json_path)
    options = _options(max_steps, amp_dtype, autocast_policy, seed, threads, gpus, gpu_memory, device_checks)
    with _ending_signals_raise():
        if module is not None:
            report = api.run_module(module, arguments, options, timeout=_seconds(timeout))
        else:
            assert script is not None
            report = api.run_script(script, arguments, options, timeout=_seconds(timeout))
    render.render_run(report, summary_console())
    _write_json(json_path, report.to_json())
    if report.exit_code is None:
        raise typer.Exit(2)
    raise typer.Exit(report.exit_code)


def verify_command(
    ctx: typer.Context,
    script: ScriptArgument,
    rewritten: Annotated[
        Path | None,
        typer.Option("--rewritten", help="A hand migration to check instead of ampfix's own rewrite."),
    ] = None,
    device: Annotated[
        RewriteDevice,
        typer.Option(
            "--device",
            help='The device the rewrite targets, as for `ampfix rewrite --device`: with cpu, the original\'s "cuda" '
            "requests are expected on the CPU (float16 -> bfloat16) and both sides run the CPU's op policy.",
        ),
    ] = RewriteDevice.cuda,
    keep_dtype: Annotated[
        bool,
        typer.Option(
            "--keep-dtype",
            help="As for `ampfix rewrite --keep-dtype`: with --device cpu, an explicit float16 is expected kept.",
        ),
    ] = False,
    max_steps: MaxStepsOption = None,
    # None: not given; the default depends on --device (see _verify_run_options).
    amp_dtype: Annotated[
        AmpDtype | None, typer.Option("--amp-dtype", help=_AMP_DTYPE_HELP, show_default="float16")
    ] = None,
    autocast_policy: Annotated[
        AutocastPolicy | None,
        typer.Option("--autocast-policy", help=_AUTOCAST_POLICY_HELP, show_default="cuda; cpu with --device cpu"),
    ] = None,
    seed: SeedOption = 0,
    threads: ThreadsOption = 1,
    timeout: TimeoutOption = VERIFY_TIMEOUT_S,
    json_path: JsonOption = None,
) -> None:
    """Run a script and its rewrite side by side on the CPU and compare them step by step.

    Exit 0 when they behave the same, 1 when not, 2 when either could not run, 3 when either crashed (died of an
    exception: the cause, whatever else differs). The rewrite is
    ampfix's own unless --rewritten names a hand migration; script arguments go after `--`.
    Each side runs in its own copy of the working directory, so scripts that write files do not meet.
    """
    _check_json_path("verify", json_path)
    options = _verify_run_options(device, keep_dtype, max_steps, amp_dtype, autocast_policy, seed, threads)
    with _ending_signals_raise():
        report = api.verify_scripts(
            script, rewritten, ctx.args, options, timeout=_seconds(timeout), device=device.value, keep_dtype=keep_dtype
        )
    render.render_verify(report, summary_console())
    _write_json(json_path, report.to_json())
    raise typer.Exit(report.exit_code)


def _verify_run_options(
    device: RewriteDevice,
    keep_dtype: bool,
    max_steps: int | None,
    amp_dtype: AmpDtype | None,
    autocast_policy: AutocastPolicy | None,
    seed: int,
    threads: int,
) -> api.RunOptions:
    """run's defaults; for a rewrite to the CPU, the options that device decides, and an error (exit 2)
    for a flag that asks otherwise: the losses could then never agree."""
    given = _options(
        max_steps, amp_dtype or AmpDtype.float16, autocast_policy or AutocastPolicy.cuda, seed, threads
    )
    decided = api.options_for_device(given, device.value, keep_dtype)
    for flag, chosen, field_name in (
        ("--amp-dtype", amp_dtype, "amp_dtype"),
        ("--autocast-policy", autocast_policy, "autocast_policy"),
    ):
        needed = getattr(decided, field_name)
        if chosen is not None and chosen.value != needed:
            summary_console().print(
                f"ampfix verify: --device {device.value} runs both sides with {flag} {needed}; "
                f"{flag} {chosen.value} does not apply",
                style="red",
                highlight=False,
            )
            raise typer.Exit(2)
    return decided
