"""float16 as a GPU computes it (ampfix/runner/gpu/numerics.py), by default: values, overflow, underflow, a GradScaler's
skipped steps and the report's lines. Every expected value is derived by hand in the fixture's docstring or comment
(fixtures/run/float16_values.py, float16_training.py) from IEEE binary16's definition, and each is also what the CPU's
own float16 kernels give (`--amp-dtype float16-cpu`); `--amp-dtype bfloat16` cannot show them, and says so.
"""

from __future__ import annotations

import json
import math
import os

import pytest
from runner_jobs import Job, define_job_fixtures

JOBS = {
    "values": ["run", "float16_values.py"],
    "values_cpu_kernels": ["run", "--amp-dtype", "float16-cpu", "float16_values.py"],
    "training": ["run", "float16_training.py"],
    "training_cpu_kernels": ["run", "--amp-dtype", "float16-cpu", "float16_training.py"],
    "training_bfloat16": ["run", "--amp-dtype", "bfloat16", "float16_training.py"],
}
define_job_fixtures(JOBS, globals())

TRAINING = "float16_training.py"
# Lines of fixtures/run/float16_training.py.
MSE_LOSS_LINE, SCORES_LINE, NAN_BACKWARD_LINE = 28, 38, 41


def _printed(job: Job) -> dict:
    assert job.returncode == 0, job.stderr
    return json.loads(job.stdout.strip().splitlines()[-1])


VALUES = {
    "dtype": "torch.float16",
    "rounded": 1.001953125,  # 1 + 2^-9: the tie 1 + 3·2^-11 goes to the even neighbour
    "overflowed": math.inf,  # 65536 >= 65520
    "largest": 65504.0,
    "kept": 2.0**-23,
    "flushed": 0.0,  # 2^-25: half the smallest subnormal, tie to even 0
    "bfloat16_dtype": "torch.bfloat16",  # an explicit bfloat16 request runs in bfloat16
    "bfloat16_rounded": 1.0,
    "gradient_without_scaler": 0.0,  # 2^-27 flushed to zero in float16
    "gradient_with_scaler": 2.0**-27,  # scaled to 2^-11, exact, unscaled in float32
}


@pytest.mark.parametrize("job_name", ["values", "values_cpu_kernels"])
def test_float16_values_are_binary16s(job_name: str, jobs) -> None:
    assert _printed(jobs.result(job_name)) == VALUES


def test_underflow_without_a_scaler_is_counted_and_reported(values: Job) -> None:
    # One value: the gradient of mse_loss's float16 input (2^-27 -> 0) in the scaler-less call; the call with an
    # enabled GradScaler flushes nothing and is not counted.
    assert values.report["float16"]["underflows"] == 1
    assert "float16 underflow 1 gradient value(s) flushed to zero (no loss scaler)" in values.stderr


TRAINED = {"scales": [32768.0, 16384.0, 16384.0], "weight": 0.4970000088214874, "score": math.inf}


@pytest.mark.parametrize("job_name", ["training", "training_cpu_kernels"])
def test_backward_overflow_skips_steps_as_on_a_gpu(job_name: str, jobs) -> None:
    job = jobs.result(job_name)
    printed = _printed(job)
    assert {name: printed[name] for name in TRAINED} == TRAINED
    assert math.isnan(printed["loss"])
    assert "Detected call of `lr_scheduler.step()` before `optimizer.step()`" in job.stderr
    assert job.report["scaler"]["skipped_steps"] == 2
    assert job.report["optimizer_steps"] == 1
    assert [(item["step"], item["scale"]) for item in job.report["float16"]["skipped_steps"]] == [
        (1, 65536.0), (2, 32768.0),
    ]


def test_the_report_names_the_op_and_line_of_each_overflow(training: Job) -> None:
    numbers = training.report["float16"]
    overflows = [item["overflow"] for item in numbers["skipped_steps"]]
    assert [(o["op"], o["phase"], os.path.basename(o["file"]), o["line"]) for o in overflows] == [
        ("mse_loss", "backward", TRAINING, MSE_LOSS_LINE)
    ] * 2
    loss = numbers["first_nonfinite_loss"]
    assert math.isnan(loss["value"]) and (loss["loss"], loss["line"]) == (4, NAN_BACKWARD_LINE)
    assert (loss["overflow"]["op"], loss["overflow"]["phase"], loss["overflow"]["line"]) == (
        "matmul", "forward", SCORES_LINE,
    )
    text = " ".join(training.stderr.split())  # rich wraps the lines at its width
    assert (f"skipped step 1 (scale 65536): first float16 inf/NaN: mse_loss (backward) at {TRAINING}:{MSE_LOSS_LINE}"
            in text)
    assert (f"non-finite loss nan (loss 4, at {TRAINING}:{NAN_BACKWARD_LINE}): first float16 inf/NaN: matmul "
            f"(forward) at {TRAINING}:{SCORES_LINE}") in text


def test_the_cpu_kernels_run_says_it_does_not_watch(training_cpu_kernels: Job) -> None:
    text = " ".join(training_cpu_kernels.stderr.split())
    assert "skipped step 2 (scale 32768): which op overflowed is not watched with --amp-dtype float16-cpu" in text


def test_the_bfloat16_stand_in_cannot_overflow_and_says_so(training_bfloat16: Job) -> None:
    printed = _printed(training_bfloat16)
    # bfloat16 has float32's range: nothing overflows, no step is skipped; q·k = 80000 rounds to bfloat16's 79872
    # (8 significant bits: spacing 512 between 65536 and 131072).
    assert printed["scales"] == [65536.0] * 3 and printed["score"] == 79872.0 and printed["loss"] == 1.0
    assert training_bfloat16.report["float16"]["ran_as_bfloat16"] is True
    text = " ".join(training_bfloat16.stderr.split())
    assert ("note float16 ran as bfloat16 (--amp-dtype bfloat16): float16's overflow past 65504 and underflow "
            "below 2^-24 cannot show in this run") in text
