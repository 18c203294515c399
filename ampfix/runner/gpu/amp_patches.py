"""CUDA AMP runs as CPU AMP, and every request is recorded as the script made it.

Runs in the child. ``torch.amp.autocast_mode.autocast.__init__`` is the one constructor all the
autocast spellings reach (``torch.autocast``, ``torch.amp.autocast``, the deprecated
``torch.cuda.amp.autocast`` through ``super().__init__``); likewise ``torch.amp.GradScaler.
__init__`` for the scalers. The patched constructors record the *requested* arguments, normalised
(``dtype=None`` becomes the device default), then build the object for the CPU: a region asked
for on "cuda" runs as CPU autocast in the chosen dtype, a "cuda" custom_fwd casts its inputs to
that dtype where it asked for a low-precision one, a "cuda" GradScaler is a CPU GradScaler.
Recording the request, not what ran, is what lets ``verify`` see a rewrite that changed the
requested dtype even though the run forces one dtype everywhere.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
import types
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from ampfix.runner.gpu.cuda_autocast import CudaPolicy
from ampfix.runner.gpu.torch_features import AUTOCAST_STATE
from ampfix.runner.trace.observe import CustomFwdKey, Recorder, RegionKey, dtype_name
from ampfix.runner.trace.patching import replace, with_arguments_adjusted, with_call_bound
from ampfix.runner.trace.sites import find_site, read_by_script

# Per device on every release (torch_features: before 2.4, one function per device).
_original_get_autocast_dtype = AUTOCAST_STATE.get_dtype
_original_is_autocast_enabled = AUTOCAST_STATE.is_enabled
_original_set_autocast_dtype = AUTOCAST_STATE.set_dtype
_original_set_autocast_enabled = AUTOCAST_STATE.set_enabled
_original_cache_enabled = torch.is_autocast_cache_enabled

# The run dtypes that replace every low-precision request; the others keep the requested dtype ("float16", the
# default, and "float16-cpu" differ in how float16 is computed: gpu/numerics, or the CPU's own kernels).
FORCED_DTYPES = {"bfloat16": torch.bfloat16}
# Autocast's low precision: a custom_fwd that casts its inputs to one of these asks for it.
LOW_PRECISION_DTYPES = (torch.bfloat16, torch.float16)


class AmpPlan:
    """How a request for the emulated device is run on the CPU."""

    def __init__(
        self, amp_dtype: str, cuda_policy: CudaPolicy | None = None, cuda_tensors_read_as: str = "cuda"
    ) -> None:
        self.forced_dtype = FORCED_DTYPES.get(amp_dtype)  # None: keep the requested dtype
        # The device the script's "cuda" tensors read as (devices.DeviceModel): "cuda", or "cpu" where "cuda"
        # means the CPU (verify --device cpu). A "cuda" custom_fwd casts the tensors of that device.
        self.cuda_tensors_read_as = cuda_tensors_read_as
        # "explicit": a dtype the script gave is kept, a defaulted one is the CPU's default, as in a
        # rewrite to the CPU that keeps float16 (`ampfix rewrite --device cpu --keep-dtype`).
        self.cpu_default_for_defaulted = amp_dtype == "explicit"
        # Set when "cuda" regions run CUDA's op policy (--autocast-policy cuda); None: the CPU's.
        self.cuda_policy = cuda_policy
        # True once float16 asked of "cuda" autocast has run as bfloat16 in this process: from then on
        # a bfloat16 tensor is taken for the stand-in of a float16 one where it meets the outside
        # world (see :mod:`boundaries`).
        self.stand_in = False

    def note_run(self, region: RegionKey) -> None:
        if region.enabled_run and region.dtype_requested == "float16" and region.dtype_run == "bfloat16":
            self.stand_in = True

    def runs_cuda_policy(self, region: RegionKey) -> bool:
        """A region the script asked for as "cpu" keeps the CPU's policy. An enabled region torch opens
        on the script's behalf replays a script region (checkpointing recomputes the forward in
        backward, outside any region): in a run with CUDA's policy, that is a "cuda" one."""
        if self.cuda_policy is None or not region.enabled_run:
            return False
        return region.site.origin != "script" or region.device_requested == "cuda"

    @staticmethod
    def requested_dtype(device_type: Any, dtype: Any) -> Any:
        if dtype is not None or not isinstance(device_type, str):
            return dtype
        try:
            return _original_get_autocast_dtype(device_type)
        except RuntimeError:  # an unknown device type: the constructor will say so
            return None

    def run_device_and_dtype(self, device_type: Any, dtype: Any, dtype_given: bool) -> tuple[Any, Any]:
        if device_type != "cuda":
            return device_type, dtype
        if not dtype_given and self.cpu_default_for_defaulted:
            return "cpu", _original_get_autocast_dtype("cpu")
        requested = self.requested_dtype(device_type, dtype)
        if not isinstance(requested, torch.dtype):
            # Not a dtype at all (a positional `enabled` that slid into `dtype`): passed on, it
            # fails on entry exactly as it would on a GPU.
            return "cpu", requested
        return "cpu", self.forced_dtype or requested

    def run_cast_inputs(self, device_type: Any, cast_inputs: Any) -> Any:
        """What a custom_fwd for ``device_type`` casts its inputs to. For "cuda", a low-precision
        ``cast_inputs`` asks for autocast's low precision, so it runs in the run's AMP dtype, as a
        region's written dtype does (kept with --amp-dtype keep or explicit); float32 (a forward
        that must run in full precision) and every other value stay as written."""
        if device_type != "cuda" or cast_inputs not in LOW_PRECISION_DTYPES:
            return cast_inputs
        run = self.forced_dtype or cast_inputs
        if cast_inputs == torch.float16 and run == torch.bfloat16:
            self.stand_in = True
        return run


