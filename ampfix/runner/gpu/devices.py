"""The device each of the script's tensors is on, as the GPU machine would have it, and what CUDA refuses.

Runs in the child. Every tensor is a CPU tensor; the device the script put it on (``cuda:N`` or ``cpu``)
is a mark on its storage: the ``UntypedStorage`` Python object, which torch keeps for as long as the
storage lives. So a view, ``.data``, a ``Parameter`` made of a tensor and a checkpoint's storage share
their tensor's device, and the mark goes when the storage is freed, which is also when the caching
allocator's count of it ends (:mod:`memory`).

Torch's own Python code sees these devices too, as it does on a GPU: it compares "cuda" with "cuda"
(autocast's ``_cast``, GradScaler's per-device state, checkpointing's device check), and every tensor
it then asks for on "cuda" is made on the CPU and marked. What C++ reads (the optimizers' grouping by
device) is the real device, the CPU, for every tensor alike.

A storage made where no mode watched (inside backward, in another process, by C++) has no mark: it
reads as the CPU and joins any device, so it never raises falsely. Gradients are marked when read
(``p.grad``: the parameter's device), DataLoader batches when they arrive (the CPU).
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Iterable
from typing import Any

import torch

from ampfix.runner.gpu.boundaries import FailsOnTheGpuToo
from ampfix.runner.gpu.memory import GpuMemory, GpuOutOfMemory
from ampfix.runner.gpu.torch_features import OUT_OF_MEMORY_ERROR
from ampfix.runner.trace.observe import Recorder
from ampfix.runner.trace.patching import replace
from ampfix.runner.trace.sites import find_site

CPU = "cpu"
NO_TENSORS = ""  # what DeviceModel.of_inputs answers for a call given no tensor
_MARK = "_ampfix_device"
_Tensor = torch.Tensor


def _named_as(name: str, module: str) -> Any:
    """A traceback, ``type(error).__name__`` and ``repr`` show the error a GPU raises, not the runner's class."""

    def rename(cls: type) -> type:
        cls.__name__ = cls.__qualname__ = name
        cls.__module__ = module
        return cls

    return rename


@_named_as("RuntimeError", "builtins")
class RefusedOnTheGpu(FailsOnTheGpuToo):
    """What CUDA refuses, with CUDA's own message (a RuntimeError, as torch raises it)."""


@_named_as("TypeError", "builtins")
class NumpyOfGpuTensor(TypeError):
    """``.numpy()`` of a tensor on a GPU: a TypeError, as torch raises it."""

    fails_on_the_gpu_too = True


@_named_as("OutOfMemoryError", OUT_OF_MEMORY_ERROR.__module__)
class GpuOutOfMemoryError(OUT_OF_MEMORY_ERROR):
    """``torch.OutOfMemoryError`` (also ``torch.cuda.OutOfMemoryError``) past ``--gpu-memory``."""

    fails_on_the_gpu_too = True


def same_device_message(first: str, second: str) -> str:
    return f"Expected all tensors to be on the same device, but found at least two devices, {first} and {second}!"


def numpy_message(device: str) -> str:
    return (
        f"can't convert {device} device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory "
        "first."
    )


