"""What the installed torch has, tested by feature (never by version): the emulation adapts to torch 2.2 .. 2.15.

Runs in the child. Each reader here is taken from torch when this module is imported, which the harness does
before any patch is installed, so they are torch's own (unpatched) functions on every release:

- torch 2.4 made the autocast state per device (``torch.get_autocast_dtype("cpu")``, ``is_autocast_enabled(
  "cuda")``, ``set_autocast_dtype``, ``set_autocast_enabled``); before it there is one function per device
  (``get_autocast_cpu_dtype()``, ``get_autocast_gpu_dtype()``; ``is_autocast_enabled()`` is CUDA's).
  :class:`AutocastState` gives the per-device form on both.
- ``torch.OutOfMemoryError`` arrived in 2.5 (:data:`OUT_OF_MEMORY_ERROR`).
- ``torch.accelerator`` arrived in 2.6 (:func:`has_accelerator`).
- Up to 2.5, dynamo's device interface refuses a ``torch.cuda.Event``/``Stream`` that is not a subclass of
  ``torch._streambase._EventBase``/``_StreamBase`` (:func:`stream_and_event_bases`).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch


# Per device: the getter of its dtype, whether it is enabled, and the two setters, before torch 2.4.
LEGACY_AUTOCAST_STATE = {
    "cpu": ("get_autocast_cpu_dtype", "is_autocast_cpu_enabled", "set_autocast_cpu_dtype", "set_autocast_cpu_enabled"),
    "cuda": ("get_autocast_gpu_dtype", "is_autocast_enabled", "set_autocast_gpu_dtype", "set_autocast_enabled"),
}

# CUDA's out-of-memory error: torch.OutOfMemoryError from torch 2.5, torch.cuda.OutOfMemoryError (the same class
# since) before. Any: a base class the emulation's own error derives from.
OUT_OF_MEMORY_ERROR: Any = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError


class AutocastState:
    """torch's autocast state functions in their per-device form, whichever form ``torch_module`` has."""

    def __init__(self, torch_module: ModuleType | Any) -> None:
        self.per_device = hasattr(torch_module, "get_autocast_dtype")
        if self.per_device:
            self.get_dtype: Callable[[str], Any] = torch_module.get_autocast_dtype
            self.is_enabled: Callable[[str], bool] = torch_module.is_autocast_enabled
            self.set_dtype: Callable[[str, Any], None] = torch_module.set_autocast_dtype
            self.set_enabled: Callable[[str, bool], None] = torch_module.set_autocast_enabled
            return
        # Before torch 2.4: one function per device, the unsuffixed setters and is_autocast_enabled CUDA's.
        self._by_device = {
            device: tuple(getattr(torch_module, name) for name in names)
            for device, names in LEGACY_AUTOCAST_STATE.items()
            if all(hasattr(torch_module, name) for name in names)
        }
        self.get_dtype = lambda device: self._of(device)[0]()
        self.is_enabled = lambda device: self._of(device)[1]()
        self.set_dtype = lambda device, dtype: self._of(device)[2](dtype)
        self.set_enabled = lambda device, enabled: self._of(device)[3](enabled)

    def _of(self, device: Any) -> tuple[Callable[..., Any], ...]:
        functions = self._by_device.get(device)
        if functions is None:  # what torch 2.4's per-device functions raise for a device they do not know
            raise RuntimeError(f"unsupported autocast device_type '{device}'")
        return functions


# torch's own, read before the runner patches any of them.
AUTOCAST_STATE = AutocastState(torch)


def has_accelerator(torch_module: ModuleType | Any = torch) -> bool:
    """``torch.accelerator`` (torch 2.6+): emulated only where it exists, so that a script naming it on an
    older torch fails as it would on a GPU there."""
    return isinstance(getattr(torch_module, "accelerator", None), ModuleType)


def stream_and_event_bases(torch_module: ModuleType | Any = torch) -> tuple[type, ...]:
    """The classes ``torch.cuda.Stream`` and ``Event`` derive from where dynamo's device interface checks
    that they do (torch 2.1 .. 2.5: ``torch._streambase``): (stream base, event base), or () where there is
    no such check."""
    streambase = getattr(torch_module, "_streambase", None)
    if streambase is None:
        try:
            import importlib

            streambase = importlib.import_module(f"{torch_module.__name__}._streambase")
        except ImportError:
            return ()
    stream_base, event_base = getattr(streambase, "_StreamBase", None), getattr(streambase, "_EventBase", None)
    if not isinstance(stream_base, type) or not isinstance(event_base, type):
        return ()
    return stream_base, event_base
