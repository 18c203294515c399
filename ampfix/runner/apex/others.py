"""apex's other modules a training script imports beside ``apex.amp``, for scripts written against NVIDIA apex.

Runs in the child, when the script imports one of them and no installed apex provides it (see :mod:`provider`).
apex's own ImageNet example imports ``apex.fp16_utils`` (``*``), ``apex.optimizers`` and
``apex.multi_tensor_apply`` in the ``try`` that raises without apex, and of all they bind calls only
``to_python_float``. So:

* ``to_python_float`` is apex's own (``t.item()``, or ``t[0]`` for what has no ``item``): pure Python, the same on
  any device;
* every other name of those modules is bound, so the imports (star import included) work as with apex, but calling
  one fails: master weights by hand (``FP16_Optimizer``), the fused optimizers and the multi-tensor kernels are not
  emulated. The failure is the runner's, and the run's summary names the name and the line.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from ampfix.runner.trace.observe import Recorder
from ampfix.runner.trace.sites import find_site

# What each module binds at apex's last commit with apex.amp (eae1ddf1): its ``__init__``'s names.
NAMES = {
    "apex.fp16_utils": ("BN_convert_float", "network_to_half", "prep_param_lists", "model_grads_to_master_grads",
                        "master_params_to_model_params", "tofp16", "to_python_float", "clip_grad_norm",
                        "convert_module", "convert_network", "FP16Model", "FP16_Optimizer", "LossScaler",
                        "DynamicLossScaler"),
    "apex.optimizers": ("FusedSGD", "FusedAdam", "FusedNovoGrad", "FusedLAMB", "FusedAdagrad",
                        "FusedMixedPrecisionLamb"),
    "apex.multi_tensor_apply": ("MultiTensorApply", "multi_tensor_applier"),
}
TO_PYTHON_FLOAT = "apex.fp16_utils.to_python_float (apex's own: t.item(), or t[0])"
NOT_EMULATED = "{module}.{name} (not emulated: the import works, a call fails)"


def to_python_float(t: Any) -> Any:
    """apex.fp16_utils.to_python_float, as apex wrote it."""
    if hasattr(t, "item"):
        return t.item()
    return t[0]


def populate(module: ModuleType, recorder: Recorder) -> None:
    """Fill one of :data:`NAMES`' module objects: ``to_python_float`` itself, every other name a stand-in that
    records its use and fails when called."""
    module.__doc__ = f"{module.__name__}, as much of it as ampfix run stands in for (apex is not installed)."
    module.__dict__["__all__"] = list(NAMES[module.__name__])  # what `from apex.fp16_utils import *` binds
    for name in NAMES[module.__name__]:
        if (module.__name__, name) == ("apex.fp16_utils", "to_python_float"):
            setattr(module, name, _recorded(to_python_float, TO_PYTHON_FLOAT, recorder))
        else:
            setattr(module, name, _not_emulated(module.__name__, name, recorder))


def _recorded(function: Callable[..., Any], feature: str, recorder: Recorder) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        recorder.emulated_use(feature, find_site())
        return function(*args, **kwargs)

    call.__name__ = call.__qualname__ = function.__name__
    call.__doc__ = function.__doc__
    return call


def _not_emulated(module: str, name: str, recorder: Recorder) -> Callable[..., Any]:
    feature = NOT_EMULATED.format(module=module, name=name)

    def call(*args: Any, **kwargs: Any) -> Any:
        recorder.unemulated_use(feature, find_site())
        raise NotImplementedError(f"{module}.{name}: ampfix run emulates apex.amp's O1, apex.parallel and "
                                  f"to_python_float, not {name} (apex is not installed)")

    call.__name__ = call.__qualname__ = name
    return call