class CpuAutocastState:
    """The CPU autocast state as the script set it, kept while the emulation holds the real one."""

    __slots__ = ("enabled", "dtype")

    def __init__(self, enabled: bool, dtype: Any) -> None:
        self.enabled, self.dtype = enabled, dtype

    @classmethod
    def now(cls) -> CpuAutocastState:
        return cls(_original_is_autocast_enabled("cpu"), _original_get_autocast_dtype("cpu"))

    def make_real(self) -> None:
        _original_set_autocast_enabled("cpu", self.enabled)
        _original_set_autocast_dtype("cpu", self.dtype)


class ActiveRegions:
    """The autocast regions open in each thread, innermost last: what a model call ran under. And, per
    thread, the script's own CPU autocast state, which a region the emulation runs on the CPU state does
    not change on a GPU (see :meth:`script_cpu_state`)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def stack(self) -> list[RegionKey]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def innermost_enabled(self) -> RegionKey | None:
        """The innermost region, if it runs autocast; None outside autocast."""
        stack = self.stack()
        if not stack or not stack[-1].enabled_run:
            return None
        return stack[-1]

    def _cpu_states(self) -> list[CpuAutocastState | None]:
        states = getattr(self._local, "cpu_states", None)
        if states is None:
            states = self._local.cpu_states = []
        return states

    def script_cpu_state(self) -> CpuAutocastState | None:
        """The script's CPU autocast state where the emulation holds the real one (inside a "cuda" region, or
        one torch opened for it); None where the real state is the script's (outside them, or inside a "cpu"
        region the script opened, which runs on the real state as on a GPU)."""
        states = getattr(self._local, "cpu_states", None)
        return states[-1] if states else None

    def asked_by_the_script(self) -> CpuAutocastState | None:
        """:meth:`script_cpu_state`, where the script (or a library) asks; None where torch's own code does."""
        held = self.script_cpu_state()
        return held if held is not None and read_by_script() is not None else None

    def holding(self, region: RegionKey | None) -> CpuAutocastState | None:
        """What to keep for the script on entering ``region``, read before torch changes the state."""
        if region is None or (region.device_requested == "cpu" and region.site.origin == "script"):
            return None
        outer = self.script_cpu_state()
        return CpuAutocastState(outer.enabled, outer.dtype) if outer is not None else CpuAutocastState.now()

    def entered(self, held: CpuAutocastState | None) -> int:
        """Returns the depth to hand to :meth:`left`."""
        states = self._cpu_states()
        states.append(held)
        return len(states) - 1

    def left(self, depth: int | None) -> None:
        """On a GPU, what the script set on the CPU inside a "cuda" region stays once it is left: handed to
        the enclosing emulation, or made real (torch has just restored the state from before the region)."""
        states = self._cpu_states()
        if depth is None or depth >= len(states):
            return
        held = states[depth]
        del states[depth:]
        if held is None:
            return
        outer = states[-1] if states else None
        if outer is not None:
            outer.enabled, outer.dtype = held.enabled, held.dtype
        elif (held.enabled, held.dtype) != (_original_is_autocast_enabled("cpu"), _original_get_autocast_dtype("cpu")):
            held.make_real()


