"""The CUDA paths outside tensor calls: DataParallel, distributed backends, checkpoints, the
default device, random generators. (DataLoader pinning needs nothing here: ``torch.accelerator``
answers as the CUDA device, so the loader pins, and the device mode keeps the pinned mark.)

Runs in the child. Child processes need no patch here: ``torch.multiprocessing.spawn`` and
spawned DataLoader workers start a fresh interpreter that finds the bootstrap ``sitecustomize``
on ``PYTHONPATH``; forked workers inherit the patched interpreter.
"""

from __future__ import annotations

import atexit
import functools
from collections.abc import Callable
from typing import Any

import torch

from ampfix.runner.gpu.devices import CPU, DeviceModel
from ampfix.runner.trace.observe import Recorder
from ampfix.runner.trace.patching import replace, with_arguments_adjusted
from ampfix.runner.trace.sites import find_site


def installers(recorder: Recorder, devices: DeviceModel) -> list[tuple[str, Callable[[], None]]]:
    """(what, how) pairs; the harness installs each on its own so one missing name costs only itself."""
    steps = [
        ("DataParallel", lambda: _data_parallel_as_one_replica(recorder)),
        ("checkpoints' devices", lambda: _checkpoints_keep_their_devices(devices)),
        ("torch.set_default_device", lambda: _default_device_on_cpu(devices)),
        ("torch.Generator(device=...)", lambda: _generators_on_cpu(devices)),
        ("DataLoader batches", lambda: _loader_batches_on_the_cpu(devices)),
    ]
    if torch.distributed.is_available():
        steps.append(("NCCL process groups", lambda: _nccl_runs_as_gloo(recorder, devices)))
        steps.append(("DistributedDataParallel device_ids", _ddp_device_ids_on_cpu))
        steps.append(("process groups kept until exit", _process_groups_live_until_exit))
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


def _checkpoints_keep_their_devices(devices: DeviceModel) -> None:
    """torch.save writes each storage's device as the script's tensors have it ("cuda:0"), and torch.load puts
    a storage back on the device its location names after ``map_location`` (a GPU's, or the CPU), as on the
    GPU machine: the storage stays a CPU one, marked with that device. Torch's own hook for other locations
    (``serialization.register_package``), ahead of its CPU and CUDA entries."""
    serialization = torch.serialization

    def location_of(storage: Any) -> str | None:
        device = devices.of_storage(storage)
        return device if device is not None and device != CPU else None

    def put_back(storage: Any, location: str) -> Any:
        device = devices.resolve(location)
        if device is None:
            return None  # not a location of ours (meta, xpu): torch's own entries decide
        devices.mark_storage(getattr(storage, "_untyped_storage", storage), device)
        return storage

    serialization.register_package(-1, location_of, put_back)


def _default_device_on_cpu(devices: DeviceModel) -> None:
    original_set, original_get = torch.set_default_device, torch.get_default_device

    @functools.wraps(original_set)
    def set_default_device(device):
        devices.default = devices.resolve(device) if device is not None else None
        return original_set(CPU if devices.default is not None and devices.default != CPU else device)

    @functools.wraps(original_get)
    def get_default_device():
        return devices.torch_device(devices.default) if devices.default is not None else original_get()

    torch.set_default_device = set_default_device
    torch.get_default_device = get_default_device


def _generators_on_cpu(devices: DeviceModel) -> None:
    """torch.Generator(device="cuda") is a CPU generator; isinstance() still accepts every generator."""
    base: Any = torch._C.Generator
    base_type: Any = type(base)

    class GeneratorType(base_type):
        def __instancecheck__(cls, instance: Any) -> bool:
            return isinstance(instance, base)

    class Generator(base, metaclass=GeneratorType):
        def __new__(cls, device: Any = "cpu"):
            return super().__new__(cls, CPU if devices.is_gpu(device) else device)

    Generator.__module__, Generator.__qualname__ = "torch", "Generator"
    replace(torch, "Generator", Generator)


def _loader_batches_on_the_cpu(devices: DeviceModel) -> None:
    """A batch from worker processes arrives through shared memory, made where no mode watched: it is on the
    CPU, as the loader's batches are on the GPU machine (pinned or not), so ``model(batch)`` with a model on
    "cuda" fails as it would there."""
    iterator = torch.utils.data.dataloader._BaseDataLoaderIter
    original_next = iterator.__next__

    @functools.wraps(original_next)
    def __next__(self):
        batch = original_next(self)
        devices.place_unmarked(batch, CPU)
        return batch

    replace(iterator, "__next__", __next__)


def _nccl_runs_as_gloo(recorder: Recorder, devices: DeviceModel) -> None:
    distributed = torch.distributed

    def gloo_for_nccl(arguments: dict[str, Any]) -> None:
        backend = arguments.get("backend")
        if isinstance(backend, str) and "nccl" in backend.lower():
            recorder.unemulated_use("NCCL backend (ran with gloo on the CPU)", find_site())
            arguments["backend"] = backend.lower().replace("nccl", "gloo")
        if arguments.get("device_id") is not None and devices.is_gpu(arguments["device_id"]):
            arguments["device_id"] = None

    replace(distributed, "init_process_group", with_arguments_adjusted(distributed.init_process_group, gloo_for_nccl))


# Every process group this process made, released at its exit (`_process_groups_live_until_exit`).
_made_groups: list[Any] = []


def _process_groups_live_until_exit() -> None:
    """A process group is destroyed when the process exits, not when its last user (DDP's reducer) lets it go.

    Destroying a gloo group joins its worker threads while holding the GIL. A worker that has just finished a
    collective drops the work's last reference, whose captured thread-local state holds Python objects here (the
    runner's TorchFunctionMode is on every thread's stack), and that needs the GIL: each waits on the other for
    ever. Seen in `fixtures/run/spawn_ddp.py`: a rank hung in ``~ProcessGroupGloo`` under ``~Reducer`` as its
    DDP model was freed after the last step (gdb), 1 run in 12 on a loaded 2-core machine. The GPU machine runs
    NCCL with no mode on the stack: the hang is the runner's own. At exit the workers have long been idle. A group
    is never used after its destruction, so keeping it changes nothing a script can see but its threads' lifetime."""
    c10d = torch.distributed.distributed_c10d
    original = c10d._new_process_group_helper  # what init_process_group, new_group and their kin all call

    @functools.wraps(original)
    def _new_process_group_helper(*args, **kwargs):
        made = original(*args, **kwargs)
        _made_groups.append(made)
        return made

    replace(c10d, "_new_process_group_helper", _new_process_group_helper)
    atexit.register(_made_groups.clear)  # after the script's own handlers (registered later, run first)


def _ddp_device_ids_on_cpu() -> None:
    """DDP(model, device_ids=[rank]) is the CUDA spelling; the module lives on the CPU, where DDP wants none."""
    ddp = torch.nn.parallel.DistributedDataParallel

    def without_devices(arguments: dict[str, Any]) -> None:
        for name in ("device_ids", "output_device"):
            if arguments.get(name) is not None:
                arguments[name] = None

    replace(ddp, "__init__", with_arguments_adjusted(ddp.__init__, without_devices))
