"""``run_script`` and ``verify_scripts``: the runner's API. Returns reports; never prints.

Parent side: torch is only ever imported by the child processes these functions start, and
ampfix's own rewrite engine (libcst) only when ``verify`` is asked to produce the rewrite.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from ampfix.runner.compare import first_difference
from ampfix.runner.config import AMP_DTYPES, AUTOCAST_POLICIES
from ampfix.runner.launch import LaunchedRun, precheck
from ampfix.runner.model import RunReport, VerifyReport


@dataclass(frozen=True)
class RunOptions:
    max_steps: int | None = None
    amp_dtype: str = "bfloat16"  # the dtype "cuda" autocast runs in on the CPU; "keep": as requested
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
) -> LaunchedRun:
    return LaunchedRun(
        Path(script),
        list(script_args),
        asdict(options),
        capture_output=capture_output,
        timeout=timeout,
        extra_paths=extra_paths,
    )


def run_script(
    script: str | os.PathLike[str],
    script_args: Sequence[str] = (),
    options: RunOptions = RunOptions(),
    *,
    capture_output: bool = False,
    timeout: float | None = None,
) -> RunReport:
    """Run ``script`` on the CPU under the harness; its output goes to ours unless captured."""
    return _launch(Path(script), script_args, options, capture_output=capture_output, timeout=timeout).finish()


def verify_scripts(
    original: str | os.PathLike[str],
    rewritten: str | os.PathLike[str] | None = None,
    script_args: Sequence[str] = (),
    options: RunOptions = RunOptions(),
    *,
    timeout: float | None = None,
) -> VerifyReport:
    """Run the original and its rewrite side by side (same seed, same threads) and compare them.

    Without ``rewritten``, ampfix's own rewrite of ``original`` is run from a temporary copy; the
    original's folder stays importable so its neighbouring modules are found.
    """
    original = Path(original)
    notes = []
    workspace = tempfile.mkdtemp(prefix="ampfix-verify-")
    try:
        if rewritten is None:
            rewritten, problem = _write_engine_rewrite(original, Path(workspace), notes)
            if problem is not None:
                return VerifyReport(None, None, None, error=problem, notes=notes)
        for script in (original, Path(rewritten)):
            problem = precheck(script)
            if problem is not None:  # do not start the other side for nothing
                return VerifyReport(None, None, None, error=problem, notes=notes)
        runs = [
            _launch(original, script_args, options, capture_output=True, timeout=timeout),
            _launch(
                Path(rewritten),
                script_args,
                options,
                capture_output=True,
                timeout=timeout,
                extra_paths=[str(original.resolve().parent)],
            ),
        ]
        original_report, rewritten_report = (run.finish() for run in runs)
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    report = compare_runs(original_report, rewritten_report)
    report.notes.extend(notes)
    return report


def compare_runs(original: RunReport, rewritten: RunReport) -> VerifyReport:
    """Equivalent, not, or (``equivalent=None``) not comparable because one side could not run."""
    if not original.ran or not rewritten.ran:
        failed, report = ("original", original) if not original.ran else ("rewrite", rewritten)
        return VerifyReport(original, rewritten, None, error=f"the {failed} could not be run: {report.error}")
    if original.exit_code != 0:
        # Without a run that works there is nothing to hold the rewrite to.
        error = f"the original exited with status {original.exit_code} under the runner; nothing to compare against"
        return VerifyReport(original, rewritten, None, error=error)
    difference = first_difference(original, rewritten)
    return VerifyReport(original, rewritten, difference is None, difference)


def _write_engine_rewrite(original: Path, workspace: Path, notes: list[str]) -> tuple[Path | None, str | None]:
    """ampfix's rewrite of ``original``, written under the same file name in ``workspace``."""
    from ampfix.engine import Options, fix_source  # libcst: only now, and only for this

    try:
        source = original.read_text(encoding="utf-8")
    except OSError as error:
        return None, f"cannot read {original}: {error}"
    try:
        result = fix_source(source, Options())
    except Exception as error:  # the engine must not take verify down with it; say what happened
        return None, f"ampfix's rewrite failed on {original}: {type(error).__name__}: {error}"
    if result.error is not None:
        return None, f"ampfix could not rewrite {original}: {result.error}"
    if not result.changed:
        notes.append("ampfix's rewrite left the script unchanged: both runs are of the same source")
    target = workspace / original.name
    target.write_text(result.new_source, encoding="utf-8")
    notes.append("rewrite: ampfix's own, run from a temporary copy")
    return target, None
