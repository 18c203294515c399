"""Sets up every Python process the runner starts, before the script runs.

Called from the bootstrap ``sitecustomize`` whenever the runner's configuration is in the
environment: in the main child that runs the script, and in every process started below it
(``torch.multiprocessing.spawn`` ranks, spawned DataLoader workers). It seeds the generators,
captures deprecation warnings with their file:line, arranges for the torch patches to be installed
the moment torch is imported, provides an emulated ``apex.amp`` if no apex has it, and writes
what was observed when the process exits. A forked child
inherits all of it, starts its own observation, and writes it on ``os._exit`` too (how
multiprocessing ends forked children) and, in a Pool worker, on the SIGTERM of ``Pool.terminate``.
"""

from __future__ import annotations

import _thread
import atexit
import importlib.abc
import os
import random
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable
from types import ModuleType, TracebackType
from typing import Any

from ampfix.runner.apex.provider import ApexProvider
from ampfix.runner.child import progress
from ampfix.runner.config import CONFIG_ENV, PASS_THROUGH, ROLE_ENV, RUNNER_DIR, RunnerConfig
from ampfix.runner.trace.observe import Recorder
from ampfix.runner.trace.patching import replace, with_arguments_adjusted

_DEPRECATIONS = (DeprecationWarning, FutureWarning)


# This process's recorder and settings, for what runs in it later without a closure to carry them
# (the Pool initializer, which a spawned worker unpickles by name).
_this_process: tuple[Recorder, RunnerConfig] | None = None


def start() -> None:
    global _this_process
    config = RunnerConfig.from_env_value(os.environ[CONFIG_ENV])
    role = os.environ.get(ROLE_ENV, "child")
    os.environ[ROLE_ENV] = "child"  # this process's own environment: what its children inherit
    recorder = Recorder(role)
    _this_process = (recorder, config)
    random.seed(config.seed)
    _capture_deprecations(recorder)
    if role == "main":
        _record_failure(recorder)
        progress.start(recorder)
    _AfterImport.install(
        {
            "torch": lambda torch: _install_harness(torch, recorder, config),
            "numpy": lambda numpy: numpy.random.seed(config.seed),
            "multiprocessing.pool": _pool_workers_report_when_terminated,
        }
    )
    ApexProvider.install(recorder)  # last on sys.meta_path: an installed apex.amp wins
    atexit.register(_write_observation, recorder, config)
    if hasattr(os, "register_at_fork"):  # not on Windows, where children are spawned, never forked
        os.register_at_fork(after_in_child=lambda: _start_forked_child(recorder, config))


def _install_harness(torch: ModuleType, recorder: Recorder, config: RunnerConfig) -> None:
    from ampfix.runner.gpu import harness

    try:
        harness.install(torch, recorder, config)
    except Exception as error:
        print(f"ampfix run: could not install the CPU harness into torch {torch.__version__}:", file=sys.stderr)
        setattr(error, RAISED_BY_AMPFIX, True)  # read by _failure: ampfix's own, even where torch raised it
        raise


def _capture_deprecations(recorder: Recorder) -> None:
    """Record every deprecation with its file:line; show each distinct one once, as Python would."""
    for category in _DEPRECATIONS:
        warnings.simplefilter("always", category)
    original_show = warnings.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):
        running = recorder.deprecated_call_running()
        if running is not None and issubclass(category, _DEPRECATIONS) and running.raised(str(message)):
            # Counted by the runner itself (see amp_patches.record_deprecated_calls), shown at the script's line.
            if running.count == 1:
                original_show(message, category, running.site.file, running.site.line, file, None)
            return
        if issubclass(category, _DEPRECATIONS):
            if recorder.deprecation(str(message), category.__name__, filename, lineno) > 1:
                return
        original_show(message, category, filename, lineno, file, line)

    warnings.showwarning = showwarning


def _record_failure(recorder: Recorder) -> None:
    """The exception the script dies of, with where it was raised: ``verify`` and ``run`` say whether
    that was inside the runner's emulation (see failures.explain)."""
    previous = sys.excepthook

    def excepthook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        try:
            recorder.failure = _failure(kind, value, tb)
        finally:
            shown = _as_shown(recorder.failure, tb)
            # Python's own hook prints the exception's traceback, not the one it is given.
            previous(kind, value.with_traceback(shown), shown)

    sys.excepthook = excepthook


