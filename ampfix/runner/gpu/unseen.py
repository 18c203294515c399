"""Results of torch's C++ paths that no torch function mode sees: they get the device a GPU gives them.

Runs in the child. A TorchScript function or method (``torch.jit.script``, ``torch.jit.trace``), a function
transform (``torch.func.vmap``, ``grad``, ``jacrev``, ...) and a DLPack import make their tensors in C++, past
the device mode (:mod:`device_mode`): unmarked, those would read as the CPU, where a GPU puts them on the
device of their inputs. So each such call is wrapped here: it runs as it is, and the new storages among its
results (nested in tuples, lists and dicts) are marked with the device of its tensor inputs. Storages that
already have a device (an input handed back, a view of one) keep it. A call given no marked tensor marks
nothing: its results read as the CPU and join any device, so the runner never refuses what it cannot know.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from ampfix.runner.gpu.devices import CPU, NO_TENSORS, DeviceModel
from ampfix.runner.trace.patching import replace

# torch.func's transforms: each returns a function whose calls run in functorch's C++ layers.
FUNCTION_TRANSFORMS = ("vmap", "grad", "grad_and_value", "jacrev", "jacfwd", "hessian")


def install(devices: DeviceModel) -> None:
    for owner in (torch._C.ScriptFunction, torch._C.ScriptMethod):
        replace(owner, "__call__", _results_on_inputs_device(devices, owner.__call__))
    transforms = [torch.func] + ([torch] if hasattr(torch, "vmap") else [])
    for module in transforms:
        for name in FUNCTION_TRANSFORMS:
            transform = getattr(module, name, None)
            if transform is not None:
                replace(module, name, _transform_results_on_inputs_device(devices, transform))
    _dlpack_keeps_the_device(devices)


def _results_on_inputs_device(devices: DeviceModel, call: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(call)
    def call_then_mark(*args: Any, **kwargs: Any) -> Any:
        result = call(*args, **kwargs)
        device, _ = devices.of_inputs((*args, *kwargs.values()))
        if device is not None and device != NO_TENSORS:
            devices.place_unmarked(result, device)
        return result

    return call_then_mark


def _transform_results_on_inputs_device(devices: DeviceModel, transform: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(transform)
    def transformed(*args: Any, **kwargs: Any) -> Any:
        return _results_on_inputs_device(devices, transform(*args, **kwargs))

    return transformed


def _dlpack_keeps_the_device(devices: DeviceModel) -> None:
    """``torch.from_dlpack`` shares the memory of its source: its tensor is on the source's device. A capsule
    (``torch.utils.dlpack.to_dlpack``) carries no mark, so the device each capsule was made on is kept until
    it is imported (the capsule is consumed then; a capsule never imported leaves one small entry)."""
    capsules: dict[int, str] = {}
    original_to, original_from = torch.utils.dlpack.to_dlpack, torch.from_dlpack

    def to_dlpack(tensor: Any) -> Any:
        capsule = original_to(tensor)
        device = devices.of(tensor)
        if device is not None and device != CPU:
            capsules[id(capsule)] = device
        return capsule

    def from_dlpack(source: Any, *args: Any, **kwargs: Any) -> Any:
        device = devices.of(source) if isinstance(source, torch.Tensor) else capsules.pop(id(source), None)
        result = original_from(source, *args, **kwargs)
        if device is not None and kwargs.get("device") is None:
            devices.mark(result, device)
        return result

    for module in (torch, torch.utils.dlpack):
        if hasattr(module, "to_dlpack"):
            replace(module, "to_dlpack", functools.wraps(original_to)(to_dlpack))
        replace(module, "from_dlpack", functools.wraps(original_from)(from_dlpack))
