"""ampfix's own code, as the caches key it: a hash of its files' bytes, and facts derived from its rule data alone.

A development install keeps its version while its code changes, and two installs of one version (pre-commit's
environments of two revisions) may differ, so what the caches kept is keyed by the code itself: every `.py` file of
the package, its path and bytes, with the interpreter's version (the engine parses with its `ast`). Reading and
hashing 1.1 MB costs more than a pre-commit run may spend, so the hash is kept in the cache folder with each file's
stat key (mtime and ctime in ns, size, inode; as `ampfix.io.project_index` keys the project's files), and computed
afresh when one differs; a stat walk of the package costs about 1 ms. Racy-clean as the index: a hash is not kept
while a file's mtime is within 2 s of now.

Beside the hash, the facts that the code alone decides and that cost imports to compute (the names the project walks
index, taken from the rules: `derived`): a warm run that only replays kept answers does not load the rule data.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ampfix.io.project_index import blake2b, cache_folder, digest, read_checked, stat_walk, write_checked

FORMAT = 1
_MAGIC = b"ampfix-code\n"
_RACY_NS = 2_000_000_000
_T = TypeVar("_T")


class _Stamp:
    """The code's hash and facts, for one cache folder (or none: kept in this process only)."""

    def __init__(self, folder: Path | None, package: Path) -> None:
        files = list(stat_walk(str(package)))
        self.stats = tuple((path, info.st_mtime_ns, info.st_ctime_ns, info.st_size, info.st_ino)
                           for path, info in files)
        named = digest(str(package), str(FORMAT), sys.implementation.cache_tag).hex()[:24]
        self.file = folder / f"code-{named}.stamp" if folder is not None else None
        fresh = time.time_ns() - _RACY_NS
        self.keepable = self.file is not None and all(mtime < fresh for _, mtime, *_ in self.stats)
        self.package, self.files = package, [path for path, _ in files]
        self.facts: dict[str, Any] = {}
        self._hash: bytes | None = None
        kept = self._load()
        if kept is not None:
            self._hash, self.facts = kept

    @property
    def hash(self) -> bytes:
        if self._hash is None:
            self._hash = _hash(self.package, self.files)
            self.save()
        return self._hash

    def _load(self) -> tuple[bytes, dict[str, Any]] | None:
        if self.file is None:
            return None
        try:
            stats, code, facts = read_checked(self.file, _MAGIC)
        except (TypeError, ValueError):  # None (no such file, another, corrupt), or not three values
            return None
        return (code, facts) if stats == self.stats and isinstance(facts, dict) else None

    def save(self) -> None:
        if self.file is not None and self.keepable:
            write_checked(self.file, _MAGIC, (self.stats, self.hash, self.facts))


def _hash(package: Path, files: list[str]) -> bytes:
    hashed = blake2b(digest_size=16)
    hashed.update(f"{FORMAT}\0{sys.version}\0".encode())
    for path in files:
        try:
            with open(path, "rb") as handle:
                hashed.update(digest(os.path.relpath(path, package), handle.read()))
        except OSError:
            return os.urandom(16)  # unreadable: nothing kept can match, and nothing kept under it is met again
    return hashed.digest()


_PACKAGE = Path(__file__).resolve().parent.parent
_stamps: dict[Path | None, _Stamp] = {}  # by cache folder: a process's tests point it at several


def _stamp(kept: bool) -> _Stamp:
    folder: Path | None = None
    if kept:
        try:
            folder = cache_folder()
        except RuntimeError:  # no home folder to be found
            folder = None
    stamp = _stamps.get(folder)
    if stamp is None:
        stamp = _stamps[folder] = _Stamp(folder, _PACKAGE)
    return stamp


def code_hash() -> bytes:
    """The hash of ampfix's code (its files' paths and bytes) and of the interpreter's version, kept in the cache
    folder."""
    return _stamp(True).hash


def derived(name: str, compute: Callable[[], _T], kept: bool = True) -> _T:
    """The fact `name`, which ampfix's code alone decides (`compute` must read nothing else, and give what marshal
    takes): kept with the code's hash, computed once per change of the code; `kept` False (`--no-cache`): computed
    in this process, nothing read or written."""
    stamp = _stamp(kept)
    if name not in stamp.facts:
        stamp.facts[name] = compute()
        stamp.save()
    return stamp.facts[name]
