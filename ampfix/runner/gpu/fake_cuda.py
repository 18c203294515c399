"""``torch.cuda`` and ``torch.accelerator`` answer as the emulated GPUs (:mod:`devices`), so the script
takes its CUDA path on the CPU, and the report says so.

Runs in the child. The utilities a training script calls (availability, device queries, the caching
allocator's memory figures, events, streams, nvtx, the legacy ``torch.cuda.FloatTensor`` types) get CPU
stand-ins. Each device question the script branches on (``is_available()``, ``current_accelerator()``,
...) is recorded with the answer it got. What cannot be emulated (CUDA graphs) is recorded where the
script touches it and then fails the way it would on a CPU, so the report names it instead of hiding it.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import os
import threading
import time
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ampfix.runner.gpu.devices import CPU, DeviceModel
from ampfix.runner.gpu.torch_features import has_accelerator, stream_and_event_bases
from ampfix.runner.trace.observe import Recorder
from ampfix.runner.trace.patching import replace
from ampfix.runner.trace.sites import asked_by_torch, find_site

DEVICE_NAME = "ampfix emulated CUDA device (runs on CPU)"
# Ampere: scripts that check for bf16 / TF32 support take the modern path.
CAPABILITY = (8, 0)

LEGACY_TENSOR_TYPES = (
    "FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "ByteTensor",
    "CharTensor", "ShortTensor", "IntTensor", "LongTensor", "BoolTensor",
)  # fmt: skip
CUDA_GRAPH_NAMES = ("CUDAGraph", "graph", "make_graphed_callables", "graph_pool_handle")
# What torch.accelerator.get_device_capability() reports for a CUDA device.
SUPPORTED_DTYPES = frozenset({
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex64, torch.complex128,
    torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
})  # fmt: skip


def _physical_memory() -> tuple[int, int]:
    """(free, total) bytes of host memory, the closest thing this machine has to GPU memory."""
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        return page * os.sysconf("SC_AVPHYS_PAGES"), page * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0, 0


class FakeEvent:
    """torch.cuda.Event timed with the host clock; elapsed_time() in milliseconds like CUDA."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self.enable_timing = enable_timing
        self._recorded_at: float | None = None

    def record(self, stream: Any = None) -> None:
        self._recorded_at = time.perf_counter()

    def elapsed_time(self, end_event: FakeEvent) -> float:
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._recorded_at is None or end_event._recorded_at is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._recorded_at - self._recorded_at) * 1000.0

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def wait(self, stream: Any = None) -> None:
        pass


class FakeStream:
    """A stream on the fake device: work is synchronous on the CPU, so every wait is a no-op.

    Entering it (``with s:`` or ``torch.cuda.stream(s)``) makes it the thread's current stream,
    as on a GPU, so ``torch.cuda.current_stream()`` answers what the script expects.
    """

    cuda_stream = 0
    device_index = 0

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        self.device = torch.device("cuda", 0)
        self.priority = priority
        self._entered_from: list[FakeStream] = []

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def is_capturing(self) -> bool:
        return False  # no CUDA graph capture (the optimizers ask before every step)

    def wait_stream(self, stream: Any) -> None:
        pass

    def wait_event(self, event: Any) -> None:
        pass

    def record_event(self, event: FakeEvent | None = None) -> FakeEvent:
        event = event or FakeEvent()
        event.record(self)
        return event

    def __enter__(self) -> FakeStream:
        self._entered_from.append(_CURRENT.stream)
        _CURRENT.stream = self
        return self

    def __exit__(self, *exc: Any) -> None:
        _CURRENT.stream = self._entered_from.pop()


_DEFAULT_STREAM = FakeStream()


class _CurrentStream(threading.local):
    def __init__(self) -> None:
        self.stream = _DEFAULT_STREAM


_CURRENT = _CurrentStream()


