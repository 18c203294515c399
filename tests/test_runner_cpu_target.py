"""`ampfix verify --device cpu`: the runner agrees with `ampfix rewrite --device cpu` (issue 8).

Each verify starts two torch processes (seconds each on 2 loaded cores): five jobs, queued on the
session's job queue when collection ends (tests/runner_jobs.py).
"""

from __future__ import annotations

from pathlib import Path

from runner_jobs import FIXTURES, Job, JobPool, define_job_fixtures

from ampfix.engine import Options, fix_source

CNN_STEPS = ["--", "--steps", "3"]


def _cpu_rewrite(script: Path, folder: Path) -> Path:
    result = fix_source(script.read_text(encoding="utf-8"), Options(device="cpu"))
    assert result.error is None and result.changed
    target = folder / f"{script.stem}.cpu.py"
    target.write_text(result.new_source, encoding="utf-8")
    return target


def _commands(folder: Path) -> dict[str, list[str]]:
    cnn_rewrite = _cpu_rewrite(FIXTURES / "cnn_amp.py", folder)
    float16_to_bfloat16 = _cpu_rewrite(FIXTURES / "explicit_float16.py", folder)
    return {
        # The engine's rewrite, made here and handed over as a migration.
        "cnn": ["verify", "cnn_amp.py", "--rewritten", str(cnn_rewrite), "--device", "cpu", *CNN_STEPS],
        # verify makes the rewrite itself: float16 written for CUDA (autocast, custom_fwd's cast_inputs)
        # becomes bfloat16, which the original's side runs too.
        "explicit_float16": ["verify", "explicit_float16.py", "--device", "cpu"],
        # A hand migration that moved one autocast to the CPU and left the GradScaler on "cuda".
        "wrong_cpu": ["verify", "cnn_amp.py", "--rewritten", "cnn_amp.wrong_cpu.py", "--device", "cpu", *CNN_STEPS],
        # --keep-dtype: verify makes `rewrite --device cpu --keep-dtype`'s rewrite, explicit float16 kept.
        "keep_dtype": ["verify", "explicit_float16.py", "--device", "cpu", "--keep-dtype"],
        # The rewrite without --keep-dtype, held to --keep-dtype's promise.
        "keep_dtype_not_kept": [
            "verify", "explicit_float16.py", "--rewritten", str(float16_to_bfloat16), "--device", "cpu", "--keep-dtype",
        ],
    }


define_job_fixtures(_commands, globals())


def _requested_devices(report: dict) -> set[str]:
    return {region["device_requested"] for region in report["autocast_regions"]} | {
        scaler["device"] for scaler in report["grad_scalers"]
    }


def test_the_engines_cpu_rewrite_of_the_cnn_is_equivalent(jobs: JobPool) -> None:
    job: Job = jobs.result("cnn")
    assert job.returncode == 0, job.stderr
    report = job.report
    assert report["equivalent"] is True and report["first_difference"] is None
    assert _requested_devices(report["original"]) == {"cuda"}
    assert _requested_devices(report["rewritten"]) == {"cpu"}  # really a rewrite to the CPU
    assert len(report["original"]["losses"]) == 3
    assert report["original"]["losses"] == report["rewritten"]["losses"]  # bit for bit
    assert any("--device cpu" in note for note in report["notes"])
    assert "equivalent" in job.stderr


