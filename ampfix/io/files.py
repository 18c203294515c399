"""Files: discovery, reading, one processing path (a codec per file kind, the engine, careful writing). Never prints."""

from __future__ import annotations

import dataclasses
import gc
import itertools
import os
import signal
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, cast

from ampfix.core.options import Options
from ampfix.engine import INTERNAL_ERROR_CODE, SYNTAX_ERROR_CODE, Finding, SourceResult, check_source, fix_source
from ampfix.io.codec import NOTEBOOK_SUFFIX, PYTHON, READ_ERROR_CODE, SUFFIXES, WRITE_ERROR_CODE, DecodeError
from ampfix.io.declared_torch import Target, declared_torch_of_file
from ampfix.io import result_cache
from ampfix.io.exclusion import GITIGNORE, Exclusions, FolderFilter
from ampfix.io.project_modules import (FileModules, begin_run, cache_state, forget, project_modules, reads_apex_switch,
                                       run_state)

if TYPE_CHECKING:
    from ampfix.io.codec import Codec

__all__ = ["MODES", "READ_ERROR_CODE", "WRITE_ERROR_CODE", "FileResult", "codec_for", "default_jobs", "discover",
           "process_data", "process_file", "process_paths", "process_stdin", "read_candidate", "shown_message"]


@dataclass(frozen=True)
class FileResult:
    path: str
    findings: tuple[Finding, ...] = ()
    diff: str = ""
    changed: bool = False  # the new text differs (written, unless a dry run)
    error: str | None = None
    target: Target | None = None  # the target torch the engine worked at; None: the file did not reach it


def _is_virtualenv(path: Path) -> bool:
    return (path / "pyvenv.cfg").is_file() or (path / "conda-meta").is_dir()


def discover(paths: Iterable[str | os.PathLike[str]], exclusions: Exclusions | None = None,
             force_exclude: bool = False) -> Iterator[Path | FileResult]:
    """Every .py file under the given paths, in a stable order, streamed (not collected).

    Folders skip what `exclusions` exclude (by default: caches, installed packages, build output)
    and what git ignores. A file named explicitly is always taken, whatever its name or location,
    unless `force_exclude` applies the excludes to it too; it is read through a symlink. In a
    folder, symlinks are not followed: a target inside the given paths is taken under its own name
    (once: through the link it would be read twice, and written from stale bytes), and a rewrite
    must not reach outside what it was pointed at. A folder that cannot be read comes out as an
    error result, in its place; the walk goes on.
    """
    exclusions = exclusions or Exclusions()
    for given in paths:
        path = Path(given)
        if force_exclude and exclusions.forced_out(path):
            continue
        try:
            is_dir = path.is_dir()
        except OSError:  # its parent cannot be searched: reading it says why
            is_dir = False
        if is_dir:
            yield from _walk(path, exclusions.walk_from(path))
        else:
            yield path


def _walk(directory: Path, skipped: FolderFilter, walked: str = "") -> Iterator[Path | FileResult]:
    """`walked`: `directory` below the walk's start ("" or "pkg/sub/"), as the filter names entries."""
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError as error:
        yield _error(directory, f"cannot read folder: {error.strerror or error}")
        return
    skipped = skipped.entering(directory, walked, any(entry.name == GITIGNORE for entry in entries))
    subdirs = []
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            if not skipped.skips(walked + entry.name, entry.name, True):
                subdirs.append((directory / entry.name, f"{walked}{entry.name}/"))
        elif (entry.name.endswith(SUFFIXES) and not entry.is_symlink()
              and not skipped.skips(walked + entry.name, entry.name, False)):
            yield directory / entry.name  # reading it reports one that is not a regular file
    for subdir, below in subdirs:
        try:
            virtualenv = _is_virtualenv(subdir)
        except OSError as error:  # listed but not searchable: nothing inside can be opened
            yield _error(subdir, f"cannot read folder: {error.strerror or error}")
            continue
        if not virtualenv:
            yield from _walk(subdir, skipped, below)


