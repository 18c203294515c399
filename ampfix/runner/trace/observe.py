"""What the harness sees inside one process, and the JSON it leaves behind when the process exits.

Runs in the child. Pure Python (no torch import): the patches call into a :class:`Recorder`,
which keeps two kinds of data:

* counters and lists for the summary (regions, op dtypes, scaler calls, losses, deprecations);
* an ordered *trace* of the things a migration must not change (autocast requests, GradScaler
  arguments, custom_fwd/custom_bwd device types, scaler calls, losses, optimizer steps), each
  tagged with the number of optimizer steps taken so far. ``verify`` compares two traces.

A request (autocast, a GradScaler, custom_fwd/custom_bwd, a model call and its precision) is
traced as ``fields``, its arguments by name as JSON scalars, which ``verify`` compares and
retargets; what people read of it is rendered from them by :func:`event_what`. A request whose
dtype the script left to the device's default also says so (``defaulted``, not compared: a rewrite
may spell the default out); ``verify --device cpu --keep-dtype`` needs it, as the rewrite moves only
that dtype. Other events (a loss's hex, a clipping) carry their text as ``what``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# A run without --max-steps can be long; past this many events the trace stops growing (and
# says so) while the counters keep counting.
TRACE_LIMIT = 100_000

SCALER_CALLS = ("scale", "unscale", "step", "update")


@dataclass(frozen=True)
class Site:
    file: str
    line: int
    # "script" when the script asked for it, "torch" when torch did it on the script's behalf
    # (custom_fwd's inner autocast, for instance).
    origin: str = "script"


@dataclass(frozen=True)
class RegionKey:
    """One autocast construction site with what was asked for and what actually ran.

    The requested dtype and cache setting are the effective ones: where the call gives none, the
    value current at construction (an enclosing region's, ``torch.set_autocast_dtype``'s), as torch
    takes it; the old ``torch.cuda.amp.autocast()`` passes float16 and True itself."""

    site: Site
    device_requested: str
    dtype_requested: str  # normalised: None became the device default
    enabled_requested: bool | str  # repr() of anything that is not a bool
    cache_enabled_requested: bool | str
    device_run: str
    dtype_run: str
    enabled_run: bool
    dtype_defaulted: bool = False  # no dtype given: dtype_requested is the device's default

    def defaulted_fields(self) -> tuple[str, ...]:
        return ("dtype",) if self.dtype_defaulted else ()

    def request_fields(self) -> dict[str, Any]:
        return {
            "device": self.device_requested,
            "dtype": self.dtype_requested,
            "enabled": self.enabled_requested,
            "cache_enabled": self.cache_enabled_requested,
        }


@dataclass(frozen=True)
class CustomFwdKey:
    """One custom_fwd decoration site: the device and ``cast_inputs`` asked for and those it runs with."""

    site: Site
    device_requested: str
    cast_inputs_requested: str | None  # a dtype's name; None: no cast (forward keeps the autocast state)
    device_run: str
    cast_inputs_run: str | None

    def request_fields(self) -> dict[str, Any]:
        return {"device_type": self.device_requested, "cast_inputs": self.cast_inputs_requested}


@dataclass(frozen=True)
class RunningCall:
    """The deprecated call the runner is counting in this thread (see :meth:`Recorder.deprecated_call`)."""

    message: str
    category: str
    site: Site
    count: int
    owns_warnings: bool = False

    def raised(self, message: str) -> bool:
        """Whether a deprecation warning with this text, raised now, is this call's own."""
        return self.owns_warnings or message == self.message


def dtype_name(dtype: Any) -> str:
    """'torch.bfloat16' -> 'bfloat16'; anything that is not a dtype keeps its repr."""
    text = str(dtype)
    return text[len("torch.") :] if text.startswith("torch.") else repr(dtype)