def test_verify_makes_the_cpu_rewrite_itself_and_custom_fwd_casts_in_the_runs_dtype(jobs: JobPool) -> None:
    job = jobs.result("explicit_float16")
    assert job.returncode == 0, job.stderr
    report = job.report
    assert report["equivalent"] is True and report["first_difference"] is None
    assert report["notes"][2:] == [
        "rewrite: ampfix's own --device cpu of the script and the 0 local module(s) it imports, "
        f"run from the rewrite side's copy of {FIXTURES}",
        "files rewritten: explicit_float16.py",
    ]
    assert _requested_devices(report["rewritten"]) == {"cpu"}
    # The original's custom_fwd asked CUDA for float16 and cast to bfloat16, the run's AMP dtype, as
    # its autocast regions ran; the rewrite asks the CPU for bfloat16 itself.
    assert _custom_fwds(report["original"]) == [(14, "cuda", "float16", "cpu", "bfloat16")]
    assert _custom_fwds(report["rewritten"]) == [(14, "cpu", "bfloat16", "cpu", "bfloat16")]
    assert _region_dtypes(report["original"]) == [(44, "cuda", "float16", "bfloat16"), (51, "cuda", "float16", "bfloat16")]
    assert _region_dtypes(report["rewritten"]) == [(44, "cpu", "bfloat16", "bfloat16"), (51, "cpu", "bfloat16", "bfloat16")]
    assert len(report["original"]["losses"]) == 3
    assert report["original"]["losses"] == report["rewritten"]["losses"]  # bit for bit


def test_a_cpu_migration_that_left_the_scaler_on_cuda_is_not_equivalent(jobs: JobPool) -> None:
    job = jobs.result("wrong_cpu")
    assert job.returncode == 1, job.stderr
    assert job.report["equivalent"] is False
    assert job.report["first_difference"].startswith(
        "step 0: original loss scaler(device='cpu' init_scale=65536.0 growth_factor=2.0 backoff_factor=0.5 "
        "growth_interval=2000 enabled=True) at cnn_amp.py:41; rewrite loss scaler(device='cuda' "
    )
    assert "NOT equivalent" in job.stderr


def _region_dtypes(report: dict) -> list[tuple[int, str, str, str]]:
    """(line, device asked for, dtype asked for, dtype run) of the script's own autocast regions."""
    return sorted(
        (region["line"], region["device_requested"], region["dtype_requested"], region["dtype"])
        for region in report["autocast_regions"]
        if region["origin"] == "script"
    )


def _custom_fwds(report: dict) -> list[tuple[int, str, str, str, str]]:
    """(line, device asked for, cast_inputs asked for, device run, cast_inputs run) of each custom_fwd."""
    return [
        (item["line"], item["device_requested"], item["cast_inputs_requested"], item["device_run"], item["cast_inputs"])
        for item in report["custom_fwd"]
    ]


def test_keep_dtype_holds_the_rewrite_to_an_explicit_float16_kept(jobs: JobPool) -> None:
    job = jobs.result("keep_dtype")
    assert job.returncode == 0, job.stderr
    report = job.report
    assert report["equivalent"] is True
    assert report["notes"][2:] == [
        "rewrite: ampfix's own --device cpu --keep-dtype of the script and the 0 local module(s) it imports, "
        f"run from the rewrite side's copy of {FIXTURES}",
        "files rewritten: explicit_float16.py",
    ]
    # The explicit float16 (line 44) runs in float16 on both sides; the plain autocast() (line 51),
    # CUDA's default on the original's side, runs in the CPU's default.
    assert _region_dtypes(report["original"]) == [(44, "cuda", "float16", "float16"), (51, "cuda", "float16", "bfloat16")]
    assert _region_dtypes(report["rewritten"]) == [(44, "cpu", "float16", "float16"), (51, "cpu", "bfloat16", "bfloat16")]
    # The float16 written for custom_fwd is kept as written too (--amp-dtype explicit).
    assert _custom_fwds(report["original"]) == [(14, "cuda", "float16", "cpu", "float16")]
    assert _custom_fwds(report["rewritten"]) == [(14, "cpu", "float16", "cpu", "float16")]
    assert len(report["original"]["losses"]) == 3
    assert report["original"]["losses"] == report["rewritten"]["losses"]  # bit for bit


def test_keep_dtype_finds_a_rewrite_that_did_not_keep_float16(jobs: JobPool) -> None:
    job = jobs.result("keep_dtype_not_kept")
    assert job.returncode == 1, job.stderr
    assert job.report["first_difference"] == (
        "step 0: original custom_fwd(device_type=cpu cast_inputs=float16) at explicit_float16.py:14; "
        "rewrite custom_fwd(device_type=cpu cast_inputs=bfloat16) at explicit_float16.cpu.py:14"
    )