def read_candidate(path: Path, retargets: bool = False, kept: bool = False,
                   unsafe_fixes: bool = False) -> bytes | None | FileResult:
    """The file's bytes if it could hold a use the run looks at (or `kept`: a check of it is kept, whose replay
    costs less than the byte filter's rule data; or, under `unsafe_fixes`, it compares the members of an enum that
    switches the project's apex.amp uses, `reads_apex_switch`), None if not, or a read error."""
    try:
        data = _read_regular_file(path)
    except _NotRegular as kind:
        return _error(path, f"not a regular file ({kind}): skipped")
    except OSError as error:
        return _error(path, f"cannot read: {error.strerror or error}")
    # The engine's test, on the bytes: a file that cannot hold a use is never decoded.
    if kept or codec_for(path).could_hold(data, retargets):
        return data
    return data if unsafe_fixes and path.name.endswith(".py") and reads_apex_switch(path) else None


def codec_for(path: Path) -> Codec:
    """How a file's bytes become the engine's source, by its name: a notebook, else Python (a file
    named explicitly is read as Python whatever its name)."""
    if path.name.endswith(NOTEBOOK_SUFFIX):
        from ampfix.io.notebooks import NOTEBOOK  # json and the cell reader: only where there are notebooks

        return NOTEBOOK
    return PYTHON


class _NotRegular(Exception):
    """A FIFO, socket or device: reading one could block forever or have side effects."""


_FILE_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder"))


def _read_regular_file(path: Path) -> bytes:
    # Looked at before opening (opening a device can act on it), and again once open, without
    # blocking: a FIFO put in its place meanwhile must not hang the run. Reading the descriptor
    # with os.read costs what Path.read_bytes did (the 2,500 files of the generated tree, minimum
    # of 9 runs: 58 vs 60 ms); through open(fd) it cost 20% more.
    _require_regular(os.stat(path).st_mode)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        info = os.fstat(fd)
        _require_regular(info.st_mode)
        chunks = [os.read(fd, info.st_size + 1)]
        while chunks[-1]:  # to the end, wherever it is now (a read returns 2 GiB at most)
            chunks.append(os.read(fd, 1 << 20))
        return b"".join(chunks)
    finally:
        os.close(fd)