def _enter_cuda_state(region: Any) -> Any:
    """A "cuda" region runs as a CPU one, so torch never sets the CUDA autocast state: the dtype that a nested
    ``torch.amp.autocast("cuda")`` without a dtype inherits, and that ``torch.get_autocast_dtype("cuda")`` /
    ``get_autocast_gpu_dtype()`` read (float16 by default, whatever the run's dtype), and whether CUDA autocast
    is on, which the script reads with ``torch.is_autocast_enabled()``. Set here as on a GPU (the requested,
    effective dtype; the region's enabled), restored on exit. Returns what to restore, or None."""
    dtype = getattr(region, "_ampfix_cuda_dtype", None)
    if not isinstance(dtype, torch.dtype):
        return None
    previous = (_original_get_autocast_dtype("cuda"), _original_is_autocast_enabled("cuda"))
    try:
        _original_set_autocast_dtype("cuda", dtype)
    except RuntimeError:  # a dtype CUDA autocast refuses: the region itself fails as on a GPU
        return None
    _original_set_autocast_enabled("cuda", bool(region._enabled))
    return previous


def _restore_cuda_state(previous: Any) -> None:
    if previous is not None:
        dtype, enabled = previous
        _original_set_autocast_dtype("cuda", dtype)
        _original_set_autocast_enabled("cuda", enabled)


@contextlib.contextmanager
def autocast_suspended(plan: AmpPlan) -> Iterator[None]:
    """No autocast in this thread for a while, CUDA's policy included, with nothing recorded."""
    enabled = _original_is_autocast_enabled("cpu")
    _original_set_autocast_enabled("cpu", False)
    policy_before = plan.cuda_policy.switch(False) if plan.cuda_policy is not None else None
    try:
        yield
    finally:
        _original_set_autocast_enabled("cpu", enabled)
        if plan.cuda_policy is not None:
            plan.cuda_policy.restore(policy_before)


def _as_recorded(value: Any) -> Any:
    return value if isinstance(value, bool) else repr(value)


def _request(
    plan: AmpPlan, device_type: Any, dtype: Any, dtype_given: bool, enabled: Any, cache_enabled: Any
) -> dict[str, Any]:
    """What the script asked autocast for, normalised: defaults filled in as torch would."""
    if cache_enabled is None:
        cache_enabled = _original_cache_enabled()
    return {
        "site": find_site(),
        "device_requested": str(device_type),
        "dtype_requested": dtype_name(plan.requested_dtype(device_type, dtype)),
        "enabled_requested": _as_recorded(enabled),
        "cache_enabled_requested": _as_recorded(cache_enabled),
        "dtype_defaulted": not dtype_given,
    }


