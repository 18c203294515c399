"""float16 as a GPU computes it, at the CPU's float32 speed: the matmul family of a "cuda" region in float16.

Runs in the child, inside CUDA's op policy (:mod:`cuda_autocast`), where a "cuda" region runs in float16.
The tensors are really float16; only how the matmul family computes them differs from the CPU's own
float16 kernels, which this CPU (no ``avx512_fp16``) runs 20-50x slower than float32.

**The matmul family** (``mm``, ``bmm``, ``addmm``, ``matmul``, ``linear``, ``baddbmm``, the convolutions,
``scaled_dot_product_attention``, ``einsum`` ...). A GPU's cuBLAS/cuDNN call multiplies the float16
operands exactly, sums the products in float32 and rounds the sum once to float16. Here each floating
operand is cast to float16 as autocast casts it (onto float16's grid: range, subnormals, ties to even),
widened to float32 (exact: a float16 value is a float32 value, and the product of two 11-bit
significands fits float32's 24 bits), the op runs in float32 on the CPU's fast kernels, and its result
is rounded once to float16. The order of the float32 sums is the CPU kernel's, as a GPU's is cuBLAS's:
the last bit of a result can differ from the CPU's own float16 kernel (see benchmarks/bench_runner.py).

Backward follows from autograd: the gradient a float16 operand receives is computed in float32 from
the widened operands and rounded once to float16 (the widening's own backward), as a GPU's backward matmul gives
a float16 gradient from float32 sums. Elementwise ops and reductions keep the CPU's own float16 kernels,
which compute in float32 and round once, as CUDA's do, at about float32's speed (measured: add,
gelu, layer_norm, softmax within 1-4x of float32 on tensors of a million values; only the matmul
family is 20-50x).

**What the report needs** (:class:`Float16Watch`, cheap by construction): only float16 results are
looked at, as float32 before their one rounding (``aminmax``: one pass, no copy): a value past
float16's range (from 65520 up, which rounds to inf) or a NaN is an overflow. The script's line is
looked up only once something overflowed in the forward; a backward overflow names the line of the
forward op whose gradient overflowed, noted (one frame walk, no copy) when that op ran. Without a
GradScaler, gradient values that the rounding to float16 flushed to zero are counted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ampfix.runner.trace.observe import Recorder, Site
from ampfix.runner.trace.sites import find_site

# The ops of CUDA's lower-precision list that a GPU runs on cuBLAS/cuDNN (float32 accumulation), named as
# the dispatcher registers them. Each runs here in float32 from float16 operands, rounded once.
MATMUL_FAMILY = (
    "mm", "bmm", "addmm", "addbmm", "baddbmm", "matmul", "linear", "linalg_vecdot", "mv", "addmv", "addr",
    "einsum", "chain_matmul", "linalg_multi_dot", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
    "conv_transpose2d.input", "conv_transpose3d.input", "convolution", "_convolution", "_convolution.deprecated",
    "scaled_dot_product_attention",
)  # fmt: skip

HALF, FLOAT = torch.float16, torch.float32
# float16's largest finite value is 65504 = (2 - 2^-10)·2^15; the next value of its grid would be 65536, so a
# value from the midpoint 65520 up rounds to inf (ties to even: 65520 itself goes to the even 65536, out of range).
OVERFLOWS_FROM = 65520.0


def _overflows(values: torch.Tensor) -> bool:
    """Whether rounding float32 ``values`` to float16 gives an inf or a NaN (one pass; a NaN fails ``<``)."""
    if values.numel() == 0:
        return False
    low, high = torch.aminmax(values.detach())
    return not (float(high) < OVERFLOWS_FROM and float(low) > -OVERFLOWS_FROM)


class Float16Watch:
    """Where float16 first overflowed since the last optimizer step, and the gradient values flushed to zero."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self._record = recorder.float16

    def rounded(self, result: torch.Tensor, op: str) -> torch.Tensor:
        """A forward result of ``op`` in float32, rounded once to float16."""
        if not self._record.overflow_pending() and _overflows(result):
            self._record.overflowed(op, "forward", find_site())
        return result.to(HALF)

    def gradient_seen(self, gradient: torch.Tensor, op: str, site: Site) -> None:
        """The float32 gradient of a widened float16 operand, before its one rounding to float16 (done by the
        widening's own backward, torch's ``_to_copy``): past float16's range it overflows there."""
        if not self._record.overflow_pending() and _overflows(gradient):
            self._record.overflowed(op, "backward", site)
        if not self._recorder.scales_losses():
            flushed = int(torch.count_nonzero(gradient)) - int(torch.count_nonzero(gradient.to(HALF)))
            if flushed:
                self._record.underflowed(flushed)


