"""``run_script`` and ``verify_scripts``: the runner's API. Returns reports; never prints.

Parent side: torch is only ever imported by the child processes these functions start, and
ampfix's own rewrite engine (libcst) only when ``verify`` is asked to produce the rewrite.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ampfix.runner.compare import first_difference
from ampfix.runner.config import AMP_DTYPES, AUTOCAST_POLICIES
from ampfix.runner.cpu_target import CPU_AMP_DTYPE, as_cpu_rewrite_promises
from ampfix.runner.launch import LaunchedRun, precheck
from ampfix.runner.model import RunReport, VerifyReport
from ampfix.runner.workdir import mirror


@dataclass(frozen=True)
class RunOptions:
    max_steps: int | None = None
    amp_dtype: str = "bfloat16"  # the dtype "cuda" autocast runs in on the CPU (see config.AMP_DTYPES)
    autocast_policy: str = "cuda"  # whose op lists "cuda" regions follow: CUDA's or the CPU's
    seed: int = 0
    threads: int = 1

    def __post_init__(self) -> None:
        if self.amp_dtype not in AMP_DTYPES:
            raise ValueError(f"amp_dtype must be one of {', '.join(AMP_DTYPES)}, not {self.amp_dtype!r}")
        if self.autocast_policy not in AUTOCAST_POLICIES:
            raise ValueError(
                f"autocast_policy must be one of {', '.join(AUTOCAST_POLICIES)}, not {self.autocast_policy!r}"
            )
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError("max_steps must be at least 1")
        if self.threads < 1:
            raise ValueError("threads must be at least 1")


def _launch(
    script: Path,
    script_args: Sequence[str],
    options: RunOptions,
    *,
    capture_output: bool,
    timeout: float | None,
    extra_paths: Sequence[str] = (),
    cwd: Path | None = None,
    verify_observations: bool = False,
) -> LaunchedRun:
    return LaunchedRun(
        Path(script),
        list(script_args),
        {**asdict(options), "verify_observations": verify_observations},
        capture_output=capture_output,
        timeout=timeout,
        extra_paths=extra_paths,
        cwd=None if cwd is None else str(cwd),
    )


def run_script(
    script: str | os.PathLike[str],
    script_args: Sequence[str] = (),
    options: RunOptions = RunOptions(),
    *,
    capture_output: bool = False,
    timeout: float | None = None,
) -> RunReport:
    """Run ``script`` on the CPU under the harness, in the current working directory; its output
    goes to ours unless captured. ``timeout``: seconds before the script is stopped (None: never)."""
    return _launch(Path(script), script_args, options, capture_output=capture_output, timeout=timeout).finish()


# The device a rewrite targets (`ampfix rewrite --device`): "cuda" keeps each request's device,
# "cpu" moves CUDA's requests to the CPU.
VERIFY_DEVICES = ("cuda", "cpu")


def options_for_device(options: RunOptions, device: str, keep_dtype: bool = False) -> RunOptions:
    """The run options both sides of ``verify`` get. For a rewrite to the CPU, the original's "cuda"
    regions must run as the rewrite's "cpu" ones will: the CPU's op policy, in the dtype the rewrite
    asks for instead of float16; with ``keep_dtype``, in the dtype the script gave, and the CPU's
    default where it gave none."""
    if device == "cpu":
        return replace(options, autocast_policy="cpu", amp_dtype="explicit" if keep_dtype else CPU_AMP_DTYPE)
    return options


def verify_scripts(
    original: str | os.PathLike[str],
    rewritten: str | os.PathLike[str] | None = None,
    script_args: Sequence[str] = (),
    options: RunOptions = RunOptions(),
    *,
    timeout: float | None = None,
    device: str = "cuda",
    keep_dtype: bool = False,
) -> VerifyReport:
    """Run the original and its rewrite side by side (same seed, same threads) and compare them.

    ``device``: the device the rewrite targets (see ``ampfix rewrite --device``). With "cpu", both
    sides run under :func:`options_for_device`, and the original's "cuda" requests are compared as
    ``ampfix rewrite --device cpu`` promises them (:mod:`cpu_target`). ``keep_dtype``: as the
    rewrite's ``--keep-dtype`` (float16 kept on the CPU); it changes nothing for "cuda", as there.

    Without ``rewritten``, ampfix's own rewrite of ``original`` is run from a temporary copy; the
    original's folder stays importable so its neighbouring modules are found. The two sides share
    no writable state: each runs in its own mirror of the current working directory (see
    :mod:`workdir`), so neither sees, nor races on, what the other writes, and the caller's folder
    is not written to.
    """
    if device not in VERIFY_DEVICES:
        raise ValueError(f"device must be one of {', '.join(VERIFY_DEVICES)}, not {device!r}")
    original = Path(original)
    options = options_for_device(options, device, keep_dtype)
    notes: list[str] = []
    workspace = Path(tempfile.mkdtemp(prefix="ampfix-verify-"))
    runs: list[LaunchedRun] = []
    try:
        if rewritten is None:
            rewritten, problem = _write_engine_rewrite(original, workspace, notes, device, keep_dtype)
            if problem is not None:
                return VerifyReport(None, None, None, error=problem, notes=notes)
        for script in (original, Path(rewritten)):
            problem = precheck(script)
            if problem is not None:  # do not start the other side for nothing
                return VerifyReport(None, None, None, error=problem, notes=notes)
        original_cwd, rewrite_cwd = _side_working_directories(workspace, notes)
        runs.append(
            _launch(
                original,
                script_args,
                options,
                capture_output=True,
                timeout=timeout,
                cwd=original_cwd,
                verify_observations=True,
            )
        )
        runs.append(
            _launch(
                Path(rewritten),
                script_args,
                options,
                capture_output=True,
                timeout=timeout,
                extra_paths=[str(original.resolve().parent)],
                cwd=rewrite_cwd,
                verify_observations=True,
            )
        )
        original_report, rewritten_report = (run.finish() for run in runs)
    finally:
        for run in runs:  # Ctrl-C, SIGTERM, an error: neither side outlives verify
            run.abort()
        shutil.rmtree(workspace, ignore_errors=True)
    report = compare_runs(original_report, rewritten_report, device=device, keep_dtype=keep_dtype)
    report.notes.extend(notes)
    return report


def _side_working_directories(workspace: Path, notes: list[str]) -> tuple[Path, Path]:
    source = Path.cwd()
    folders = []
    for side in ("original", "rewrite"):
        folder = workspace / f"{side}-cwd"
        folder.mkdir()
        linked = mirror(source, folder, exclude=workspace)
        folders.append(folder)
    shared = f" (linked, not copied: {', '.join(linked)})" if linked else ""
    notes.append(f"each side ran in its own copy of {source}{shared}")
    return folders[0], folders[1]


def compare_runs(
    original: RunReport, rewritten: RunReport, *, device: str = "cuda", keep_dtype: bool = False
) -> VerifyReport:
    """Equivalent, not, or (``equivalent=None``) not comparable because one side could not run.
    ``device``, ``keep_dtype``: the rewrite's target, as for :func:`verify_scripts`."""
    if not original.ran or not rewritten.ran:
        failed, report = ("original", original) if not original.ran else ("rewrite", rewritten)
        return VerifyReport(original, rewritten, None, error=f"the {failed} could not be run: {report.error}")
    if original.exit_code != 0:
        # Without a run that works there is nothing to hold the rewrite to.
        error = f"the original exited with status {original.exit_code} under the runner; nothing to compare against"
        cause = _last_line(original.stderr)
        return VerifyReport(original, rewritten, None, error=f"{error} ({cause})" if cause else error)
    if device == "cpu":
        dtypes = f"an explicit float16 kept, CUDA's default dtype the CPU's ({CPU_AMP_DTYPE})" if keep_dtype \
            else f"float16 -> {CPU_AMP_DTYPE}"
        flags = "--device cpu --keep-dtype" if keep_dtype else "--device cpu"
        note = f'the original\'s "cuda" requests were compared as `ampfix rewrite {flags}` makes them ("cpu", ' \
            f"{dtypes}); both sides ran the CPU's op policy"
        difference = first_difference(as_cpu_rewrite_promises(original, keep_dtype), rewritten)
        return VerifyReport(original, rewritten, difference is None, difference, notes=[note])
    difference = first_difference(original, rewritten)
    return VerifyReport(original, rewritten, difference is None, difference)


