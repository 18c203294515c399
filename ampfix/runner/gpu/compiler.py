"""``torch.compile`` under the runner: dynamo captures the script's graphs as on a GPU; inductor's kernels are not made.

Runs in the child. Inductor, ``torch.compile``'s default backend, generates kernels for the device its graph's
inputs are on: Triton kernels for "cuda", which a CPU build can neither make nor run (it fails with "Could not
run 'aten::empty_strided' with arguments from the 'CUDA' backend"). So a compile that asks for inductor (the
default) asks for ``aot_eager`` instead: dynamo captures the graph and AOT autograd splits forward and backward
as they would for inductor, the graph breaks, guards and recompiles are dynamo's own, and the captured ops run
eagerly, through the device mode, so their results carry the GPU's devices and what a GPU refuses is refused.
What a script can tell apart is speed and inductor's own numerics (its fused kernels round alike, not bitwise
like eager). Each such call is listed in the report with its site. A compile that names another backend
(``"eager"``, ``"aot_eager"``, a function) runs as asked.

Dynamo asks for the device's current stream when it traces, in the code it generates (the graph's inputs
include it) and in its guards: up to torch 2.14 through its own Python ``torch._dynamo.utils.get_current_stream``,
which asks ``torch.accelerator`` (emulated); from 2.15 through a C function (``torch._C._dynamo.utils``) that goes
past the emulation into CUDA's own initialisation, which fails without a GPU. There dynamo's modules get 2.14's
Python function in its place (:func:`streams_asked_of_the_emulated_accelerator`).

A fake tensor made on "cuda" first initialises CUDA's context (``torch._subclasses.fake_tensor.init_gpu_context``
makes a real CUDA tensor where ``torch.cuda.is_available()``, emulated True, on torch 2.5-2.11). Dynamo makes its
fake inputs with the torch function mode stack cleared (2.8), so that tensor went past the device mode into CUDA's
initialisation. The emulated GPU is the CPU and has no context to make: that step is skipped for it
(:func:`no_cuda_context_for_fake_tensors`).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import MutableMapping
from types import ModuleType
from typing import Any

import torch

from ampfix.runner.gpu import deferred_dynamo
from ampfix.runner.trace.observe import Recorder
from ampfix.runner.trace.patching import replace, with_arguments_adjusted
from ampfix.runner.trace.sites import find_site

FAKE_TENSOR_MODULE = "torch._subclasses.fake_tensor"  # imported by `import torch`
INDUCTOR = "inductor"
STAND_IN_BACKEND = "aot_eager"
FEATURE = (
    "torch.compile with inductor (Triton kernels need a GPU): its graphs were captured by dynamo and ran as "
    "aot_eager"
)


def install(recorder: Recorder) -> None:
    original = torch.compile

    def eager_in_place_of_inductor(arguments: dict[str, Any]) -> None:
        if arguments.get("backend") in (None, INDUCTOR):
            arguments["backend"] = STAND_IN_BACKEND
            # mode and options are inductor's own (another backend refuses them)
            arguments.pop("mode", None)
            arguments.pop("options", None)
            recorder.unemulated_use(FEATURE, find_site())

    compile_ = with_arguments_adjusted(original, eager_in_place_of_inductor)
    replace(torch, "compile", functools.wraps(original)(compile_))
    deferred_dynamo.when_imported(streams_asked_of_the_emulated_accelerator)
    no_cuda_context_for_fake_tensors(sys.modules.get(FAKE_TENSOR_MODULE))


def streams_asked_of_the_emulated_accelerator(
    torch_module: ModuleType | Any = torch, modules: MutableMapping[str, Any] = sys.modules
) -> None:
    """Where dynamo's current-stream lookup is torch's C function (2.15), dynamo's modules get torch 2.14's
    Python one in its place: it asks ``torch.accelerator`` (the emulated GPU's stream). Up to 2.14 nothing is
    changed (there is no such C function; dynamo's own Python function already asks ``torch.accelerator``)."""
    native_utils = getattr(getattr(torch_module._C, "_dynamo", None), "utils", None)
    native = getattr(native_utils, "get_current_stream", None)
    if native is None:
        return

    def get_current_stream(device: Any) -> Any:
        return torch_module.accelerator.current_stream(device)

    for name, module in list(modules.items()):
        if name.startswith(deferred_dynamo.NAME) and getattr(module, "get_current_stream", None) is native:
            replace(module, "get_current_stream", get_current_stream)


def no_cuda_context_for_fake_tensors(fake_tensor: ModuleType | Any) -> None:
    """A fake tensor on the emulated GPU skips torch's CUDA context initialisation (a real CUDA tensor); one on
    another device is left to torch. Nothing is changed where torch has no such step."""
    original = getattr(fake_tensor, "init_gpu_context", None)
    if original is None:
        return

    def init_gpu_context(*args: Any, **kwargs: Any) -> None:
        device = args[0] if args else kwargs.get("device")
        if device is not None and torch.device(device).type != "cuda":
            original(*args, **kwargs)

    replace(fake_tensor, "init_gpu_context", init_gpu_context)
