"""Starts the child Python that runs a script under the harness, and collects what it left behind.

Parent side: no torch here. The child is ``sys.executable SCRIPT ARGS...`` (so the script is
``__main__``, with its arguments and its folder on ``sys.path``) with an environment built as a
copy: the bootstrap folder first on ``PYTHONPATH`` (its ``sitecustomize`` sets up this process and
every process started below it), the runner's settings, fixed seeds and thread counts. The calling
process's own ``os.environ`` is never changed.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tokenize
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import ampfix
from ampfix.runner.config import BOOTSTRAP_DIR, CONFIG_ENV, ROLE_ENV, RunnerConfig
from ampfix.runner.host.model import RunReport

# Where the ampfix package can be imported from, for a child started outside this environment's
# usual paths (a source checkout run with ``python -m``).
AMPFIX_ROOT = Path(ampfix.__file__).resolve().parent.parent
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def child_environment(
    base: Mapping[str, str], config: RunnerConfig, extra_paths: Sequence[str] = ()
) -> dict[str, str]:
    """``extra_paths``: folders importable after the script's own (a hand migration kept elsewhere still
    imports the original's neighbours)."""
    env = dict(base)
    paths = [str(BOOTSTRAP_DIR), *extra_paths]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    paths.append(str(AMPFIX_ROOT))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env[CONFIG_ENV] = config.to_env_value()
    env[ROLE_ENV] = "main"
    env["PYTHONHASHSEED"] = str(config.seed)
    for variable in THREAD_VARIABLES:
        env[variable] = str(config.threads)
    return env


def precheck(script: Path) -> str | None:
    """Why the script cannot be run at all, or None. Compiling here keeps a syntax error apart
    from a script that ran and failed."""
    if not script.is_file():
        return f"no such file: {script}"
    try:
        with tokenize.open(script) as handle:
            compile(handle.read(), str(script), "exec", dont_inherit=True)
    except (SyntaxError, UnicodeDecodeError, ValueError) as error:
        return f"{script} does not compile: {error}"
    return None


# After asking a script to stop (SIGINT, as Ctrl-C would: its finally blocks and exit handlers
# run, so what it did so far is still reported), how long it gets before it is killed.
STOP_GRACE_S = 5.0
# POSIX: each script runs in a session (so a process group) of its own, and ending it ends every
# process it started. Elsewhere only the script's own process can be ended.
OWN_PROCESS_GROUP = hasattr(os, "killpg")
_KILL = getattr(signal, "SIGKILL", signal.SIGTERM)


