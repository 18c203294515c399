"""Where the CPU emulation would show through to the script: the bfloat16 stand-in, and ops the CPU lacks.

Runs in the child; the handlers below are called by the device mode (:mod:`device_mode`), which sees
every torch call.

**The bfloat16 stand-in.** With the default ``--amp-dtype bfloat16``, float16 asked of "cuda" autocast
runs as bfloat16 (the CPU's fast low precision). From the first region where that happened
(``AmpPlan.stand_in``), a bfloat16 tensor is taken for the float16 one a GPU would hold, where it
meets the outside world:

* ``x.numpy()`` and ``np.asarray(x)`` / ``np.array(x)`` (``Tensor.__array__``) give a float16 array;
* ``torch.save`` writes a bfloat16 tensor as float16;
* ``x.dtype`` read by code outside torch (the script, its own modules, its libraries) is
  ``torch.float16``, so ``x.dtype == torch.float16``, ``torch.finfo(x.dtype)`` and ``x.half()`` guards
  take the GPU's branch; torch's own code reads the real dtype.

Each place it acted is recorded with its file:line and count (the report's ``stand_in`` list).

**Ops the CPU lacks in low precision** (``cpu_gaps.cpu_lacks_low_precision()``: the installed torch
release's table): given a float16 (or the stand-in), bfloat16 or complex32 input that their CPU kernel
refuses, they run in float32 (complex64) and their result is cast back to the dtype CUDA gives: a
real result to the low-precision dtype of the inputs (the stand-in where it stands in), a complex
one to complex32. Half-precision FFTs keep cuFFT's rule: every signal size a power of two, else
the call fails as on a GPU (:class:`FailsOnTheGpuToo`). Each call is recorded as emulated, per site.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ampfix.runner.gpu.cpu_gaps import cpu_lacks_low_precision
from ampfix.runner.gpu.cuda_autocast import CUDA_POLICY
from ampfix.runner.gpu.torch_features import AUTOCAST_STATE
from ampfix.runner.trace.observe import Recorder, Site, dtype_name
from ampfix.runner.trace.patching import replace
from ampfix.runner.trace.sites import find_site, read_by_script

_Tensor = torch.Tensor
_TENSOR_TO = _Tensor.to
# The getter torch calls a torch function mode with when the script reads ``x.dtype``.
_DTYPE: Any = inspect.getattr_static(_Tensor, "dtype").__get__
STAND_IN, ASKED = torch.bfloat16, torch.float16
_UPCAST = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.complex32: torch.complex64}
_FFT_KERNELS = ("_fft_r2c", "_fft_c2r", "_fft_c2c")
# Ops autocast runs in float32: inside a region, their float16/bfloat16 inputs reach the CPU kernel as float32 (torch
# 2.5's CPU lacks bfloat16 mse_loss, which a region gives float32 as CUDA's does, not the low precision cast back).
_FLOAT32_POLICIES = frozenset({"fp32", "fp32_set_opt_dtype", "fp32_append_dtype"})

Handler = Callable[[tuple, dict], Any]
Call = Callable[[Any, tuple, dict], Any]


class FailsOnTheGpuToo(RuntimeError):
    """Raised where the emulation reproduces a GPU's own refusal (not a limit of the CPU or the runner)."""

    fails_on_the_gpu_too = True  # what child._failure looks for (it does not import torch to ask isinstance)


class StandIn:
    """The handlers that make the bfloat16 stand-in read as float16 at the run's boundaries."""

    def __init__(self, recorder: Recorder, plan: Any) -> None:
        self._recorder = recorder
        self._plan = plan  # amp_patches.AmpPlan: its ``stand_in`` says whether the stand-in is in use
        self._saving = threading.local()

    def handlers(self) -> dict[Any, Handler]:
        return {_DTYPE: self._dtype, _Tensor.numpy: self._numpy, _Tensor.__array__: self._array}

    def _acted(self, what: str, site: Site) -> None:
        self._recorder.stand_in_use(what, site)

    def _dtype(self, args: tuple, kwargs: dict) -> Any:
        dtype = _DTYPE(*args)
        if dtype is STAND_IN and self._plan.stand_in:
            site = read_by_script()  # None: torch's own code reads it, and gets the real dtype
            if site is not None:
                self._acted("x.dtype read as float16", site)
                return ASKED
        return dtype

    def _as_asked(self, tensor: Any, what: str) -> Any:
        if isinstance(tensor, _Tensor) and _DTYPE(tensor) is STAND_IN and self._plan.stand_in:
            self._acted(what, find_site())
            return _TENSOR_TO(tensor, ASKED)
        return tensor

    def _numpy(self, args: tuple, kwargs: dict) -> Any:
        return _Tensor.numpy(self._as_asked(args[0], "x.numpy() gave float16"), *args[1:], **kwargs)

    def _array(self, args: tuple, kwargs: dict) -> Any:
        return _Tensor.__array__(self._as_asked(args[0], "numpy array of x in float16"), *args[1:], **kwargs)

    def install_save(self) -> None:
        """``torch.save`` pickles each tensor through ``Tensor.__reduce_ex__``: inside a save, the stand-in
        is pickled as float16 (a plain pickle, a deepcopy, a DataLoader worker's queue are left alone)."""
        original_save, original_reduce = torch.save, _Tensor.__reduce_ex__
        saving = self._saving

        def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
            outer = getattr(saving, "site", None)
            saving.site = outer or find_site()
            try:
                return original_save(obj, f, *args, **kwargs)
            finally:
                saving.site = outer

        def __reduce_ex__(tensor: Any, protocol: Any) -> Any:
            site = getattr(saving, "site", None)
            if site is not None and type(tensor) is _Tensor and self._plan.stand_in:
                with torch._C.DisableTorchFunction():
                    if tensor.dtype is STAND_IN:
                        self._acted("torch.save wrote float16", site)
                        tensor = tensor.detach().to(ASKED).requires_grad_(tensor.requires_grad)
            return original_reduce(tensor, protocol)

        for module in (torch, torch.serialization):
            replace(module, "save", functools.wraps(original_save)(save))
        replace(_Tensor, "__reduce_ex__", __reduce_ex__)  # the one place pickling meets a tensor