@contextlib.contextmanager
def _quiet_cpu_dtype_check() -> Iterator[None]:
    """CUDA autocast does not vet the dtype when built (a bad one fails on entry); CPU autocast warns."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="In CPU autocast, but the target dtype is not supported")
        yield


def install_autocast(recorder: Recorder, plan: AmpPlan, at_step_boundary, active: ActiveRegions) -> None:
    autocast = torch.amp.autocast_mode.autocast
    original_init, original_enter, original_exit = autocast.__init__, autocast.__enter__, autocast.__exit__

    def as_requested_for_the_cpu(arguments: dict[str, Any], construct) -> None:
        self, device_type, dtype = arguments["self"], arguments["device_type"], arguments["dtype"]
        dtype_given = getattr(self, _DTYPE_GIVEN, dtype is not None)
        if device_type == "cpu" and dtype is None:
            # A "cpu" region the script opens inside a "cuda" one defaults, as on a GPU, to the script's CPU
            # dtype, not to the one the emulation runs the "cuda" region in.
            held = active.asked_by_the_script()
            if held is not None:
                dtype = arguments["dtype"] = held.dtype
        request = _request(plan, device_type, dtype, dtype_given, arguments["enabled"], arguments["cache_enabled"])
        self._ampfix_cuda_dtype = plan.requested_dtype(device_type, dtype) if device_type == "cuda" else None
        arguments["device_type"], arguments["dtype"] = plan.run_device_and_dtype(device_type, dtype, dtype_given)
        unusual_dtype = device_type == "cuda" and arguments["dtype"] not in LOW_PRECISION_DTYPES
        try:
            with _quiet_cpu_dtype_check() if unusual_dtype else contextlib.nullcontext():
                construct()
        except Exception:
            # The request is what verify compares: keep it even when torch refuses it.
            recorder.region_created(RegionKey(**request, device_run="-", dtype_run="-", enabled_run=False))
            raise
        self._ampfix_region = RegionKey(
            **request, device_run=self.device, dtype_run=dtype_name(self.fast_dtype), enabled_run=bool(self._enabled)
        )
        plan.note_run(self._ampfix_region)
        recorder.region_created(self._ampfix_region)

    @functools.wraps(original_enter)
    def __enter__(self):
        region = getattr(self, "_ampfix_region", None)
        if region is not None:
            if region.site.origin == "script":
                at_step_boundary()
            recorder.region_entered(region, find_site())
        held = active.holding(region)
        entered = original_enter(self)
        self._ampfix_cpu_depth = active.entered(held)
        self._ampfix_cuda_state_before = _enter_cuda_state(self)
        if plan.cuda_policy is not None and region is not None:
            self._ampfix_policy_before = plan.cuda_policy.switch(plan.runs_cuda_policy(region))
        if region is not None:
            active.stack().append(region)
        return entered

    @functools.wraps(original_exit)
    def __exit__(self, *exc_info):
        try:
            return original_exit(self, *exc_info)
        finally:
            active.left(getattr(self, "_ampfix_cpu_depth", None))
            _restore_cuda_state(getattr(self, "_ampfix_cuda_state_before", None))
            if plan.cuda_policy is not None:
                plan.cuda_policy.restore(getattr(self, "_ampfix_policy_before", None))
            region, stack = getattr(self, "_ampfix_region", None), active.stack()
            if region is not None and stack and stack[-1] is region:
                stack.pop()

    replace(autocast, "__init__", with_call_bound(original_init, as_requested_for_the_cpu, fill_defaults=True))
    replace(autocast, "__enter__", __enter__)
    replace(autocast, "__exit__", __exit__)
    for device in ("cuda", "cpu"):
        deprecated = getattr(getattr(getattr(torch, device, None), "amp", None), "autocast", None)
        if isinstance(deprecated, type):  # a torch that dropped the class has nothing to note
            _note_whether_dtype_given(deprecated)


# Set on an instance of a deprecated autocast class: whether the script's call gave a dtype.
_DTYPE_GIVEN = "_ampfix_dtype_given"


def _note_whether_dtype_given(deprecated: Any) -> None:
    """``torch.cuda.amp.autocast()`` hands its own default dtype (float16) on to ``torch.autocast`` as
    if the script had given it; whether it did is known only at the script's call."""

    def note(arguments: dict[str, Any]) -> None:
        setattr(arguments["self"], _DTYPE_GIVEN, arguments.get("dtype") is not None)

    replace(deprecated, "__init__", with_arguments_adjusted(deprecated.__init__, note))


