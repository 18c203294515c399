"""The results of ``run`` and ``verify``, as the parent sees them. Pure data; never prints.

A run may involve several processes (the script, its ranks, its multiprocessing and DataLoader
workers, spawned or forked); each leaves one observation. :class:`RunReport` keeps them all, main
first, and sums them into the fields the summary and the JSON show.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCALER_FIELDS = ("scale", "unscale", "step", "update", "skipped_steps")


@dataclass
class RunReport:
    script: str
    exit_code: int | None  # None: the script never ran, or did not finish (see ``error``)
    processes: list[dict[str, Any]] = field(default_factory=list)
    # Set when the runner could not run the script or observe it: a missing file, a syntax error,
    # a timeout, a process that ended without writing its observation.
    error: str | None = None
    stdout: str | None = None  # only when the output was captured (verify, tests)
    stderr: str | None = None
    seconds: float | None = None  # wall time from the script's start to its end; None: it never started

    @property
    def steps_per_second(self) -> float | None:
        """Optimizer steps per second of the whole run (its start-up included), or None without a step."""
        if not self.seconds or not self.optimizer_steps:
            return None
        return self.optimizer_steps / self.seconds

    @property
    def ran(self) -> bool:
        return self.error is None

    @property
    def main(self) -> dict[str, Any] | None:
        return next((process for process in self.processes if process["label"] == "main"), None)

    @property
    def autocast_regions(self) -> list[dict[str, Any]]:
        return [{**region, "process": p["label"]} for p in self.processes for region in p["autocast_regions"]]

    @property
    def custom_fwd(self) -> list[dict[str, Any]]:
        """Each custom_fwd decoration site: the device and cast_inputs asked for and those that ran."""
        return _merge_counted(
            self.processes, "custom_fwd",
            ("device_requested", "cast_inputs_requested", "device_run", "cast_inputs", "file", "line"),
        )  # fmt: skip

    @property
    def op_dtypes(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for process in self.processes:
            for name, count in process["op_dtypes"].items():
                totals[name] = totals.get(name, 0) + count
        return dict(sorted(totals.items(), key=lambda item: -item[1]))

    @property
    def scaler(self) -> dict[str, int]:
        return {name: sum(p["scaler"][name] for p in self.processes) for name in SCALER_FIELDS}

    @property
    def grad_scalers(self) -> list[dict[str, Any]]:
        return [{**scaler, "process": p["label"]} for p in self.processes for scaler in p["grad_scalers"]]

    @property
    def apex_loss_scales(self) -> list[float]:
        """The loss scale each emulated apex.amp loss scaler ended with (empty without apex.amp)."""
        return [scale for p in self.processes for scale in p.get("apex_loss_scales", [])]

    @property
    def optimizer_steps(self) -> int:
        return sum(process["optimizer_steps"] for process in self.processes)

    @property
    def losses(self) -> list[float]:
        return [loss for process in self.processes for loss in process["losses"]]

    @property
    def deprecations(self) -> list[dict[str, Any]]:
        return _merge_counted(self.processes, "deprecations", ("message", "category", "file", "line"))

    @property
    def unemulated(self) -> list[dict[str, Any]]:
        return _merge_counted(self.processes, "unemulated", ("feature", "file", "line"))

    @property
    def emulated(self) -> list[dict[str, Any]]:
        return _merge_counted(self.processes, "emulated", ("feature", "file", "line"))

    @property
    def deprecated_api_calls(self) -> list[dict[str, Any]]:
        """Calls of a deprecated AMP API, as the runner counted them (a script cannot silence these)."""
        return [item for item in self.deprecations if item.get("api")]

    @property
    def local_modules(self) -> list[str]:
        """The script's own modules (not the standard library's, not site-packages') the main process loaded."""
        main = self.main
        return list(main.get("local_modules", ())) if main is not None else []

    @property
    def failure(self) -> dict[str, Any] | None:
        """The exception the main process died of, where it passed (see child._record_failure)."""
        main = self.main
        return main.get("failure") if main is not None else None

    @property
    def stand_in(self) -> list[dict[str, Any]]:
        """Each place the bfloat16 stand-in was shown to the script as float16 (see runner.boundaries)."""
        return _merge_counted(self.processes, "stand_in", ("what", "file", "line"))

    @property
    def device_queries(self) -> list[dict[str, Any]]:
        return _merge_counted(self.processes, "device_queries", ("query", "answer", "file", "line"))

    @property
    def devices_used(self) -> list[str]:
        """The devices the script's tensors were on, in any of its processes."""
        return sorted({device for p in self.processes for device in p.get("devices_used", ())})

    @property
    def gpu_memory(self) -> list[dict[str, Any]]:
        """Each emulated GPU's peak memory, per process (each process has its own GPUs' figures)."""
        return [{**item, "process": p["label"]} for p in self.processes for item in p.get("gpu_memory", ())]

    @property
    def gpu_refusals(self) -> list[dict[str, Any]]:
        """What a GPU refuses, where the script did it (see runner.devices)."""
        return _merge_counted(self.processes, "gpu_refusals", ("message", "file", "line"))

    @property
    def stopped_at_max_steps(self) -> bool:
        return any(process["stopped_at_max_steps"] for process in self.processes)

    @property
    def float16(self) -> dict[str, Any]:
        """What float16 did (gpu/numerics): each step a loss scaler skipped, with its scale and the first float16 result
        that overflowed or was NaN (op, forward/backward, the script's line); the first non-finite loss and that
        overflow; the gradient values float16 flushed to zero without a loss scaler. ``ran_as_bfloat16``: float16
        requests ran as bfloat16 (--amp-dtype bfloat16), so none of this could happen. ``watched``: float16 results were
        looked at (the default; not with --amp-dtype float16-cpu, whose CPU kernels are not watched)."""
        skipped, first_loss, underflows, watched = [], None, 0, False
        for process in self.processes:
            numbers = process.get("float16") or {}
            watched = watched or bool(numbers.get("watched"))
            skipped += [{**item, "process": process["label"]} for item in numbers.get("skipped_steps", ())]
            if first_loss is None and numbers.get("first_nonfinite_loss") is not None:
                first_loss = {**numbers["first_nonfinite_loss"], "process": process["label"]}
            underflows += numbers.get("underflows", 0)
        ran_as_bfloat16 = any(
            region["dtype_requested"] == "float16" and region["dtype"] == "bfloat16" for region in self.autocast_regions
        )
        return {"watched": watched, "skipped_steps": skipped, "first_nonfinite_loss": first_loss,
                "underflows": underflows, "ran_as_bfloat16": ran_as_bfloat16}

    def to_json(self, include_traces: bool = False) -> dict[str, Any]:
        processes = self.processes if include_traces else [_without_trace(p) for p in self.processes]
        return {
            "script": self.script,
            "exit_code": self.exit_code,
            "error": self.error,
            "autocast_regions": self.autocast_regions,
            "custom_fwd": self.custom_fwd,
            "op_dtypes": self.op_dtypes,
            "scaler": self.scaler,
            "grad_scalers": self.grad_scalers,
            "apex_loss_scales": self.apex_loss_scales,
            "optimizer_steps": self.optimizer_steps,
            "losses": self.losses,
            "deprecations": self.deprecations,
            "unemulated": self.unemulated,
            "emulated": self.emulated,
            "stand_in": self.stand_in,
            "device_queries": self.device_queries,
            "devices_used": self.devices_used,
            "gpu_memory": self.gpu_memory,
            "gpu_refusals": self.gpu_refusals,
            "stopped_at_max_steps": self.stopped_at_max_steps,
            "seconds": self.seconds,
            "steps_per_second": self.steps_per_second,
            "float16": self.float16,
            "processes": processes,
        }