class CpuGaps:
    """The handlers that run ops the CPU lacks in low precision in float32, cast back as CUDA would give."""

    def __init__(self, recorder: Recorder, plan: Any) -> None:
        self._recorder = recorder
        self._plan = plan

    def handlers(self, call: Call) -> dict[Any, Handler]:
        """``call(func, args, kwargs)``: the device mode's own way of running a torch call."""
        handlers: dict[Any, Handler] = {}
        for name, dtype_names in cpu_lacks_low_precision().items():
            lacking = frozenset(getattr(torch, dtype) for dtype in dtype_names)
            float32_in_regions = CUDA_POLICY.get(name.rpartition(".")[2]) in _FLOAT32_POLICIES
            for label, function in _variants(name):
                handlers[function] = self._handler(label, function, lacking, call, float32_in_regions)
        return handlers

    def _handler(self, label: str, function: Any, lacking: frozenset, call: Call, float32_in_regions: bool) -> Handler:
        fft = label.startswith("torch.fft.")

        def handler(args: tuple, kwargs: dict) -> Any:
            found = _low_precision_inputs(args, kwargs)
            if not found or not self._lacks(found, lacking):
                return call(function, args, kwargs)
            if float32_in_regions and torch.complex32 not in found and AUTOCAST_STATE.is_enabled("cpu"):
                return call(function, args, kwargs)  # autocast casts the inputs to float32 first
            return self._emulate(label, function, found, args, kwargs, call, fft)

        return handler

    def _lacks(self, found: set, lacking: frozenset) -> bool:
        if found & lacking:
            return True
        return STAND_IN in found and ASKED in lacking and self._plan.stand_in

    def _emulate(self, label: str, function: Any, found: set, args: tuple, kwargs: dict, call: Call, fft: bool) -> Any:
        real = STAND_IN if STAND_IN in found or (self._plan.stand_in and ASKED not in found) else ASKED
        args, kwargs = _map_tensors((args, kwargs), _upcast)

        def in_float32_cast_back(*args: Any, **kwargs: Any) -> Any:
            if not fft:
                return _map_tensors(function(*args, **kwargs), lambda tensor: _cast_back(tensor, real))
            with _FftSignals() as signals:
                result = function(*args, **kwargs)
            signals.check_half_precision_sizes()
            return _map_tensors(result, lambda tensor: _cast_back(tensor, real))

        result = call(in_float32_cast_back, args, kwargs)  # the mode counts the dtypes CUDA gives, not float32's
        inputs = "/".join(sorted(dtype_name(dtype) for dtype in found))
        feature = f"{label} on {inputs}: no CPU kernel, ran in float32, cast back as CUDA gives"
        self._recorder.emulated_use(feature, find_site())
        return result


def _variants(name: str) -> list[tuple[str, Any]]:
    """``torch.<name>`` and, for a top-level op, its ``Tensor`` method: each spelling a torch call reaches us by."""
    function: Any = torch
    for part in name.split("."):
        function = getattr(function, part, None)
        if function is None:
            return []
    variants = [(f"torch.{name}", function)]
    method = getattr(_Tensor, name, None) if "." not in name else None
    if method is not None:
        variants.append((f"Tensor.{name}", method))
    return variants


def _low_precision_inputs(args: tuple, kwargs: dict) -> set:
    found = set()
    for value in (*args, *kwargs.values()):
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(item, _Tensor):
                dtype = _DTYPE(item)
                if dtype in _UPCAST:
                    found.add(dtype)
    return found


def _map_tensors(value: Any, change: Callable[[Any], Any]) -> Any:
    if isinstance(value, _Tensor):
        return change(value)
    if isinstance(value, dict):
        return {key: _map_tensors(item, change) for key, item in value.items()}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_map_tensors(item, change) for item in value)
    return value


def _upcast(tensor: Any) -> Any:
    wider = _UPCAST.get(_DTYPE(tensor))
    return tensor if wider is None else _TENSOR_TO(tensor, wider)


def _cast_back(tensor: Any, real: torch.dtype) -> Any:
    dtype = _DTYPE(tensor)
    if dtype.is_complex:
        return _TENSOR_TO(tensor, torch.complex32)
    if dtype.is_floating_point:
        return _TENSOR_TO(tensor, real)
    return tensor


class _FftSignals(TorchDispatchMode):
    """Notes the signal sizes of the FFT kernels an op runs, to hold a half-precision call to cuFFT's rule."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[int]] = []  # each FFT kernel's signal sizes

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in _FFT_KERNELS:
            source, dims = args[0], list(args[1])
            sizes = [source.shape[dim] for dim in dims]
            if name == "_fft_c2r":  # the last dimension's signal is the real output's
                sizes[-1] = args[3]
            self.calls.append(sizes)
        return func(*args, **kwargs)

    def check_half_precision_sizes(self) -> None:
        """cuFFT's own check (aten/src/ATen/native/cuda/CuFFTPlanCache.h), with its own message."""
        for sizes in self.calls:
            if any(size & (size - 1) for size in sizes):
                raise FailsOnTheGpuToo(
                    "cuFFT only supports dimensions whose sizes are powers of two when computing in half precision, "
                    f"but got a signal size of{sizes} "
                    "(ampfix run: a GPU refuses this call too; in float32 it runs on both)"
                )
