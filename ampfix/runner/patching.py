"""Shapes every patch of the runner shares (standard library only: the child imports it before torch)."""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any


def with_arguments_adjusted(original: Callable[..., Any], adjust: Callable[[dict[str, Any]], None]) -> Callable[..., Any]:
    """``original`` with each call bound to its parameters and ``adjust`` given the arguments by name
    to change in place; a call that does not bind reaches ``original`` as it was, to raise its own error."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def adjusted(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)
        adjust(bound.arguments)
        return original(*bound.args, **bound.kwargs)

    return adjusted


def run_every_new_thread_through(around_run: Callable[[Callable[[], None]], None]) -> None:
    """Each thread started from now on runs ``around_run(run)`` instead of its ``run()``: a state torch
    keeps per thread (autocast, a TorchFunctionMode) is entered again there."""
    original_start = threading.Thread.start

    @functools.wraps(original_start)
    def start(self: threading.Thread) -> None:
        run = self.run
        self.run = functools.partial(around_run, run)  # an instance attribute: a subclass's run() is covered too
        original_start(self)

    threading.Thread.start = start
