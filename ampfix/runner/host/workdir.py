"""A working directory of its own for each side of ``verify``, mirroring the one ampfix was started in.

Parent side; no torch. The two sides run at the same time with the same arguments, so whatever
one writes by relative path (checkpoints, logs, a ``latest`` link) would meet the other's. Each
side therefore runs in a fresh folder that mirrors the caller's working directory: entries up to
:data:`COPY_LIMIT_BYTES` / :data:`COPY_LIMIT_FILES` are copied (so even a file the script rewrites
in place is its own, and the caller's folder is never written), bigger ones (a dataset, ``.git``,
a virtual environment) are linked so that reading them by relative path still works.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

COPY_LIMIT_BYTES = 64 * 2**20  # per top-level entry
COPY_LIMIT_FILES = 2_000
COPY_BUDGET_BYTES = 256 * 2**20  # in all: past it, the remaining entries are linked


def mirror(source: Path, target: Path, exclude: Path | None = None) -> list[str]:
    """Fill the existing folder ``target`` with ``source``'s entries; returns the names linked, not copied.

    ``exclude``: a folder left out (verify's own workspace, when ampfix is started in its parent)."""
    linked = []
    budget = COPY_BUDGET_BYTES
    excluded = os.path.realpath(exclude) if exclude is not None else None
    for entry in sorted(os.scandir(source), key=lambda item: item.name):
        destination = target / entry.name
        if excluded is not None and os.path.realpath(entry.path) == excluded:
            continue
        if entry.is_symlink():
            _copy_link(entry, source, destination)
            continue
        size = _size_within_limits(entry)
        if size is not None and size <= budget and _copied(entry, destination):
            budget -= size
            continue
        try:
            os.symlink(entry.path, destination, target_is_directory=entry.is_dir())
        except OSError:
            continue  # neither copied nor linked: the script sees it missing, as it would be
        linked.append(entry.name + (os.sep if entry.is_dir() else ""))
    return linked


def _copy_link(entry: os.DirEntry, source: Path, destination: Path) -> None:
    """A link that stays inside ``source`` is copied as it is; one leading out points at the same place."""
    pointed = os.readlink(entry.path)
    resolved = os.path.realpath(entry.path)
    inside = os.path.commonpath([resolved, os.path.realpath(source)]) == os.path.realpath(source)
    try:
        os.symlink(pointed if inside and not os.path.isabs(pointed) else resolved, destination)
    except OSError:
        pass


def _size_within_limits(entry: os.DirEntry) -> int | None:
    """The entry's size in bytes, or None once it is over a limit (without walking the rest)."""
    try:
        if entry.is_file():
            size = entry.stat().st_size
            return size if size <= COPY_LIMIT_BYTES else None
        if not entry.is_dir():
            return None  # a socket, a FIFO: nothing to copy
        total, files = 0, 0
        for folder, _, names in os.walk(entry.path):
            for name in names:
                files += 1
                path = os.path.join(folder, name)
                if not os.path.islink(path):
                    total += os.stat(path).st_size
                if files > COPY_LIMIT_FILES or total > COPY_LIMIT_BYTES:
                    return None
        return total
    except OSError:
        return None


def _copied(entry: os.DirEntry, destination: Path) -> bool:
    try:
        if entry.is_dir():
            shutil.copytree(entry.path, destination, symlinks=True)
        else:
            shutil.copy2(entry.path, destination)
        return True
    except (OSError, shutil.Error):
        if destination.is_dir() and not destination.is_symlink():
            shutil.rmtree(destination, ignore_errors=True)
        elif destination.exists():
            destination.unlink()
        return False


def writable_path(root: Path, relative: Path) -> Path:
    """``root / relative``, made safe to write in a mirror: a linked folder on the way becomes a real
    folder of links to its entries, and a linked file is removed, so that writing there never reaches
    the folder the mirror was made from."""
    current = root
    for part in relative.parts:
        current = current / part
        if not current.is_symlink():
            continue
        target = Path(os.path.realpath(current))
        current.unlink()
        if target.is_dir():
            current.mkdir()
            for entry in os.scandir(target):
                os.symlink(entry.path, current / entry.name, target_is_directory=entry.is_dir())
    current.parent.mkdir(parents=True, exist_ok=True)
    return current