@contextlib.contextmanager
def _stream_context(stream: Any = None) -> Iterator[None]:
    if stream is None:  # torch.cuda.stream(None) changes nothing
        yield
        return
    with stream:
        yield


def _current_stream(device: Any = None) -> Any:
    return _CURRENT.stream


def _set_stream(stream: Any) -> None:
    if stream is not None:
        _CURRENT.stream = stream


# torch.accelerator's own function objects, not torch.cuda's: dynamo keys its handlers by function and refuses
# one function registered twice ("Handler already registered for <function _current_stream>").
def _accelerator_current_stream(device: Any = None) -> Any:
    return _CURRENT.stream


def _accelerator_set_stream(stream: Any) -> None:
    _set_stream(stream)


def _device_context(devices: DeviceModel) -> Callable[[Any], contextlib.AbstractContextManager[None]]:
    @contextlib.contextmanager
    def device(device: Any) -> Iterator[None]:
        previous = devices.current
        devices.set_current(device)  # None (or a negative index) keeps the current one, as torch does
        try:
            yield
        finally:
            devices.set_current(previous)

    return device


def _device_functions(devices: DeviceModel) -> dict[str, Any]:
    def properties(device: Any = None) -> types.SimpleNamespace:
        # Every index answers alike: DataParallel over more devices than --gpus asks for each one's, and runs
        # as one replica (process_patches).
        return types.SimpleNamespace(
            name=DEVICE_NAME,
            major=CAPABILITY[0],
            minor=CAPABILITY[1],
            total_memory=devices.memory.capacity or _physical_memory()[1],
            multi_processor_count=os.cpu_count() or 1,
            is_integrated=False,
            is_multi_gpu_board=False,
        )

    return {
        "is_available": lambda: True,
        "init": lambda: None,
        "device_count": lambda: devices.gpus,
        "current_device": lambda: devices.current,
        "set_device": devices.set_current,
        "device": _device_context(devices),
        "synchronize": lambda device=None: None,
        "get_device_name": lambda device=None: DEVICE_NAME,
        "get_device_properties": properties,
        "get_device_capability": lambda device=None: CAPABILITY,
        "is_bf16_supported": lambda including_emulation=True: True,
        "is_current_stream_capturing": lambda: False,
        "ipc_collect": lambda: None,
        "Event": FakeEvent,
        "Stream": FakeStream,
        "current_stream": _current_stream,
        "default_stream": lambda device=None: _DEFAULT_STREAM,
        "set_stream": _set_stream,
        "stream": _stream_context,
        "get_rng_state": lambda device="cuda": torch.get_rng_state(),
        "set_rng_state": lambda new_state, device="cuda": torch.set_rng_state(new_state),
        "get_rng_state_all": lambda: [torch.get_rng_state() for _ in range(devices.gpus)],
        "set_rng_state_all": lambda new_states: torch.set_rng_state(new_states[0]),
    }


def _memory_functions(devices: DeviceModel) -> dict[str, Any]:
    """The caching allocator's figures, from the emulated GPUs' count of their storages (gpu_memory)."""
    memory = devices.memory

    def of(device: Any) -> Any:
        return memory.devices[devices.stats_index(device)]

    def reset_peak(device: Any = None) -> None:
        memory.reset_peak(devices.stats_index(device))

    def summary(device: Any = None, abbreviated: bool = False) -> str:
        stats = of(device).stats()
        return "ampfix run: emulated CUDA caching allocator\n" + "\n".join(
            f"{name}: {value}" for name, value in stats.items()
        )

    return {
        "memory_allocated": lambda device=None: of(device).allocated,
        "max_memory_allocated": lambda device=None: of(device).peak_allocated,
        "memory_reserved": lambda device=None: of(device).reserved,
        "max_memory_reserved": lambda device=None: of(device).peak_reserved,
        "memory_cached": lambda device=None: of(device).reserved,
        "max_memory_cached": lambda device=None: of(device).peak_reserved,
        "empty_cache": memory.empty_cache,
        "reset_peak_memory_stats": reset_peak,
        "reset_max_memory_allocated": reset_peak,
        "reset_max_memory_cached": reset_peak,
        "reset_accumulated_memory_stats": lambda device=None: None,
        "memory_stats": lambda device=None: of(device).stats(),
        "memory_summary": summary,
        "mem_get_info": lambda device=None: memory.free_and_total(devices.stats_index(device), _physical_memory()[1]),
        "set_per_process_memory_fraction": lambda fraction, device=None: None,
    }


