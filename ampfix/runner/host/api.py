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

from ampfix.runner.host.compare import first_difference
from ampfix.runner.config import AMP_DTYPES, AUTOCAST_POLICIES
from ampfix.runner.host.cpu_target import CPU_AMP_DTYPE, as_cpu_rewrite_promises
from ampfix.runner.host.failures import explain
from ampfix.runner.host.launch import LaunchedRun, precheck
from ampfix.runner.host.model import RunReport, VerifyReport
from ampfix.runner.host.rewrite import rewrite_project, still_deprecated_modules
from ampfix.runner.host.workdir import mirror


@dataclass(frozen=True)
class RunOptions:
    max_steps: int | None = None
    amp_dtype: str = "float16"  # the dtype "cuda" autocast runs in on the CPU (see config.AMP_DTYPES)
    autocast_policy: str = "cuda"  # whose op lists "cuda" regions follow: CUDA's or the CPU's
    seed: int = 0
    threads: int = 1
    gpus: int = 1  # the emulated GPUs: cuda:0 .. cuda:N-1
    gpu_memory: int | None = None  # bytes each GPU holds; None: no limit
    device_checks: bool = True  # what a GPU refuses fails the run; False: recorded and let through
    # Every tensor asked for on "cuda" is a CPU tensor in all it reads: verify --device cpu, whose rewrite
    # moves AMP to the CPU and leaves the script's .cuda() calls (the CPU machine it targets has no GPU).
    cuda_is_cpu: bool = False

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
        if self.gpus < 1:
            raise ValueError("gpus must be at least 1")
        if self.gpu_memory is not None and self.gpu_memory < 1:
            raise ValueError("gpu_memory must be at least 1 byte")


