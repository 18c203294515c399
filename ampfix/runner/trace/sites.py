"""Find the line of the user's script that caused what a patch is looking at.

Runs in the child. Frames are classified once per file: *plumbing* (this package, the autocast
and GradScaler modules, decorator helpers) is skipped; a frame inside torch marks the event as
done by torch on the script's behalf; the first other frame is the script's site.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from types import FrameType

from ampfix.runner.config import RUNNER_DIR
from ampfix.runner.trace.observe import Site

_PLUMBING, _TORCH, _SCRIPT = 0, 1, 2
_kind_by_file: dict[str, int] = {}
_torch_dir: str | None = None
_plumbing_prefixes: tuple[str, ...] = ()
# The runner's own files and the decorator helpers: frames no code of torch's or the script's is in.
_helper_prefixes: tuple[str, ...] = ()
# custom_fwd's and custom_bwd's wrappers (torch.amp's; torch.cuda.amp's before 2.4) open autocast regions of their
# own. Up to 2.13 a Python frame of torch's (Function.apply) stood between them and the script; from 2.14 apply is
# the C function itself, so the wrapper's own frame is what says such a region is torch's, not the script's.
_TORCH_WRAPPERS = frozenset({"decorate_fwd", "decorate_bwd"})


def configure(torch_dir: str) -> None:
    global _torch_dir, _plumbing_prefixes, _helper_prefixes
    _torch_dir = os.path.join(torch_dir, "")
    amp_modules = [
        os.path.join(torch_dir, "amp", ""),
        os.path.join(torch_dir, "cuda", "amp", ""),
        os.path.join(torch_dir, "cpu", "amp", ""),
        os.path.join(torch_dir, "overrides.py"),
        os.path.join(torch_dir, "_tensor.py"),  # Tensor.backward -> torch.autograd.backward
        os.path.join(torch_dir, "utils", "_contextlib.py"),
        # Module.__call__: a call of the script's model is the script's, at the line that called it.
        os.path.join(torch_dir, "nn", "modules", "module.py"),
    ]
    helpers = [RUNNER_DIR, contextlib.__file__, functools.__file__]
    typing_extensions_file = getattr(sys.modules.get("typing_extensions"), "__file__", None)
    if typing_extensions_file:
        helpers.append(typing_extensions_file)
    _plumbing_prefixes = tuple(amp_modules + helpers)
    _helper_prefixes = tuple(helpers)
    _kind_by_file.clear()


def _kind(filename: str) -> int:
    kind = _kind_by_file.get(filename)
    if kind is None:
        if filename.startswith(_plumbing_prefixes):
            kind = _PLUMBING
        elif _torch_dir is not None and filename.startswith(_torch_dir):
            kind = _TORCH
        else:
            kind = _SCRIPT
        _kind_by_file[filename] = kind
    return kind


def find_site() -> Site:
    """The first frame outside torch and the harness, and whether torch stood in between."""
    frame: FrameType | None = sys._getframe(1)
    origin = "script"
    while frame is not None:
        kind = _kind(frame.f_code.co_filename)
        if kind == _SCRIPT:
            return Site(frame.f_code.co_filename, frame.f_lineno, origin)
        if kind == _TORCH or (frame.f_code.co_name in _TORCH_WRAPPERS and _inside_torch(frame)):
            origin = "torch"
        frame = frame.f_back
    return Site("<unknown>", 0, origin)


def _inside_torch(frame: FrameType) -> bool:
    return _torch_dir is not None and frame.f_code.co_filename.startswith(_torch_dir)


def asked_by_torch() -> bool:
    """Whether the code that called the current function (the first frame outside the runner) is torch's own:
    a question torch asks on the script's behalf (GradScaler's ``torch.cuda.is_available()``)."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_helper_prefixes):
        frame = frame.f_back
    return frame is not None and _torch_dir is not None and frame.f_code.co_filename.startswith(_torch_dir)


def read_by_script() -> Site | None:
    """The code that made the current call (the first frame outside the runner and its helpers), when it
    is not torch's own: the place where the script, one of its modules or a library reads a value."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_helper_prefixes):
            if _torch_dir is not None and filename.startswith(_torch_dir):
                return None
            return Site(filename, frame.f_lineno)
        frame = frame.f_back
    return None