def _as_shown(failure: dict[str, Any] | None, tb: TracebackType | None) -> TracebackType | None:
    """The traceback the script's user sees: without the runner's frames (as pytest's ``__tracebackhide__``
    hides its own), so that it reads as it would on a GPU, ending in the script's or torch's code. Kept whole
    when the exception was raised in the runner's own emulation: `why:` blames the runner, and these frames
    are what a report of it needs."""
    if failure is None:
        return tb
    module, function = failure["runner_module"], failure["runner_function"]
    if module is not None and not failure["gpu_too"] and (module, function) not in PASS_THROUGH:
        return tb
    kept = []
    while tb is not None:
        if not os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(RUNNER_DIR):
            kept.append(tb)
        tb = tb.tb_next
    shown = None
    for entry in reversed(kept):
        shown = TracebackType(shown, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return shown


def _runner_module(filename: str) -> str:
    relative = os.path.relpath(os.path.abspath(filename), RUNNER_DIR)
    return os.path.splitext(relative)[0].replace(os.sep, "/")


# Set on an exception the harness's installation raised.
RAISED_BY_AMPFIX = "ampfix_raised_it"
# ampfix's package: a failure raised in any of its modules (the runner's, or one it imports) is ampfix's own.
_AMPFIX_DIR = os.path.join(os.path.dirname(os.path.dirname(RUNNER_DIR)), "")


def _raised_in_ampfix(frames: list[Any], ampfixs_own: bool) -> Any:
    """The innermost frame, where it is in ampfix's own code (below the import system's frames, which Python
    keeps where a module's import fails); else None. ``ampfixs_own`` (the harness's installation failed: a name
    the runner reads that this torch lacks, raised by torch's module ``__getattr__``): the innermost of ampfix's
    frames, wherever it is."""
    for frame in reversed(frames):
        in_ampfix = os.path.abspath(frame.filename).startswith(_AMPFIX_DIR)
        if in_ampfix or not (ampfixs_own or frame.filename.startswith("<frozen importlib")):
            return frame if in_ampfix else None
    return None


def _failure(kind: type[BaseException], value: BaseException, tb: Any) -> dict[str, Any]:
    import traceback

    from ampfix.runner.gpu import harness

    frames = traceback.extract_tb(tb)
    runner_frame = _raised_in_ampfix(frames, bool(getattr(value, RAISED_BY_AMPFIX, False)))
    return {
        "type": kind.__name__,
        "message": str(value),
        # The runner module (its path below ampfix/runner, without .py, "gpu/devices"; "../families/x" for another
        # of ampfix's modules) and function the exception was raised from (its innermost frame), else None.
        "runner_module": _runner_module(runner_frame.filename) if runner_frame else None,
        "runner_function": runner_frame.name if runner_frame else None,
        "gpu_too": bool(getattr(value, "fails_on_the_gpu_too", False)),
        "stand_in": bool(harness.current is not None and harness.current.plan.stand_in),
        # torch's own CUDA initialisation ran: a call went past the emulated GPU to this machine's missing one.
        "reached_real_cuda": any(_is_real_cuda_init(frame) for frame in frames),
    }


def _is_real_cuda_init(frame: Any) -> bool:
    return frame.name == "_lazy_init" and os.path.normpath(frame.filename).endswith(
        os.path.join("torch", "cuda", "__init__.py")
    )


def _start_forked_child(recorder: Recorder, config: RunnerConfig) -> None:
    # A forked process starts with a copy of its parent's counts; it reports only its own.
    _stop_watching_for_sigterm()
    recorder.reset()
    recorder.role = "child"
    _write_before_forked_exit(recorder, config)


def _write_before_forked_exit(recorder: Recorder, config: RunnerConfig) -> None:
    """multiprocessing ends every forked child (``Process``, ``Pool`` and DataLoader workers) with
    ``os._exit``, which skips atexit: the observation is written just before."""
    exit_without_cleanup = getattr(os._exit, "_ampfix_original", os._exit)  # a grandchild: wrap once

    def _exit(status: int) -> None:
        _write_observation(recorder, config)
        exit_without_cleanup(status)

    replace(_exit, "_ampfix_original", exit_without_cleanup)
    replace(os, "_exit", _exit)


def _pool_workers_report_when_terminated(pool_module: ModuleType) -> None:
    """A Pool leaving its ``with`` block terminates its workers (SIGTERM): each writes first.

    Only Pool workers get a SIGTERM handler, through the Pool's initializer; other processes keep
    SIGTERM's default, which a script may rely on to end them. A worker blocked in C when the
    signal comes is ended all the same, by a thread (see :func:`_watch_for_sigterm`).
    """
    def initialized_by_ampfix_first(arguments: dict[str, Any]) -> None:
        arguments["initargs"] = (os.getpid(), arguments.get("initializer"), tuple(arguments.get("initargs") or ()))
        arguments["initializer"] = initialize_pool_worker

    pool_class = pool_module.Pool
    pool_class.__init__ = with_arguments_adjusted(pool_class.__init__, initialized_by_ampfix_first)


def initialize_pool_worker(pool_creator: int, initializer: Callable[..., Any] | None, initargs: tuple) -> None:
    """Every Pool's initializer (module level: a spawned worker unpickles it by name), then the script's."""
    if os.getpid() != pool_creator and _this_process is not None:  # not a ThreadPool's thread
        recorder, config = _this_process
        recorder.pool_worker = True
        _write_when_terminated(recorder, config)
    if initializer is not None:
        initializer(*initargs)


def _write_when_terminated(recorder: Recorder, config: RunnerConfig) -> None:
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return  # the script's own handler, inherited: it decides how this process ends

    def on_sigterm(signum: int, frame: object) -> None:
        if _ending.acquire(blocking=False):  # else the watching thread is already ending it
            _write_observation(recorder, config)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)  # end as the signal would have: status -SIGTERM

    try:
        signal.signal(signal.SIGTERM, on_sigterm)
    except ValueError:  # not this interpreter's main thread: the os._exit path only
        return
    _watch_for_sigterm(recorder, config)


