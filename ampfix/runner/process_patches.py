"""The CUDA paths outside tensor calls: DataParallel, distributed backends, checkpoints, the
default device, random generators. (DataLoader pinning needs nothing here: ``torch.accelerator``
answers as the CUDA device, so the loader pins, and the device mode keeps the pinned mark.)

Runs in the child. Child processes need no patch here: ``torch.multiprocessing.spawn`` and
spawned DataLoader workers start a fresh interpreter that finds the bootstrap ``sitecustomize``
on ``PYTHONPATH``; forked workers inherit the patched interpreter.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from ampfix.runner.device_mode import is_cuda_device
from ampfix.runner.observe import Recorder
from ampfix.runner.patching import replace, with_arguments_adjusted
from ampfix.runner.sites import find_site


def installers(recorder: Recorder) -> list[tuple[str, Callable[[], None]]]:
    """(what, how) pairs; the harness installs each on its own so one missing name costs only itself."""
    steps = [
        ("DataParallel", lambda: _data_parallel_as_one_replica(recorder)),
        ("torch.load map_location", _checkpoints_load_on_cpu),
        ("torch.set_default_device", _default_device_on_cpu),
        ("torch.Generator(device=...)", _generators_on_cpu),
    ]
    if torch.distributed.is_available():
        steps.append(("NCCL process groups", lambda: _nccl_runs_as_gloo(recorder)))
        steps.append(("DistributedDataParallel device_ids", _ddp_device_ids_on_cpu))
    return steps


def _data_parallel_as_one_replica(recorder: Recorder) -> None:
    """DataParallel on the one emulated device runs its module directly, as on a single GPU.

    Built on the emulated device, DataParallel checks that the parameters sit on cuda:0 and
    scatters inputs to it; on the CPU both fail. With one device DataParallel calls the module
    on the whole batch and gathers nothing, which is what runs here; more device ids than that
    run as one replica, and the report says so.
    """
    data_parallel = torch.nn.DataParallel
    original_init, original_forward = data_parallel.__init__, data_parallel.forward

    @functools.wraps(original_init)
    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        if len(self.device_ids) > 1:
            recorder.unemulated_use(
                f"DataParallel over {len(self.device_ids)} devices (ran as one replica on the CPU)", find_site()
            )

    @functools.wraps(original_forward)
    def forward(self, *inputs, **kwargs):
        if not self.device_ids:  # built without a device: torch's own CPU path
            return original_forward(self, *inputs, **kwargs)
        with torch.autograd.profiler.record_function("DataParallel.forward"):
            return self.module(*inputs, **kwargs)

    replace(data_parallel, "__init__", __init__)
    replace(data_parallel, "forward", forward)


def _cpu_map_location(map_location: Any) -> Any:
    if map_location is None or is_cuda_device(map_location):
        return "cpu"
    if isinstance(map_location, dict):
        return {key: "cpu" if is_cuda_device(value) else value for key, value in map_location.items()}
    return map_location


def _checkpoints_load_on_cpu() -> None:
    def mapped_to_cpu(arguments: dict[str, Any]) -> None:
        arguments["map_location"] = _cpu_map_location(arguments.get("map_location"))

    torch.load = with_arguments_adjusted(torch.load, mapped_to_cpu)


def _default_device_on_cpu() -> None:
    original = torch.set_default_device

    @functools.wraps(original)
    def set_default_device(device):
        return original("cpu" if device is not None and is_cuda_device(device) else device)

    torch.set_default_device = set_default_device


def _generators_on_cpu() -> None:
    """torch.Generator(device="cuda") is a CPU generator; isinstance() still accepts every generator."""
    base: Any = torch._C.Generator
    base_type: Any = type(base)

    class GeneratorType(base_type):
        def __instancecheck__(cls, instance: Any) -> bool:
            return isinstance(instance, base)

    class Generator(base, metaclass=GeneratorType):
        def __new__(cls, device: Any = "cpu"):
            return super().__new__(cls, "cpu" if is_cuda_device(device) else device)

    Generator.__module__, Generator.__qualname__ = "torch", "Generator"
    replace(torch, "Generator", Generator)


def _nccl_runs_as_gloo(recorder: Recorder) -> None:
    distributed = torch.distributed

    def gloo_for_nccl(arguments: dict[str, Any]) -> None:
        backend = arguments.get("backend")
        if isinstance(backend, str) and "nccl" in backend.lower():
            recorder.unemulated_use("NCCL backend (ran with gloo on the CPU)", find_site())
            arguments["backend"] = backend.lower().replace("nccl", "gloo")
        if is_cuda_device(arguments.get("device_id")):
            arguments["device_id"] = None

    replace(distributed, "init_process_group", with_arguments_adjusted(distributed.init_process_group, gloo_for_nccl))


def _ddp_device_ids_on_cpu() -> None:
    """DDP(model, device_ids=[rank]) is the CUDA spelling; the module lives on the CPU, where DDP wants none."""
    ddp = torch.nn.parallel.DistributedDataParallel

    def without_devices(arguments: dict[str, Any]) -> None:
        for name in ("device_ids", "output_device"):
            if arguments.get(name) is not None:
                arguments[name] = None

    replace(ddp, "__init__", with_arguments_adjusted(ddp.__init__, without_devices))
