"""The ops the CPU lacks in low precision, per torch release: which ones the runner runs in float32.

An op belongs here where CUDA's kernel accepts a low-precision dtype (float16, bfloat16, complex32) that the
installed torch's CPU kernel refuses (see :mod:`ampfix.runner.gpu.boundaries`). Both sides change between
releases: 2.5's CPU still lacks float16 ``grid_sample`` and ``pad``, 2.11's low-precision ``trace``; 2.14's
cuFFT path accepts bfloat16. What a release's CUDA kernels accept cannot be tested for on a CPU, so this is the
one table chosen by version: 2.13's
(``cuda_autocast.CPU_LACKS_LOW_PRECISION``) with each measured release's changes, found from that release's
OpInfo database by tests/test_runner_policy.py (which prints the table to paste for a release that differs).
A release not measured takes the nearest measured one below it (the oldest measured one below all).
"""

from __future__ import annotations

import torch

from ampfix.runner.gpu.cuda_autocast import CPU_LACKS_LOW_PRECISION

BASE_RELEASE = (2, 13)
# Per release (major, minor): the entries that differ from 2.13's table; () for an op the release lacks nothing of.
CHANGES_FROM_BASE: dict[tuple[int, int], dict[str, tuple[str, ...]]] = {
    (2, 5): {
        "grid_sampler_2d": ("bfloat16", "float16"),
        "isin": ("float16",),
        "logaddexp": (),
        "nn.functional.adaptive_max_pool3d": ("float16",),
        "nn.functional.grid_sample": ("bfloat16", "float16"),
        "nn.functional.mse_loss": ("bfloat16",),
        "nn.functional.pad": ("float16",),
        "trace": ("bfloat16", "complex32", "float16"),
    },
    (2, 8): {
        "logaddexp": (),
        "trace": ("bfloat16", "complex32", "float16"),
    },
    (2, 11): {
        "trace": ("bfloat16", "complex32", "float16"),
    },
    (2, 14): {
        "fft.fft": ("bfloat16", "complex32", "float16"),
        "fft.fft2": ("bfloat16", "complex32", "float16"),
        "fft.fftn": ("bfloat16", "complex32", "float16"),
        "fft.hfft": ("bfloat16", "complex32", "float16"),
        "fft.hfft2": ("bfloat16", "complex32", "float16"),
        "fft.hfftn": ("bfloat16", "complex32", "float16"),
        "fft.ifft": ("bfloat16", "complex32", "float16"),
        "fft.ifft2": ("bfloat16", "complex32", "float16"),
        "fft.ifftn": ("bfloat16", "complex32", "float16"),
        "fft.ihfft": ("bfloat16", "float16"),
        "fft.ihfft2": ("bfloat16", "float16"),
        "fft.ihfftn": ("bfloat16", "float16"),
        "fft.irfft": ("bfloat16", "complex32", "float16"),
        "fft.irfft2": ("bfloat16", "complex32", "float16"),
        "fft.irfftn": ("bfloat16", "complex32", "float16"),
        "fft.rfft": ("bfloat16", "float16"),
        "fft.rfft2": ("bfloat16", "float16"),
        "fft.rfftn": ("bfloat16", "float16"),
        "sparse.sampled_addmm": ("bfloat16", "float16"),
        "stft": ("bfloat16",),
    },
}


def release_of(version: str) -> tuple[int, int]:
    """``"2.14.1+cu130"`` -> ``(2, 14)``."""
    major, minor = version.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def measured_release(version: str) -> tuple[int, int]:
    """The measured release whose table ``version`` takes: itself, else the nearest below, else the oldest."""
    release = release_of(version)
    measured = sorted({BASE_RELEASE, *CHANGES_FROM_BASE})
    below = [candidate for candidate in measured if candidate <= release]
    return below[-1] if below else measured[0]


def cpu_lacks_low_precision(version: str = torch.__version__) -> dict[str, tuple[str, ...]]:
    """The op name under ``torch`` -> the low-precision dtypes its CPU kernel lacks on torch ``version``."""
    table = {**CPU_LACKS_LOW_PRECISION, **CHANGES_FROM_BASE.get(measured_release(version), {})}
    return {name: dtypes for name, dtypes in sorted(table.items()) if dtypes}