class DeviceModel:
    """The emulated GPUs: how many, which is current, the default device, each storage's device and memory."""

    def __init__(self, recorder: Recorder, gpus: int = 1, capacity: int | None = None, refuse: bool = True,
                 ranks_grow: bool = False, cuda_is_cpu: bool = False) -> None:
        self.recorder = recorder
        self.cuda_is_cpu = cuda_is_cpu
        self.gpus = gpus
        # In a process the script started (a spawned rank), a GPU index past --gpus is that rank's own GPU:
        # multi-process training is not emulated as one machine, so its ranks never fail for want of GPUs.
        self.ranks_grow = ranks_grow
        self.refuse = refuse  # False: what a GPU refuses is recorded and let through (--no-device-checks)
        self.memory = GpuMemory(gpus, capacity, find_site)
        self.default: str | None = None  # torch.set_default_device's, as the script named it
        self._local = threading.local()  # CUDA's current device is per thread
        self._parsed: dict[str, torch.device] = {}
        self.used: set[str] = set()
        # the GPU blocks of live storages, by their weak reference's id (see mark_storage)
        self._blocks: dict[int, tuple[weakref.ref, int, int]] = {}

    # -- the current device --------------------------------------------------------------------

    @property
    def current(self) -> int:
        return getattr(self._local, "index", 0)

    def set_current(self, device: Any) -> None:
        """torch.cuda.set_device(device): an index, "cuda:N", a torch.device; None or -1 change nothing."""
        if device is None:
            return
        if isinstance(device, int) and not isinstance(device, bool):
            index = device
        else:
            parsed = device if isinstance(device, torch.device) else torch.device(device)
            if parsed.type != "cuda":
                raise ValueError(f"Expected a cuda device, but got: {parsed}")
            index = parsed.index if parsed.index is not None else self.current
        if index < 0:
            return
        self._check_index(index)
        self._local.index = index

    def _check_index(self, index: int) -> None:
        if index >= self.gpus and self.ranks_grow:
            self.memory.add_devices(index + 1)
            self.gpus = index + 1
        if not 0 <= index < self.gpus:
            raise RefusedOnTheGpu(
                "CUDA error: invalid device ordinal\nCUDA kernel errors might be asynchronously reported at some "
                "other API call, so the stacktrace below might be incorrect."
            )

    # -- names of devices ----------------------------------------------------------------------

    def resolve(self, device: Any) -> str | None:
        """The device a ``device=`` value names ("cuda" is the current GPU); None for one left alone (meta)."""
        if isinstance(device, str):
            parsed = self._parsed.get(device)
            if parsed is None:
                parsed = self._parsed[device] = torch.device(device)
            device = parsed
        if isinstance(device, torch.device):
            if device.type == CPU:
                return CPU
            if device.type != "cuda":
                return None
            index = self.current if device.index is None else device.index
        elif isinstance(device, int) and not isinstance(device, bool):
            index = device  # a bare index names a GPU on the machine the script was written for
        else:
            return None
        self._check_index(index)
        return CPU if self.cuda_is_cpu else f"cuda:{index}"

    def is_gpu(self, device: Any) -> bool:
        resolved = self.resolve(device)
        return resolved is not None and resolved != CPU

    # -- marks -----------------------------------------------------------------------------

    def of(self, tensor: Any) -> str | None:
        """The tensor's device; None for a storage no mode saw made (or a tensor without storage)."""
        try:
            return getattr(tensor.untyped_storage(), _MARK, None)
        except (RuntimeError, NotImplementedError, AttributeError, TypeError):
            return None

    @staticmethod
    def of_storage(storage: Any) -> str | None:
        return getattr(getattr(storage, "_untyped_storage", storage), _MARK, None)

    def place(self, result: Any, device: str) -> None:
        """Mark the storages of a call's result that have no device yet (new ones: views keep theirs)."""
        if isinstance(result, _Tensor):
            self.mark(result, device)
        elif isinstance(result, (tuple, list)):
            for item in result:
                if isinstance(item, _Tensor):
                    self.mark(item, device)

    def mark(self, tensor: Any, device: str) -> None:
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):
            return  # sparse, nested, a subclass without storage: nothing to count
        if getattr(storage, _MARK, None) is not None:
            return
        if tensor.is_meta or (type(tensor) is not _Tensor and storage.device.type == "meta"):
            return  # meta memory (a fake tensor's, torch.export's): its tensors keep their own device
        self.mark_storage(storage, device)

    def mark_storage(self, storage: Any, device: str) -> None:
        if device != CPU:
            index = int(device[5:])
            try:
                block = self.memory.allocate(index, storage.nbytes())
            except GpuOutOfMemory as error:
                raise GpuOutOfMemoryError(str(error)) from None
            if block:
                # A weak reference's callback, not weakref.finalize (a third of a small op's cost under the
                # runner): the reference is kept until it fires, with what it frees.
                reference = weakref.ref(storage, self._freed)
                self._blocks[id(reference)] = (reference, index, block)
        setattr(storage, _MARK, device)
        self.used.add(device)

    def _freed(self, reference: weakref.ref) -> None:
        _, index, block = self._blocks.pop(id(reference))
        self.memory.free(index, block)

    def place_unmarked(self, value: Any, device: str) -> None:
        """Mark every tensor in a (nested) batch that has no device yet: a DataLoader's, a queue's."""
        if isinstance(value, _Tensor):
            self.mark(value, device)
        elif isinstance(value, dict):
            for item in value.values():
                self.place_unmarked(item, device)
        elif isinstance(value, (list, tuple)):
            for item in value:
                self.place_unmarked(item, device)

    # -- the device of a call --------------------------------------------------------------------

    def of_inputs(self, values: Iterable[Any]) -> tuple[str | None, str | None]:
        """The device the tensors among ``values`` (and in lists among them) are on, and CUDA's refusal where a
        GPU would refuse them (None where it would not).

        A 0-dim CPU tensor joins a GPU's (CUDA takes it as a scalar); an unmarked tensor joins any device.
        The device is None for no marked tensor among them, :data:`NO_TENSORS` for no tensor at all."""
        found: str | None = None
        refusal: str | None = None
        scalar_on_cpu = False
        tensors = False
        for value in values:
            items = value if isinstance(value, (list, tuple)) else (value,)
            for item in items:
                if not isinstance(item, _Tensor):
                    continue
                tensors = True
                device = self.of(item)
                if device is None or device == found:
                    continue
                if device == CPU and item.dim() == 0:
                    scalar_on_cpu = True
                    continue
                if found is None:
                    found = device
                elif refusal is None:  # CUDA names a GPU first: cuda:0 and cpu, whichever came first
                    first, second = (device, found) if found == CPU else (found, device)
                    refusal = same_device_message(first, second)
                    found = first
        if found is not None:
            return found, refusal
        return (CPU if scalar_on_cpu else (None if tensors else NO_TENSORS)), None

    @property
    def making(self) -> str | None:
        """The device the torch call running in this thread gives its results (None: none running)."""
        return getattr(self._local, "making", None)

    def start_making(self, device: str | None) -> str | None:
        previous = getattr(self._local, "making", None)
        self._local.making = device
        return previous

    def read(self, tensor: Any) -> str | None:
        """The device a read of ``tensor`` answers: its mark, or, for a tensor made inside the running call and
        not marked yet (autograd's pack hooks read it there), that call's device; None: the real one (the CPU).
        Every read goes through here: ``x.device``, ``x.to(other)``, ``isinstance(x, torch.cuda.FloatTensor)``."""
        mark = self.of(tensor)
        if mark is not None:
            return mark
        making = getattr(self._local, "making", None)
        return None if making is None or tensor.is_meta else making  # a meta tensor keeps its own device

    def for_new_tensors(self) -> str:
        """The device a factory without ``device=`` makes its tensor on."""
        return self.default or CPU

    def refused(self, message: str, kind: type[Exception] = RefusedOnTheGpu) -> None:
        site = find_site()
        self.recorder.gpu_refusal(message.split("\n")[0], site)
        if self.refuse:
            raise kind(message)

    # -- reads -----------------------------------------------------------------------------

    def torch_device(self, device: str) -> torch.device:
        parsed = self._parsed.get(device)
        if parsed is None:
            parsed = self._parsed[device] = torch.device(device)
        return parsed

    def check_host_copy(self, tensor: Any) -> None:
        """``.numpy()`` / ``np.asarray`` of a GPU's tensor."""
        device = self.of(tensor)
        if device is not None and device != CPU:
            self.refused(numpy_message(device), NumpyOfGpuTensor)

    def stats_index(self, device: Any) -> int:
        """The GPU a ``torch.cuda.memory_*(device)`` call asks about."""
        if device is None:
            return self.current
        resolved = self.resolve(device)
        return self.current if resolved is None or resolved == CPU else int(resolved[5:])



def install_gradient_marks(devices: DeviceModel) -> None:
    """Gradients are made inside backward, where no mode watches: once a backward is done, each parameter's
    gradient is marked with its parameter's device, so the GPU's memory counts it as a GPU's would.

    The parameters are the ``nn.Parameter`` objects alive in the process (a weak set: a dropped model's go)."""
    parameters: weakref.WeakSet[Any] = weakref.WeakSet()
    parameter_class = torch.nn.Parameter
    original_new = parameter_class.__new__

    def __new__(cls, data=None, requires_grad=True):
        parameter = original_new(cls, data, requires_grad)
        parameters.add(parameter)
        return parameter

    replace(parameter_class, "__new__", staticmethod(__new__))
    original_backward = torch.autograd.backward

    def backward(*args: Any, **kwargs: Any) -> Any:
        result = original_backward(*args, **kwargs)
        for parameter in list(parameters):
            grad = parameter.grad
            if grad is not None:
                device = devices.of(parameter)
                if device is not None:
                    devices.mark(grad, device)
        return result

    replace(torch.autograd, "backward", functools.wraps(original_backward)(backward))