def _require_regular(mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise _NotRegular(next((kind for test, kind in _FILE_KINDS if test(mode)), "not a file"))


MODES = ("check", "diff", "rewrite")
# Errors (internal, syntax, read, write) carry no rewrite to suggest.
_NO_SUGGESTION_CODES = frozenset({INTERNAL_ERROR_CODE, SYNTAX_ERROR_CODE, READ_ERROR_CODE, WRITE_ERROR_CODE})


def shown_message(finding: Finding) -> str:
    """The message as every report shows it (the text and GitHub formats, SARIF, the flake8 plugin): with the
    suggested rewrite when a person has to finish the job, unless the message already spells it out."""
    needs_hand = not finding.fixed and not (finding.fixable and not finding.unsafe)
    if (needs_hand and finding.suggestion and finding.code not in _NO_SUGGESTION_CODES
            and finding.suggestion not in finding.message):
        return f"{finding.message}; suggested: {finding.suggestion}"
    return finding.message


def process_file(path: Path, options: Options, mode: str = "check", data: bytes | None = None) -> FileResult:
    """Check, diff (a dry run) or rewrite one file. Never raises for a bad file."""
    if data is None:
        read = read_candidate(path, options.retargets, unsafe_fixes=options.unsafe_fixes)
        if read is None:
            return FileResult(str(path))
        if isinstance(read, FileResult):
            return read
        data = read
    return process_data(path, data, options, mode)[0]


def process_stdin(name: str, data: bytes, options: Options, mode: str) -> tuple[FileResult, bytes]:
    """`ampfix check -` / `ampfix rewrite -`: the bytes read from stdin, named `name` in messages,
    through the engine; the result and the bytes to print (the input when nothing changed).
    Nothing is written, nor kept: an editor's buffer, not a file (and no earlier run's kept checks are read)."""
    result_cache.begin(False)
    return process_data(Path(name), data, options, "check" if mode == "check" else "diff")


def process_data(path: Path, data: bytes, options: Options, mode: str) -> tuple[FileResult, bytes]:
    """The one processing path: `data`, the bytes of `path`, through its codec and the engine;
    written back in "rewrite" mode. The result, and the file's new bytes (`data` when nothing
    changed or nothing was written). Where `options` set no target torch, the file's project
    metadata does (`targeted`)."""
    inferred = options.target_torch is None
    project = project_modules(path, options, _plans_half)  # another half of an apex set-up is planned as this file
    options, target = targeted(path, options)
    kept = result_cache.current() if mode == "check" else None
    key = kept.key(path, data, options, project is not None) if kept is not None else b""
    if kept is not None:
        found = kept.replay(path, key, project)  # None where no entry is kept, or it no longer holds
        if found is not None:
            return _checked(path, *found, target, inferred), data
    try:
        decoded = codec_for(path).decode(data, options.retargets)
    except DecodeError as error:
        return _error(path, error.message, error.code), data
    if mode != "check":  # only a rewrite lays out lines
        from ampfix.io.formatter import formatter_of_file

        formatter = formatter_of_file(path)
        options = dataclasses.replace(options, line_length=formatter.line_length, formatted=formatter.declared)
    if kept is not None:
        recording = result_cache.Recording(project) if project is not None else None
        asked = cast("FileModules", recording) if recording is not None else project
        converted = decoded.converted(check_source(decoded.source, options, asked))
        kept.keep(path, key, recording, converted.findings, converted.error)
    else:
        engine = check_source if mode == "check" else fix_source
        converted = decoded.converted(engine(decoded.source, options, project))
    if converted.new_text is None or converted.new_text == decoded.text:
        return _checked(path, converted.findings, converted.error, target, inferred), data
    findings = _with_raise_hint(converted.findings, target) if inferred else converted.findings
    new_data = converted.new_text.encode(decoded.encoding)
    # Only --diff shows it; difflib costs more than the whole rewrite on a densely changed file.
    diff = "" if mode == "rewrite" else SourceResult(decoded.text, converted.new_text).diff(str(path))
    if mode == "rewrite":
        problem = _write_in_place(path, new_data)
        if problem is not None:
            return dataclasses.replace(_not_written(path, findings, problem), target=target), data
    return FileResult(str(path), findings, diff, changed=True, error=converted.error, target=target), new_data


def _checked(path: Path, findings: tuple[Finding, ...], error: str | None, target: Target,
             inferred: bool) -> FileResult:
    """The result of a file whose text the engine left as it was."""
    return FileResult(str(path), _with_raise_hint(findings, target) if inferred else findings, error=error,
                      target=target)


def _plans_half(path: Path, project: FileModules) -> bool:
    """Whether `path`, planned as this run plans it (rewrite, the run's options and the file's own target), with a
    project that answers True to its own questions about the other halves, rewrites its half of an apex set-up."""
    assert project.options is not None
    try:
        decoded = codec_for(path).decode(path.read_bytes(), project.options.retargets)
    except Exception:  # noqa: BLE001 - a file that cannot be read or decoded plans nothing
        return False
    options, _ = targeted(path, project.options)
    from ampfix.families.apex import rules  # asked only by a half of a split apex set-up, under --unsafe-fixes

    # a half's initialize or scale_loss fixed; or an enum switch's comparisons, in a module without apex
    halves = {rules.INITIALIZE.code, rules.SCALE_LOSS.code, rules.FRAMEWORK_CONFIG.code}
    result = fix_source(decoded.source, options, project)
    return any(f.fixed and f.code in halves for f in result.findings)


def targeted(path: Path, options: Options) -> tuple[Options, Target]:
    """The options for `path`, and its target torch: `options` as they are when a flag or
    `[tool.ampfix]` set the target; else the floor its project declares (`declared_torch`), or the
    newest torch when it declares none."""
    if options.target_torch is not None:
        return options, Target(options.target_torch, options.target_source)
    declared = declared_torch_of_file(path)
    if declared.source is None:
        return options, Target(None, None)
    from ampfix.io.config import display_path

    source = display_path(declared.source)
    target = Target(declared.floor, source, declared.problem)
    if declared.floor is None:
        return options, target
    return dataclasses.replace(options, target_torch=declared.floor, target_source=source), target


def _with_raise_hint(findings: tuple[Finding, ...], target: Target) -> tuple[Finding, ...]:
    """A finding held back by a floor read from project metadata says how to raise it."""
    if target.version is None or not findings:
        return findings
    held = held_back_at(target.version)
    hint = f"; raise the torch requirement in {target.source} or pass --target-torch"
    return tuple(dataclasses.replace(f, message=f.message + hint) if held(f) else f for f in findings)


def held_back_at(version: tuple[int, int]) -> Callable[[Finding], bool]:
    """Whether a finding is left because a fix needs a newer torch than the target `version`: its rule's
    minimum is newer, or the engine's reason for holding it back says so (a use left with its import, whose
    rule is newer: `torch_amp.autocast()` after `import torch.cuda.amp as torch_amp`, AMP001, held by
    AMP010). The Finding carries no field for it: the reason is the end of its message, as
    `ampfix.engine.analysis` (hold_back) words it."""
    from ampfix.families import ALL_RULES

    newer = {rule.code for rule in ALL_RULES if rule.min_torch is not None and rule.min_torch > version}
    reason_end = f"; the target is torch {version[0]}.{version[1]}"
    return lambda f: not f.fixed and (f.code in newer or f.message.endswith(reason_end))


def _not_written(path: Path, findings: tuple[Finding, ...], problem: str) -> FileResult:
    """The file stays as it was: none of its fixes is applied, and the reason is a finding."""
    message = f"cannot write: {problem}; the file is unchanged"
    unfixed = tuple(dataclasses.replace(f, fixed=False) for f in findings)
    return FileResult(str(path), (*unfixed, Finding(1, 1, WRITE_ERROR_CODE, message, False)), error=message)


def _write_in_place(path: Path, data: bytes) -> str | None:
    """Replace the file's content atomically, through a symlink; None, or why it was not written.

    The replacement is a new inode: it gets the original's owner, group and mode before it takes
    the name (a root run must not hand a user's file to root), or the file is not written. A file
    with several hard links is not written: the new inode would carry one name only, and the other
    names would keep the old text (writing over the inode in place is not atomic: a crash halfway
    would lose the file).
    """
    # SIGTERM (the pool ending its workers, a worker's parent dying, `kill`) waits until the
    # temporary file is gone or has become the file: it must not be left in the user's folder.
    if not hasattr(signal, "pthread_sigmask"):
        return _replace(path, data)
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        return _replace(path, data)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _replace(path: Path, data: bytes) -> str | None:
    import tempfile  # only a rewrite writes: `check` does not pay for the import

    real = Path(os.path.realpath(path))
    temp = None
    try:
        info = real.stat()
        if info.st_nlink > 1:
            return f"it has {info.st_nlink} hard links, and a rewrite would cut it off from the others"
        fd, temp = tempfile.mkstemp(dir=real.parent, prefix=f".{real.name}.", suffix=".ampfix")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            created = os.fstat(fd)
            if hasattr(os, "fchown") and (created.st_uid, created.st_gid) != (info.st_uid, info.st_gid):
                try:
                    os.fchown(fd, info.st_uid, info.st_gid)
                except OSError as error:
                    return f"cannot keep its owner {info.st_uid}:{info.st_gid} ({error.strerror or error})"
        os.chmod(temp, stat.S_IMODE(info.st_mode))  # after chown, which clears set-id bits
        os.replace(temp, real)
        temp = None
    except OSError as error:
        return error.strerror or str(error)
    finally:
        if temp is not None and os.path.lexists(temp):
            os.unlink(temp)
    return None


def _error(path: Path, message: str, code: str = READ_ERROR_CODE) -> FileResult:
    return FileResult(str(path), (Finding(1, 1, code, message, False),), error=message)


# Below this many candidate files a process pool costs more than it saves (measured: see
# benchmarks/README.md). Candidates go to the workers in chunks of CHUNK_SIZE, at most
# IN_FLIGHT chunks per worker at a time, so memory stays bounded however many there are.
MIN_FILES_FOR_POOL = 16
CHUNK_SIZE = 4
IN_FLIGHT = 4


def default_jobs() -> int:
    """The CPUs this process may run on (its affinity, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def process_paths(paths: Iterable[str | os.PathLike[str]], options: Options, mode: str = "check",
                  jobs: int | None = None, exclusions: Exclusions | None = None,
                  force_exclude: bool = False, on_discovered: Callable[[Path | FileResult], None] | None = None,
                  stop: Callable[[], bool] = lambda: False) -> Iterator[FileResult]:
    """Results for every candidate file under `paths` (and every unreadable one), in discovery order.

    Files are filtered by a byte search first; only candidates are parsed, in a process pool
    when there are enough of them. Never every file's text is held: at most the first
    MIN_FILES_FOR_POOL candidates' bytes, while deciding whether to start the pool.
    Once `stop()` is true no further file is started; the results of those already started
    still come, so that every file written is reported.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    jobs = jobs or default_jobs()
    settings = (options, mode)
    given = tuple(str(p) for p in paths)
    begin_run(given, exclusions, force_exclude, discover)  # a half of an apex set-up asks: is the other half in it
    found = discover(given, exclusions, force_exclude)
    if on_discovered is not None:  # the CLI counts files for its progress line and summary
        found = _observed(found, on_discovered)
    kept = result_cache.begin(cache_state()) if mode == "check" else None
    items = _candidates(found, options.retargets, kept, options.unsafe_fixes)
    head = list(itertools.islice(items, MIN_FILES_FOR_POOL))
    if jobs < 2 or len(head) < MIN_FILES_FOR_POOL:
        for item in itertools.chain(head, items):
            if stop():
                return
            yield _process_item(item, settings)
        return
    yield from _pooled(itertools.chain(head, items), settings, jobs, stop)


@dataclass(frozen=True)
class _Candidate:
    """A file the pre-filter kept, with the bytes it read (so one process reads each file once)."""

    path: Path
    data: bytes


def _pooled(items: Iterator[_Candidate | FileResult], settings: tuple[Options, str], jobs: int,
            stop: Callable[[], bool] = lambda: False) -> Iterator[FileResult]:
    """`_process_item` over `items` in `jobs` processes, results in order, a bounded window ahead."""
    from collections import deque
    from concurrent.futures.process import BrokenProcessPool

    try:
        pool = _start_pool(jobs)
    except (OSError, ImportError, NotImplementedError):  # no working multiprocessing here (no /dev/shm)
        yield from (_process_item(item, settings) for item in items)
        return
    pending: deque = deque()  # (the chunk's items, its future), in order

    def restart():
        # A worker died (killed, out of memory): the pool ends every chunk in flight with it,
        # some of them halfway. Those files are reported; the run goes on in a new pool.
        nonlocal pool
        yield from (_lost(item) for paths, _ in pending for item in paths)
        pending.clear()
        pool.shutdown(wait=True)
        pool = _start_pool(jobs)

    try:
        while not stop():
            chunk = list(itertools.islice(items, CHUNK_SIZE))
            if chunk:
                # Workers get paths and read the files themselves: the parent stays a light walker.
                paths = [item.path if isinstance(item, _Candidate) else item for item in chunk]
                try:
                    future = pool.submit(_process_chunk, paths, settings)
                except BrokenProcessPool:  # it broke since the last result: this chunk is not lost
                    yield from restart()
                    future = pool.submit(_process_chunk, paths, settings)
                pending.append((paths, future))
            if pending and (not chunk or len(pending) >= IN_FLIGHT * jobs):
                try:
                    results = pending[0][1].result()
                except BrokenProcessPool:
                    yield from restart()
                    continue
                pending.popleft()
                yield from results
            elif not chunk:
                return
        # Stopped: chunks not started are dropped; those started may have written files.
        started = [(paths, future) for paths, future in pending if not future.cancel()]
        for paths, future in started:
            try:
                yield from future.result()
            except BrokenProcessPool:
                yield from (_lost(item) for item in paths)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _start_pool(jobs: int):
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context()
    # Under forkserver the workers are the server's children; it ends when this process does.
    direct = context.get_start_method() != "forkserver"
    return ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_start_worker,
                               initargs=(os.getpid(), direct, run_state(), cache_state()))