def _nvtx_functions() -> dict[str, Callable[..., Any]]:
    return {
        "range_push": lambda msg: 0,
        "range_pop": lambda: 0,
        "range_start": lambda msg: 0,
        "range_end": lambda range_id: None,
        "mark": lambda msg: None,
    }


def _unemulated_callable(recorder: Recorder, feature: str, original: Any) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        recorder.unemulated_use(feature, find_site())
        raise RuntimeError(f"ampfix run: {feature} cannot be emulated on the CPU.")

    refuse.__name__ = getattr(original, "__name__", feature)
    return refuse


class _LegacyCudaType(type):
    """Stands in for torch.cuda.FloatTensor & co: a tensor of that dtype on the current GPU, as on the GPU."""

    devices: DeviceModel
    cpu_type: Any  # torch.FloatTensor & co: the same constructor on the CPU (its class has the dtype)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls.cpu_type(*args, **kwargs).cuda()

    def __instancecheck__(cls, instance: Any) -> bool:
        return (
            isinstance(instance, torch.Tensor)
            and (cls.devices.read(instance) or CPU) != CPU
            and instance.dtype == cls.cpu_type.dtype
        )


def _legacy_type(devices: DeviceModel, name: str) -> type:
    proxy = _LegacyCudaType(name, (), {"__module__": "torch.cuda"})
    proxy.devices, proxy.cpu_type = devices, getattr(torch, name)
    return proxy


def _set_everywhere(module: types.ModuleType, name: str, value: Any, submodules: list[types.ModuleType]) -> None:
    setattr(module, name, value)
    for submodule in submodules:
        if hasattr(submodule, name):
            setattr(submodule, name, value)


# The questions a script branches on to pick its device path. Each answer the script (not torch on
# its behalf) receives is recorded with its file:line, so the report says which path was taken.
CUDA_QUERIES = ("is_available", "device_count", "is_bf16_supported", "get_device_capability")
ACCELERATOR_QUERIES = ("is_available", "current_accelerator", "device_count")
# Other accelerators' availability: answered as on the CUDA machine (no), and recorded all the same.
OTHER_BACKEND_QUERIES = (("backends.mps", "is_available"), ("xpu", "is_available"))


def _answer_text(answer: Any) -> str:
    return str(answer) if isinstance(answer, torch.device) else repr(answer)


