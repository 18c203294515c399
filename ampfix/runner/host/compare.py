"""Compare two runs step by step and say where they first differ. Pure; never prints.

What is compared, per process (matched by label): the trace of autocast requests (device, dtype
with ``None`` made the device default, enabled, cache_enabled), GradScaler arguments, the device
types given to custom_fwd/custom_bwd, scaler calls, losses bit for bit, optimizer steps; then the
exit status. Line numbers are shown, not compared (a rewrite may add an import line).

A Pool's workers are the exception: which worker runs which task is up to the scheduler, and a
worker numbers its steps across the tasks it happened to run, so their events are compared
together, as one multiset without step numbers.

When one side ran apex.amp through the runner's emulation, the two sides cannot open the same
autocast regions (apex's O1 is one region from ``initialize`` on) nor call the scaler at the same
moments (apex unscales and updates inside ``scale_loss``). What is compared then is what those
choices produce: the loss scalers' arguments (apex's defaults are a GradScaler's; on either side, not those of
a loss scaler nothing scaled with), and per
optimizer step each top-level model call with the autocast it ran under, each loss given to
backward (bit for bit) with the loss scale it was multiplied by, clipping and whether the gradients
it clipped were still scaled, optimizer steps taken or skipped, the scaler state saved and loaded.
Where the regions open and close, and when the scaler unscales and updates, are not compared.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ampfix.runner.host.model import RunReport
from ampfix.runner.trace.observe import event_what


# Apex against native: events whose place differs by design (see the module docstring).
APEX_UNCOMPARED = frozenset({"autocast", "autocast_enter", "scaler.unscale", "scaler.step", "scaler.update"})
# Apex against native: compared as a set, wherever each side creates its scaler.
SCALER_CREATION = "grad_scaler"


def uses_apex_emulation(report: RunReport) -> bool:
    return any(item["feature"].startswith("apex.amp") for item in report.emulated)


def first_difference(original: RunReport, rewritten: RunReport) -> str | None:
    originals = {process["label"]: process for process in original.processes if not process["pool_worker"]}
    rewrites = {process["label"]: process for process in rewritten.processes if not process["pool_worker"]}
    apex = uses_apex_emulation(original) or uses_apex_emulation(rewritten)
    for label in _labels_in_order(originals, rewrites):
        if label not in rewrites:
            return f"process {label}: ran in the original, not in the rewrite"
        if label not in originals:
            return f"process {label}: ran in the rewrite, not in the original"
        before, after = originals[label]["trace"], rewrites[label]["trace"]
        difference = _apex_trace_difference(before, after) if apex else _trace_difference(before, after)
        if difference is not None:
            return difference if label == "main" else f"process {label}: {difference}"
    difference = _pool_workers_difference(_pool_worker_events(original), _pool_worker_events(rewritten))
    if difference is not None:
        return difference
    if original.exit_code != rewritten.exit_code:
        return f"exit status: original {original.exit_code}, rewrite {rewritten.exit_code}"
    return None


def _labels_in_order(*groups: dict[str, Any]) -> list[str]:
    labels = {label for group in groups for label in group}
    return sorted(labels, key=lambda label: (label != "main", label))


def _pool_worker_events(report: RunReport) -> Counter[tuple[str, Any]]:
    return Counter(
        # An optimizer step's text is the worker's running count of them: scheduling, again.
        (event["kind"], "" if event["kind"] == "optimizer_step" else _content(event))
        for process in report.processes
        if process["pool_worker"]
        for event in process["trace"]
    )


def _pool_workers_difference(original: Counter, rewritten: Counter) -> str | None:
    for only_in, extra in (("original", original - rewritten), ("rewrite", rewritten - original)):
        if extra:
            first = min(extra, key=lambda key: (key[0], event_what(_event_of(*key))))
            return f"Pool workers: {_describe(_event_of(*first))} ran {extra[first]} more time(s) in the {only_in}"
    return None


def _content(event: dict[str, Any]) -> Any:
    """What an event says, as compared: its fields, in the order recorded, or its text."""
    fields = event.get("fields")
    return event["what"] if fields is None else tuple(fields.items())


def _event_of(kind: str, content: Any) -> dict[str, Any]:
    """The event ``_content`` was taken from, without its step and place."""
    return {"kind": kind, "fields": dict(content)} if isinstance(content, tuple) else {"kind": kind, "what": content}


def _comparable(event: dict[str, Any]) -> tuple[Any, ...]:
    return event["step"], event["kind"], _content(event)


def _trace_difference(original: list[dict[str, Any]], rewritten: list[dict[str, Any]]) -> str | None:
    for before, after in zip(original, rewritten):
        if _comparable(before) != _comparable(after):
            return (f"step {before['step']}: original {_describe(before)}; "
                    f"rewrite {_describe(after)}{_why(before, after)}")
    if len(original) > len(rewritten):
        event = original[len(rewritten)]
        return f"step {event['step']}: the rewrite stopped before {_describe(event)}"
    if len(rewritten) > len(original):
        event = rewritten[len(original)]
        return f"step {event['step']}: the original stopped before the rewrite's {_describe(event)}"
    return None


# What an autocast takes from the enclosing state when the call does not give it.
INHERITED_SETTINGS = ("dtype", "cache_enabled")
# The dtypes an enclosing region can hand on: a rewrite's `dtype=True` (a flag moved into `dtype`) is no such thing.
AUTOCAST_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})


def _why(before: dict[str, Any], after: dict[str, Any]) -> str:
    """For one autocast region whose effective dtype or cache setting alone differs: why that happens."""
    if before["kind"] != after["kind"] or before["kind"] not in ("autocast", "autocast_enter"):
        return ""
    old, new = before.get("fields") or {}, after.get("fields") or {}
    differing = [name for name in old if old.get(name) != new.get(name)]
    if not differing or any(name not in INHERITED_SETTINGS for name in differing):
        return ""
    if "dtype" in differing and str(new.get("dtype")) not in AUTOCAST_DTYPES:
        return ""
    return (
        f" (the region's effective {' and '.join(differing)} differ: an autocast that does not give them takes the "
        "enclosing region's, where the deprecated torch.cuda.amp.autocast() and torch.cpu.amp.autocast() give their "
        "own defaults)"
    )


def _apex_trace_difference(original: list[dict[str, Any]], rewritten: list[dict[str, Any]]) -> str | None:
    # A loss scaler nothing scaled with changes nothing, on either side: apex's that no scale_loss used (replaced by
    # a later initialize, made for inference, or a run that ended before its first step) and the native ones
    # nothing called (observe). One that scaled is compared, and a loss scaled by one side only shows in the losses.
    scalers = [[event for event in trace if event["kind"] == SCALER_CREATION and not event.get("replaced_unused")
                and not event.get("apex_unused") and not event.get("unused")]
               for trace in (original, rewritten)]
    if Counter(map(_content, scalers[0])) != Counter(map(_content, scalers[1])):
        return _scaler_difference(*scalers)
    return _trace_difference(*(_apex_comparable(trace) for trace in (original, rewritten)))


def _apex_comparable(trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [event for event in trace if event["kind"] not in APEX_UNCOMPARED and event["kind"] != SCALER_CREATION]


def _scaler_difference(original: list[dict[str, Any]], rewritten: list[dict[str, Any]]) -> str:
    if not rewritten:
        return f"loss scaling: the rewrite creates no GradScaler; the original's {_describe(original[0])}"
    if not original:
        return f"loss scaling: the original has none; the rewrite's {_describe(rewritten[0])}"
    if len(original) != len(rewritten):  # apex's num_losses: a scale per loss, where the rewrite has one
        return (f"loss scaling: the original has {len(original)} loss scalers, the rewrite {len(rewritten)}; "
                f"original {_describe(original[0])}; rewrite {_describe(rewritten[0])}")
    return f"loss scaling: original {_describe(original[0])}; rewrite {_describe(rewritten[0])}"


# How the events that name a mistake read in a difference.
_MESSAGES = {
    "grad_scaler": "loss scaler({what})",
    "model_call": "call of {what}",
    "clip_grad": "{what}",
    "optimizer_step_on_scaled_gradients": (
        "optimizer.step() on gradients still scaled by {what} (the GradScaler never steps: no scaler.step(optimizer))"
    ),
    "scaler.update_without_step": (
        "GradScaler.update() with no scaler.step() since the last update (update per micro-step?)"),
    "scaler.state_dict": "loss scaler state saved ({what})",
    "scaler.load_state_dict": "loss scaler state loaded ({what})",
    "scaler.skipped_step": "optimizer step skipped (inf/NaN gradients)",
}


def _describe(event: dict[str, Any]) -> str:
    kind, what = event["kind"], event_what(event)
    if kind == "loss":
        value = float.fromhex(what)
        text = f"loss {value!r} ({what})"
    elif kind in _MESSAGES:
        text = _MESSAGES[kind].format(what=what)
    elif what:
        text = f"{kind}({what})"
    else:
        text = kind
    where = event.get("where")
    return f"{text} at {_short(where)}" if where else text


def _short(where: str) -> str:
    path, _, line = where.rpartition(":")
    return f"{path.replace(chr(92), '/').rsplit('/', 1)[-1]}:{line}"