class LaunchedRun:
    """One child process running a script; ``finish()`` waits for it and returns the report.

    However the wait ends (the script exits, ``timeout`` seconds pass, Ctrl-C, SIGTERM turned into
    an exception by the caller), the script's whole process group is ended and the run's
    ``/tmp/ampfix-run-*`` folder removed before ``finish()`` returns or raises.
    """

    def __init__(
        self,
        script: Path,
        script_args: Sequence[str],
        config_values: dict[str, Any],
        *,
        capture_output: bool = False,
        timeout: float | None = None,
        extra_paths: Sequence[str] = (),
        python: str | None = None,
        cwd: str | None = None,
        module: str | None = None,
    ) -> None:
        # A module runs as `python -m MODULE ARGS` does (a test suite: -m pytest); ``script`` is then unused.
        self._module = module
        self.script = script if module is not None else script.resolve()
        self._timeout = timeout
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._process: subprocess.Popen | None = None
        self._group_ended = False
        self._outputs: tuple[IO[bytes], IO[bytes]] | None = None
        self._started: float | None = None
        self._out_dir = tempfile.mkdtemp(prefix="ampfix-run-")
        self.error = precheck(self.script) if module is None else None
        if self.error is None:
            config = RunnerConfig(out_dir=self._out_dir, **config_values)
            env = child_environment(os.environ, config, extra_paths)
            self._start(python or sys.executable, script_args, env, capture_output, cwd)

    def _start(
        self, python: str, script_args: Sequence[str], env: dict[str, str], capture_output: bool, cwd: str | None
    ) -> None:
        if capture_output:
            # Files, not pipes: two children run side by side and neither may block on a full pipe.
            self._outputs = (tempfile.TemporaryFile(), tempfile.TemporaryFile())
        stdout, stderr = self._outputs or (None, None)
        # A captured run has nobody at the keyboard: a breakpoint() must not wait for one.
        stdin = subprocess.DEVNULL if capture_output else None
        self._started = time.monotonic()
        try:
            self._process = subprocess.Popen(
                [python, *(["-m", self._module] if self._module is not None else [str(self.script)]), *script_args],
                env=env,
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                cwd=cwd,
                start_new_session=OWN_PROCESS_GROUP,
            )
        except OSError as error:
            self.error = f"could not start {python}: {error}"

    def finish(self) -> RunReport:
        try:
            exit_code = self._wait()
            seconds = None if self._process is None or self._started is None else time.monotonic() - self._started
            stdout, stderr = self._read_outputs()
            processes = read_observations(self._out_dir)
        finally:
            self.abort()
        error = self.error
        if error is None and not any(process["label"] == "main" for process in processes):
            error = "the script's process ended without reporting (os._exit, or killed by a signal)"
        target = f"-m {self._module}" if self._module is not None else str(self.script)
        return RunReport(target, exit_code, processes, error, stdout, stderr, seconds)

    def abort(self) -> None:
        """End the script and everything it started, now, and remove the run's folder. Idempotent."""
        if self._process is not None and not self._group_ended:
            if self._process.poll() is None:
                self._signal_group(_KILL)
                self._process.wait()
            if OWN_PROCESS_GROUP:
                self._signal_group(_KILL)  # whatever the script left running in its group
            self._group_ended = True
        shutil.rmtree(self._out_dir, ignore_errors=True)

    def _wait(self) -> int | None:
        if self._process is None:
            return None
        try:
            code = self._process.wait(timeout=self._time_left())
        except subprocess.TimeoutExpired:
            self._stop()
            self.error = f"timed out after {self._timeout:g} s (--timeout)"
            return None
        except KeyboardInterrupt:
            # The script is in a process group of its own: Ctrl-C reached only us. Pass it on and
            # let it finish its exit handlers; a second Ctrl-C ends it at once (abort()).
            self._signal_group(signal.SIGINT)
            code = self._process.wait()
        return 128 - code if code < 0 else code  # killed by signal N: the shell's 128 + N

    def _time_left(self) -> float | None:
        return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def _stop(self) -> None:
        """Ask the script to stop as Ctrl-C would, then kill it if it does not within the grace time."""
        if self._process is None:
            return
        self._signal_group(signal.SIGINT)
        try:
            self._process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self._signal_group(_KILL)
            self._process.wait()

    def _signal_group(self, signal_number: int) -> None:
        if self._process is None:
            return
        try:
            if OWN_PROCESS_GROUP:
                os.killpg(self._process.pid, signal_number)  # its session leader: the group's id is its pid
            else:
                self._process.send_signal(signal_number)
        except (ProcessLookupError, PermissionError):
            pass  # already gone

    def _read_outputs(self) -> tuple[str | None, str | None]:
        if self._outputs is None:
            return None, None
        texts = []
        for handle in self._outputs:
            handle.seek(0)
            texts.append(handle.read().decode("utf-8", errors="replace"))
            handle.close()
        return texts[0], texts[1]


def read_observations(out_dir: str) -> list[dict[str, Any]]:
    """Every process's observation, the main process first, the others in label order."""
    processes = []
    for path in glob.glob(os.path.join(out_dir, "process-*.json")):
        with open(path, encoding="utf-8") as handle:
            processes.append(json.load(handle))
    return sorted(processes, key=lambda process: (process["label"] != "main", process["label"]))
