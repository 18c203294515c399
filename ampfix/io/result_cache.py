"""The findings of `check` for a file, kept between runs with the project's answers they were decided from.

The engine is a pure function of a file's source, the options and the project's answers to its questions
(`ampfix.core.project`: it reads nothing else, and its code is ampfix's own). So a `check` of a file is kept as
what it was given and what it asked: the key (a hash of ampfix's code, the interpreter, the file's absolute path, its
bytes and the options as the file's target made them) and each question the engine asked of the project, with its
answer. A later `check` of the same bytes under the same key asks those questions again, of the project as it is
now; where every answer is the one kept, the engine would ask the same questions in the same order and decide the
same, so the kept findings are the findings. Where one answer differs (another module now imports the name), or
the key does (the file, the options, ampfix), the engine runs and the entry is replaced. So it is never wrong, and
what a warm run saves is the engine itself: its rule data, its planners, the parse and the analysis (a pre-commit
`check` of a module that asks the project loads about half of ampfix's modules less).

Kept only for `check` of files (a rewrite's text depends on LibCST, whose version is not in the key; stdin is an
editor's buffer), and only where every
question's answer can be compared: a file whose engine asked for another file's tree or planned another half of an
apex set-up (`tree_of`, `half_planned`) is not kept.

One entry a file (a slot named by a hash of its absolute path and the interpreter), in the folder of the project
walks' cache (`ampfix.io.project_index.cache_folder`), `results/`; written atomically, read with its checksum; a
folder that cannot be written means no cache, silently. `--no-cache` reads and writes none.

ampfix's code is hashed from its files' bytes, once per change (`ampfix.io.code_stamp`).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ampfix.io import code_stamp
from ampfix.io.project_index import cache_folder, digest, read_checked, write_checked

if TYPE_CHECKING:
    from ampfix.core.options import Options
    from ampfix.engine import Finding
    from ampfix.io.project_modules import FileModules

FORMAT = 1
_MAGIC = b"ampfix-result\n"
# The questions whose answers cannot be compared (a tree) or plan other files (the apex halves): not kept.
_UNKEPT_QUESTIONS = frozenset({"tree_of", "half_planned"})

Answer = Any  # a question's answer as kept: str, bool, None, a tuple of those, or a tagged tuple (Export, Calls)
Question = tuple[str, tuple[Any, ...], Answer]


class Recording:
    """The project's answers to one file's engine, as given and kept (`questions`); each a method of
    `ampfix.core.project.ProjectModules`, delegated to the file's `FileModules`."""

    def __init__(self, project: FileModules) -> None:
        self.project = project
        self.answers: dict[tuple[str, tuple[Any, ...]], Answer] = {}  # (method, arguments) -> the answer, as kept
        self.comparable = True

    def __getattr__(self, name: str) -> Callable[..., Any]:
        asked = getattr(self.project, name)

        def ask(*args: Any) -> Any:
            answer = asked(*args)
            if name in _UNKEPT_QUESTIONS:
                self.comparable = False
            else:
                self.answers.setdefault((name, args), kept_answer(answer))
            return answer

        return ask


def kept_answer(answer: Any) -> Answer:
    """An answer as an entry keeps it (marshal's types), the same for the same answer."""
    if dataclasses.is_dataclass(answer) and not isinstance(answer, type):
        return (type(answer).__name__, *(kept_answer(getattr(answer, f.name)) for f in dataclasses.fields(answer)))
    if isinstance(answer, (tuple, list)):
        return tuple(kept_answer(item) for item in answer)
    return answer


class ResultCache:
    """The entries of one run, in its cache folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._code: bytes | None = None

    def _slot(self, path: Path) -> Path:
        named = digest(os.path.abspath(path), sys.implementation.cache_tag).hex()
        return self.folder / "results" / named[:24]

    def has_entry(self, path: Path) -> bool:
        """Whether a `check` of `path` was kept (so reading it is worth it whatever the byte filter says)."""
        return os.path.exists(self._slot(path))

    def key(self, path: Path, data: bytes, options: Options, asks: bool) -> bytes:
        """What a kept check is valid for: ampfix's code and the interpreter, the file (its absolute path and
        bytes), the options (the file's target in them), whether there is a project to ask (`asks`)."""
        return digest(str(FORMAT), self.code(), os.path.abspath(path), _options_text(options), str(asks), data)

    def replay(self, path: Path, key: bytes,
               project: FileModules | None) -> tuple[tuple[Finding, ...], str | None] | None:
        """The kept findings and error of the `check` of `path` under `key`, where the project answers every kept
        question as it did; None otherwise."""
        entry = read_checked(self._slot(path), _MAGIC)
        if not isinstance(entry, tuple) or len(entry) != 4 or entry[0] != key:
            return None
        _, questions, findings, error = entry
        for name, args, answer in questions:
            if project is None or kept_answer(getattr(project, name)(*args)) != answer:
                return None
        from ampfix.engine import Finding

        return tuple(Finding(*values) for values in findings), error

    def keep(self, path: Path, key: bytes, recording: Recording | None, findings: tuple[Finding, ...],
             error: str | None) -> None:
        if recording is not None and not recording.comparable:
            return
        questions = tuple((name, args, answer) for (name, args), answer in recording.answers.items()) \
            if recording is not None else ()
        rows = tuple(tuple(getattr(f, field.name) for field in dataclasses.fields(f)) for f in findings)
        try:
            write_checked(self._slot(path), _MAGIC, (key, questions, rows, error))
        except ValueError:  # an answer of a type marshal does not take: not kept
            return

    def code(self) -> bytes:
        if self._code is None:
            self._code = code_stamp.code_hash()
        return self._code


def _options_text(options: Options) -> str:
    values = []
    for field in dataclasses.fields(options):
        value = getattr(options, field.name)
        values.append((field.name, sorted(value) if isinstance(value, frozenset) else value))
    return repr(values)


_current: ResultCache | None = None  # this process's run's (`begin`); None: no run has begun (the API's own calls)


def begin(enabled: bool) -> ResultCache | None:
    """The kept checks of the run beginning (`process_paths`, and each of its pool workers), in its cache folder,
    found now (a long-lived process may be pointed at another between runs); None with `enabled` False
    (`--no-cache`) or no folder (no home folder to be found)."""
    global _current
    _current = None
    if enabled:
        try:
            _current = ResultCache(cache_folder())
        except RuntimeError:
            pass
    return _current


def current() -> ResultCache | None:
    return _current