def _internal_error(path: Path, error: Exception) -> FileResult:
    message = f"internal error, file left unchanged: {type(error).__name__}: {error}"
    return FileResult(str(path), (Finding(1, 1, INTERNAL_ERROR_CODE, message, False),), error=message)


def _lost(item: Path | FileResult) -> FileResult:
    if isinstance(item, FileResult):
        return item
    message = ("internal error: the process working on it ended unexpectedly; the file is either as it was "
               "or completely rewritten")
    return FileResult(str(item), (Finding(1, 1, INTERNAL_ERROR_CODE, message, False),), error=message)


def _start_worker(parent: int, direct_child: bool, run: tuple[tuple[str, ...], object, bool] | None = None,
                  cache: bool = True) -> None:
    """A pool worker ends with the process that started the pool, and leaves Ctrl-C to it.

    A terminal sends Ctrl-C to the whole process group: the parent decides (it stops handing
    out files, and waits for the chunks started), so a worker finishes what it has. Without a
    death signal a worker whose parent is killed waits for work forever.
    """
    forget(cache)  # the project's byte answers kept between runs, or not (`--no-cache`), as in the parent
    result_cache.begin(cache)  # and the checks kept between runs
    if run is not None:  # the run's files, as the parent found them (`in_run`)
        begin_run(*run, discover)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _end_worker)
    watched = parent if direct_child else os.getppid()
    if not _signal_on_parent_death(signal.SIGTERM):
        import threading

        threading.Thread(target=_watch_parent, args=(watched,), daemon=True).start()
    if os.getppid() != watched:  # the parent died before the death signal was set
        os._exit(1)


