"""Files: discovery, decoding, the engine per file, and careful writing. Never prints."""

from __future__ import annotations

import gc
import io
import itertools
import os
import stat
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from ampfix.engine import Finding, SourceResult, check_source, fix_source
from ampfix.exclusion import GITIGNORE, Exclusions, FolderFilter
from ampfix.options import Options
from ampfix.prefilter import could_hold_deprecated_use

READ_ERROR_CODE = "AMP902"

@dataclass(frozen=True)
class FileResult:
    path: str
    findings: tuple[Finding, ...] = ()
    diff: str = ""
    changed: bool = False  # the new text differs (written, unless a dry run)
    error: str | None = None


def _is_virtualenv(path: Path) -> bool:
    return (path / "pyvenv.cfg").is_file() or (path / "conda-meta").is_dir()


def discover(paths: Iterable[str | os.PathLike[str]], exclusions: Exclusions | None = None,
             force_exclude: bool = False) -> Iterator[Path]:
    """Every .py file under the given paths, in a stable order, streamed (not collected).

    Folders skip what `exclusions` exclude (by default: caches, installed packages, build output)
    and what git ignores. A file named explicitly is always taken, whatever its name or location,
    unless `force_exclude` applies the excludes to it too.
    """
    exclusions = exclusions or Exclusions()
    for given in paths:
        path = Path(given)
        if force_exclude and exclusions.forced_out(path):
            continue
        if path.is_dir():
            yield from _walk(path, exclusions.walk_from(path))
        else:
            yield path


def _walk(directory: Path, skipped: FolderFilter, walked: str = "") -> Iterator[Path]:
    """`walked`: `directory` below the walk's start ("" or "pkg/sub/"), as the filter names entries."""
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return
    skipped = skipped.entering(directory, walked, any(entry.name == GITIGNORE for entry in entries))
    subdirs = []
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            path = Path(entry.path)
            if not skipped.skips(walked + entry.name, entry.name, True) and not _is_virtualenv(path):
                subdirs.append((path, f"{walked}{entry.name}/"))
        elif entry.name.endswith(".py") and entry.is_file() and not skipped.skips(walked + entry.name, entry.name, False):
            yield Path(entry.path)
    for subdir, below in subdirs:
        yield from _walk(subdir, skipped, below)


def read_candidate(path: Path) -> bytes | None | FileResult:
    """The file's bytes if it could hold a deprecated use, None if not, or a read error."""
    try:
        data = path.read_bytes()
    except OSError as error:
        return _error(path, f"cannot read: {error.strerror or error}")
    # The engine's test, on the bytes: a file that cannot hold a use is never decoded.
    return data if could_hold_deprecated_use(data) else None


MODES = ("check", "diff", "rewrite")


def process_file(path: Path, options: Options, mode: str = "check", data: bytes | None = None) -> FileResult:
    """Check, diff (a dry run) or rewrite one file. Never raises for a bad file."""
    if data is None:
        read = read_candidate(path)
        if read is None:
            return FileResult(str(path))
        if isinstance(read, FileResult):
            return read
        data = read
    decoded = _decode(path, data)
    if isinstance(decoded, FileResult):
        return decoded
    source, encoding = decoded
    if mode == "check":
        result = check_source(source, options)
        return FileResult(str(path), result.findings, error=result.error)
    return _finish(path, data, encoding, fix_source(source, options), write=mode == "rewrite")


def process_stdin(name: str, data: bytes, options: Options, mode: str) -> tuple[FileResult, bytes]:
    """`ampfix check -` / `ampfix rewrite -`: the bytes read from stdin, named `name` in messages,
    through the engine; the result and the bytes to print (the input when nothing changed).
    Nothing is written."""
    path = Path(name)
    if mode == "check":
        return process_file(path, options, "check", data), data
    decoded = _decode(path, data)
    if isinstance(decoded, FileResult):
        return decoded, data
    source, encoding = decoded
    result = fix_source(source, options)
    file_result = _finish(path, data, encoding, result, write=False)
    return file_result, result.new_source.encode(encoding) if file_result.changed else data


def _decode(path: Path, data: bytes) -> tuple[str, str] | FileResult:
    """(text, encoding), or the error of a file not valid in its declared encoding."""
    try:
        encoding = _encoding(data)
        return data.decode(encoding), encoding
    except (SyntaxError, UnicodeDecodeError, LookupError) as error:
        return _error(path, f"not valid in its declared encoding: {error}")


