"""Shapes every patch of the runner shares (standard library only: the child imports it before torch)."""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any


def with_arguments_adjusted(
    original: Callable[..., Any], adjust: Callable[[dict[str, Any]], None], *, fill_defaults: bool = False
) -> Callable[..., Any]:
    """``original`` with each call bound to its parameters and ``adjust`` given the arguments by name
    to change in place; a call that does not bind reaches ``original`` as it was, to raise its own error.
    ``fill_defaults``: ``adjust`` also sees each parameter the call left out, at the original's own
    default, so a patch never restates torch's defaults."""

    def adjusted_then_called(arguments: dict[str, Any], call: Callable[[], Any]) -> Any:
        adjust(arguments)
        return call()

    return with_call_bound(original, adjusted_then_called, fill_defaults=fill_defaults)


def with_call_bound(
    original: Callable[..., Any],
    around: Callable[[dict[str, Any], Callable[[], Any]], Any],
    *,
    fill_defaults: bool = False,
) -> Callable[..., Any]:
    """:func:`with_arguments_adjusted` for a patch that also acts once the call is made, or when it
    fails: ``around(arguments, call)`` may change the arguments in place and returns what the patched
    function returns, usually ``call()`` (``original`` run with the arguments as they then are)."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def bound_call(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)  # raises the original's own error, not the signature's
        if fill_defaults:
            bound.apply_defaults()
        return around(bound.arguments, lambda: original(*bound.args, **bound.kwargs))

    return bound_call


def replace(owner: Any, name: str, value: Any) -> None:
    """Install a patch: ``owner.name = value``. Every patch of a torch class or module goes through here
    (a type checker would refuse to see a method or a module function reassigned, and rightly: only the
    runner's child does this, on purpose)."""
    setattr(owner, name, value)


def run_every_new_thread_through(around_run: Callable[[Callable[[], None]], None]) -> None:
    """Each thread started from now on runs ``around_run(run)`` instead of its ``run()``: a state torch
    keeps per thread (autocast, a TorchFunctionMode) is entered again there."""
    original_start = threading.Thread.start

    @functools.wraps(original_start)
    def start(self: threading.Thread) -> None:
        # An instance attribute: a subclass's run() is covered too.
        replace(self, "run", functools.partial(around_run, self.run))
        original_start(self)

    replace(threading.Thread, "start", start)
