"""The rich summaries ``ampfix run`` and ``ampfix verify`` print (to stderr: the script owns stdout)."""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ampfix.runner.host.compare import uses_apex_emulation
from ampfix.runner.host.failures import explain
from ampfix.runner.gpu.memory import format_size
from ampfix.runner.host.model import RunReport, VerifyReport

LOSSES_SHOWN = 8


def _where(file: str, line: int) -> str:
    return f"{os.path.basename(file)}:{line}"


def _region_text(device: str, dtype: str, enabled: Any) -> str:
    return f"{device} {dtype}" + ("" if enabled is True else f" enabled={enabled}")


def _regions_table(report: RunReport) -> Table:
    table = Table(title="autocast regions", title_justify="left", show_edge=False, pad_edge=False)
    for column in ("where", "requested", "ran as", "entered"):
        table.add_column(column, justify="right" if column == "entered" else "left")
    multi_process = len(report.processes) > 1
    for region in report.autocast_regions:
        where = _where(region["file"], region["line"])
        if region["origin"] != "script":
            where += " (torch)"
        if multi_process:
            where = f"[{region['process']}] {where}"
        requested = _region_text(region["device_requested"], region["dtype_requested"], region["enabled_requested"])
        if region.get("cache_enabled_requested", True) is not True:
            requested += f" cache_enabled={region['cache_enabled_requested']}"
        ran = _region_text(region["device_run"], region["dtype"], region["enabled"])
        table.add_row(where, requested, ran, str(region["entered"]))
    return table


def _losses_text(losses: list[float]) -> str:
    if not losses:
        return "none recorded"
    shown = [f"{loss:.6g}" for loss in losses]
    if len(shown) > LOSSES_SHOWN:
        shown = shown[: LOSSES_SHOWN - 2] + ["…"] + shown[-2:]
    return f"{len(losses)}: " + ", ".join(shown)


def _scaler_text(report: RunReport) -> str:
    calls = report.scaler
    text = " · ".join(
        f"{label} {calls[name]}"
        for name, label in (("scale", "scale"), ("unscale", "unscale_"), ("step", "step"), ("update", "update"))
    )
    return f"{text} · skipped steps {calls['skipped_steps']}"


def _apex_scaling_text(report: RunReport) -> str:
    """The loss scaling of an apex.amp script in apex's terms: it has no scaler.step() (the script steps its
    optimizer, which apex skips once after inf/NaN gradients), and the scale is apex's own."""
    calls = report.scaler
    scales = report.apex_loss_scales
    scale = " / ".join(f"{value:g}" for value in scales) if scales else "none (loss scaling off)"
    return (
        f"scale_loss {calls['scale']} · loss scale updates {calls['update']} · optimizer steps skipped "
        f"(inf/NaN gradients) {calls['skipped_steps']} · optimizer steps taken {report.optimizer_steps} · "
        f"loss scale now {scale}"
    )


def _scales_like_apex(report: RunReport) -> bool:
    """Every loss scaler of the run is the emulated apex.amp's (a script that also builds a GradScaler is
    shown in GradScaler's terms)."""
    return bool(report.grad_scalers) and all(scaler.get("emulating") for scaler in report.grad_scalers)


def _custom_fwd_text(item: dict[str, Any]) -> str:
    """'train.py:14 cuda cast_inputs=float16, ran as cpu cast_inputs=bfloat16 (×1)'."""
    requested = f"{item['device_requested']} cast_inputs={item['cast_inputs_requested']}"
    ran = f"{item['device_run']} cast_inputs={item['cast_inputs']}"
    return f"{_where(item['file'], item['line'])} {requested}, ran as {ran} (×{item['count']})"