def install_autocast_state_queries(active: ActiveRegions) -> None:
    """The state queries answer the script as a GPU would; torch's own code (and the runner's) reads the
    real state, which runs the emulation.

    torch.is_autocast_enabled("cuda") (and the legacy no-argument form) asks the CPU state, which runs the
    "cuda" regions (and the ones torch opens for them: custom_fwd's, checkpointing's), except where the script
    (or a library it uses) asks while the real CPU state is its own (outside those regions, or inside a region
    it opened for "cpu"): there it reads the CUDA state as a GPU keeps it (:func:`_enter_cuda_state`).
    The CPU queries (``torch.is_autocast_enabled("cpu")``, ``get_autocast_dtype("cpu")``, the deprecated
    ``is_autocast_cpu_enabled()`` / ``get_autocast_cpu_dtype()``) asked by the script inside those regions
    read the script's own CPU state (:meth:`ActiveRegions.script_cpu_state`), and the CPU setters it calls
    there change that state, not the one that runs the region."""

    @functools.wraps(_original_is_autocast_enabled)
    def is_autocast_enabled(device_type: str = "cuda") -> bool:
        if device_type == "cuda":
            if active.script_cpu_state() is None and read_by_script() is not None:
                return _original_is_autocast_enabled("cuda")
            return _original_is_autocast_enabled("cpu")
        if device_type == "cpu":
            held = active.asked_by_the_script()
            if held is not None:
                return held.enabled
        return _original_is_autocast_enabled(device_type)

    @functools.wraps(_original_get_autocast_dtype)
    def get_autocast_dtype(device_type: str) -> Any:
        if device_type == "cpu":
            held = active.asked_by_the_script()
            if held is not None:
                return held.dtype
        return _original_get_autocast_dtype(device_type)

    def answering(getter: Any, answer: Any) -> Any:
        @functools.wraps(getter)
        def query(*args: Any, **kwargs: Any) -> Any:
            value = getter(*args, **kwargs)  # counted, and warned about, as ever
            held = active.asked_by_the_script()
            return value if held is None else answer(held)

        return query

    def setting(setter: Any) -> Any:
        @functools.wraps(setter)
        def set_state(*args: Any, **kwargs: Any) -> Any:
            held = active.asked_by_the_script()
            if held is None:
                return setter(*args, **kwargs)
            running = CpuAutocastState.now()
            held.make_real()
            try:
                return setter(*args, **kwargs)  # torch vets the arguments (and warns) as ever
            finally:
                held.enabled, held.dtype = _original_is_autocast_enabled("cpu"), _original_get_autocast_dtype("cpu")
                running.make_real()

        return set_state

    if AUTOCAST_STATE.per_device:
        replace(torch, "is_autocast_enabled", is_autocast_enabled)
        replace(torch, "get_autocast_dtype", get_autocast_dtype)
    else:  # before torch 2.4: is_autocast_enabled() takes no device (it is CUDA's), get_autocast_dtype is absent
        replace(torch, "is_autocast_enabled", _cuda_only(is_autocast_enabled, torch.is_autocast_enabled))
    for name in ("set_autocast_enabled", "set_autocast_dtype", "set_autocast_cpu_enabled", "set_autocast_cpu_dtype"):
        if hasattr(torch, name):
            replace(torch, name, setting(getattr(torch, name)))
    for name, answer in (("is_autocast_cpu_enabled", _held_enabled), ("get_autocast_cpu_dtype", _held_dtype)):
        if hasattr(torch, name):
            replace(torch, name, answering(getattr(torch, name), answer))


def _cuda_only(is_autocast_enabled: Any, original: Any) -> Any:
    """torch.is_autocast_enabled() as torch before 2.4 has it: no argument (a device given fails as it does)."""

    @functools.wraps(original)
    def is_cuda_autocast_enabled() -> bool:
        return is_autocast_enabled("cuda")

    return is_cuda_autocast_enabled


def _held_enabled(held: CpuAutocastState) -> bool:
    return held.enabled


def _held_dtype(held: CpuAutocastState) -> Any:
    return held.dtype