# Whichever of the two SIGTERM paths of a Pool worker takes it first writes and ends the process.
_ending = threading.Lock()
# The pipe whose write end is this process's signal wakeup fd, while a thread watches its read end.
_sigterm_pipe: tuple[int, int] | None = None
# How long the watching thread leaves the main thread's handler to end the process by itself.
MAIN_THREAD_GRACE_S = 1.0


def _watch_for_sigterm(recorder: Recorder, config: RunnerConfig) -> None:
    """A Python signal handler runs only between bytecodes of the main thread. A worker whose main
    thread is blocked in C when SIGTERM comes (on a semaphore it was just about to wait on; in a
    native call that never returns) would never run it, and the script's ``Pool.terminate()`` would
    wait on that worker for ever. The C-level handler also writes the signal's number to the wakeup
    fd at once: a thread reading it ends the process whatever the main thread is doing."""
    global _sigterm_pipe
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    if previous != -1:  # the script's own (asyncio's): it stays; the handler above is the only path
        signal.set_wakeup_fd(previous)
        os.close(read_end)
        os.close(write_end)
        return
    _sigterm_pipe = (read_end, write_end)
    # A bare thread: not a threading.Thread the script could see, nor one the harness patches.
    _thread.start_new_thread(_end_on_sigterm, (read_end, recorder, config))


def _end_on_sigterm(read_end: int, recorder: Recorder, config: RunnerConfig) -> None:
    while True:
        try:
            received = os.read(read_end, 64)  # one byte per signal caught, its number
        except OSError:
            return
        if not received:
            return
        if signal.SIGTERM in received:
            break
    time.sleep(MAIN_THREAD_GRACE_S)  # a main thread running Python ends the process itself, as -SIGTERM
    if _ending.acquire(blocking=False):
        _write_observation(recorder, config)
        os.kill(os.getpid(), signal.SIGKILL)  # signal.signal() is the main thread's only: no SIG_DFL from here


def _stop_watching_for_sigterm() -> None:
    """In a forked child: the wakeup fd is its parent's pipe, and no thread watches it here."""
    global _sigterm_pipe
    if _sigterm_pipe is None:
        return
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:
        pass
    for end in _sigterm_pipe:
        os.close(end)
    _sigterm_pipe = None


def _process_label(recorder: Recorder) -> str:
    if recorder.role == "main":
        return "main"
    import multiprocessing

    name = multiprocessing.current_process().name
    return name if name != "MainProcess" else f"process-{os.getpid()}"


def _write_observation(recorder: Recorder, config: RunnerConfig) -> None:
    if recorder.role != "main" and recorder.is_empty():
        return  # a worker that saw nothing worth reporting
    if recorder.role == "main":
        recorder.local_modules = _local_modules()
    try:
        recorder.write(config.out_dir, _process_label(recorder))
    except OSError as error:  # the parent is gone or its folder was removed: nothing to report to
        print(f"ampfix run: could not write the observation: {error}", file=sys.stderr)


def _local_modules() -> list[str]:
    """The files of the modules this process loaded from the script's folder or the working directory,
    outside the interpreter's own and its site-packages (a virtual environment inside the project)."""
    import site
    import sysconfig

    script = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else None
    roots = [os.path.join(os.getcwd(), "")] + ([os.path.join(os.path.dirname(script), "")] if script else [])
    site_packages: list[str] = getattr(site, "getsitepackages", list)()  # absent in some virtualenv versions
    installed = {sys.prefix, sys.base_prefix, *sysconfig.get_paths().values(), *site_packages}
    ampfix_package = os.path.dirname(os.path.dirname(RUNNER_DIR))  # a checkout run in place
    excluded = tuple(os.path.join(os.path.abspath(path), "") for path in (*installed, ampfix_package) if path)
    files = set()
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not file or not file.endswith(".py"):
            continue
        file = os.path.abspath(file)
        if file != script and file.startswith(tuple(roots)) and not file.startswith(excluded):
            files.add(file)
    return sorted(files)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a callback right after a top-level module has finished executing its import."""

    def __init__(self, callbacks: dict[str, Callable[[ModuleType], None]]) -> None:
        self._callbacks = dict(callbacks)

    @classmethod
    def install(cls, callbacks: dict[str, Callable[[ModuleType], None]]) -> None:
        sys.meta_path.insert(0, cls(callbacks))

    def find_spec(self, fullname, path, target=None):
        callback = self._callbacks.pop(fullname, None)
        if callback is None:
            return None
        spec = self._spec_from_other_finders(fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        original_exec = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original_exec(module)
            callback(module)

        spec.loader.exec_module = exec_module
        return spec

    def _spec_from_other_finders(self, fullname, path, target):
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            if finder is self or find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                return spec
        return None