def _recording_answers(recorder: Recorder, query: str, answer: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(answer)
    def ask(*args: Any, **kwargs: Any) -> Any:
        result = answer(*args, **kwargs)
        if asked_by_torch():
            return result
        site = find_site()
        if site.origin == "script":
            recorder.device_query(f"{query}()", _answer_text(result), site)
        return result

    return ask


def install(recorder: Recorder, devices: DeviceModel) -> None:
    cuda = torch.cuda
    submodules = [getattr(cuda, name) for name in ("memory", "random", "streams", "graphs") if hasattr(cuda, name)]
    replacements = {**_device_functions(devices), **_memory_functions(devices)}
    for name in CUDA_QUERIES:
        replacements[name] = _recording_answers(recorder, f"torch.cuda.{name}", replacements[name])
    for name in CUDA_GRAPH_NAMES:
        replacements[name] = _unemulated_callable(recorder, f"CUDA graphs (torch.cuda.{name})",
                                                  getattr(cuda, name, None))
    for name in LEGACY_TENSOR_TYPES:
        if hasattr(cuda, name) and hasattr(torch, name):
            replacements[name] = _legacy_type(devices, name)
    for name, value in replacements.items():
        _set_everywhere(cuda, name, value, submodules)
    for name, value in _nvtx_functions().items():
        setattr(cuda.nvtx, name, value)
    _record_stream_takes_fake_streams()
    register_with_torchs_stream_bases()


def register_with_torchs_stream_bases() -> None:
    """torch 2.1 .. 2.5: importing torch._dynamo (torch.compile, some optimizers' paths) asserts that
    ``torch.cuda.Stream``/``Event`` derive from ``torch._streambase``'s abstract bases; the fakes are made their
    virtual subclasses (later releases check nothing: no bases, nothing done)."""
    fakes: tuple[type, ...] = (FakeStream, FakeEvent)
    for base, fake in zip(stream_and_event_bases(), fakes):
        if isinstance(base, abc.ABCMeta):
            base.register(fake)


def _record_stream_takes_fake_streams() -> None:
    """x.record_stream(s) keeps x alive until s's queued work is done; the CPU queues nothing.

    Its argument parser rejects a FakeStream before any torch function mode sees the call,
    so the method itself is replaced.
    """

    def record_stream(self: torch.Tensor, stream: Any) -> None:
        return None

    replace(torch.Tensor, "record_stream", record_stream)


def _accelerator_functions(devices: DeviceModel) -> dict[str, Any]:
    memory = _memory_functions(devices)

    def current_accelerator(check_available: bool = False) -> torch.device:
        return torch.device("cuda")

    def capability(device: Any = None) -> dict[str, Any]:
        return {"supported_dtypes": SUPPORTED_DTYPES}

    return {
        "is_available": lambda: True,
        "current_accelerator": current_accelerator,
        "device_count": lambda: devices.gpus,
        "current_device_index": lambda: devices.current,
        "current_device_idx": lambda: devices.current,
        "set_device_index": devices.set_current,
        "set_device_idx": devices.set_current,
        "device_index": _device_context(devices),
        "synchronize": lambda device=None: None,
        "current_stream": _accelerator_current_stream,
        "set_stream": _accelerator_set_stream,
        "get_device_capability": capability,
        "get_memory_info": memory["mem_get_info"],
        "empty_host_cache": lambda: None,
        **{name: memory[name] for name in (
            "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
            "memory_stats", "empty_cache", "reset_peak_memory_stats", "reset_accumulated_memory_stats",
        )},
    }  # fmt: skip


def install_accelerator(recorder: Recorder, devices: DeviceModel) -> None:
    """``torch.accelerator`` names the fake CUDA device, so a device-generic script takes its CUDA path.

    Only the names this torch has are replaced: the API is young and its names still move.
    """
    if not has_accelerator():  # before torch 2.6: a script naming it fails as on a GPU with that torch
        return
    accelerator = torch.accelerator
    submodules = [getattr(accelerator, name) for name in ("memory", "graphs") if hasattr(accelerator, name)]
    replacements = _accelerator_functions(devices)
    for name in ACCELERATOR_QUERIES:
        replacements[name] = _recording_answers(recorder, f"torch.accelerator.{name}", replacements[name])
    if hasattr(accelerator, "Graph"):
        replacements["Graph"] = _unemulated_callable(recorder, "CUDA graphs (torch.accelerator.Graph)",
                                                     accelerator.Graph)
    for name, value in replacements.items():
        if hasattr(accelerator, name):
            _set_everywhere(accelerator, name, value, submodules)


def install_other_backend_queries(recorder: Recorder) -> None:
    for module_path, name in OTHER_BACKEND_QUERIES:
        module = functools.reduce(getattr, module_path.split("."), torch)
        setattr(module, name, _recording_answers(recorder, f"torch.{module_path}.{name}", getattr(module, name)))