def _finish(path: Path, data: bytes, encoding: str, result: SourceResult, write: bool) -> FileResult:
    if result.error is not None or not result.changed:
        return FileResult(str(path), result.findings, error=result.error)
    new_data = result.new_source.encode(encoding)
    # Only --diff shows it; difflib costs more than the whole rewrite on a densely changed file.
    diff = "" if write else result.diff(str(path))
    if write:
        try:
            _write_in_place(path, new_data)
        except OSError as error:
            return FileResult(str(path), result.findings, diff, error=f"cannot write: {error}")
    return FileResult(str(path), result.findings, diff, changed=True)


def _encoding(data: bytes) -> str:
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return encoding  # "utf-8-sig" when there is a BOM: decoding drops it, encoding restores it


def _write_in_place(path: Path, data: bytes) -> None:
    """Replace the file's content atomically, through a symlink, keeping its mode."""
    import tempfile  # only a rewrite writes: `check` does not pay for the import

    real = Path(os.path.realpath(path))
    mode = stat.S_IMODE(real.stat().st_mode)
    fd, temp = tempfile.mkstemp(dir=real.parent, prefix=f".{real.name}.", suffix=".ampfix")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(temp, mode)
        os.replace(temp, real)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def _error(path: Path, message: str) -> FileResult:
    return FileResult(str(path), (Finding(1, 1, READ_ERROR_CODE, message, False),), error=message)


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
                  force_exclude: bool = False,
                  on_discovered: Callable[[Path], None] | None = None) -> Iterator[FileResult]:
    """Results for every candidate file under `paths` (and every unreadable one), in discovery order.

    Files are filtered by a byte search first; only candidates are parsed, in a process pool
    when there are enough of them. Never every file's text is held: at most the first
    MIN_FILES_FOR_POOL candidates' bytes, while deciding whether to start the pool.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    jobs = jobs or default_jobs()
    settings = (options, mode)
    found = discover(paths, exclusions, force_exclude)
    if on_discovered is not None:  # the CLI counts files for its progress line and summary
        found = _observed(found, on_discovered)
    items = _candidates(found)
    head = list(itertools.islice(items, MIN_FILES_FOR_POOL))
    if jobs < 2 or len(head) < MIN_FILES_FOR_POOL:
        for item in itertools.chain(head, items):
            yield _process_item(item, settings)
        return
    yield from _pooled(itertools.chain(head, items), settings, jobs)


@dataclass(frozen=True)
class _Candidate:
    """A file the pre-filter kept, with the bytes it read (so one process reads each file once)."""

    path: Path
    data: bytes


def _pooled(items: Iterator[_Candidate | FileResult], settings: tuple[Options, str], jobs: int) -> Iterator[FileResult]:
    """`_process_item` over `items` in `jobs` processes, results in order, a bounded window ahead."""
    from collections import deque
    from concurrent.futures import ProcessPoolExecutor

    try:
        pool = ProcessPoolExecutor(max_workers=jobs)
    except (OSError, ImportError, NotImplementedError):  # no working multiprocessing here (no /dev/shm)
        yield from (_process_item(item, settings) for item in items)
        return
    pending: deque = deque()
    try:
        while True:
            chunk = list(itertools.islice(items, CHUNK_SIZE))
            if chunk:
                # Workers get paths and read the files themselves: the parent stays a light walker.
                paths = [item.path if isinstance(item, _Candidate) else item for item in chunk]
                pending.append(pool.submit(_process_chunk, paths, settings))
            if pending and (not chunk or len(pending) >= IN_FLIGHT * jobs):
                yield from pending.popleft().result()
            elif not chunk:
                return
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _process_chunk(chunk: list[Path | FileResult], settings: tuple[Options, str]) -> list[FileResult]:
    return [_process_item(item, settings) for item in chunk]


def _observed(paths: Iterable[Path], observer: Callable[[Path], None]) -> Iterator[Path]:
    for path in paths:
        observer(path)
        yield path


def _candidates(paths: Iterable[Path]) -> Iterator[_Candidate | FileResult]:
    for path in paths:
        read = read_candidate(path)
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
    finally:
        if collecting:
            gc.enable()