def _last_line(text: str | None) -> str | None:
    """The last line a failed script wrote to stderr: the exception, after its traceback."""
    lines = [line for line in (text or "").splitlines() if line.strip()]
    return lines[-1].strip() if lines else None


def _write_engine_rewrite(
    original: Path, workspace: Path, notes: list[str], device: str, keep_dtype: bool
) -> tuple[Path | None, str | None]:
    """ampfix's rewrite of ``original`` for ``device`` (and ``keep_dtype``), written under the same file
    name in ``workspace``."""
    from ampfix.engine import Options, fix_source  # libcst: only now, and only for this

    try:
        source = original.read_text(encoding="utf-8")
    except OSError as error:
        return None, f"cannot read {original}: {error}"
    try:
        result = fix_source(source, Options(device=device, keep_dtype=keep_dtype))
    except Exception as error:  # the engine must not take verify down with it; say what happened
        return None, f"ampfix's rewrite failed on {original}: {type(error).__name__}: {error}"
    if result.error is not None:
        return None, f"ampfix could not rewrite {original}: {result.error}"
    if not result.changed:
        notes.append("ampfix's rewrite left the script unchanged: both runs are of the same source")
    target = workspace / "rewrite" / original.name
    target.parent.mkdir()
    target.write_text(result.new_source, encoding="utf-8")
    target_flag = ("" if device == "cuda" else f" --device {device}") + (" --keep-dtype" if keep_dtype else "")
    notes.append(f"rewrite: ampfix's own{target_flag}, run from a temporary copy")
    return target, None
