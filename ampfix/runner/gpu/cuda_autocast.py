"""CUDA's autocast op policy, run on the CPU: each op inside a "cuda" region gives the dtype a GPU would.

Runs in the child. CPU autocast has its own op lists: it leaves softmax, log_softmax, layer_norm,
sum, exp ... in bfloat16 where CUDA autocast runs them in float32. The tables below are CUDA's
lists as torch 2.13 declares them (``torch/include/ATen/autocast_mode.h``: ``AT_FORALL_LOWER_PRECISION_FP``,
``AT_FORALL_FP32``, ``AT_FORALL_FP32_SET_OPT_DTYPE``, ``AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE``,
``AT_FORALL_PROMOTE``) plus what ``aten/src/ATen/autocast_mode.cpp`` registers for CUDA beside them
(the cuDNN convolutions, the binary_cross_entropy ban). The lists grow between releases: the tables hold
every op any release from 2.2 registers, and a run installs those the installed torch registers for CUDA
autocast (:func:`ops_to_install`). The tests hold them to the installed torch's own AutocastCUDA
registrations and header (benchmarks/torch_matrix.py runs them on each release).

How it runs: a "cuda" region stays a CPU autocast region (every state query, nesting, custom_fwd
and checkpointing keep working as they do), and a second autocast dispatch key, one that ranks
above AutocastCPU and that no CPU tensor ever carries (AutocastIPU), is switched on in the thread
for the region. Python kernels registered at that key apply CUDA's policy, in the CPU autocast
dtype (the run dtype), and call the op below both autocast keys, as torch's own wrappers do below
theirs. Ops that CPU autocast registers and CUDA does not are run below AutocastCPU untouched,
so a composite such as cross_entropy_loss decomposes and its parts meet CUDA's policy, as on a GPU.
Ops whose CPU kernel already is CUDA's policy (linear, matmul, conv, bmm ...) fall through to
that C++ kernel: the hot ops pay nothing and keep its weight-cast cache.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ampfix.runner.gpu.torch_features import AUTOCAST_STATE

# -- CUDA's policy, as data -----------------------------------------------------------------------
# Op names are "name" or "name.overload", as the dispatcher registers them.

LOWER_PRECISION_FP = (
    "_convolution.deprecated", "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
    "conv_transpose2d.input", "conv_transpose3d.input", "convolution", "prelu", "addmm", "addmv", "addr",
    "matmul", "einsum", "mm", "mv", "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul",
    "linalg_multi_dot", "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell",
    "rnn_tanh_cell", "rnn_relu_cell", "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
    # autocast_mode.cpp, beside the shared list; cuDNN's RNN in cudnn/AutocastRNN.cpp (CUDA builds only):
    "cudnn_convolution", "cudnn_convolution_transpose", "_cudnn_rnn",
)  # fmt: skip

FP32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "softplus", "layer_norm",
    "native_layer_norm", "rms_norm", "group_norm", "frobenius_norm.dim", "nuclear_norm", "nuclear_norm.dim",
    "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d",
    "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss",
    "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d", "_upsample_nearest_exact2d",
    "upsample_nearest3d", "_upsample_nearest_exact3d", "upsample_linear1d", "upsample_bilinear2d",
    "_upsample_bilinear2d_aa", "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bicubic2d_aa",
    # autocast_mode.cpp, beside the shared list (torch 2.14+):
    "linalg_matrix_sqrth",
)  # fmt: skip

# What torch registers for CUDA autocast beside autocast_mode.h's lists (above, each in its policy's list).
BESIDE_THE_HEADER = frozenset({"cudnn_convolution", "cudnn_convolution_transpose", "_cudnn_rnn", "linalg_matrix_sqrth"})

# float32 unless the call gives dtype= itself.
# The named-dimension overloads (Dimname) are up to torch 2.5's.
FP32_SET_OPT_DTYPE = (
    "prod", "prod.dim_int", "prod.dim_Dimname", "softmax.int", "softmax.Dimname", "log_softmax.int",
    "log_softmax.Dimname", "cumprod", "cumprod.dimname", "cumsum", "cumsum.dimname", "linalg_vector_norm",
    "linalg_matrix_norm", "linalg_matrix_norm.str_ord", "sum", "sum.dim_IntList", "sum.dim_DimnameList",
)  # fmt: skip

# Run as the overload that takes an output dtype, with float32 appended.
FP32_APPEND_DTYPE = {
    "norm.Scalar": "norm.ScalarOpt_dtype",
    "norm.ScalarOpt_dim": "norm.ScalarOpt_dim_dtype",
    "norm.names_ScalarOpt_dim": "norm.names_ScalarOpt_dim_dtype",  # up to torch 2.5
}

# In the widest floating dtype among the inputs (float32 over the autocast dtype).
PROMOTE = (
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "index_put",
    "tensordot", "scatter_add",
)  # fmt: skip

# autocast_mode.cpp registers a kernel that refuses these under CUDA autocast.
BANNED = {
    "binary_cross_entropy": (
        "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
        "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
        "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
        "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
        "safe to autocast."
    ),
}

CUDA_POLICY: dict[str, str] = {
    **dict.fromkeys(LOWER_PRECISION_FP, "lower_precision_fp"),
    **dict.fromkeys(FP32, "fp32"),
    **dict.fromkeys(FP32_SET_OPT_DTYPE, "fp32_set_opt_dtype"),
    **dict.fromkeys(FP32_APPEND_DTYPE, "fp32_append_dtype"),
    **dict.fromkeys(PROMOTE, "promote"),
    **dict.fromkeys(BANNED, "banned"),
}

# Ops left to CPU autocast's own C++ kernel, because what it does is what CUDA autocast does:
CPU_KERNEL_IS_CUDA_POLICY = frozenset({
    # lower precision on both (every floating input cast to the autocast dtype)
    "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d.input",
    "conv_transpose3d.input", "_convolution.deprecated", "prelu", "addmm", "matmul", "mm", "linalg_vecdot",
    "linear", "addbmm", "baddbmm", "bmm", "scaled_dot_product_attention",
    # The CPU's LSTM/GRU layer: its CUDA twin, cuDNN's _cudnn_rnn, is cast to lower precision by a
    # kernel only CUDA builds register (aten/src/ATen/cudnn/AutocastRNN.cpp).
    "mkldnn_rnn_layer",
    # The CPU casts to the widest input dtype; CUDA registers nothing and type promotion gives that
    # same dtype and the same values.
    "cat", "stack", "index_copy",
})  # fmt: skip

# Ops whose CPU kernel refuses a low-precision dtype that CUDA's accepts (the FFT family: cuFFT runs
# half precision, the CPU's FFT has no float16 kernel; ops on the complex32 an FFT gives). Found from the
# installed torch, not by hand: each op its OpInfo database declares CUDA but not CPU support for, kept
# where the CPU kernel raises on OpInfo's own sample inputs in that dtype. tests/test_runner_policy.py
# derives it again and prints the table to paste when torch changes. Keyed by the name under ``torch``;
# the runner runs them in float32 (complex64) and casts the result back to the dtype CUDA gives
# (see :mod:`ampfix.runner.gpu.boundaries`). A "float16" entry also covers the bfloat16 stand-in.
CPU_LACKS_LOW_PRECISION: dict[str, tuple[str, ...]] = {
    "acos": ("complex32",),
    "acosh": ("complex32",),
    "angle": ("complex32",),
    "asin": ("complex32",),
    "asinh": ("complex32",),
    "atan": ("complex32",),
    "atanh": ("complex32",),
    "cos": ("complex32",),
    "cosh": ("complex32",),
    "div": ("complex32",),
    "exp": ("complex32",),
    "fft.fft": ("complex32", "float16"),
    "fft.fft2": ("complex32", "float16"),
    "fft.fftn": ("complex32", "float16"),
    "fft.hfft": ("complex32", "float16"),
    "fft.hfft2": ("complex32", "float16"),
    "fft.hfftn": ("complex32", "float16"),
    "fft.ifft": ("complex32", "float16"),
    "fft.ifft2": ("complex32", "float16"),
    "fft.ifftn": ("complex32", "float16"),
    "fft.ihfft": ("float16",),
    "fft.ihfft2": ("float16",),
    "fft.ihfftn": ("float16",),
    "fft.irfft": ("complex32", "float16"),
    "fft.irfft2": ("complex32", "float16"),
    "fft.irfftn": ("complex32", "float16"),
    "fft.rfft": ("float16",),
    "fft.rfft2": ("float16",),
    "fft.rfftn": ("float16",),
    "lerp": ("complex32",),
    "log": ("complex32",),
    "logaddexp": ("complex32",),
    "nanmean": ("complex32",),
    "nansum": ("complex32",),
    "nn.functional.avg_pool3d": ("bfloat16", "float16"),
    "nn.functional.multi_margin_loss": ("bfloat16", "float16"),
    "nn.functional.multilabel_margin_loss": ("bfloat16", "float16"),
    "nn.functional.rrelu": ("float16",),
    "pow": ("complex32",),
    "prod": ("complex32",),
    "rsqrt": ("complex32",),
    "sigmoid": ("complex32",),
    "sin": ("complex32",),
    "sinh": ("complex32",),
    "sqrt": ("complex32",),
    "sum": ("complex32",),
    "tan": ("complex32",),
    "tanh": ("complex32",),
    "trace": ("complex32",),
    "true_divide": ("complex32",),
}

# The key CUDA's policy runs at: above AutocastCPU in the dispatcher's order, carried by no CPU tensor.
EMULATION_KEY_NAME = "AutocastIPU"


def _op_handle(name: str) -> Any:
    base, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), overload or "default")


def _eligible(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != torch.float64


class CudaPolicy:
    """Registers the kernels once; ``switch(on)`` turns the policy on or off in this thread."""

    def __init__(self, float16: Any = None) -> None:
        self.installed = False
        self._libraries: list[Any] = []
        # numerics.Float16Numerics: where given, the matmul family runs in float16 as a GPU computes it (float32
        # sums of exact products, rounded once) instead of on the CPU's own, slow, float16 kernels.
        self._float16 = float16

    # -- installation (every private torch name is looked up here) -----------------------------

    def install(self) -> None:
        C = torch._C
        key = getattr(C.DispatchKey, EMULATION_KEY_NAME)
        cpu_key = C.DispatchKey.AutocastCPU
        below_autocast = C.DispatchKeySet(key) | C.DispatchKeySet(cpu_key)
        self._exclude_guard = C._ExcludeDispatchKeyGuard
        # torch.ops calls meet the script's torch function modes (the runner's device mode among
        # them): the casts and calls made here are autocast's own, not the script's.
        self._no_torch_function = C.DisableTorchFunction
        self._below_autocast = below_autocast
        self._set_excluded = C._dispatch_tls_set_dispatch_key_excluded
        self._set_included = C._dispatch_tls_set_dispatch_key_included
        self._is_included = C._dispatch_tls_is_dispatch_key_included
        self._key = key
        self._autocast_dtype = AUTOCAST_STATE.get_dtype
        cpu_registered = [
            name[len("aten::") :]
            for name in C._dispatch_get_all_op_names()
            if name.startswith("aten::") and C._dispatch_has_kernel_for_dispatch_key(name, "AutocastCPU")
        ]
        fallback = torch.library.Library("_", "IMPL")
        fallback.fallback(torch.library.fallthrough_kernel, EMULATION_KEY_NAME)
        kernels = torch.library.Library("aten", "IMPL")
        self._libraries = [fallback, kernels]
        registered = _registered_for_cuda_autocast()
        taken = self._register_float16_matmuls(kernels, registered)
        cuda_registered = {name for name in ops_to_install(registered) if _exists(name)}
        for name in sorted(cuda_registered - taken):
            kernels.impl(name, self._kernel(name, CUDA_POLICY[name]), EMULATION_KEY_NAME)
        for name in cpu_registered:  # the ops only the CPU's lists name (in this torch)
            if name not in cuda_registered and name not in CPU_KERNEL_IS_CUDA_POLICY and name not in taken:
                kernels.impl(name, self._below_cpu_autocast(_op_handle(name)), EMULATION_KEY_NAME, with_keyset=True)
        self.installed = True

    def _register_float16_matmuls(self, kernels: Any, registered: set[str] | None) -> frozenset[str]:
        """The matmul family computed as cuBLAS/cuDNN do (gpu/numerics), where float16 is computed as a GPU does:
        each op this torch has and registers for CUDA autocast (all it has, where it cannot say)."""
        if self._float16 is None:
            return frozenset()
        from ampfix.runner.gpu.numerics import MATMUL_FAMILY

        def below_autocast() -> Any:
            return _Both(self._no_torch_function(), self._exclude_guard(self._below_autocast))

        taken = frozenset(
            name for name in MATMUL_FAMILY if _exists(name) and (registered is None or name in registered)
        )
        for name in taken:
            kernel = self._float16.matmul_kernel(_op_handle(name), name, lambda: self._autocast_dtype("cpu"),
                                                 below_autocast)
            kernels.impl(name, kernel, EMULATION_KEY_NAME)
        self._float16.installed()
        return taken

    def _kernel(self, name: str, policy: str) -> Callable[..., Any]:
        op = _op_handle(name)
        if policy == "lower_precision_fp":
            return self._cast_all(op, lambda args, kwargs: self._autocast_dtype("cpu"))
        if policy == "fp32":
            return self._cast_all(op, lambda args, kwargs: torch.float32, self._widening(name))
        if policy == "promote":
            return self._cast_all(op, self._widest)
        if policy == "fp32_set_opt_dtype":
            return self._set_opt_dtype(op, self._widening(name))
        if policy == "fp32_append_dtype":
            return self._append_dtype(_op_handle(FP32_APPEND_DTYPE[name]))
        return self._banned(BANNED[name])

    # -- the policies (autocast_mode.h's WrapFunction_ specialisations) --------------------------

    def _widening(self, name: str) -> Callable[[Any], Any] | None:
        """With float16 computed as a GPU does, a float16 input of a float32 op is widened by
        numerics.Float16Numerics.widen: its gradient's one rounding to float16 is watched (overflow, underflow)."""
        if self._float16 is None:
            return None
        label, widen = name.partition(".")[0], self._float16.widen
        return lambda half: widen(half, label)

    def _cast_all(self, op: Any, target: Callable[[tuple, dict], torch.dtype],
                  widen: Callable[[Any], Any] | None = None) -> Callable[..., Any]:
        def kernel(*args, **kwargs):
            with self._no_torch_function(), self._exclude_guard(self._below_autocast):
                dtype = target(args, kwargs)
                args = tuple(_cast(value, dtype, widen) for value in args)
                kwargs = {name: _cast(value, dtype, widen) for name, value in kwargs.items()}
                return op(*args, **kwargs)

        return kernel

    def _widest(self, args: tuple, kwargs: dict) -> torch.dtype:
        widest = self._autocast_dtype("cpu")
        for value in (*args, *kwargs.values()):
            for tensor in value if isinstance(value, (list, tuple)) else (value,):
                # float32 wins over the autocast dtype; float64 is left alone, as CUDA does. A third
                # floating dtype (float16 in a bfloat16 run), which CUDA's code refuses, counts as float32.
                if _eligible(tensor) and tensor.dtype != widest:
                    return torch.float32
        return widest

    def _set_opt_dtype(self, op: Any, widen: Callable[[Any], Any] | None = None) -> Callable[..., Any]:
        names = [argument.name for argument in op._schema.arguments]
        position = names.index("dtype")
        keyword_only = op._schema.arguments[position].kwarg_only

        def kernel(*args, **kwargs):
            with self._no_torch_function(), self._exclude_guard(self._below_autocast):
                if _eligible(args[0]):
                    if widen is not None and args[0].dtype == torch.float16:  # the same values, converted here
                        args = (widen(args[0]), *args[1:])
                    if keyword_only or len(args) <= position:
                        if kwargs.get("dtype") is None:
                            kwargs = {**kwargs, "dtype": torch.float32}
                    elif args[position] is None:
                        args = (*args[:position], torch.float32, *args[position + 1 :])
                return op(*args, **kwargs)

        return kernel

    def _append_dtype(self, op_with_dtype: Any) -> Callable[..., Any]:
        def kernel(self_tensor, *args, **kwargs):
            with self._no_torch_function(), self._exclude_guard(self._below_autocast):
                dtype = torch.float32 if _eligible(self_tensor) else self_tensor.dtype
                return op_with_dtype(self_tensor, *args, **kwargs, dtype=dtype)

        return kernel

    @staticmethod
    def _banned(message: str) -> Callable[..., Any]:
        def kernel(*args, **kwargs):
            raise RuntimeError(message)

        return kernel

    def _below_cpu_autocast(self, op: Any) -> Callable[..., Any]:
        """A CPU-only policy: the op runs as it is, its inner ops still meet CUDA's policy."""

        def kernel(keyset, *args, **kwargs):
            return op.redispatch(keyset - self._below_autocast, *args, **kwargs)

        return kernel

    # -- per region ----------------------------------------------------------------------------

    def switch(self, on: bool) -> bool | None:
        """Turn the policy on or off in this thread; returns what to give ``restore``."""
        if not self.installed:
            return None
        previous = self._is_included(self._key)
        self._set(on)
        return previous

    def restore(self, previous: bool | None) -> None:
        if previous is not None:
            self._set(previous)

    def _set(self, on: bool) -> None:
        self._set_included(self._key, on)
        self._set_excluded(self._key, not on)