def install_custom_fwd_bwd(recorder: Recorder, plan: AmpPlan) -> None:
    """custom_fwd/custom_bwd for "cuda" act on CPU autocast (through the "cuda" regions they open), custom_fwd's
    ``cast_inputs`` in the run's dtype (:meth:`AmpPlan.run_cast_inputs`); what the script asked for is recorded."""

    def fwd_for_the_cpu(arguments: dict[str, Any]) -> None:
        requested_device, requested_cast = arguments["device_type"], arguments["cast_inputs"]
        # torch's _cast casts the tensors whose device is custom_fwd's: the one "cuda" tensors read as; the region
        # custom_fwd opens for "cuda" runs as CPU autocast like every other.
        if requested_device == "cuda":
            arguments["device_type"] = plan.cuda_tensors_read_as
            arguments["cast_inputs"] = plan.run_cast_inputs(requested_device, requested_cast)
        recorder.custom_fwd_created(
            CustomFwdKey(
                find_site(),
                device_requested=str(requested_device),
                cast_inputs_requested=_dtype_or_none(requested_cast),
                device_run="cpu" if requested_device == "cuda" else str(requested_device),
                cast_inputs_run=_dtype_or_none(arguments["cast_inputs"]),
            )
        )

    def bwd_for_the_cpu(arguments: dict[str, Any]) -> None:
        requested_device = arguments["device_type"]
        if requested_device == "cuda":
            arguments["device_type"] = plan.cuda_tensors_read_as
        recorder.custom_amp_decorator("custom_bwd", {"device_type": str(requested_device)}, find_site())

    custom_fwd = _decorator_for_the_cpu(torch.amp.autocast_mode.custom_fwd, fwd_for_the_cpu)
    custom_bwd = _decorator_for_the_cpu(torch.amp.autocast_mode.custom_bwd, bwd_for_the_cpu)
    for module in (torch.amp, torch.amp.autocast_mode):
        replace(module, "custom_fwd", custom_fwd)
        replace(module, "custom_bwd", custom_bwd)


def _decorator_for_the_cpu(original, for_the_cpu) -> Any:
    """``original`` (custom_fwd or custom_bwd) with ``for_the_cpu`` given its arguments once it has the
    function to decorate. Called with its options alone, it returns itself with those options, as torch
    does, so the call that brings the function comes back here, still with the script's options."""
    function_parameter = next(iter(inspect.signature(original).parameters))

    def decorate(arguments: dict[str, Any], call) -> Any:
        if arguments[function_parameter] is None:
            options = {name: value for name, value in arguments.items() if name != function_parameter}
            return functools.partial(decorator, **options)
        for_the_cpu(arguments)
        return call()

    decorator = with_call_bound(original, decorate, fill_defaults=True)
    return decorator


def _dtype_or_none(value: Any) -> str | None:
    return dtype_name(value) if value is not None else None


# -- GradScaler ------------------------------------------------------------------------------

_SCALER_NUMBERS = {"init_scale": float, "growth_factor": float, "backoff_factor": float, "growth_interval": int}


def _normalised_scaler_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """2**16 and 65536.0 are the same request; a device that is not a string stays visible as is."""
    normalised = {}
    for name, value in arguments.items():
        convert = _SCALER_NUMBERS.get(name)
        if convert is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
            value = convert(value)
        normalised[name] = value if isinstance(value, (str, bool, int, float)) else repr(value)
    return normalised


def install_grad_scaler(recorder: Recorder, at_step_boundary, record_scaled_loss, scaling,
                        cuda_tensors_read_as: str = "cuda") -> None:
    scaler = torch.amp.grad_scaler.GradScaler
    _patch_scaler_init(scaler, recorder, cuda_tensors_read_as)
    _patch_scaler_calls(scaler, recorder, at_step_boundary, record_scaled_loss, scaling)
    _patch_scaler_state(scaler, recorder)