# Tensor.register_hook as torch defines it: the device mode's wrapper (device_mode.py) re-enters the mode in the
# script's hooks; the watch's own hook runs no op of the script's and needs none of it.
_register_hook = getattr(torch.Tensor.register_hook, "__wrapped__", torch.Tensor.register_hook)


def _widened_and_watched(half: torch.Tensor, watch: Float16Watch, op: str, site: Site) -> torch.Tensor:
    """``half`` widened to float32 for a float32 kernel. Its gradient goes back through torch's own cast (rounded
    once to float16, in C++); a tensor hook looks at it first. A hook rather than an autograd.Function: a
    Python Function's node costs several times a hook's call, on each operand of each op."""
    wide = half.to(FLOAT)
    _register_hook(wide, lambda gradient: watch.gradient_seen(gradient, op, site))
    return wide


def _eligible(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != torch.float64


class Float16Numerics:
    """The kernels CUDA's policy runs the matmul family with in a float16 region, and the widening of float16
    operands that its float32 ops (softmax, the losses, layer_norm ...) take."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self.watch = Float16Watch(recorder)

    def installed(self) -> None:
        """Called once CUDA's policy runs the matmul family with these kernels: float16 results are watched."""
        self._recorder.float16.watched = True

    def widen(self, half: torch.Tensor, op: str, site: Site | None = None) -> torch.Tensor:
        """``half`` (float16) as float32 for ``op``; the gradient it gets back is rounded to float16 and watched."""
        if not half.requires_grad:
            return half.to(FLOAT)
        return _widened_and_watched(half, self.watch, op, site or find_site())

    def matmul_kernel(self, op: Any, name: str, dtype_now: Callable[[], torch.dtype],
                      below_autocast: Callable[[], Any]) -> Callable[..., Any]:
        """``op`` as CUDA's lower-precision policy runs it: operands cast to the autocast dtype; in float16,
        computed in float32 from them and rounded once. ``below_autocast()``: the context the policy's own
        kernels call ops in (no torch function modes, the autocast keys excluded)."""
        label = name.partition(".")[0]

        def kernel(*args: Any, **kwargs: Any) -> Any:
            with below_autocast():
                dtype = dtype_now()
                if dtype != HALF:  # a bfloat16 region: the CPU's own kernel, as CPU autocast runs it
                    return op(*_cast_all(args, dtype), **_cast_all(kwargs, dtype))
                site = find_site() if torch.is_grad_enabled() else None
                widen = self._widening(label, site)
                result = op(*_cast_all(args, HALF, widen), **_cast_all(kwargs, HALF, widen))
                return self.watch.rounded(result, label) if isinstance(result, torch.Tensor) else result

        return kernel

    def _widening(self, op: str, site: Site | None) -> Callable[[torch.Tensor], torch.Tensor]:
        def widen(half: torch.Tensor) -> torch.Tensor:
            if site is None or not half.requires_grad:
                return half.to(FLOAT)
            return _widened_and_watched(half, self.watch, op, site)

        return widen


def _cast_all(values: Any, dtype: torch.dtype, then: Callable[[torch.Tensor], torch.Tensor] | None = None) -> Any:
    """Each floating tensor in ``values`` (a tuple, a dict, a list of tensors) cast to ``dtype``, then ``then``."""
    if isinstance(values, dict):
        return {name: _cast_one(value, dtype, then) for name, value in values.items()}
    return tuple(_cast_one(value, dtype, then) for value in values)


def _cast_one(value: Any, dtype: torch.dtype, then: Callable[[torch.Tensor], torch.Tensor] | None) -> Any:
    if isinstance(value, torch.Tensor):
        if not _eligible(value):
            return value
        cast = value if value.dtype == dtype else torch.ops.aten.to.dtype(value, dtype)
        return then(cast) if then is not None else cast
    if isinstance(value, (list, tuple)) and value and all(isinstance(item, torch.Tensor) for item in value):
        return type(value)(_cast_one(item, dtype, then) for item in value)
    return value