EXIT_CRASHED = 3  # verify's exit status when a side crashed (0 equivalent, 1 not, 2 could not run)


@dataclass
class VerifyReport:
    original: RunReport | None  # None: nothing was run (the rewrite could not be produced)
    rewritten: RunReport | None
    equivalent: bool | None  # None: could not compare (see ``error``)
    first_difference: str | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    # "original" or "rewrite": the side that died of an exception, the cause whatever else differs (``error``
    # says how, with the exception's line); None: neither did.
    crashed: str | None = None

    @property
    def exit_code(self) -> int:
        if self.crashed is not None:
            return EXIT_CRASHED
        if self.equivalent is None:
            return 2
        return 0 if self.equivalent else 1

    def to_json(self) -> dict[str, Any]:
        return {
            "equivalent": self.equivalent,
            "first_difference": self.first_difference,
            "exit_code": self.exit_code,
            "error": self.error,
            "crashed": self.crashed,
            "notes": self.notes,
            "original": self.original.to_json() if self.original is not None else None,
            "rewritten": self.rewritten.to_json() if self.rewritten is not None else None,
        }


def _without_trace(process: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in process.items() if key != "trace"}


def _merge_counted(processes: list[dict[str, Any]], field_name: str,
                   key_fields: tuple[str, ...]) -> list[dict[str, Any]]:
    merged: dict[tuple, dict[str, Any]] = {}
    for process in processes:
        for item in process.get(field_name, ()):
            key = tuple(item[name] for name in key_fields)
            if key in merged:
                merged[key]["count"] += item["count"]
            else:
                merged[key] = dict(item)
    return list(merged.values())
