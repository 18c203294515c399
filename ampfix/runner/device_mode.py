"""Tensors asked for on "cuda" live on the CPU; ops inside autocast have their output dtypes counted.

Runs in the child. One :class:`CudaOnCpuMode` (a ``TorchFunctionMode``) sees every torch call:
it rewrites ``device=`` arguments, turns ``.cuda()`` / ``.to("cuda")`` into CPU no-ops (a copy
for a pinned tensor, as on a GPU), keeps the mark of pinned memory (``pin_memory()``,
``is_pinned()``), notes reads of ``x.is_cuda`` (which stays False: that cannot be emulated),
and, while CPU autocast is on, counts the dtypes the call produced.

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

from ampfix.runner.observe import Recorder
from ampfix.runner.patching import replace, run_every_new_thread_through
from ampfix.runner.sites import find_site

_Tensor = torch.Tensor
_TENSOR_TO = _Tensor.to
# The getter torch calls a torch function mode with when the script reads ``x.is_cuda``.
_IS_CUDA: Any = inspect.getattr_static(_Tensor, "is_cuda").__get__


def is_cuda_device(device: Any) -> bool:
    if isinstance(device, str):
        return device.startswith("cuda")
    if isinstance(device, torch.device):
        return device.type == "cuda"
    # A bare integer names an accelerator index; on the machine the script was written for
    # that is a GPU.
    return isinstance(device, int) and not isinstance(device, bool)


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


def _map_keyword_devices(kwargs: dict[str, Any]) -> dict[str, Any]:
    device = kwargs.get("device")
    move = device is not None and is_cuda_device(device)
    pin = bool(kwargs.get("pin_memory"))
    if not move and not pin:
        return kwargs
    kwargs = dict(kwargs)
    if move:
        kwargs["device"] = "cpu"
    if pin:
        kwargs["pin_memory"] = False  # pinned memory needs an accelerator; plain CPU memory is the same data
    return kwargs


class CudaOnCpuMode(TorchFunctionMode):
    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self._recorder = recorder
        self._pinned = PinnedTensors()
        # Private torch names are looked up here, inside the install step, so that a torch without
        # them loses this emulation alone. The C function itself: torch.is_autocast_enabled is
        # patched to answer "cuda" with the CPU state.
        self._is_autocast_enabled = torch._C.is_autocast_enabled
        self.mode_stack = torch.overrides._get_current_function_mode_stack
        # Handlers get the call's own arguments: each maps the devices it names itself.
        self._handlers: dict[Any, Callable[[tuple, dict], Any]] = {
            _Tensor.cuda: self._cuda,
            _TENSOR_TO: self._to,
            _Tensor.pin_memory: self._pin_memory,
            _Tensor.is_pinned: self._is_pinned,
            _Tensor.type: self._type,
            _IS_CUDA: self._is_cuda,
        }

    def add_handlers(self, handlers: dict[Any, Callable[[tuple, dict], Any]]) -> None:
        """More calls handled by their own code (see :mod:`boundaries`); the device handlers stay first."""
        self._handlers = {**handlers, **self._handlers}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        handler = self._handlers.get(func)
        if handler is not None:
            return handler(args, kwargs or {})
        return self.call(func, args, kwargs)

    def call(self, func: Any, args: tuple, kwargs: dict | None) -> Any:
        """A torch call as the mode runs it: devices mapped, output dtypes counted inside autocast."""
        if kwargs:  # every torch call passes here: the common call without keywords does no more
            result = func(*args, **_map_keyword_devices(kwargs))
            if kwargs.get("pin_memory"):  # torch.empty(..., pin_memory=True)
                self._pinned.add(result)
        else:
            result = func(*args)
        if self._is_autocast_enabled("cpu"):
            self._count_dtypes(result)
        return result

    def _count_dtypes(self, result: Any) -> None:
        if isinstance(result, _Tensor):
            self._recorder.count_op_dtype(result.dtype)
        elif isinstance(result, (tuple, list)):
            for item in result:
                if isinstance(item, _Tensor):
                    self._recorder.count_op_dtype(item.dtype)

    # -- the calls that name a device positionally, or that need an accelerator ----------------

    def _on_device(self, source: _Tensor, moved: Any) -> Any:
        """A pinned buffer is staging memory the script refills: its device copy must not follow it."""
        return moved.clone() if moved is source and source in self._pinned else moved

    def _cuda(self, args: tuple, kwargs: dict) -> Any:
        # Tensor.cuda(device=None, non_blocking=False, memory_format=torch.preserve_format)
        tensor = args[0]
        memory_format = kwargs.get("memory_format", args[3] if len(args) > 3 else None)
        if memory_format is None or memory_format is torch.preserve_format:
            return self._on_device(tensor, tensor)
        return _TENSOR_TO(tensor, memory_format=memory_format)

    def _to(self, args: tuple, kwargs: dict) -> Any:
        to_cuda = False
        if kwargs:
            to_cuda = is_cuda_device(kwargs.get("device"))
            kwargs = _map_keyword_devices(kwargs)
        if len(args) > 1 and is_cuda_device(args[1]):
            args, to_cuda = (args[0], "cpu", *args[2:]), True
        moved = _TENSOR_TO(*args, **kwargs)
        return self._on_device(args[0], moved) if to_cuda else moved

    def _pin_memory(self, args: tuple, kwargs: dict) -> Any:
        # Pinning copies into page-locked memory; the source stays as it was.
        tensor = args[0]
        return tensor if tensor in self._pinned else self._pinned.add(tensor.clone())

    def _is_pinned(self, args: tuple, kwargs: dict) -> bool:
        return args[0] in self._pinned

    @staticmethod
    def _type(args: tuple, kwargs: dict) -> Any:
        # x.type("torch.cuda.FloatTensor") / x.type(torch.cuda.FloatTensor) -> the CPU twin.
        if len(args) > 1:
            args = (args[0], _cpu_twin_of_cuda_type(args[1]), *args[2:])
        elif "dtype" in kwargs:
            kwargs = {**kwargs, "dtype": _cpu_twin_of_cuda_type(kwargs["dtype"])}
        return _Tensor.type(*args, **kwargs)

    def _is_cuda(self, args: tuple, kwargs: dict) -> Any:
        site = find_site()
        if site.origin == "script":
            self._recorder.unemulated_use("x.is_cuda (False on CPU: the script's is_cuda branch is not taken)", site)
        return _IS_CUDA(*args, **kwargs)


def _cpu_twin_of_cuda_type(wanted: Any) -> Any:
    if isinstance(wanted, str):
        name = wanted
    elif isinstance(wanted, type):
        name = f"{wanted.__module__}.{wanted.__name__}"
    else:
        return wanted
    return "torch." + name[len("torch.cuda.") :] if name.startswith("torch.cuda.") else wanted


@contextlib.contextmanager
def mode_active(mode: CudaOnCpuMode) -> Iterator[None]:
    """Enter ``mode`` unless this thread already has it (autograd and new threads do not)."""
    if mode in mode.mode_stack():
        yield
        return
    with mode:
        yield


def install(mode: CudaOnCpuMode) -> None:
    """Enter the mode for good in this thread and re-enter it where torch leaves it behind."""
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
