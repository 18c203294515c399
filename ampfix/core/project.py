"""What the engine may ask of the project around a file: what a module of the project binds a name to, which
modules of the project take a name from this file, and where they construct a class of it.

`from .compat import torch` or `from .utils import autocast` bind a name another module of the project binds;
the engine reads one file, so it asks (`ProjectModules.exported`), and the io layer answers from the project's
files (`ampfix.io.project_modules`). Without an answer (no project, a module outside it, a name bound there in
several ways) the name stays what it was: taken from another module, unresolved.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Export:
    qname: str  # the qualified name the module binds the name to, by an import (followed through the project)
    where: str  # the file and line of that import, for messages (`pkg/compat.py:1`)


@dataclass(frozen=True)
class Calls:
    """How the project's other modules call something of the file asked about: a class (its constructions), or what
    a function returns (`get_autocast(p)` then `autocast()`)."""

    seen: tuple[str, ...]  # each call found there, as `path:line`
    positional: str | None = None  # the first of them that passes an argument by position, `path:line`
    # Where it goes that cannot be followed, or why code outside the project may call it (for a message).
    escape: str | None = None


class ProjectModules(Protocol):
    def exported(self, level: int, module: str | None, name: str) -> Export | None:
        """What `from <"." * level><module> import <name>`, written in the file asked about, binds; or None."""
        ...

    def importers(self, name: str) -> tuple[str, ...]:
        """Where other files of the project take `name` from the file asked about (`from <it> import <name>`), as
        `path:line`; empty where none does, or where the project cannot be read."""
        ...

    def uses(self, qname: str) -> tuple[str, ...]:
        """Where other files of the project use the qualified name `qname` (a dotted name resolved through each
        file's own imports, scope by scope: `from apex import amp; amp.initialize(...)`), as `path:line`, the
        files sharing most folders with the file asked about first; empty where none does, or where the project
        cannot be read."""
        ...

    def module(self) -> str | None:
        """The dotted name the file asked about is imported by (`pkg.setup`, from its package root), or None."""
        ...

    def file_of(self, module: str) -> str | None:
        """The project's file of the absolute module `module`, shown as `uses` shows places, or None."""
        ...

    def uses_below(self, qname: str) -> tuple[str, ...]:
        """As `uses`, for every name below `qname` too (`apex.amp.state_dict` below `apex.amp`)."""
        ...

    def switch_reader(self) -> bool:
        """Whether the file asked about reads an enum whose members guard the project's apex.amp uses (`if X ==
        E.APEX:` around each): planned under --unsafe-fixes though it spells no apex (its comparisons are the
        switch's too)."""
        ...

    def in_run(self, place: str) -> bool:
        """Whether the file of `place` (a path as `uses` shows it, `:line` or not) is one this run processes (an
        apex set-up split across modules is rewritten only where every module holding a half is)."""
        ...

    def half_planned(self, place: str) -> bool:
        """Whether the file of `place`, planned as this file is (its options; its own half of a split set-up, the
        project's facts), rewrites its half; asked of that file without its own questions about the others (True
        there), so every half decides from the same facts."""
        ...

    def tree_of(self, place: str) -> ast.Module | None:
        """The parsed file of `place`, as it is now (another worker of this run may have rewritten it), or None."""
        ...

    def constructions(self, name: str) -> Calls | None:
        """Where the other files of the project construct the class `name` of the file asked about (taken by
        `from <it> import <name>`, or read as an attribute of it as a module), or where it escapes them; None where
        the project cannot be read."""
        ...

    def result_calls(self, name: str) -> Calls | None:
        """Where the other files of the project call what the function `name` of the file asked about returns (each
        read of the function a call, whose value is followed), or where it escapes them; None where the project
        cannot be read."""
        ...

    def argument_calls(self, level: int, module: str, name: str, position: int | None,
                       keyword: str | None) -> Calls | None:
        """Where the function that `from <"." * level><module> import <name>`, written in the file asked about,
        binds (defined in a module of the project) calls the value an argument passes it, at `position` or as
        `keyword` (`train_one_epoch(model, amp_autocast=amp_autocast)`, `amp_autocast()` in engine.py), or where
        that value escapes it; None where that is no plain function of the project's modules."""
        ...

    def value_calls(self, name: str) -> Calls | None:
        """Where the other files of the project call the value of the top-level variable `name` of the file asked
        about (`from .config import amp_autocast`, then `with amp_autocast():`), or where it escapes them (a type
        position among them); None where the project cannot be read."""
        ...
