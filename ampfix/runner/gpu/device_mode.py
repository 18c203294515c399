"""Tensors live on the CPU and read as the device the script put them on; what CUDA refuses is refused.

Runs in the child. One :class:`CudaOnCpuMode` (a ``TorchFunctionMode``) sees every torch call the
script and torch's Python code make. It makes every tensor on the CPU (``device=`` arguments,
``.cuda()``, ``.to("cuda")``, ``.cpu()``, ``.type(...)``) and gives it the device asked for through
:class:`devices.DeviceModel`: a factory's ``device=`` or the default device, otherwise the device of the
call's tensors, where a GPU would refuse two devices. Moving a tensor to another device copies it, as on
a GPU. Reads answer with that device (``x.device``, ``x.is_cuda``, ``x.is_cpu``, ``x.get_device()``,
``x.type()``), ``.numpy()`` / ``np.asarray`` of a GPU's tensor fail as on a GPU, pinned memory is
marked (``pin_memory()``, ``is_pinned()``), and, while CPU autocast is on, the dtypes each call produced
are counted.

A torch function mode is thread-local and autograd switches it off while running backward, so
the mode is re-entered in every new thread, in custom ``Function.backward``, in tensor and module
backward hooks, and in saved-tensor unpacking (where activation checkpointing recomputes).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ampfix.runner.gpu.devices import CPU, NO_TENSORS, DeviceModel
from ampfix.runner.gpu.torch_features import AUTOCAST_STATE
from ampfix.runner.trace.observe import Recorder
from ampfix.runner.trace.patching import replace, run_every_new_thread_through

_Tensor = torch.Tensor
_TENSOR_TO = _Tensor.to


def _setter(name: str) -> Any:
    return inspect.getattr_static(_Tensor, name).__set__



# Calls whose result is on the device of the tensor they are called on, whatever tensors they are
# also given: CUDA indexes with CPU index tensors and copies from any device; the others read only a
# shape, or build a new tensor on their tensor's device from any data.
ON_THEIR_TENSORS_DEVICE = frozenset({
    _Tensor.__getitem__, _Tensor.__setitem__, _Tensor.copy_, _Tensor.set_, _Tensor.index_put_,
    _Tensor.index_put, _Tensor.new_tensor, _Tensor.new_empty, _Tensor.new_zeros, _Tensor.new_ones,
    _Tensor.new_full, _Tensor.new_empty_strided, _Tensor.expand_as, _Tensor.view_as, _Tensor.reshape_as,
    _setter("data"), _setter("grad"),
})  # fmt: skip
# Calls that make a CPU tensor whatever the default device is.
ON_THE_CPU = frozenset({torch.from_numpy, torch.frombuffer})
# Calls that only read a ``device=`` argument (``Module.to`` parses its arguments with it): the device
# they name is handed back as it is, to the call that makes the tensors.
ONLY_PARSE_A_DEVICE = frozenset({torch._C._nn._parse_to})


class PinnedTensors:
    """The tensors the script pinned. A CPU build has no page-locked memory, so the mark lives here.

    Keyed by ``id`` (a tensor's ``==`` is elementwise, so no set of tensors), forgotten when the
    tensor is freed, before its id can be reused.
    """

    def __init__(self) -> None:
        self._ids: set[int] = set()

    def add(self, tensor: Any) -> Any:
        if isinstance(tensor, _Tensor) and id(tensor) not in self._ids:
            self._ids.add(id(tensor))
            weakref.finalize(tensor, self._ids.discard, id(tensor))
        return tensor

    def __contains__(self, tensor: Any) -> bool:
        return id(tensor) in self._ids


def _fake_mode() -> Any:
    return torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE)


class CudaOnCpuMode(TorchFunctionMode):
    def __init__(self, recorder: Recorder, devices: DeviceModel) -> None:
        super().__init__()
        self._recorder = recorder
        self.devices = devices
        self._pinned = PinnedTensors()
        # Private torch names are looked up here, inside the install step, so that a torch without
        # them loses this emulation alone. torch's own (per device on every release): torch.is_autocast_enabled
        # is patched to answer "cuda" with the CPU state.
        self._is_autocast_enabled = AUTOCAST_STATE.is_enabled
        self.mode_stack = torch.overrides._get_current_function_mode_stack
        # What a GPU refuses before the call runs: checked ahead of any handler.
        self._refusals: dict[Any, Callable[[tuple], None]] = {
            _Tensor.numpy: self._host_copy,
            _Tensor.__array__: self._host_copy,
            _Tensor.pin_memory: self._host_copy_to_pin,
        }
        # Handlers get the call's own arguments: each maps the devices it names itself.
        self._handlers: dict[Any, Callable[[tuple, dict], Any]] = {
            _Tensor.cuda: self._cuda,
            _TENSOR_TO: self._to,
            _Tensor.cpu: self._cpu,
            _Tensor.pin_memory: self._pin_memory,
            _Tensor.is_pinned: self._is_pinned,
            _Tensor.type: self._type,
            _Tensor.type_as: self._type_as,
            torch.autograd.grad: self._grad,
            **{parse: _as_it_is(parse) for parse in ONLY_PARSE_A_DEVICE},
        }

    def add_handlers(self, handlers: dict[Any, Callable[[tuple, dict], Any]]) -> None:
        """More calls handled by their own code (see :mod:`boundaries`). A call has one handler: a second
        one for the same call is a bug of the runner's, not something to drop silently."""
        clash = handlers.keys() & self._handlers.keys()
        if clash:
            raise ValueError(f"two handlers for {sorted(map(str, clash))}")
        self._handlers = {**self._handlers, **handlers}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if _fake_mode() is not None:
            return func(*args, **(kwargs or {}))
        if types and (len(types) > 1 or types[0] is not _Tensor) and _foreign(types):
            return self._under_their_own_torch_function(func, types, args, kwargs or {})
        refusal = self._refusals.get(func)
        if refusal is not None:
            refusal(args)
        handler = self._handlers.get(func)
        if handler is not None:
            return handler(args, kwargs or {})
        return self.call(func, args, kwargs)

    def call(self, func: Any, args: tuple, kwargs: dict | None) -> Any:
        """A torch call as the mode runs it: on the CPU, its result on the device CUDA would give it.

        Only a call that returns tensors has a device to give, and only such a call is refused for
        two devices: a GPU checks where a kernel computes, and a question asked of tensors
        (``torch._has_compatible_shallow_copy_type``, ``x.shape``) computes nothing."""
        wanted, pin, own_device = None, False, False
        if kwargs:  # every torch call passes here: the common call without keywords does no more
            if kwargs.get("device") is not None:
                wanted = self.devices.resolve(kwargs["device"])
                if wanted is not None:
                    kwargs = {**kwargs, "device": CPU}
                else:  # meta, or a device the runner does not emulate: the tensor keeps its own
                    own_device = True
            if kwargs.get("pin_memory"):  # torch.empty(..., pin_memory=True)
                pin, kwargs = True, {**kwargs, "pin_memory": False}  # page-locked memory needs an accelerator
        devices = self.devices
        refusal = None
        if wanted is not None or own_device:
            device: str | None = wanted
        elif func in ON_THEIR_TENSORS_DEVICE:
            device = devices.of(args[0]) if args else None
        else:
            device, refusal = devices.of_inputs((*args, *kwargs.values()) if kwargs else args)
            if device == NO_TENSORS:
                device = CPU if func in ON_THE_CPU else devices.for_new_tensors()
        outer = devices.start_making(device)
        try:
            result = func(*args, **kwargs) if kwargs else func(*args)
        finally:
            devices.start_making(outer)
        if isinstance(result, _Tensor) or (isinstance(result, (tuple, list)) and result and
                                           isinstance(result[0], _Tensor)):
            if refusal is not None:
                devices.refused(refusal)
            if wanted is not None and isinstance(result, _Tensor):
                result = self._copied_if_handed_back(result, wanted, args)
            if device is not None:
                devices.place(result, device)
            if pin:
                self._pinned.add(result)
            if self._is_autocast_enabled("cpu"):
                self._count_dtypes(result)
        return result

    def _copied_if_handed_back(self, result: _Tensor, wanted: str, args: tuple) -> _Tensor:
        """``torch.as_tensor(x, device="cuda")`` / ``torch.asarray`` hand ``x`` itself back when the CPU build
        needs no copy: a GPU copies a tensor that is on another device."""
        current = self.devices.of(result)
        if current is None:  # a new tensor, or an unmarked one handed back: that one is on the CPU
            if wanted == CPU or not any(result is arg for arg in args):
                return result
        elif current == wanted:
            return result
        return _TENSOR_TO(result, copy=True)

    def _under_their_own_torch_function(self, func: Any, types: tuple, args: tuple, kwargs: dict) -> Any:
        """A call given an object of a class that is no Tensor and has its own ``__torch_function__``
        (a tensor wrapper): that class runs the call as it would without the mode, with the mode still on,
        so the torch calls it makes with its own tensors are seen and give their results a device."""
        for value in (*args, *kwargs.values()):
            for item in value if isinstance(value, (list, tuple)) else (value,):
                if not isinstance(item, _Tensor) and type(item) in types:
                    with mode_active(self):
                        result = item.__torch_function__(func, types, args, kwargs)
                    if result is not NotImplemented:
                        return result
        return self.call(func, args, kwargs)

    def _grad(self, args: tuple, kwargs: dict) -> Any:
        """``torch.autograd.grad``: each gradient is on its input's device (inputs on several devices are no
        refusal), and an unused input's None leaves the others as they are."""
        result = torch.autograd.grad(*args, **kwargs)
        inputs = kwargs.get("inputs", args[1] if len(args) > 1 else ())
        for gradient, tensor in zip(result, (inputs,) if isinstance(inputs, _Tensor) else inputs):
            device = self.devices.of(tensor)
            if gradient is not None and device is not None:
                self.devices.mark(gradient, device)
        return result

    def _count_dtypes(self, result: Any) -> None:
        if isinstance(result, _Tensor):
            self._recorder.count_op_dtype(result.dtype)
        elif isinstance(result, (tuple, list)):
            for item in result:
                if isinstance(item, _Tensor):
                    self._recorder.count_op_dtype(item.dtype)

    # -- moves between devices ---------------------------------------------------------------------

    def _move(self, tensor: _Tensor, target: str | None, run: Callable[..., Any]) -> Any:
        """``run(copy=...)`` makes the CPU tensor; a move to another device copies, as a GPU does."""
        current = self.devices.of(tensor)
        if target is None or target == (current or CPU):
            result = run(copy=False)
            if current is not None and result is not tensor:
                self.devices.place(result, current)  # a dtype or layout conversion on the same device
            return result
        result = run(copy=True)
        self.devices.place(result, target)
        return result

    def _cuda(self, args: tuple, kwargs: dict) -> Any:
        # Tensor.cuda(device=None, non_blocking=False, memory_format=torch.preserve_format)
        tensor = args[0]
        device = kwargs.get("device", args[1] if len(args) > 1 else None)
        memory_format = kwargs.get("memory_format", args[3] if len(args) > 3 else torch.preserve_format)
        if isinstance(device, (str, torch.device)) and torch.device(device).type != "cuda":
            raise RuntimeError(f"Invalid device, must be cuda device, but got: {device}")
        target = self.devices.resolve("cuda" if device is None else device)
        return self._move(tensor, target, lambda copy: _TENSOR_TO(tensor, memory_format=memory_format, copy=copy))

    def _cpu(self, args: tuple, kwargs: dict) -> Any:
        tensor = args[0]
        memory_format = kwargs.get("memory_format", args[1] if len(args) > 1 else torch.preserve_format)
        return self._move(tensor, CPU, lambda copy: _TENSOR_TO(tensor, memory_format=memory_format, copy=copy))

    def _to(self, args: tuple, kwargs: dict) -> Any:
        # Tensor.to(device=None, dtype=None, non_blocking=False, copy=False), to(dtype, ...), to(other, ...)
        tensor, rest = args[0], list(args[1:])
        target = None
        if rest and isinstance(rest[0], _Tensor):
            target = self.devices.read(rest[0]) or CPU
        elif kwargs.get("device") is not None:
            target = self.devices.resolve(kwargs["device"])
            if target is None:  # meta, or a device the runner does not emulate: its own
                return _TENSOR_TO(*args, **kwargs)
            kwargs = {**kwargs, "device": CPU}
        elif rest and not isinstance(rest[0], torch.dtype):
            target = self.devices.resolve(rest[0])
            if target is None:
                return _TENSOR_TO(*args, **kwargs)
            rest[0] = CPU
        copy_asked = bool(kwargs.pop("copy", False)) if "copy" in kwargs else False
        if len(rest) > 3:  # copy given positionally
            copy_asked, rest = bool(rest[3]), rest[:3]

        def run(copy: bool) -> Any:
            to: Any = _TENSOR_TO  # its overloads cannot follow arguments gathered at run time
            return to(tensor, *rest, **kwargs, copy=copy or copy_asked)

        return self._move(tensor, target, run)

    def _type(self, args: tuple, kwargs: dict) -> Any:
        # x.type() -> its type's name; x.type("torch.cuda.FloatTensor") / x.type(torch.FloatTensor) moves it too.
        tensor = args[0]
        wanted = args[1] if len(args) > 1 else kwargs.get("dtype")
        if wanted is None:
            own = _Tensor.type(tensor)
            on_gpu = (self.devices.of(tensor) or CPU) != CPU
            return "torch.cuda." + own[len("torch."):] if on_gpu and own.startswith("torch.") else own
        legacy = _legacy_type_name(wanted)
        rest = _without(kwargs, "dtype")
        if legacy is None:  # a dtype: the same device
            return self._move(tensor, None, lambda copy: _Tensor.type(tensor, wanted, **rest))
        name: str = legacy
        on_gpu = name.startswith("torch.cuda.")
        cpu_name = "torch." + name[len("torch.cuda."):] if on_gpu else name

        def run(copy: bool) -> Any:
            converted = _Tensor.type(tensor, cpu_name, **rest)
            return converted.clone() if copy and converted is tensor else converted

        return self._move(tensor, self.devices.resolve("cuda") if on_gpu else CPU, run)

    def _type_as(self, args: tuple, kwargs: dict) -> Any:
        tensor, other = args[0], args[1]
        target = self.devices.read(other) or CPU
        return self._move(tensor, target, lambda copy: _TENSOR_TO(tensor, other.dtype, copy=copy))

    # -- reads ---------------------------------------------------------------------------------

    # -- the host's side: numpy, pinned memory ------------------------------------------------------

    def _host_copy(self, args: tuple) -> None:
        self.devices.check_host_copy(args[0])

    def _host_copy_to_pin(self, args: tuple) -> None:
        device = self.devices.of(args[0])
        if device is not None and device != CPU:
            self.devices.refused(f"cannot pin '{self._type((args[0],), {})}' only dense CPU tensors can be pinned")

    def _pin_memory(self, args: tuple, kwargs: dict) -> Any:
        # Pinning copies into page-locked memory; the source stays as it was.
        tensor = args[0]
        if tensor in self._pinned:
            return tensor
        pinned = self._pinned.add(tensor.clone())
        self.devices.place(pinned, CPU)
        return pinned

    def _is_pinned(self, args: tuple, kwargs: dict) -> bool:
        return args[0] in self._pinned


def _foreign(types: tuple) -> bool:
    return any(not issubclass(kind, _Tensor) for kind in types)


def _as_it_is(func: Any) -> Callable[[tuple, dict], Any]:
    return lambda args, kwargs: func(*args, **kwargs)


def _without(kwargs: dict, name: str) -> dict:
    return {key: value for key, value in kwargs.items() if key != name}


def _legacy_type_name(wanted: Any) -> str | None:
    """'torch.cuda.FloatTensor' for that name or class; None for a dtype."""
    if isinstance(wanted, str):
        return wanted
    if isinstance(wanted, type):
        return f"{wanted.__module__}.{wanted.__name__}"
    return None


@contextlib.contextmanager
def mode_active(mode: CudaOnCpuMode) -> Iterator[None]:
    """Enter ``mode`` unless this thread already has it (autograd and new threads do not)."""
    if mode in mode.mode_stack():
        yield
        return
    with mode:
        yield


def _reads_answer_with_devices(devices: DeviceModel) -> None:
    """``x.device``, ``x.is_cuda``, ``x.is_cpu`` and ``x.get_device()`` answer with the tensor's device.

    Properties of ``torch.Tensor`` itself, not the mode's: a read must give one answer whether or not a
    mode is active (inside a torch call the mode is not, and ``torch.utils.checkpoint`` compares what
    its pack hook read there with what the recompute reads)."""
    base = torch._C.TensorBase
    real_device, real_is_cuda = inspect.getattr_static(base, "device"), inspect.getattr_static(base, "is_cuda")
    real_is_cpu, real_get_device = inspect.getattr_static(base, "is_cpu", None), base.get_device

    def device(self: Any) -> Any:
        mark = devices.read(self)
        return real_device.__get__(self) if mark is None else devices.torch_device(mark)

    def is_cuda(self: Any) -> Any:
        mark = devices.read(self)
        return real_is_cuda.__get__(self) if mark is None else mark != CPU

    def is_cpu(self: Any) -> Any:
        mark = devices.read(self)
        return real_is_cpu.__get__(self) if mark is None else mark == CPU

    def get_device(self: Any) -> int:
        mark = devices.read(self)
        return real_get_device(self) if mark is None or mark == CPU else int(mark[5:])

    replace(_Tensor, "device", property(device, doc=real_device.__doc__))
    replace(_Tensor, "is_cuda", property(is_cuda, doc=real_is_cuda.__doc__))
    if real_is_cpu is not None:
        replace(_Tensor, "is_cpu", property(is_cpu, doc=real_is_cpu.__doc__))
    replace(_Tensor, "get_device", functools.wraps(real_get_device)(get_device))


def install(mode: CudaOnCpuMode) -> None:
    """Enter the mode for good in this thread and re-enter it where torch leaves it behind."""
    _reads_answer_with_devices(mode.devices)
    mode.__enter__()
    _reenter_in_new_threads(mode)
    _reenter_in_custom_backward(mode)
    _reenter_in_tensor_hooks(mode)
    _reenter_in_module_backward_hooks(mode)
    _reenter_in_saved_tensor_unpacking(mode)


def _reenter_in_new_threads(mode: CudaOnCpuMode) -> None:
    def with_mode(run: Callable[[], None]) -> None:
        with mode_active(mode):
            run()

    run_every_new_thread_through(with_mode)


def _reenter_in_custom_backward(mode: CudaOnCpuMode) -> None:
    backward_node = torch.autograd.function.BackwardCFunction
    original_apply = backward_node.apply

    @functools.wraps(original_apply)
    def apply(self, *args):
        with mode_active(mode):
            return original_apply(self, *args)

    replace(backward_node, "apply", apply)


def _with_mode(mode: CudaOnCpuMode, hook: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(hook)
    def hook_with_mode(*args, **kwargs):
        with mode_active(mode):
            return hook(*args, **kwargs)

    return hook_with_mode


def _reenter_in_tensor_hooks(mode: CudaOnCpuMode) -> None:
    original_register_hook = _Tensor.register_hook

    @functools.wraps(original_register_hook)
    def register_hook(self, hook):
        return original_register_hook(self, _with_mode(mode, hook))

    replace(_Tensor, "register_hook", register_hook)


def _reenter_in_module_backward_hooks(mode: CudaOnCpuMode) -> None:
    module = torch.nn.Module
    for name in ("register_full_backward_hook", "register_full_backward_pre_hook", "register_backward_hook"):
        original = getattr(module, name)

        def register(self, hook, *args, _original=original, **kwargs):
            return _original(self, _with_mode(mode, hook), *args, **kwargs)

        replace(module, name, functools.wraps(original)(register))


def _reenter_in_saved_tensor_unpacking(mode: CudaOnCpuMode) -> None:
    """Non-reentrant checkpointing recomputes the forward while unpacking, inside backward."""
    hooks = torch.autograd.graph.saved_tensors_hooks
    original_init = hooks.__init__

    @functools.wraps(original_init)
    def __init__(self, pack_hook, unpack_hook):
        original_init(self, pack_hook, _with_mode(mode, unpack_hook))

    replace(hooks, "__init__", __init__)