class Float16Record:
    """What float16 did, as a GPU computes it (gpu/numerics): the first float16 result that overflowed since the last
    optimizer step, each step a loss scaler skipped (with that overflow), the first non-finite loss, and the gradient
    values float16 flushed to zero without a loss scaler."""

    def __init__(self) -> None:
        self.watched = False  # float16 results are watched here (gpu/numerics installed): the op can be named
        self.reset()

    def reset(self) -> None:
        self._overflow: dict[str, Any] | None = None
        self.skipped_steps: list[dict[str, Any]] = []
        self.first_nonfinite_loss: dict[str, Any] | None = None
        self.underflows = 0

    def overflow_pending(self) -> bool:
        """Whether a float16 overflow is already noted for this step (only the first is reported)."""
        return self._overflow is not None

    def overflowed(self, op: str, phase: str, site: Site) -> None:
        """``op``'s float16 result (``phase``: "forward", or "backward" for its gradient) held an inf or a NaN."""
        if self._overflow is None:
            self._overflow = {"op": op, "phase": phase, "file": site.file, "line": site.line}

    def underflowed(self, values: int) -> None:
        self.underflows += values

    def step_taken(self) -> None:
        self._overflow = None

    def step_skipped(self, step: int, scale: float | None) -> None:
        self.skipped_steps.append({"step": step, "scale": scale, "overflow": self._overflow})
        self._overflow = None

    def loss(self, value: float, site: Site, index: int) -> None:
        if self.first_nonfinite_loss is None and not math.isfinite(value):
            self.first_nonfinite_loss = {
                "value": value, "file": site.file, "line": site.line, "loss": index, "overflow": self._overflow,
            }

    def to_dict(self) -> dict[str, Any]:
        return {"watched": self.watched, "skipped_steps": self.skipped_steps,
                "first_nonfinite_loss": self.first_nonfinite_loss, "underflows": self.underflows}


