"""The answers of the project walks' byte filters, kept between runs, keyed by each file's stat (as black's cache).

The project's questions (`ampfix.io.project_modules`: `importers`, `uses`, the calls of a name) walk every `.py` file
of the project and pick, by a cheap test of its bytes, the few to parse. A file's answers are kept here by its stat
key (mtime and ctime in ns, size, inode): a run stats every file, reads only those whose kept answer is True (which it
then parses, as without the cache) or whose stat key changed, and answers those afresh. A file not in the cache is
read; one removed drops out when a walk is complete. So the cache is never wrong for a changed, added or removed
file. Racy-clean (as git's index): an answer for a file whose mtime is within 2 s of the moment the walk
began is not saved (the file could change again within the same timestamp tick); it is answered afresh next run.

The cache lives in a user cache folder, never in the project: `$AMPFIX_CACHE_DIR`, else `$XDG_CACHE_HOME/ampfix`,
else `~/.cache/ampfix`; one file per project root, named by a hash of the resolved root, the format and the
interpreter. Its header (ampfix's version, the format, a hash of the rule data and the filters' code, the root)
must match, and its payload its checksum, or the cache is empty and rebuilt. Written atomically (a temporary file
in the same folder, then `os.replace`), when a walk ends having answered something new; a folder that cannot be
made or written means no cache, silently. Pool workers each load and write it: the last writer wins, and every
entry is validated by stat.
"""

from __future__ import annotations

import marshal
import os
import stat
import sys
import time
from pathlib import Path
from collections.abc import Callable, Iterator, Sequence
from typing import Any

try:  # blake2 without OpenSSL: `hashlib` loads libcrypto, 5 ms of a pre-commit run's start
    from _blake2 import blake2b
except ImportError:  # not CPython
    from hashlib import blake2b

FORMAT = 1
_MAGIC = b"ampfix-project-index\n"
_RACY_NS = 2_000_000_000  # an answer for a file changed this close to the walk's start is not saved
_SKIPPED_FOLDERS = frozenset({"__pycache__", "node_modules", "site-packages", "venv", "build", "dist"})

Key = tuple[str, ...]  # a byte question: ("importer",), ("in", word), ("word", name)
Test = tuple[Key, Callable[[bytes], bool]]  # a question and its answer for a file's bytes
_UNKNOWN, _FALSE, _TRUE = 0, 1, 2  # a file's answer to a question, one byte per file and question


class Index:
    """The kept answers of one project root, for one process's run. Held by columns, which load 6x faster than a
    dict per file (10,000 files: about 7 ms against 44 ms): the files' paths below the root, their stat keys (four
    ints each: mtime and ctime in ns, size, inode) and, for each question, one byte per file (`_UNKNOWN`, `_FALSE`,
    `_TRUE`)."""

    def __init__(self, root: Path, rules: str, enabled: bool) -> None:
        self.root = root
        self.rules = rules
        self.file = _cache_file(root) if enabled else None
        self.rels: list[str] = []
        self.stats: list[int] = []
        self.answers: dict[Key, bytearray] = {}
        if self.file is not None:
            self._load()
        self.at = {rel: i for i, rel in enumerate(self.rels)}
        self.dirty = False
        self.began: int | None = None  # when this process's first walk began (ns), for the racy rule

    def header(self) -> tuple[str, int, str, str]:
        import ampfix

        # Read, not imported by name: under an editable install, a folder named `ampfix` in the working directory
        # (LibCST's codemod command puts it first on sys.path) makes `ampfix` a namespace package whose
        # `__init__` never ran. The rules' hash, which covers the filters' code, still keys the cache then.
        version = getattr(ampfix, "__version__", "")
        return version, FORMAT, self.rules, str(self.root)

    def _load(self) -> None:
        assert self.file is not None
        try:
            header, rels, stats, answers = read_checked(self.file, _MAGIC)
        except (TypeError, ValueError):  # None (no such file, another, corrupt), or not four values
            return
        if header != self.header():
            return
        self.rels = rels.split("\0") if rels else []
        self.stats = stats
        self.answers = {question: bytearray(column) for question, column in answers.items()}

    def sources(self, tests: Sequence[Test]) -> Iterator[tuple[Path, bytes]]:
        """Each file of the project (in `_project_files`' order) whose answer to every test is True, with its bytes;
        a file that cannot be read is skipped. A complete walk drops the removed files; the end of a walk (complete or
        not) saves what it answered anew."""
        began = time.time_ns()
        if self.began is None:
            self.began = began
        prefix = len(os.path.join(str(self.root), ""))
        columns = [(self.answers.setdefault(question, bytearray(len(self.rels))), test) for question, test in tests]
        at, stats = self.at, self.stats
        seen = bytearray(len(self.rels))
        complete = False
        try:
            for path, info in stat_walk(str(self.root)):
                rel = path[prefix:]
                i = at.get(rel)
                if i is None:
                    i = at[rel] = len(self.rels)
                    self.rels.append(rel)
                    stats += (info.st_mtime_ns, info.st_ctime_ns, info.st_size, info.st_ino)
                    for column in self.answers.values():
                        column.append(_UNKNOWN)
                    seen.append(1)
                    self.dirty = True
                else:
                    seen[i] = 1
                    j = 4 * i
                    if (stats[j] != info.st_mtime_ns or stats[j + 1] != info.st_ctime_ns
                            or stats[j + 2] != info.st_size or stats[j + 3] != info.st_ino):
                        stats[j:j + 4] = info.st_mtime_ns, info.st_ctime_ns, info.st_size, info.st_ino
                        for column in self.answers.values():
                            column[i] = _UNKNOWN
                        self.dirty = True
                data: bytes | None = None
                taken = True
                for column, test in columns:
                    answer = column[i]
                    if answer == _UNKNOWN:
                        if data is None:
                            try:
                                data = _read(path)
                            except OSError:
                                taken = False
                                break
                        answer = column[i] = _TRUE if test(data) else _FALSE
                        self.dirty = True
                    if answer == _FALSE:
                        taken = False
                        break
                if not taken:
                    continue
                if data is None:
                    try:
                        data = _read(path)
                    except OSError:
                        continue
                yield Path(path), data
            complete = True
        finally:
            self.save(seen if complete else None)

    def save(self, seen: bytearray | None = None) -> None:
        """Write the answers (a file that `seen`, a complete walk, did not see is gone), but those of files whose mtime
        is within 2 s of the first walk's start; only where something was answered anew. (The ctime in the key sees
        a change whose mtime was set back; the racy rule needs only the mtime, which every write sets.)"""
        if seen is not None and seen.count(0):
            self.dirty = True
        if not self.dirty or self.file is None:
            return
        self.dirty = False
        assert self.began is not None
        fresh, stats = self.began - _RACY_NS, self.stats
        kept = [i for i in range(len(self.rels)) if (seen is None or seen[i]) and stats[4 * i] < fresh]
        write_checked(self.file, _MAGIC, (self.header(), "\0".join(self.rels[i] for i in kept),
                                          [value for i in kept for value in stats[4 * i:4 * i + 4]],
                                          {question: bytes(column[i] for i in kept)
                                           for question, column in self.answers.items()}))


