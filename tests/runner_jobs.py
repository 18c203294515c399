"""Runs the `ampfix run` / `ampfix verify` jobs of the runner test modules.

Every CLI invocation is one *job*. Starting a child Python with torch costs seconds, so each job
runs once per session (a module-scoped fixture per job, answered from the job's one run). The jobs
the selected tests need are queued when collection ends (`prepare_in_background`, called by
conftest.py), module by module in the order pytest runs the modules, and run two at a time on one
queue for the whole session: the jobs of the runner modules run while pytest walks the modules
before them on one core, and the queue never drains between modules.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "run"
JOB_TIMEOUT_S = 300


@dataclass
class Job:
    returncode: int
    stdout: str
    stderr: str
    report: dict[str, Any]
    seconds: float
    cwd: Path | None  # None: the tests' own working directory
    tmpdir: Path  # the job's own TMPDIR, to see what it leaves there

# job name -> what makes the job's working directory inside the job's folder (and returns it)
WorkingDirectories = dict[str, Callable[[Path], Path]]


def _command(arguments: list[str], json_path: Path) -> list[str]:
    command = [sys.executable, "-m", "ampfix"]
    for argument in arguments:
        command.append(str(FIXTURES / argument) if argument.endswith(".py") else argument)
    # ampfix's options go before the script (run takes every word after it as the script's): right after
    # the command's name.
    return [*command[:4], "--json", str(json_path), *command[4:]]


def _invoke(arguments: list[str], folder: Path, make_cwd: Callable[[Path], Path] | None, session_cwd: Path,
            environ: dict[str, str]) -> Job:
    folder.mkdir()
    tmpdir = folder / "tmp"
    tmpdir.mkdir()
    cwd = make_cwd(folder) if make_cwd is not None else None
    json_path = folder / "report.json"
    started = time.monotonic()
    completed = subprocess.run(
        _command(arguments, json_path),
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT_S,
        cwd=cwd or session_cwd,
        env={**environ, "TMPDIR": str(tmpdir)},
    )
    report = json.loads(json_path.read_text()) if json_path.exists() else {}
    return Job(completed.returncode, completed.stdout, completed.stderr, report, time.monotonic() - started, cwd, tmpdir)


_queue: ThreadPoolExecutor | None = None  # the session's one queue of jobs (`shutdown` at the session's end)


def _executor() -> ThreadPoolExecutor:
    global _queue
    if _queue is None:
        _queue = ThreadPoolExecutor(max_workers=2)
    return _queue


def shutdown() -> None:
    """End the queue: the jobs not started are dropped (an interrupted or failed-fast session), those running end."""
    global _queue
    if _queue is not None:
        _queue.shutdown(wait=True, cancel_futures=True)
        _queue = None


class JobPool:
    def __init__(
        self, folder: Path, commands: dict[str, list[str]], working_directories: WorkingDirectories | None = None
    ) -> None:
        self._folder = folder
        self._commands = commands
        self._working_directories = working_directories or {}
        self._executor = _executor()
        self._futures: dict[str, Future[Job]] = {}
        # The tests' working directory and environment as the pool is made (before any test runs): a job started
        # while a test has changed them (monkeypatch.chdir, setenv) must not run in that test's.
        self._cwd = Path.cwd()
        self._environ = dict(os.environ)

    def submit(self, name: str) -> None:
        if name not in self._futures:
            self._futures[name] = self._executor.submit(
                _invoke, self._commands[name], self._folder / name, self._working_directories.get(name), self._cwd,
                self._environ,
            )

    def result(self, name: str) -> Job:
        self.submit(name)
        return self._futures[name].result()

    def close(self) -> None:
        """Wait for this pool's jobs (none is left running into the next module's tests)."""
        for future in self._futures.values():
            if not future.cancelled():
                future.exception()


def session_folder(session: pytest.Session, name: str) -> Path:
    """A new folder under the session's base temporary folder, for work started by a collection hook, before any
    fixture runs (pytest's `tmp_path_factory` is a fixture; the factory behind it lives on the config)."""
    return session.config._tmp_path_factory.mktemp(name)


def define_job_fixtures(
    commands: dict[str, list[str]] | Callable[[Path], dict[str, list[str]]],
    namespace: dict[str, Any],
    working_directories: WorkingDirectories | None = None,
) -> None:
    """Give a test module a `jobs` pool (and `prepare_in_background`, which conftest.py calls) and, where
    ``commands`` is a dict, one fixture per job, named as in it (job name -> the ampfix command line; a fixture
    script name is made a path under FIXTURES): the jobs queued are those whose fixture a selected test uses.
    ``commands`` may instead make them in the pool's folder (files they need written first): then every job is
    queued, and tests ask the pool by name (`jobs.result(name)`)."""

    queued: list[JobPool] = []  # the pool `prepare_in_background` filled, if it ran

    def prepare_in_background(session: pytest.Session) -> None:
        folder = session_folder(session, "runner-jobs")
        made = commands(folder) if callable(commands) else commands
        pool = JobPool(folder, made, working_directories)
        selected = set()
        for item in session.items:
            selected.update(getattr(item, "fixturenames", ()))
            callspec = getattr(item, "callspec", None)
            if callspec is not None and "job_name" in callspec.params:
                selected.add(callspec.params["job_name"])
        for name in made:
            if callable(commands) or name in selected:
                pool.submit(name)
        queued.append(pool)

    @pytest.fixture(scope="module")
    def jobs(request: pytest.FixtureRequest):
        if not queued:  # collected without conftest.py's hook (a plugin-less run): queue them now
            prepare_in_background(request.session)
        pool = queued[0]
        yield pool
        pool.close()

    namespace["prepare_in_background"] = prepare_in_background
    namespace["jobs"] = jobs
    if not callable(commands):
        for name in commands:
            namespace[f"_{name}_fixture"] = _job_fixture(name)


def _job_fixture(name: str):
    @pytest.fixture(scope="module", name=name)
    def job(jobs: JobPool) -> Job:
        return jobs.result(name)

    return job


def autocast_region(report: dict[str, Any], line: int, origin: str = "script", process: str = "main") -> dict[str, Any]:
    """The one autocast region the report has for this line, origin and process."""
    matches = [
        region
        for region in report["autocast_regions"]
        if region["line"] == line and region["origin"] == origin and region["process"] == process
    ]
    assert len(matches) == 1, report["autocast_regions"]
    return matches[0]