class Recorder:
    def __init__(self, role: str) -> None:
        self.role = role
        # The emulated GPUs (devices.DeviceModel, set by the harness once torch is imported): the devices the
        # script's tensors were on and each GPU's memory, read when the observation is written.
        self.devices: Any = None
        # Set in a Pool's workers: which worker runs which task is up to the scheduler (see compare).
        self.pool_worker = False
        self._calls = threading.local()  # the deprecated call running in each thread (see deprecated_call)
        self.float16 = Float16Record()
        self.reset()

    def reset(self) -> None:
        self.regions: dict[RegionKey, int] = {}
        self.custom_fwds: dict[CustomFwdKey, int] = {}  # -> how many functions that site decorated
        self.op_dtypes: dict[Any, int] = {}
        self.scaler_calls = dict.fromkeys(SCALER_CALLS, 0)
        self.skipped_steps = 0
        self.grad_scalers: list[dict[str, Any]] = []
        # The loss scale each of apex.amp's loss scalers holds now (the emulation's, see apex_amp).
        self.apex_loss_scales: list[float] = []
        self.optimizer_steps = 0
        self.losses: list[float] = []
        self.deprecations: dict[tuple[str, str, str, int], int] = {}
        self.deprecated_apis: set[tuple[str, str, str, int]] = set()  # the deprecations the runner counted itself
        # Set when the process ends: the script's own modules it loaded, and the exception it died of.
        self.local_modules: list[str] = []
        self.failure: dict[str, Any] | None = None
        self.unemulated: dict[tuple[str, str, int], int] = {}
        self.emulated: dict[tuple[str, str, int], int] = {}
        self.stand_in: dict[tuple[str, str, int], int] = {}
        self.device_queries: dict[tuple[str, str, str, int], int] = {}
        # What a GPU refuses, where the script did it (raised, or let through with --no-device-checks).
        self.gpu_refusals: dict[tuple[str, str, int], int] = {}
        self.trace: list[dict[str, Any]] = []
        self.trace_truncated = False
        # the trace's loss scalers of apex's last initialize, while no scale_loss has used them
        self._apex_unused_scalers: list[dict[str, Any]] = []
        self.stopped_at_max_steps = False
        self.float16.reset()

    # -- the trace -------------------------------------------------------------------------

    def _trace(
        self, kind: str, what: str = "", site: Site | None = None, fields: dict[str, Any] | None = None,
        defaulted: tuple[str, ...] = (),
    ) -> None:
        if len(self.trace) >= TRACE_LIMIT:
            self.trace_truncated = True
            return
        event: dict[str, Any] = {"step": self.optimizer_steps, "kind": kind}
        if fields is not None:
            event["fields"] = fields
        else:
            event["what"] = what
        if defaulted:
            event["defaulted"] = list(defaulted)
        if site is not None:
            event["where"] = f"{site.file}:{site.line}"
        self.trace.append(event)

    # -- autocast --------------------------------------------------------------------------

    def region_created(self, key: RegionKey) -> None:
        self.regions.setdefault(key, 0)
        if key.site.origin == "script":
            self._trace("autocast", site=key.site, fields=key.request_fields(), defaulted=key.defaulted_fields())

    def region_entered(self, key: RegionKey, site: Site) -> None:
        self.regions[key] = self.regions.get(key, 0) + 1
        if key.site.origin == "script":
            self._trace("autocast_enter", site=site, fields=key.request_fields(), defaulted=key.defaulted_fields())

    def custom_amp_decorator(self, name: str, request: dict[str, Any], site: Site) -> None:
        """custom_fwd / custom_bwd and the arguments it was given, by name."""
        self._trace(name, site=site, fields=request)

    def custom_fwd_created(self, key: CustomFwdKey) -> None:
        self.custom_fwds[key] = self.custom_fwds.get(key, 0) + 1
        self.custom_amp_decorator("custom_fwd", key.request_fields(), key.site)

    def count_op_dtype(self, dtype: Any) -> None:
        self.op_dtypes[dtype] = self.op_dtypes.get(dtype, 0) + 1

    # -- GradScaler, optimizer, losses -----------------------------------------------------

    def scaler_created(self, arguments: dict[str, Any], site: Site,
                       emulating: str | None = None) -> dict[str, Any] | None:
        """``arguments``: JSON scalars by name. ``emulating``: the library whose loss scaler this stands
        for (apex.amp's), shown, not compared. The creation's trace event (None past the trace's limit): a
        native scaler's is marked `unused` until it is called (`scaler_used`)."""
        extra = {"emulating": emulating} if emulating else {}
        self.grad_scalers.append({**arguments, **extra, "file": site.file, "line": site.line})
        traced = len(self.trace)
        self._trace("grad_scaler", site=site, fields=dict(arguments))
        event = self.trace[-1] if len(self.trace) > traced else None
        if emulating and event is not None:
            # until a scale_loss uses it: verify does not count a loss scaler of apex's nothing scaled with (an
            # initialize given the model alone, for inference, where the native rewrite makes no GradScaler)
            event["apex_unused"] = True
            self._apex_unused_scalers.append(event)
        return event

    @staticmethod
    def scaler_used(event: dict[str, Any] | None) -> None:
        """A native scaler was called (scale, unscale_, step, update): verify counts it. A disabled one nothing calls
        changes nothing (the placeholder a set-up split across modules binds until initialize's place runs) and is
        not counted, as apex's loss scalers replaced unused are not."""
        if event is not None:
            event.pop("unused", None)

    def apex_loss_scalers_used(self) -> None:
        """A scale_loss ran on the loss scalers of apex's last initialize: verify counts them."""
        for event in self._apex_unused_scalers:
            event.pop("apex_unused", None)
        self._apex_unused_scalers = []

    def apex_loss_scalers_replaced(self) -> None:
        """apex's initialize called again: the loss scalers made before are replaced (apex kept one set,
        process-wide). Those no scale_loss used (sentence-transformers' loop, an initialize per objective before the
        training loop) are marked `replaced_unused`: verify does not count them, the last one serving every
        optimizer. Those used before (torchdistill's initialize per stage) are counted, as the rewrite's scaler per
        stage is."""
        for event in self._apex_unused_scalers:
            event["replaced_unused"] = True
        self._apex_unused_scalers = []

    def scaler_called(self, name: str, what: str = "") -> None:
        self.scaler_calls[name] += 1
        self._trace(f"scaler.{name}", what)

    def apex_loss_scales_now(self, scales: list[float]) -> None:
        self.apex_loss_scales = list(scales)

    def scaler_updated_without_step(self, site: Site) -> None:
        self._trace("scaler.update_without_step", "", site)

    def scaler_state(self, kind: str, scale: Any, site: Site) -> None:
        """A loss scaler's state saved (``state_dict``) or restored (``load_state_dict``): its scale."""
        self._trace(f"scaler.{kind}", f"scale={scale!r}", site)

    def gradients_clipped(self, what: str, site: Site) -> None:
        self._trace("clip_grad", what, site)

    def stepped_on_scaled_gradients(self, scale: float, site: Site) -> None:
        self._trace("optimizer_step_on_scaled_gradients", repr(scale), site)

    def model_called(self, module: str, region: RegionKey | None, site: Site) -> None:
        """A top-level module call and the device and dtype the script asked for of the autocast
        ``region`` it ran under; None outside autocast."""
        if region is None:
            fields = {"module": module, "device": None, "dtype": None}
            self._trace("model_call", site=site, fields=fields)
            return
        fields = {"module": module, "device": region.device_requested, "dtype": region.dtype_requested}
        self._trace("model_call", site=site, fields=fields, defaulted=region.defaulted_fields())

    def scaler_step_skipped(self, scale: float | None = None) -> None:
        """``scale``: the loss scale the skipped step's gradients were scaled by (None: not known)."""
        self.skipped_steps += 1
        self._trace("scaler.skipped_step", "")
        self.float16.step_skipped(self.optimizer_steps + self.skipped_steps, scale)

    def optimizer_stepped(self) -> None:
        self.optimizer_steps += 1
        self._trace("optimizer_step", str(self.optimizer_steps))
        self.float16.step_taken()

    def loss(self, value: float, site: Site) -> None:
        self.losses.append(value)
        self.float16.loss(value, site, len(self.losses))
        # float.hex: verify compares losses bit for bit, and a NaN equals itself as text.
        self._trace("loss", value.hex(), site)

    def scales_losses(self) -> bool:
        """Whether the script made an enabled loss scaler (a GradScaler, apex.amp's)."""
        return any(scaler.get("enabled", True) is True for scaler in self.grad_scalers)

    # -- what the user should know ---------------------------------------------------------

    def deprecation(self, message: str, category: str, file: str, line: int) -> int:
        """Count one more occurrence; returns how many times this one has been seen."""
        key = (message, category, file, line)
        self.deprecations[key] = count = self.deprecations.get(key, 0) + 1
        return count

    @contextlib.contextmanager
    def deprecated_call(self, message: str, category: str, site: Site, *, owns_warnings: bool = False) -> Iterator[int]:
        """A call of a deprecated API, counted here whatever warning filters the script set; while it runs,
        :meth:`deprecated_call_running` names it, so the warning it raises (if shown) is not counted twice.
        ``owns_warnings``: every deprecation warning raised while it runs is its own, whatever its text (a C
        function that calls no Python code, whose warning text the build decorates). Yields how many times
        this one has been seen."""
        count = self.deprecation(message, category, site.file, site.line)
        self.deprecated_apis.add((message, category, site.file, site.line))
        outer = getattr(self._calls, "running", None)
        self._calls.running = RunningCall(message, category, site, count, owns_warnings)
        try:
            yield count
        finally:
            self._calls.running = outer

    def deprecated_call_running(self) -> RunningCall | None:
        return getattr(self._calls, "running", None)

    def unemulated_use(self, feature: str, site: Site) -> None:
        key = (feature, site.file, site.line)
        self.unemulated[key] = self.unemulated.get(key, 0) + 1

    def emulated_use(self, feature: str, site: Site) -> None:
        """A library the script uses that is not installed and that the runner stands in for."""
        key = (feature, site.file, site.line)
        self.emulated[key] = self.emulated.get(key, 0) + 1

    def stand_in_use(self, what: str, site: Site) -> None:
        """A place where the bfloat16 stand-in was shown to the script as the float16 it stands for."""
        key = (what, site.file, site.line)
        self.stand_in[key] = self.stand_in.get(key, 0) + 1

    def device_query(self, query: str, answer: str, site: Site) -> None:
        """A question the script can branch on (``torch.cuda.is_available()``) and what it was told."""
        key = (query, answer, site.file, site.line)
        self.device_queries[key] = self.device_queries.get(key, 0) + 1

    def gpu_refusal(self, message: str, site: Site) -> None:
        key = (message, site.file, site.line)
        self.gpu_refusals[key] = self.gpu_refusals.get(key, 0) + 1

    def is_empty(self) -> bool:
        return not (
            self.regions or self.custom_fwds or self.op_dtypes or any(self.scaler_calls.values())
            or self.optimizer_steps
            or self.losses or self.deprecations or self.unemulated or self.emulated or self.stand_in
            or self.device_queries or self.trace or self.gpu_refusals
        )  # fmt: skip

    # -- output ----------------------------------------------------------------------------

    def to_dict(self, label: str) -> dict[str, Any]:
        return {
            "label": label,
            "pid": os.getpid(),
            "role": self.role,
            "pool_worker": self.pool_worker,
            "autocast_regions": [_region_dict(key, entered) for key, entered in self.regions.items()],
            "custom_fwd": [_custom_fwd_dict(key, count) for key, count in self.custom_fwds.items()],
            "op_dtypes": {dtype_name(dtype): count for dtype, count in self.op_dtypes.items()},
            "scaler": {**self.scaler_calls, "skipped_steps": self.skipped_steps},
            "grad_scalers": self.grad_scalers,
            "apex_loss_scales": self.apex_loss_scales,
            "optimizer_steps": self.optimizer_steps,
            "losses": self.losses,
            "deprecations": [
                {
                    "message": m, "category": c, "file": f, "line": n, "count": count,
                    "api": (m, c, f, n) in self.deprecated_apis,
                }
                for (m, c, f, n), count in self.deprecations.items()
            ],
            "local_modules": self.local_modules,
            "failure": self.failure,
            "unemulated": [
                {"feature": feature, "file": f, "line": n, "count": count}
                for (feature, f, n), count in self.unemulated.items()
            ],
            "emulated": [
                {"feature": feature, "file": f, "line": n, "count": count}
                for (feature, f, n), count in self.emulated.items()
            ],
            "stand_in": [
                {"what": what, "file": f, "line": n, "count": count} for (what, f, n), count in self.stand_in.items()
            ],
            "device_queries": [
                {"query": query, "answer": answer, "file": f, "line": n, "count": count}
                for (query, answer, f, n), count in self.device_queries.items()
            ],
            "devices_used": sorted(self.devices.used) if self.devices is not None else [],
            "gpu_memory": self.devices.memory.report() if self.devices is not None else [],
            "gpu_refusals": [
                {"message": message, "file": f, "line": n, "count": count}
                for (message, f, n), count in self.gpu_refusals.items()
            ],
            "stopped_at_max_steps": self.stopped_at_max_steps,
            "float16": self.float16.to_dict(),
            "trace": self.trace,
            "trace_truncated": self.trace_truncated,
        }

    def write(self, out_dir: str, label: str) -> None:
        path = os.path.join(out_dir, f"process-{os.getpid()}.json")
        # One temporary file per writing thread: a worker's SIGTERM watcher may write while its exit does.
        temporary = f"{path}.{threading.get_ident()}.tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(self.to_dict(label), handle)
        os.replace(temporary, path)  # the parent never reads half a file


