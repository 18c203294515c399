"""The CUDA paths outside tensor calls: DataLoader pinning, distributed backends, checkpoints,
the default device, random generators.

Runs in the child. Child processes need no patch here: ``torch.multiprocessing.spawn`` and
spawned DataLoader workers start a fresh interpreter that finds the bootstrap ``sitecustomize``
on ``PYTHONPATH``; forked workers inherit the patched interpreter.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any

import torch

from ampfix.runner.device_mode import is_cuda_device
from ampfix.runner.observe import Recorder
from ampfix.runner.sites import find_site


def installers(recorder: Recorder) -> list[tuple[str, Callable[[], None]]]:
    """(what, how) pairs; the harness installs each on its own so one missing name costs only itself."""
    steps = [
        ("DataLoader pin_memory", _pin_memory_in_data_loaders),
        ("torch.accelerator device index", _single_accelerator_index),
        ("torch.load map_location", _checkpoints_load_on_cpu),
        ("torch.set_default_device", _default_device_on_cpu),
        ("torch.Generator(device=...)", _generators_on_cpu),
    ]
    if torch.distributed.is_available():
        steps.append(("NCCL process groups", lambda: _nccl_runs_as_gloo(recorder)))
        steps.append(("DistributedDataParallel device_ids", _ddp_device_ids_on_cpu))
    return steps


def _pin_memory_in_data_loaders() -> None:
    """pin_memory=True keeps the loader's pinning path (its thread, the pin_memory() calls) running.

    A CPU build turns pinning off because no accelerator is found; the script being debugged has
    one, so its loader pins. The pin itself is a no-op in the device mode.
    """
    base_iterator = torch.utils.data.dataloader._BaseDataLoaderIter
    original_init = base_iterator.__init__

    @functools.wraps(original_init)
    def __init__(self, loader, *args, **kwargs):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="'pin_memory' argument is set as true but no accelerator")
            original_init(self, loader, *args, **kwargs)
        if loader.pin_memory:
            self._pin_memory = True
            self._pin_memory_device = "cuda"

    base_iterator.__init__ = __init__


def _single_accelerator_index() -> None:
    # The pin-memory thread asks for and sets the current accelerator index.
    torch.accelerator.current_device_index = lambda: 0
    torch.accelerator.set_device_index = lambda device: None


def _cpu_map_location(map_location: Any) -> Any:
    if map_location is None or is_cuda_device(map_location):
        return "cpu"
    if isinstance(map_location, dict):
        return {key: "cpu" if is_cuda_device(value) else value for key, value in map_location.items()}
    return map_location


def _checkpoints_load_on_cpu() -> None:
    original_load = torch.load

    @functools.wraps(original_load)
    def load(f, map_location=None, *args, **kwargs):
        return original_load(f, _cpu_map_location(map_location), *args, **kwargs)

    torch.load = load


def _default_device_on_cpu() -> None:
    original = torch.set_default_device

    @functools.wraps(original)
    def set_default_device(device):
        return original("cpu" if device is not None and is_cuda_device(device) else device)

    torch.set_default_device = set_default_device


def _generators_on_cpu() -> None:
    """torch.Generator(device="cuda") is a CPU generator; isinstance() still accepts every generator."""
    base = torch._C.Generator

    class GeneratorType(type(base)):
        def __instancecheck__(cls, instance: Any) -> bool:
            return isinstance(instance, base)

    class Generator(base, metaclass=GeneratorType):
        def __new__(cls, device: Any = "cpu"):
            return super().__new__(cls, "cpu" if is_cuda_device(device) else device)

    Generator.__module__, Generator.__qualname__ = "torch", "Generator"
    torch.Generator = Generator


def _nccl_runs_as_gloo(recorder: Recorder) -> None:
    distributed = torch.distributed
    original = distributed.init_process_group
    signature = inspect.signature(original)

    @functools.wraps(original)
    def init_process_group(*args, **kwargs):
        bound = signature.bind_partial(*args, **kwargs)
        backend = bound.arguments.get("backend")
        if isinstance(backend, str) and "nccl" in backend.lower():
            recorder.unemulated_use("NCCL backend (ran with gloo on the CPU)", find_site())
            bound.arguments["backend"] = backend.lower().replace("nccl", "gloo")
        if is_cuda_device(bound.arguments.get("device_id")):
            bound.arguments["device_id"] = None
        return original(*bound.args, **bound.kwargs)

    distributed.init_process_group = init_process_group


def _ddp_device_ids_on_cpu() -> None:
    """DDP(model, device_ids=[rank]) is the CUDA spelling; the module lives on the CPU, where DDP wants none."""
    ddp = torch.nn.parallel.DistributedDataParallel
    original_init = ddp.__init__
    signature = inspect.signature(original_init)

    @functools.wraps(original_init)
    def __init__(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        for name in ("device_ids", "output_device"):
            if bound.arguments.get(name) is not None:
                bound.arguments[name] = None
        original_init(*bound.args, **bound.kwargs)

    ddp.__init__ = __init__
