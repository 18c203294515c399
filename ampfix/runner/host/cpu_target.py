"""What ``ampfix rewrite --device cpu`` promises, in the terms the runner records: ``verify
--device cpu`` holds the rewrite to the original's requests as that rewrite moves them. Pure.

Each request the original made for "cuda" is expected on "cpu" instead; a dtype chosen for CUDA
becomes the CPU's (the device rules' own mapping, ``Family.cpu_dtypes``: float16 -> bfloat16), in
the parameters the rules say hold one (autocast's ``dtype``, custom_fwd's ``cast_inputs``); every
other argument (enabled, cache_enabled, the scaler's settings) is expected unchanged. Requests for
"cpu" stay as they are, as the rewrite leaves them. With ``--keep-dtype`` the rewrite keeps every
dtype the script wrote; only a dtype left to CUDA's default (float16) becomes the CPU's default
(bfloat16, which is also the mapping's float16), since the rewrite leaves it unwritten. Imports the
rules, which are plain data: no torch, no libcst.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ampfix.core.rules import Rule
from ampfix.families import TORCH_AMP
from ampfix.families.torch_amp import autocast, custom_bwd, custom_fwd, grad_scaler
from ampfix.runner.host.model import RunReport

# A trace event the rewrite retargets -> the field that holds its device, and the rule whose call
# made it (its CallShape names the parameters holding a dtype chosen for CUDA). A model call is
# retargeted as the autocast region it ran under.
_RETARGETED_EVENTS: dict[str, tuple[str, Rule]] = {
    "autocast": ("device", autocast.RULE),
    "autocast_enter": ("device", autocast.RULE),
    "model_call": ("device", autocast.RULE),
    "grad_scaler": ("device", grad_scaler.RULE),
    "custom_fwd": ("device_type", custom_fwd.RULE),
    "custom_bwd": ("device_type", custom_bwd.RULE),
}


def _short_dtype(qualified: str) -> str:
    """'torch.float16' -> 'float16': the runner records dtypes without their module."""
    return qualified.rpartition(".")[2]


CPU_DTYPES = {_short_dtype(old): _short_dtype(new) for old, new in TORCH_AMP.cpu_dtypes.items()}
# The dtype a "cuda" region of the original runs in: the one the rewrite asks for instead of float16.
CPU_AMP_DTYPE = CPU_DTYPES["float16"]


def as_cpu_rewrite_promises(report: RunReport, keep_dtype: bool = False) -> RunReport:
    """``report`` with every trace event of a "cuda" request turned into what the rewrite must record;
    ``keep_dtype``: as ``ampfix rewrite --device cpu --keep-dtype`` makes it."""
    processes = [
        {**process, "trace": [_retargeted(event, keep_dtype) for event in process["trace"]]}
        for process in report.processes
    ]
    return replace(report, processes=processes)


def _retargeted(event: dict[str, Any], keep_dtype: bool) -> dict[str, Any]:
    known = _RETARGETED_EVENTS.get(event["kind"])
    if known is None:
        return event
    device_field, rule = known
    fields = event["fields"]
    if fields.get(device_field) != "cuda":
        return event
    dtype_fields = rule.shape.cuda_dtype_params if rule.shape is not None else ()
    if keep_dtype:
        dtype_fields = tuple(name for name in dtype_fields if name in event.get("defaulted", ()))
    moved = {}
    for name, value in fields.items():
        if name == device_field:
            value = "cpu"
        elif name in dtype_fields:
            value = CPU_DTYPES.get(value, value)
        moved[name] = value
    return {**event, "fields": moved}