def _patch_scaler_init(scaler: Any, recorder: Recorder, cuda_tensors_read_as: str) -> None:
    """A "cuda" scaler stays one where the script's "cuda" tensors read as "cuda": its state is made on the
    device of the outputs it scales, and ``update(new_scale)`` checks the new scale's device against its own."""

    def for_the_cpu(arguments: dict[str, Any]) -> None:
        settings = {name: value for name, value in arguments.items() if name != "self"}
        event = recorder.scaler_created(_normalised_scaler_arguments(settings), find_site())
        if event is not None:
            event["unused"] = True  # until it is called: verify does not count a disabled one nothing calls
            try:
                arguments["self"]._ampfix_created = event
            except (KeyError, AttributeError):  # no instance to follow: counted
                event.pop("unused")
        if arguments["device"] == "cuda":
            arguments["device"] = cuda_tensors_read_as

    replace(scaler, "__init__", with_arguments_adjusted(scaler.__init__, for_the_cpu, fill_defaults=True))


def _current_scale(scaler: Any) -> float | None:
    """The scale ``scale()`` multiplies by; None for a disabled scaler (it multiplies by nothing)."""
    if not scaler.is_enabled() or getattr(scaler, "_scale", None) is None:
        return None
    return float(scaler._scale)


def _patch_scaler_calls(scaler: Any, recorder: Recorder, at_step_boundary, record_scaled_loss, scaling) -> None:
    original_scale, original_unscale = scaler.scale, scaler.unscale_
    original_step, original_update = scaler.step, scaler.update

    def used(self) -> None:
        recorder.scaler_used(getattr(self, "_ampfix_created", None))

    @functools.wraps(original_scale)
    def scale(self, outputs):
        used(self)
        at_step_boundary()
        scaled = original_scale(self, outputs)
        factor = _current_scale(self)
        recorder.scaler_called("scale", "disabled" if factor is None else repr(factor))
        record_scaled_loss(outputs, scaled, factor)
        return scaled

    @functools.wraps(original_unscale)
    def unscale_(self, optimizer):
        used(self)
        if not getattr(self, "_ampfix_in_step", False):  # step() unscales by itself; not a script call
            recorder.scaler_called("unscale")
        scaling.unscaled()
        return original_unscale(self, optimizer)

    @functools.wraps(original_step)
    def step(self, optimizer, *args, **kwargs):
        used(self)
        recorder.scaler_called("step")
        self._ampfix_stepped = True
        steps_before = recorder.optimizer_steps
        self._ampfix_in_step = True
        try:
            result = original_step(self, optimizer, *args, **kwargs)
        finally:
            self._ampfix_in_step = False
        if self.is_enabled() and recorder.optimizer_steps == steps_before:
            # inf/NaN gradients: the optimizer step was skipped (update() has not yet backed the scale off)
            recorder.scaler_step_skipped(_current_scale(self))
        return result

    @functools.wraps(original_update)
    def update(self, new_scale=None):
        used(self)
        recorder.scaler_called("update")
        if self.is_enabled() and not getattr(self, "_ampfix_stepped", False):
            # torch refuses it (no inf checks recorded): typically update() once per micro-step.
            recorder.scaler_updated_without_step(find_site())
        self._ampfix_stepped = False
        return original_update(self, new_scale)

    for name, patched in (("scale", scale), ("unscale_", unscale_), ("step", step), ("update", update)):
        replace(scaler, name, patched)


def _patch_scaler_state(scaler: Any, recorder: Recorder) -> None:
    """A checkpoint's scaler state: saved, restored, and with which scale (verify compares it)."""
    original_state_dict, original_load = scaler.state_dict, scaler.load_state_dict

    @functools.wraps(original_state_dict)
    def state_dict(self):
        state = original_state_dict(self)
        site = find_site()
        if site.origin == "script":
            recorder.scaler_state("state_dict", state.get("scale"), site)
        return state

    @functools.wraps(original_load)
    def load_state_dict(self, state_dict):
        site = find_site()
        if site.origin == "script" and isinstance(state_dict, dict):
            recorder.scaler_state("load_state_dict", state_dict.get("scale"), site)
        return original_load(self, state_dict)

    replace(scaler, "state_dict", state_dict)
    replace(scaler, "load_state_dict", load_state_dict)


