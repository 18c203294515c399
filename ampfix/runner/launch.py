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
import tokenize
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import ampfix
from ampfix.runner.config import CONFIG_ENV, ROLE_ENV, RunnerConfig
from ampfix.runner.model import RunReport

BOOTSTRAP_DIR = Path(__file__).resolve().parent / "bootstrap"
# Where the ampfix package can be imported from, for a child started outside this environment's
# usual paths (a source checkout run with ``python -m``).
AMPFIX_ROOT = Path(ampfix.__file__).resolve().parent.parent
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def child_environment(base: Mapping[str, str], config: RunnerConfig, extra_paths: Sequence[str] = ()) -> dict[str, str]:
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


class LaunchedRun:
    """One child process running a script; ``finish()`` waits for it and returns the report."""

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
    ) -> None:
        self.script = script.resolve()
        self._timeout = timeout
        self._process: subprocess.Popen | None = None
        self._outputs: tuple[IO[bytes], IO[bytes]] | None = None
        self._out_dir = tempfile.mkdtemp(prefix="ampfix-run-")
        self.error = precheck(self.script)
        if self.error is None:
            config = RunnerConfig(out_dir=self._out_dir, **config_values)
            self._start(python or sys.executable, script_args, child_environment(os.environ, config, extra_paths), capture_output)

    def _start(self, python: str, script_args: Sequence[str], env: dict[str, str], capture_output: bool) -> None:
        if capture_output:
            # Files, not pipes: two children run side by side and neither may block on a full pipe.
            self._outputs = (tempfile.TemporaryFile(), tempfile.TemporaryFile())
        stdout, stderr = self._outputs or (None, None)
        # A captured run has nobody at the keyboard: a breakpoint() must not wait for one.
        stdin = subprocess.DEVNULL if capture_output else None
        try:
            self._process = subprocess.Popen(
                [python, str(self.script), *script_args], env=env, stdin=stdin, stdout=stdout, stderr=stderr
            )
        except OSError as error:
            self.error = f"could not start {python}: {error}"

    def finish(self) -> RunReport:
        try:
            exit_code = self._wait()
            stdout, stderr = self._read_outputs()
            processes = read_observations(self._out_dir)
        finally:
            shutil.rmtree(self._out_dir, ignore_errors=True)
        error = self.error
        if error is None and not any(process["label"] == "main" for process in processes):
            error = "the script's process ended without reporting (os._exit, or killed by a signal)"
        return RunReport(str(self.script), exit_code, processes, error, stdout, stderr)

    def _wait(self) -> int | None:
        if self._process is None:
            return None
        try:
            code = self._process.wait(timeout=self._timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
            self.error = f"timed out after {self._timeout} s"
            return None
        except KeyboardInterrupt:
            # Ctrl-C reached the child too (same process group): let it finish its exit handlers.
            self._process.send_signal(signal.SIGINT)
            code = self._process.wait()
        return 128 - code if code < 0 else code  # killed by signal N: the shell's 128 + N

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