def _launch(
    script: Path,
    script_args: Sequence[str],
    options: RunOptions,
    *,
    capture_output: bool,
    timeout: float | None,
    cwd: Path | None = None,
    extra_paths: Sequence[str] = (),
    verify_observations: bool = False,
    module: str | None = None,
) -> LaunchedRun:
    return LaunchedRun(
        Path(script),
        list(script_args),
        {**asdict(options), "verify_observations": verify_observations},
        capture_output=capture_output,
        timeout=timeout,
        extra_paths=extra_paths,
        cwd=None if cwd is None else str(cwd),
        module=module,
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


def run_module(
    module: str,
    module_args: Sequence[str] = (),
    options: RunOptions = RunOptions(),
    *,
    capture_output: bool = False,
    timeout: float | None = None,
) -> RunReport:
    """Run ``python -m module module_args`` under the harness (a test suite: ``run_module("pytest", ["tests/"])``);
    the exit code is the module's."""
    return _launch(Path(module), module_args, options, capture_output=capture_output, timeout=timeout,
                   module=module).finish()


# The device a rewrite targets (`ampfix rewrite --device`): "cuda" keeps each request's device,
# "cpu" moves CUDA's requests to the CPU.
VERIFY_DEVICES = ("cuda", "cpu")


def options_for_device(options: RunOptions, device: str, keep_dtype: bool = False) -> RunOptions:
    """The run options both sides of ``verify`` get. For a rewrite to the CPU, the original's "cuda"
    regions must run as the rewrite's "cpu" ones will: the CPU's op policy, in the dtype the rewrite
    asks for instead of float16; with ``keep_dtype``, in the dtype the script gave, and the CPU's
    default where it gave none."""
    if device == "cpu":
        return replace(options, autocast_policy="cpu", amp_dtype="explicit" if keep_dtype else CPU_AMP_DTYPE,
                       cuda_is_cpu=True)
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

    Without ``rewritten``, ampfix's own rewrite of ``original`` and of the local modules it imports
    (:mod:`project`) is run from the rewrite side's own copy of the script's folder. The two sides
    share no writable state: each runs in its own mirror of the current working directory (see
    :mod:`workdir`), so neither sees, nor races on, what the other writes, and the caller's folder
    is not written to. A rewrite that still calls a deprecated AMP API is never "equivalent".
    """
    if device not in VERIFY_DEVICES:
        raise ValueError(f"device must be one of {', '.join(VERIFY_DEVICES)}, not {device!r}")
    original = Path(original)
    options = options_for_device(options, device, keep_dtype)
    notes: list[str] = []
    workspace = Path(tempfile.mkdtemp(prefix="ampfix-verify-"))
    runs: list[LaunchedRun] = []
    try:
        problem = precheck(original) or (precheck(Path(rewritten)) if rewritten is not None else None)
        if problem is not None:  # do not start the other side for nothing
            return VerifyReport(None, None, None, error=problem, notes=notes)
        original_cwd, rewrite_cwd = _side_working_directories(workspace, notes)
        if rewritten is None:
            rewrite = rewrite_project(original, _project_copy(original, workspace, rewrite_cwd), device, keep_dtype)
            notes.extend(rewrite.notes)
            if rewrite.error is not None:
                return VerifyReport(None, None, None, error=rewrite.error, notes=notes)
            rewritten = rewrite.script
        assert rewritten is not None  # given, or written by rewrite_project (which else set its error)
        # A hand migration kept in another folder still imports the original's neighbours.
        folder = original.resolve().parent
        neighbours = [str(folder)] if Path(rewritten).resolve().parent != folder else []
        for script, cwd, paths in ((original, original_cwd, []), (Path(rewritten), rewrite_cwd, neighbours)):
            launched = _launch(
                script, script_args, options, capture_output=True, timeout=timeout, cwd=cwd, extra_paths=paths,
                verify_observations=True,
            )
            runs.append(launched)
        original_report, rewritten_report = (run.finish() for run in runs)
        leftovers = still_deprecated_modules(rewritten_report, device, keep_dtype)  # before its copy is removed
    finally:
        for run in runs:  # Ctrl-C, SIGTERM, an error: neither side outlives verify
            run.abort()
        shutil.rmtree(workspace, ignore_errors=True)
    report = compare_runs(original_report, rewritten_report, device=device, keep_dtype=keep_dtype)
    report.notes.extend(notes)
    report.notes.extend(leftovers)
    return report


def _project_copy(original: Path, workspace: Path, rewrite_cwd: Path) -> Path:
    """Where the rewrite side's copy of the script's folder is: inside its copy of the working directory
    when the script lies there, else a mirror of its own."""
    root, cwd = original.resolve().parent, Path.cwd().resolve()
    if root == cwd or cwd in root.parents:
        return rewrite_cwd / root.relative_to(cwd)
    copy = workspace / "rewrite-project"
    copy.mkdir()
    mirror(root, copy, exclude=workspace)
    return copy


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
    ``device``, ``keep_dtype``: the rewrite's target, as for :func:`verify_scripts`. A rewrite that
    still calls a deprecated AMP API is not equivalent, whatever it computes: it is not migrated."""
    if not original.ran or not rewritten.ran:
        failed, report = ("original", original) if not original.ran else ("rewrite", rewritten)
        return VerifyReport(original, rewritten, None, error=f"the {failed} could not be run: {report.error}")
    crash = _crash("original", original, "; nothing to compare against")
    if crash is not None:
        return VerifyReport(original, rewritten, None, error=crash, crashed="original")
    if original.exit_code != 0:
        # Without a run that works there is nothing to hold the rewrite to.
        error = f"the original exited with status {original.exit_code} under the runner; nothing to compare against"
        cause = _last_line(original.stderr)
        error = f"{error} ({cause})" if cause else error
        why = explain(original.failure)
        return VerifyReport(original, rewritten, None, error=f"{error}; {why}" if why else error)
    notes = []
    if device == "cpu":
        dtypes = f"an explicit float16 kept, CUDA's default dtype the CPU's ({CPU_AMP_DTYPE})" if keep_dtype \
            else f"float16 -> {CPU_AMP_DTYPE}"
        flags = "--device cpu --keep-dtype" if keep_dtype else "--device cpu"
        notes.append(
            f'the original\'s "cuda" requests were compared as `ampfix rewrite {flags}` makes them ("cpu", '
            f"{dtypes}); both sides ran the CPU's op policy"
        )
        difference = first_difference(as_cpu_rewrite_promises(original, keep_dtype), rewritten)
    else:
        difference = first_difference(original, rewritten)
    crash = _crash("rewrite", rewritten)
    if crash is not None:  # the cause; a mismatch its trace showed before it is kept beside it (what led there)
        before = difference if difference and not _only_the_crash(difference) else None
        return VerifyReport(original, rewritten, None, before, error=crash, notes=notes, crashed="rewrite")
    difference = difference or _still_deprecated(rewritten)
    return VerifyReport(original, rewritten, difference is None, difference, notes=notes)


def _crash(side: str, run: RunReport, consequence: str = "") -> str | None:
    """`the rewrite crashed: <its exception's line><consequence>; <why>` for a side that died of an exception,
    else None."""
    failure = run.failure
    if run.exit_code == 0 or failure is None:
        return None
    cause = _last_line(run.stderr) or f"{failure['type']}: {failure['message']}"
    why = explain(failure)
    return f"the {side} crashed: {cause}{consequence}" + (f"; {why}" if why else "")


def _only_the_crash(difference: str) -> bool:
    """A difference that only says a side ended early or with another status: the crash's doing, not a cause."""
    return difference.startswith("exit status") or ": the rewrite stopped before " in difference


def _still_deprecated(rewritten: RunReport) -> str | None:
    calls = rewritten.deprecated_api_calls
    if not calls:
        return None
    first = calls[0]
    where = f"{Path(first['file']).name}:{first['line']}"
    more = f" and {len(calls) - 1} other site(s)" if len(calls) > 1 else ""
    return f"the rewrite still calls a deprecated API at {where}{more} ({first['message']}): not migrated"


def _last_line(text: str | None) -> str | None:
    """The last line a failed script wrote to stderr: the exception, after its traceback."""
    lines = [line for line in (text or "").splitlines() if line.strip()]
    return lines[-1].strip() if lines else None