def _facts_grid(report: RunReport) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    op_dtypes = " · ".join(f"{name} {count}" for name, count in report.op_dtypes.items()) or "none"
    grid.add_row("ops inside autocast", op_dtypes)
    if _scales_like_apex(report):
        grid.add_row("apex.amp loss scaling", _apex_scaling_text(report))
    else:
        grid.add_row("GradScaler calls", _scaler_text(report))
    for scaler in report.grad_scalers:
        arguments = " ".join(
            f"{name}={scaler[name]!r}" for name in scaler if name not in ("file", "line", "process", "emulating")
        )
        emulating = f" ({scaler['emulating']}, emulated; as a GradScaler)" if scaler.get("emulating") else ""
        grid.add_row("", f"created at {_where(scaler['file'], scaler['line'])}{emulating}: {arguments}")
    for index, item in enumerate(report.custom_fwd):
        grid.add_row("custom_fwd" if index == 0 else "", _custom_fwd_text(item))
    grid.add_row("optimizer steps", _steps_text(report))
    grid.add_row("losses", _losses_text(report.losses))
    # Which path the script took: each device question it asked, and the emulated device's answer.
    for index, item in enumerate(report.device_queries):
        answer = f"{_where(item['file'], item['line'])} {item['query']} → {item['answer']} (×{item['count']})"
        grid.add_row("device queries" if index == 0 else "", answer)
    if report.devices_used:
        grid.add_row("devices", " · ".join(report.devices_used))
    for index, item in enumerate(report.gpu_memory):
        grid.add_row("GPU memory" if index == 0 else "", _gpu_memory_text(item, len(report.processes) > 1))
    if len(report.processes) > 1:
        grid.add_row("processes", ", ".join(process["label"] for process in report.processes))
    return grid


def _steps_text(report: RunReport) -> str:
    """'30 in 12.4 s (2.42 steps/s)': the run's wall time, start-up included, as a person timing it sees it."""
    if report.seconds is None:
        return str(report.optimizer_steps)
    rate = report.steps_per_second
    return f"{report.optimizer_steps} in {report.seconds:.1f} s" + (f" ({rate:.3g} steps/s)" if rate else "")


def _gpu_memory_text(item: dict[str, Any], name_process: bool) -> str:
    """'cuda:0 peak 1.50 MiB allocated at train.py:40, 2.00 MiB reserved'."""
    where = f" at {_where(item['peak_file'], item['peak_line'])}" if item.get("peak_file") else ""
    process = f" ({item['process']})" if name_process else ""
    return (f"{item['device']}{process} peak {format_size(item['peak_allocated'])} allocated{where}, "
            f"{format_size(item['peak_reserved'])} reserved")


def _findings(report: RunReport) -> list[Text]:
    lines = []
    for item in report.deprecations:
        lines.append(
            Text.assemble(
                ("deprecated ", "yellow"),
                f"{_where(item['file'], item['line'])} {item['category']}: {item['message']} (×{item['count']})",
            )
        )
    for item in report.emulated:
        lines.append(Text.assemble(("emulated ", "cyan"),
                                   f"{_where(item['file'], item['line'])} {item['feature']} (×{item['count']})"))
    for item in report.stand_in:
        lines.append(
            Text.assemble(
                ("stand-in ", "cyan"),
                f"{_where(item['file'], item['line'])} {item['what']} (bfloat16 ran for float16) (×{item['count']})",
            )
        )
    for item in report.gpu_refusals:
        lines.append(
            Text.assemble(("fails on a GPU ", "red"),
                          f"{_where(item['file'], item['line'])} {item['message']} (×{item['count']})")
        )
    for item in report.unemulated:
        lines.append(
            Text.assemble(("not emulated ", "red"),
                          f"{_where(item['file'], item['line'])} {item['feature']} (×{item['count']})")
        )
    return lines


def _overflow_text(overflow: dict[str, Any] | None, watched: bool) -> str:
    if not watched:
        return "which op overflowed is not watched with --amp-dtype float16-cpu"
    if overflow is None:
        return "no float16 result of the matmul family or of a float32 op's input overflowed (an elementwise op's?)"
    return (f"first float16 inf/NaN: {overflow['op']} ({overflow['phase']}) at "
            f"{_where(overflow['file'], overflow['line'])}")