def _region_dict(key: RegionKey, entered: int) -> dict[str, Any]:
    return {
        "device_requested": key.device_requested,
        "dtype_requested": key.dtype_requested,
        "enabled_requested": key.enabled_requested,
        "cache_enabled_requested": key.cache_enabled_requested,
        "device_run": key.device_run,
        "dtype": key.dtype_run,
        "enabled": key.enabled_run,
        "entered": entered,
        "origin": key.site.origin,
        "file": key.site.file,
        "line": key.site.line,
    }


def _custom_fwd_dict(key: CustomFwdKey, count: int) -> dict[str, Any]:
    return {
        "device_requested": key.device_requested,
        "cast_inputs_requested": key.cast_inputs_requested,
        "device_run": key.device_run,
        "cast_inputs": key.cast_inputs_run,
        "file": key.site.file,
        "line": key.site.line,
        "count": count,
    }


def event_what(event: dict[str, Any]) -> str:
    """The text people read for a trace event: rendered from its fields, or its own text when it has none."""
    fields = event.get("fields")
    if fields is None:
        return event["what"]
    if event["kind"] == "model_call":
        return _model_call_text(fields)
    # A GradScaler's arguments are shown as Python literals (device='cuda' init_scale=65536.0), the
    # other requests' values as plain words (device=cuda dtype=float16): the texts verify has always shown.
    show = repr if event["kind"] == "grad_scaler" else str
    return " ".join(f"{name}={show(value)}" for name, value in fields.items())


def _model_call_text(fields: dict[str, Any]) -> str:
    """'SmallCNN under autocast(cuda float16)', or 'SmallCNN outside autocast'."""
    if fields["device"] is None:
        return f"{fields['module']} outside autocast"
    return f"{fields['module']} under autocast({fields['device']} {fields['dtype']})"
