"""Compare two runs step by step and say where they first differ. Pure; never prints.

What is compared, per process (matched by label): the trace of autocast requests (device, dtype
with ``None`` made the device default, enabled, cache_enabled), GradScaler arguments, the device
types given to custom_fwd/custom_bwd, scaler calls, losses bit for bit, optimizer steps; then the
exit status. Line numbers are shown, not compared (a rewrite may add an import line).

A Pool's workers are the exception: which worker runs which task is up to the scheduler, and a
worker numbers its steps across the tasks it happened to run, so their events are compared
together, as one multiset without step numbers.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ampfix.runner.model import RunReport


def first_difference(original: RunReport, rewritten: RunReport) -> str | None:
    originals = {process["label"]: process for process in original.processes if not process["pool_worker"]}
    rewrites = {process["label"]: process for process in rewritten.processes if not process["pool_worker"]}
    for label in _labels_in_order(originals, rewrites):
        if label not in rewrites:
            return f"process {label}: ran in the original, not in the rewrite"
        if label not in originals:
            return f"process {label}: ran in the rewrite, not in the original"
        difference = _trace_difference(originals[label]["trace"], rewrites[label]["trace"])
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


def _pool_worker_events(report: RunReport) -> Counter[tuple[str, str]]:
    return Counter(
        # An optimizer step's text is the worker's running count of them: scheduling, again.
        (event["kind"], "" if event["kind"] == "optimizer_step" else event["what"])
        for process in report.processes
        if process["pool_worker"]
        for event in process["trace"]
    )


def _pool_workers_difference(original: Counter, rewritten: Counter) -> str | None:
    for only_in, events in (("original", original - rewritten), ("rewrite", rewritten - original)):
        if events:
            kind, what = min(events)
            count = events[(kind, what)]
            return f"Pool workers: {_describe({'kind': kind, 'what': what})} ran {count} more time(s) in the {only_in}"
    return None


def _comparable(event: dict[str, Any]) -> tuple[Any, ...]:
    return event["step"], event["kind"], event["what"]


def _trace_difference(original: list[dict[str, Any]], rewritten: list[dict[str, Any]]) -> str | None:
    for before, after in zip(original, rewritten):
        if _comparable(before) != _comparable(after):
            return f"step {before['step']}: original {_describe(before)}; rewrite {_describe(after)}"
    if len(original) > len(rewritten):
        event = original[len(rewritten)]
        return f"step {event['step']}: the rewrite stopped before {_describe(event)}"
    if len(rewritten) > len(original):
        event = rewritten[len(original)]
        return f"step {event['step']}: the original stopped before the rewrite's {_describe(event)}"
    return None


def _describe(event: dict[str, Any]) -> str:
    kind, what = event["kind"], event["what"]
    if kind == "loss":
        value = float.fromhex(what)
        text = f"loss {value!r} ({what})"
    elif what:
        text = f"{kind}({what})"
    else:
        text = kind
    where = event.get("where")
    return f"{text} at {_short(where)}" if where else text


def _short(where: str) -> str:
    path, _, line = where.rpartition(":")
    return f"{path.replace(chr(92), '/').rsplit('/', 1)[-1]}:{line}"