def _registered_for_cuda_autocast() -> set[str] | None:
    """The ops the installed torch registers a CUDA autocast kernel for (its own lists: they grow between
    releases); None where it cannot say."""
    C = torch._C
    if not hasattr(C, "_dispatch_has_kernel_for_dispatch_key"):
        return None
    return {
        name[len("aten::") :]
        for name in C._dispatch_get_all_op_names()
        if name.startswith("aten::") and C._dispatch_has_kernel_for_dispatch_key(name, "AutocastCUDA")
    }


def ops_to_install(registered: set[str] | None) -> set[str]:
    """The ops whose CUDA policy runs at the emulation's key: those of the table (every supported release's) that
    the installed torch registers for CUDA autocast (all of the table it has, where it cannot say), less those
    whose CPU kernel already is CUDA's policy."""
    candidates = set(CUDA_POLICY) if registered is None else set(CUDA_POLICY) & registered
    return candidates - CPU_KERNEL_IS_CUDA_POLICY


class _Both:
    """Two context managers entered as one (the policy's guards, made fresh for each call)."""

    __slots__ = ("_first", "_second")

    def __init__(self, first: Any, second: Any) -> None:
        self._first, self._second = first, second

    def __enter__(self) -> None:
        self._first.__enter__()
        try:
            self._second.__enter__()
        except BaseException:
            self._first.__exit__(None, None, None)
            raise

    def __exit__(self, *exc: Any) -> None:
        try:
            self._second.__exit__(*exc)
        finally:
            self._first.__exit__(*exc)


def _exists(name: str) -> bool:
    try:
        _op_handle(name)
    except (AttributeError, RuntimeError):
        return False
    return True


def _cast(value: Any, dtype: torch.dtype, widen: Callable[[Any], Any] | None = None) -> Any:
    if isinstance(value, torch.Tensor):
        if not _eligible(value) or value.dtype == dtype:
            return value
        if widen is not None and value.dtype == torch.float16 and dtype == torch.float32:
            return widen(value)
        return torch.ops.aten.to.dtype(value, dtype)
    if isinstance(value, (list, tuple)) and value and all(isinstance(item, torch.Tensor) for item in value):
        return type(value)(_cast(item, dtype, widen) for item in value)
    return value