def _signal_on_parent_death(signum: int) -> bool:
    """Linux's prctl(PR_SET_PDEATHSIG); False where there is none."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        pr_set_pdeathsig = 1
        return ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signum, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent: int) -> None:
    import time

    if hasattr(signal, "pthread_sigmask"):  # the main thread takes the SIGTERM, once its write is done
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    while os.getppid() == parent:
        time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGTERM)


def _end_worker(*_signal_args: object) -> None:
    os._exit(1)  # never halfway through a write: _write_in_place holds SIGTERM back


def _process_chunk(chunk: list[Path | FileResult], settings: tuple[Options, str]) -> list[FileResult]:
    return [_process_item(item, settings) for item in chunk]


def _observed(paths: Iterable[Path | FileResult],
              observer: Callable[[Path | FileResult], None]) -> Iterator[Path | FileResult]:
    for path in paths:
        observer(path)
        yield path


def _candidates(paths: Iterable[Path | FileResult], retargets: bool, kept: result_cache.ResultCache | None = None,
                unsafe_fixes: bool = False) -> Iterator[_Candidate | FileResult]:
    for path in paths:
        if isinstance(path, FileResult):  # a folder that cannot be read
            yield path
            continue
        try:
            read = read_candidate(path, retargets, kept is not None and kept.has_entry(path), unsafe_fixes)
        except Exception as error:  # noqa: BLE001 - as in _process_item: that file's finding, not the run's end
            read = _internal_error(path, error)
        if isinstance(read, FileResult):
            yield read
        elif read is not None:
            yield _Candidate(path, read)


def _process_item(item: _Candidate | Path | FileResult, settings: tuple[Options, str]) -> FileResult:
    if isinstance(item, FileResult):
        return item
    path, data = (item.path, item.data) if isinstance(item, _Candidate) else (item, None)
    options, mode = settings
    # A parse allocates hundreds of thousands of objects that reference counting frees; the
    # cyclic collector would scan them again and again (measured: 10-15% of check and rewrite).
    collecting = gc.isenabled()
    gc.disable()
    try:
        return process_file(path, options, mode, data)
    except Exception as error:  # noqa: BLE001 - one file's failure (a RecursionError too) must not end the run
        return _internal_error(path, error)
    finally:
        if collecting:
            gc.enable()