# -- deprecated APIs, recorded by the runner itself ---------------------------------------------

# Where torch keeps the AMP spellings ampfix migrates; each deprecated one carries ``__deprecated__``.
DEPRECATED_AMP_MODULES = ("torch.cuda.amp", "torch.cpu.amp")


def record_deprecated_calls(recorder: Recorder) -> None:
    """Each call of a deprecated AMP class or function is counted at the script's file:line here, not
    through the warnings machinery, which a script may silence (``warnings.filterwarnings("ignore")``).
    What is deprecated is what the installed torch marks so (``__deprecated__``)."""
    import importlib

    for module_name in DEPRECATED_AMP_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        bound_in = [module, *(value for value in vars(module).values() if isinstance(value, types.ModuleType))]
        for name, value in list(vars(module).items()):
            message = getattr(value, "__deprecated__", None)
            constructor = vars(value).get("__init__") if isinstance(value, type) else None
            init_message = getattr(constructor, "__deprecated__", None)
            if isinstance(init_message, str):  # the constructor is what is marked (GradScaler)
                replace(value, "__init__", _recorded_function(recorder, value.__init__, init_message))
            elif not isinstance(message, str):
                continue
            elif isinstance(value, type):
                _record_class(recorder, value, message)
            else:
                recorded = _recorded_function(recorder, value, message)
                for holder in bound_in:
                    if getattr(holder, name, None) is value:
                        setattr(holder, name, recorded)


def _category(function: Any) -> str:
    """The warning class a ``@deprecated`` wrapper raises (kept in its closure)."""
    for cell in getattr(function, "__closure__", None) or ():
        content = cell.cell_contents
        if isinstance(content, type) and issubclass(content, Warning):
            return content.__name__
    return DeprecationWarning.__name__


def _record_class(recorder: Recorder, cls: type, message: str) -> None:
    deprecated_new = cls.__new__
    category = _category(deprecated_new)

    def __new__(klass: type, *args: Any, **kwargs: Any) -> Any:
        if klass is not cls:  # a subclass the script wrote: torch does not warn either
            return deprecated_new(klass, *args, **kwargs)
        with recorder.deprecated_call(message, category, find_site()):
            return deprecated_new(klass, *args, **kwargs)

    replace(cls, "__new__", staticmethod(__new__))


def _recorded_function(
    recorder: Recorder, function: Any, message: str, category: str | None = None, *, owns_warnings: bool = False
) -> Any:
    category = category or _category(function)

    @functools.wraps(function)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        with recorder.deprecated_call(message, category, find_site(), owns_warnings=owns_warnings):
            return function(*args, **kwargs)

    return recorded


def record_deprecated_state_functions(recorder: Recorder) -> None:
    """torch 2.4's per-device autocast state functions (``torch.get_autocast_gpu_dtype()`` and its
    siblings, AMP007) carry no ``__deprecated__``: they are C functions that warn from C++, so the script's
    warning filters decide whether they are seen. Each that the installed torch has is wrapped, transparently
    (same arguments, return value and exceptions), to be counted at the script's file:line like the rest.
    The list is the rules' (``TORCH_AMP.deprecated_names``); the warning they raise while counted is theirs
    (``owns_warnings``: its text carries the build's C++ source line, so it is not compared)."""
    import importlib

    from ampfix.families import TORCH_AMP

    if not AUTOCAST_STATE.per_device:  # before torch 2.4 they are the API itself: not deprecated, nothing warns
        return
    for qualified in sorted(TORCH_AMP.deprecated_names):
        module_name, _, name = qualified.rpartition(".")
        symbol = TORCH_AMP.symbol(qualified)
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        function = getattr(module, name, None)
        if function is None or symbol is None or symbol[2] is None:
            continue
        rule, target = symbol[1], symbol[2]
        device = f" with {target.device!r} first" if target.device else ""
        message = f"{qualified}() is deprecated. Please use {target.new}(){device} instead ({rule.code})"
        replace(module, name, _recorded_function(recorder, function, message, DeprecationWarning.__name__,
                                                 owns_warnings=True))