def cache_folder() -> Path:
    """`$AMPFIX_CACHE_DIR`, else `$XDG_CACHE_HOME/ampfix` (an absolute one), else `~/.cache/ampfix`."""
    given = os.environ.get("AMPFIX_CACHE_DIR")
    if given:
        return Path(given)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg, "ampfix")
    return Path.home() / ".cache" / "ampfix"


def _cache_file(root: Path) -> Path | None:
    try:
        folder = cache_folder()
    except RuntimeError:  # no home folder to be found
        return None
    return folder / f"project-{digest(str(root), str(FORMAT), sys.implementation.cache_tag).hex()[:24]}.index"


def digest(*parts: bytes | str) -> bytes:
    """A hash of `parts` (each length-prefixed, so no two lists of parts share one), for the caches' names and keys."""
    hashed = blake2b(digest_size=16)
    for part in parts:
        data = part.encode("utf-8", "surrogateescape") if isinstance(part, str) else part
        hashed.update(len(data).to_bytes(8, "big"))
        hashed.update(data)
    return hashed.digest()


def write_checked(file: Path, magic: bytes, value: Any) -> None:
    """`value` marshalled into `file` (atomically), after `magic` and a CRC-32 of the payload (`read_checked`)."""
    import zlib

    body = marshal.dumps(value)
    write_atomically(file, magic + zlib.crc32(body).to_bytes(4, "big") + body)


def read_checked(file: Path, magic: bytes) -> Any:
    """What `write_checked` wrote in `file` with this `magic`; None where there is no such file, or another, or its
    checksum does not match (truncated, corrupt): marshal is not to be given bytes it did not write."""
    import zlib

    try:
        with open(file, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    body = data[len(magic) + 4:]
    if not data.startswith(magic) or zlib.crc32(body).to_bytes(4, "big") != data[len(magic):len(magic) + 4]:
        return None
    try:
        return marshal.loads(body)
    except (ValueError, EOFError, TypeError):
        return None


def write_atomically(file: Path, data: bytes) -> None:
    """Atomically, or not at all (an unwritable folder: no cache, no message)."""
    temp = file.with_name(f".{file.name}.{os.getpid()}.{os.urandom(4).hex()}")
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(temp, file)
    except OSError:
        try:
            os.unlink(temp)
        except OSError:
            pass


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def stat_walk(root: str) -> Iterator[tuple[str, os.stat_result]]:
    """Each regular `.py` file below `root` (through a symlink to a file; not into a linked folder), with its stat:
    a folder's files by name, then its folders by name (hidden ones and `_SKIPPED_FOLDERS` skipped), as `os.walk`
    top-down with sorted names goes (a stack, not nested generators: a file costs one `yield`, whatever its depth)."""
    stack = [root]
    while stack:
        try:
            with os.scandir(stack.pop()) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except OSError:
            continue
        folders = []
        for entry in entries:
            name = entry.name
            try:
                if entry.is_dir():
                    if not entry.is_symlink() and not name.startswith(".") and name not in _SKIPPED_FOLDERS:
                        folders.append(entry.path)
                    continue
                if not name.endswith(".py"):
                    continue
                info = entry.stat()
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                yield entry.path, info
        stack += reversed(folders)