def _float16_lines(report: RunReport) -> list[Text]:
    """Why an AMP run skipped steps or went NaN: float16's overflows, and its underflow without a loss scaler."""
    numbers = report.float16
    lines = []
    for item in numbers["skipped_steps"]:
        scale = "" if item["scale"] is None else f" (scale {item['scale']:g})"
        overflow = _overflow_text(item["overflow"], numbers["watched"])
        lines.append(Text.assemble(("skipped step ", "yellow"), f"{item['step']}{scale}: {overflow}"))
    loss = numbers["first_nonfinite_loss"]
    if loss is not None:
        lines.append(Text.assemble(
            ("non-finite loss ", "red"),
            f"{loss['value']} (loss {loss['loss']}, at {_where(loss['file'], loss['line'])}): "
            f"{_overflow_text(loss['overflow'], numbers['watched'])}",
        ))
    if numbers["underflows"]:
        lines.append(Text.assemble(("float16 underflow ", "yellow"),
                                   f"{numbers['underflows']} gradient value(s) flushed to zero (no loss scaler)"))
    if numbers["ran_as_bfloat16"]:
        lines.append(Text.assemble(("note ", "cyan"), "float16 ran as bfloat16 (--amp-dtype bfloat16): float16's "
                                   "overflow past 65504 and underflow below 2^-24 cannot show in this run"))
    return lines


def _status_line(report: RunReport) -> Text:
    name = os.path.basename(report.script)
    if report.error is not None:
        return Text.assemble(("ampfix run: ", "bold"), f"{name}: ", (report.error, "red"))
    style = "green" if report.exit_code == 0 else "red"
    status = Text.assemble(("ampfix run: ", "bold"), f"{name} exited ", (str(report.exit_code), f"bold {style}"))
    if report.stopped_at_max_steps:
        status.append(" (stopped by --max-steps)")
    return status


def render_run(report: RunReport, console: Console) -> None:
    console.print(_status_line(report))
    why = explain(report.failure) if report.exit_code not in (0, None) else None
    if why is not None:
        console.print(Text.assemble(("why: ", "bold"), why))
    if not report.processes:
        return
    if report.autocast_regions:
        console.print(_regions_table(report))
    else:
        console.print("no autocast region was created")
    console.print(_facts_grid(report))
    for line in _findings(report) + _float16_lines(report):
        console.print(line)


def _run_line(label: str, report: RunReport | None) -> str:
    if report is None:
        return f"{label}: not run"
    if report.error is not None:
        return f"{label}: {report.error}"
    calls = report.deprecated_api_calls
    deprecated = (f", {_count(sum(item['count'] for item in calls), 'deprecated API call')} at "
                  f"{_count(len(calls), 'site')}" if calls else "")
    return (
        f"{label}: exit {report.exit_code}, {_count(report.optimizer_steps, 'optimizer step')}, "
        f"{_count(len(report.losses), 'loss', 'losses')}, {_count(len(report.autocast_regions), 'autocast site')}"
        f"{deprecated}"
    )


def _count(n: int, singular: str, plural: str | None = None) -> str:
    return f"{n} {singular if n == 1 else plural or singular + 's'}"


def render_verify(report: VerifyReport, console: Console) -> None:
    console.print(_run_line("original", report.original))
    console.print(_run_line("rewrite ", report.rewritten))
    for note in report.notes:
        console.print(f"note: {note}")
    if report.crashed is not None:
        console.print(Text.assemble(("NOT verified", "bold red"), f" — {report.error}"))
        if report.first_difference:
            console.print(f"before it, the first difference: {report.first_difference}")
        _print_failure_output(report, console)
    elif report.equivalent is None:
        console.print(Text.assemble(("could not verify: ", "bold red"), report.error or ""))
        _print_failure_output(report, console)
    elif report.equivalent and _against_apex(report):
        console.print(
            Text(
                "equivalent to the emulated apex.amp: same loss scaling, autocast over every model call, "
                "losses (bit for bit), clipping and optimizer steps",
                "bold green",
            )
        )
    elif report.equivalent:
        console.print(Text("equivalent: same autocast requests, GradScaler arguments and losses (bit for bit)",
                           "bold green"))
    else:
        console.print(Text.assemble(("NOT equivalent", "bold red"), f" — first difference: {report.first_difference}"))
        _print_failure_output(report, console)


def _against_apex(report: VerifyReport) -> bool:
    return any(run is not None and uses_apex_emulation(run) for run in (report.original, report.rewritten))


def _print_failure_output(report: VerifyReport, console: Console) -> None:
    """The end of what a failed run wrote to stderr: usually its traceback."""
    for label, run in (("original", report.original), ("rewrite", report.rewritten)):
        if run is None or run.exit_code == 0 or not run.stderr:
            continue
        tail = "\n".join(run.stderr.rstrip().splitlines()[-15:])
        console.print(f"--- {label} stderr (last lines) ---", style="dim")
        console.print(Text(tail))
