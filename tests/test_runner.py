"""`ampfix run` and `ampfix verify` on the realistic CUDA scripts in fixtures/run, on this CPU.

Each command line below is a job, run once for the module (see runner_jobs).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from runner_jobs import FIXTURES, Job, JobPool, define_job_fixtures
from runner_jobs import autocast_region as _region

# job name -> the ampfix command line (a fixture script name is made a path under FIXTURES)
JOBS: dict[str, list[str]] = {
    "cnn_run": ["run", "cnn_amp.py", "--", "--steps", "4"],
    "custom_function_run": ["run", "custom_function.py"],
    "dataloader_run": ["run", "dataloader_pinned.py"],
    "event_timing_run": ["run", "event_timing.py"],
    # bfloat16: in float16 each rank's scaled gradients overflow at the first three scales (every step skipped, as
    # a GPU would), and this job counts the ranks' steps.
    "spawn_run": ["run", "--amp-dtype", "bfloat16", "spawn_ddp.py"],
    "cuda_graphs_run": ["run", "cuda_graphs.py"],
    "resume_prefetch_run": ["run", "resume_prefetch.py"],
    "cnn_verify": ["verify", "cnn_amp.py", "--rewritten", "cnn_amp.migrated.py", "--max-steps", "2", "--amp-dtype", "keep"],
    "custom_function_verify": ["verify", "custom_function.py", "--rewritten", "custom_function.migrated.py"],
    "dataloader_verify": ["verify", "dataloader_pinned.py", "--rewritten", "dataloader_pinned.migrated.py"],
    "event_timing_verify": ["verify", "event_timing.py", "--rewritten", "event_timing.migrated.py"],
    "spawn_verify": ["verify", "spawn_ddp.py", "--rewritten", "spawn_ddp.migrated.py", "--", "--nprocs", "1", "--steps", "2"],
    "wrong_enabled_verify": ["verify", "cnn_amp.py", "--rewritten", "cnn_amp.wrong_enabled.py", "--", "--steps", "3"],
    # The CPU's op policy on both sides: the "cuda" request then runs exactly as the "cpu" one does.
    "wrong_cpu_verify": [  # both sides in bfloat16, so that only the requests differ
        "verify", "cnn_amp.py", "--rewritten", "cnn_amp.wrong_cpu.py", "--autocast-policy", "cpu", "--amp-dtype",
        "bfloat16", "--", "--steps", "3",
    ],
    "engine_rewrite_verify": ["verify", "cnn_amp.py", "--", "--steps", "3"],
    # Where real scripts meet the emulation (issue 16), and autocasts nested across a call (issue 20).
    # The bfloat16 stand-in, no longer the default (float16 runs as float16): asked for.
    "boundaries_run": ["run", "--amp-dtype", "bfloat16", "boundaries.py"],
    "odd_fft_run": ["run", "--amp-dtype", "bfloat16", "boundaries.py", "--", "24"],
    "silenced_run": ["run", "silenced.py"],
    # The autocast state functions torch 2.4 deprecated (issue 19), warnings silenced.
    "autocast_state_run": ["run", "autocast_state.py"],
    "autocast_state_verify": ["verify", "autocast_state.py", "--rewritten", "autocast_state.migrated.py"],
    "autocast_state_engine_verify": ["verify", "autocast_state.py"],
    # The script's own CPU autocast state, read and set inside the emulated "cuda" regions.
    "cpu_autocast_state_run": ["run", "cpu_autocast_state.py"],
    "project_verify": ["verify", "project_amp/run.py"],
    "project_unmigrated_verify": ["verify", "project_amp/run.py", "--rewritten", "project_amp/run.py"],
    "nested_idiomatic_verify": ["verify", "nested_call.py", "--rewritten", "nested_call.idiomatic.py"],
    "nested_explicit_verify": ["verify", "nested_call.py", "--rewritten", "nested_call.explicit.py"],
    "nested_engine_verify": ["verify", "nested_call.py"],
}


define_job_fixtures(JOBS, globals())


def _deprecation_lines(report: dict[str, Any]) -> dict[int, int]:
    return {item["line"]: item["count"] for item in report["deprecations"] if item["category"] == "FutureWarning"}


# -- ampfix run -----------------------------------------------------------------------------------


def test_cnn_runs_cuda_autocast_as_cpu_float16(cnn_run: Job) -> None:
    report = cnn_run.report
    assert cnn_run.returncode == 0, cnn_run.stderr
    assert report["exit_code"] == 0
    training = _region(report, 50)
    assert training == {
        "device_requested": "cuda", "dtype_requested": "float16", "enabled_requested": True, "cache_enabled_requested": True,
        "device_run": "cpu", "dtype": "float16", "enabled": True, "entered": 4, "origin": "script",
        "file": str(FIXTURES / "cnn_amp.py"), "line": 50, "process": "main",
    }  # fmt: skip
    assert _region(report, 59)["entered"] == 1  # the evaluation pass
    # Per step conv, relu, pool, conv, relu, pool, flatten, linear ran in float16 (the default: as asked); the same 8
    # in eval.
    assert report["op_dtypes"]["float16"] == 4 * 8 + 8 and "bfloat16" not in report["op_dtypes"]
    assert report["op_dtypes"]["float32"] > 0  # cross_entropy is autocast to float32


def test_cnn_scaler_optimizer_and_losses(cnn_run: Job) -> None:
    report = cnn_run.report
    assert report["scaler"] == {"scale": 4, "unscale": 0, "step": 4, "update": 4, "skipped_steps": 0}
    assert report["optimizer_steps"] == 4  # the script's own --steps 4 reached it through `--`
    printed = [float(line.split()[3]) for line in cnn_run.stdout.splitlines() if line.startswith("step ")]
    assert [round(loss, 4) for loss in report["losses"]] == printed
    (scaler,) = report["grad_scalers"]
    assert (scaler["device"], scaler["init_scale"], scaler["enabled"], scaler["line"]) == ("cuda", 65536.0, True, 41)


def test_cnn_deprecations_have_file_and_line(cnn_run: Job) -> None:
    assert _deprecation_lines(cnn_run.report) == {41: 1, 50: 4, 59: 1}
    assert all(item["file"] == str(FIXTURES / "cnn_amp.py") for item in cnn_run.report["deprecations"])
    assert cnn_run.report["unemulated"] == []


def test_cnn_summary_is_printed(cnn_run: Job) -> None:
    assert "ampfix run: cnn_amp.py exited 0" in cnn_run.stderr
    assert "cnn_amp.py:50" in cnn_run.stderr and "cpu float16" in cnn_run.stderr


def test_max_steps_stops_cleanly_and_keep_runs_the_requested_float16(cnn_verify: Job) -> None:
    # verify runs both sides with run's options; each side's report is a full run report.
    for side in ("original", "rewritten"):
        report = cnn_verify.report[side]
        assert report["exit_code"] == 0
        assert report["stopped_at_max_steps"] is True
        assert report["optimizer_steps"] == 2
        assert report["scaler"] == {"scale": 2, "unscale": 0, "step": 2, "update": 2, "skipped_steps": 0}
        assert len(report["losses"]) == 2
        assert _region(report, 50)["dtype"] == "float16"
        assert [region["line"] for region in report["autocast_regions"]] == [50]  # stopped before the evaluation
        assert report["op_dtypes"]["float16"] == 2 * 8 and "bfloat16" not in report["op_dtypes"]


def test_custom_fwd_cast_inputs_keeps_working(custom_function_run: Job) -> None:
    report = custom_function_run.report
    # The script itself raises if custom_fwd did not cast to float32 or left autocast on inside;
    # its backward allocates on torch.cuda.current_device(), which needs the device mapping there.
    assert custom_function_run.returncode == 0, custom_function_run.stderr
    training = _region(report, 53)
    assert (training["device_run"], training["dtype"], training["enabled"], training["entered"]) == ("cpu", "float16", True, 5)
    # custom_fwd's own region (autocast off around forward) and custom_bwd's, both made by torch.
    inner_regions = [region for region in report["autocast_regions"] if region["origin"] == "torch"]
    assert sorted((region["enabled"], region["entered"]) for region in inner_regions) == [(False, 5), (False, 5)]
    # cast_inputs=float32 (this forward must run in full precision) is not the AMP dtype: it stays float32.
    assert report["custom_fwd"] == [
        {
            "device_requested": "cuda", "cast_inputs_requested": "float32", "device_run": "cpu", "cast_inputs": "float32",
            "file": str(FIXTURES / "custom_function.py"), "line": 14, "count": 1,
        }
    ]  # fmt: skip
    assert report["op_dtypes"] == {"float16": 10, "float32": 5}  # linear+gelu per step; mse_loss
    assert report["scaler"]["step"] == 5 and report["optimizer_steps"] == 5
    messages = " ".join(item["message"] for item in report["deprecations"])
    assert "torch.cuda.amp.custom_fwd" in messages and "torch.cuda.amp.custom_bwd" in messages


def test_dataloader_with_workers_and_pinned_memory(dataloader_run: Job) -> None:
    report = dataloader_run.report
    assert dataloader_run.returncode == 0, dataloader_run.stderr
    region = _region(report, 33)
    assert (region["dtype_requested"], region["device_run"], region["dtype"], region["entered"]) == ("float16", "cpu", "float16", 8)
    assert report["op_dtypes"]["float16"] == 8 * 3  # linear, relu, linear in 2 epochs x 4 batches
    assert report["scaler"] == {"scale": 8, "unscale": 0, "step": 8, "update": 8, "skipped_steps": 0}
    assert report["optimizer_steps"] == 8


def test_cuda_events_streams_and_memory_answer(event_timing_run: Job) -> None:
    report = event_timing_run.report
    assert event_timing_run.returncode == 0, event_timing_run.stderr
    assert "device: ampfix emulated CUDA device (runs on CPU), 1 visible" in event_timing_run.stdout
    assert "median step" in event_timing_run.stdout
    region = _region(report, 30)
    assert (region["dtype_requested"], region["dtype"], region["enabled"], region["entered"]) == ("float16", "float16", True, 6)
    assert report["op_dtypes"]["float16"] > 0
    assert report["scaler"]["step"] == 6 and report["scaler"]["update"] == 6
    assert report["grad_scalers"][0]["init_scale"] == 4096.0
    assert report["deprecations"][0]["line"] == 17  # torch.autocast(device_type=...) is not deprecated


def test_spawned_ranks_get_the_same_mapping(spawn_run: Job) -> None:
    report = spawn_run.report
    assert spawn_run.returncode == 0, spawn_run.stderr
    assert [process["label"] for process in report["processes"]] == ["main", "SpawnProcess-1", "SpawnProcess-2"]
    for rank in ("SpawnProcess-1", "SpawnProcess-2"):
        region = _region(report, 30, process=rank)
        assert (region["device_run"], region["dtype"], region["enabled"], region["entered"]) == ("cpu", "bfloat16", True, 3)
    assert report["optimizer_steps"] == 6 and len(report["losses"]) == 6
    assert report["scaler"]["step"] == 6
    assert report["op_dtypes"]["bfloat16"] > 0
    (nccl,) = report["unemulated"]
    assert nccl["feature"].startswith("NCCL") and nccl["count"] == 2


def test_threads_hooks_generators_checkpoints_and_a_skipped_step(resume_prefetch_run: Job) -> None:
    report = resume_prefetch_run.report
    # The script moves batches to "cuda" in a thread, allocates on the current CUDA device in a
    # checkpointed block (recomputed inside backward) and in a gradient hook, draws from
    # torch.Generator(device="cuda"), reloads with map_location="cuda:0" and checks the scaler
    # backed off: any of those failing would fail the script.
    assert resume_prefetch_run.returncode == 0, resume_prefetch_run.stderr
    assert report["scaler"] == {"scale": 4, "unscale": 0, "step": 4, "update": 4, "skipped_steps": 1}
    assert report["optimizer_steps"] == 3  # the corrupt batch's step was skipped
    losses = report["losses"]
    # The corrupt batch (inputs of 1e30) is inf in float16, and the first matmul's inf - inf makes its loss NaN, as on
    # a GPU (bfloat16, with float32's range, gave inf).
    assert len(losses) == 4 and math.isnan(losses[2])
    assert all(loss < 10 for index, loss in enumerate(losses) if index != 2)
    assert _region(report, 32)["entered"] == 4


def test_a_failing_script_keeps_its_status_traceback_and_summary(cuda_graphs_run: Job) -> None:
    report = cuda_graphs_run.report
    assert cuda_graphs_run.returncode == 1
    assert report["exit_code"] == 1
    assert "Traceback" in cuda_graphs_run.stderr and "CUDA graphs (torch.cuda.CUDAGraph)" in cuda_graphs_run.stderr
    assert "ampfix run: cuda_graphs.py exited 1" in cuda_graphs_run.stderr
    assert report["optimizer_steps"] == 2 and report["scaler"]["step"] == 2  # what ran before the failure
    features = {(item["line"], item["feature"].split(" (")[0]) for item in report["unemulated"]}
    assert features == {(30, "CUDA graphs")}
    # x.is_cuda and the legacy types answer as on a GPU (issue 28): only the capture is not emulated.
    assert cuda_graphs_run.stdout.splitlines() == [
        "static_input.is_cuda: True",
        "legacy constructor: cuda:0 torch.float32",
        "isinstance: True False",
        "a half is a HalfTensor: True",
    ]


# -- ampfix verify --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "job_name",
    ["cnn_verify", "custom_function_verify", "dataloader_verify", "event_timing_verify", "spawn_verify"],
)
def test_each_fixture_and_its_migration_are_equivalent(job_name: str, jobs: JobPool) -> None:
    job = jobs.result(job_name)
    assert job.returncode == 0, job.stderr
    assert job.report["equivalent"] is True
    assert job.report["first_difference"] is None
    assert job.report["original"]["losses"] == job.report["rewritten"]["losses"]
    assert job.report["original"]["losses"]  # something was compared
    assert "equivalent" in job.stderr


def test_positional_enabled_moved_into_dtype_crashes_the_rewrite_and_that_is_the_cause(wrong_enabled_verify: Job) -> None:
    report = wrong_enabled_verify.report
    # torch refuses `enabled` landed in dtype on entry, as on a GPU: the crash is the cause, with exit 3.
    assert wrong_enabled_verify.returncode == 3, wrong_enabled_verify.stderr
    assert report["crashed"] == "rewrite" and report["equivalent"] is None and report["rewritten"]["exit_code"] == 1
    exception = "TypeError: set_autocast_dtype(): argument 'dtype' (position 2) must be torch.dtype, not bool"
    assert report["error"] == (
        f"the rewrite crashed: {exception}; no sign of the runner's emulation in the failure (raised outside ampfix, "
        "no bfloat16 stand-in named): the script's own"
    )
    assert f"NOT verified — {report['error']}\n" in wrong_enabled_verify.stderr  # one line: stderr is no terminal
    # What led there, kept beside the cause: `enabled` landed in dtype (and no word of inherited settings).
    assert report["first_difference"] == (
        "step 0: original autocast(device=cuda dtype=float16 enabled=True cache_enabled=True) at cnn_amp.py:50; "
        "rewrite autocast(device=cuda dtype=True enabled=True cache_enabled=True) at cnn_amp.wrong_enabled.py:50")
    assert "rewrite : exit 1, 0 optimizer steps, 0 losses, 1 autocast site" in wrong_enabled_verify.stderr.splitlines()


def test_autocast_moved_to_cpu_is_not_equivalent_even_with_equal_losses(wrong_cpu_verify: Job) -> None:
    report = wrong_cpu_verify.report
    assert wrong_cpu_verify.returncode == 1
    assert report["equivalent"] is False
    assert "device=cpu dtype=bfloat16" in report["first_difference"]
    # Both ran in CPU bfloat16, so the losses agree bit for bit: only the requests tell them apart.
    assert report["original"]["losses"] == report["rewritten"]["losses"]


def test_verify_with_ampfix_own_rewrite(engine_rewrite_verify: Job) -> None:
    assert engine_rewrite_verify.returncode == 0, engine_rewrite_verify.stderr
    assert engine_rewrite_verify.report["equivalent"] is True
    assert len(engine_rewrite_verify.report["original"]["losses"]) == 3


# -- where real scripts meet the emulation ------------------------------------------------------


def _sites(items: list[dict[str, Any]], key: str) -> set[tuple[int, str, int]]:
    return {(item["line"], item[key], item["count"]) for item in items}


def test_the_bfloat16_stand_in_reads_as_float16_where_it_leaves_the_run(boundaries_run: Job) -> None:
    report = boundaries_run.report
    assert boundaries_run.returncode == 0, boundaries_run.stderr
    # What the script printed: every boundary saw the float16 a GPU gives.
    assert boundaries_run.stdout.splitlines() == [
        "outputs: float16",
        "numpy: float16 float16",
        "saved: torch.float16",
        "spectrum: torch.complex32 mae finite: True",
    ]
    assert _region(report, 42)["dtype"] == "bfloat16"  # while the run itself ran bfloat16
    assert _sites(report["stand_in"], "what") == {
        (50, "x.numpy() gave float16", 1),
        (52, "x.dtype read as float16", 1),
        (56, "numpy array of x in float16", 1),
        (58, "torch.save wrote float16", 1),
    }
    assert all(item["file"] == str(FIXTURES / "boundaries.py") for item in report["stand_in"])


def test_ffts_the_cpu_lacks_in_half_precision_run_in_float32_and_are_reported(boundaries_run: Job) -> None:
    done = "no CPU kernel, ran in float32, cast back as CUDA gives"
    assert _sites(boundaries_run.report["emulated"], "feature") == {
        (29, f"torch.fft.rfft on bfloat16: {done}", 2),  # inside autocast, each step
        (33, f"torch.fft.irfft on complex32: {done}", 2),  # the complex32 rfft gave, as on a GPU
        (60, f"torch.fft.rfft on bfloat16: {done}", 1),  # outside autocast, on the stand-in
    }
    assert boundaries_run.report["op_dtypes"]["complex32"] == 2  # counted as CUDA gives it, not float32's


def test_a_half_precision_fft_a_gpu_refuses_fails_and_says_so(odd_fft_run: Job) -> None:
    assert odd_fft_run.returncode == 1
    assert (
        "cuFFT only supports dimensions whose sizes are powers of two when computing in half precision, "
        "but got a signal size of[24]"
    ) in odd_fft_run.stderr
    assert "why: the runner reproduces a GPU's own refusal here: the script fails the same" in odd_fft_run.stderr
    assert odd_fft_run.report["processes"][0]["failure"]["gpu_too"] is True


def test_deprecated_calls_are_counted_though_the_script_silences_warnings(silenced_run: Job) -> None:
    report = silenced_run.report
    assert silenced_run.returncode == 0, silenced_run.stderr
    assert {(item["line"], item["count"], item["category"], item["api"]) for item in report["deprecations"]} == {
        (13, 1, "FutureWarning", True),  # @custom_fwd(cast_inputs=...)
        (20, 1, "FutureWarning", True),  # torch.cuda.amp.GradScaler()
        (22, 3, "FutureWarning", True),  # torch.cuda.amp.autocast(), each step
    }
    assert "FutureWarning" not in silenced_run.stderr.split("ampfix run:")[0]  # and the script's filter still holds


def _state_message(old: str, new: str, device: str) -> str:
    return f"torch.{old}() is deprecated. Please use torch.{new}() with '{device}' first instead (AMP007)"


def test_deprecated_autocast_state_calls_are_counted_at_their_line(autocast_state_run: Job) -> None:
    report = autocast_state_run.report
    assert autocast_state_run.returncode == 0, autocast_state_run.stderr
    calls = {(item["line"], item["message"], item["count"]) for item in report["deprecations"]}
    assert {item["category"] for item in report["deprecations"]} == {"DeprecationWarning"}
    assert all(item["api"] for item in report["deprecations"])
    get, set_, is_, set_enabled = "get_autocast_dtype", "set_autocast_dtype", "is_autocast_enabled", "set_autocast_enabled"
    assert calls == {
        (22, _state_message("get_autocast_gpu_dtype", get, "cuda"), 2),  # in the Function, each step
        (35, _state_message("get_autocast_gpu_dtype", get, "cuda"), 2),  # `from torch import ... as gpu_dtype`
        (41, _state_message("is_autocast_cpu_enabled", is_, "cpu"), 1),  # `import torch as th`
        (41, _state_message("get_autocast_cpu_dtype", get, "cpu"), 1),
        (42, _state_message("get_autocast_gpu_dtype", get, "cuda"), 1),
        (43, _state_message("set_autocast_gpu_dtype", set_, "cuda"), 1),
        (44, _state_message("get_autocast_gpu_dtype", get, "cuda"), 1),
        (45, _state_message("set_autocast_gpu_dtype", set_, "cuda"), 1),
        (46, _state_message("set_autocast_cpu_enabled", set_enabled, "cpu"), 1),
        (47, _state_message("set_autocast_cpu_dtype", set_, "cpu"), 1),
        (49, _state_message("get_autocast_xla_dtype", get, "xla"), 1),  # through a reference, at the call
        (49, _state_message("get_autocast_ipu_dtype", get, "ipu"), 1),
        (49, _state_message("is_autocast_xla_enabled", is_, "xla"), 1),
        (49, _state_message("is_autocast_ipu_enabled", is_, "ipu"), 1),
        (50, _state_message("set_autocast_xla_dtype", set_, "xla"), 1),
        (51, _state_message("set_autocast_ipu_dtype", set_, "ipu"), 1),
        (52, _state_message("set_autocast_xla_enabled", set_enabled, "xla"), 1),
        (53, _state_message("set_autocast_ipu_enabled", set_enabled, "ipu"), 1),
        (55, _state_message("set_autocast_gpu_dtype", set_, "cuda"), 1),  # counted though it raises
    }  # fmt: skip
    # What the script read is what a GPU gives: CUDA's float16 though bfloat16 ran, CUDA autocast off in a
    # "cpu" region; and the script's filter still holds.
    assert autocast_state_run.stdout.splitlines() == [
        "cuda region: torch.float16 True torch.float16",
        "cuda region: torch.float16 True torch.float16",
        "cpu region: False True torch.bfloat16",
        "outside: torch.float16 False",
        "set: torch.bfloat16",
        "other devices: torch.bfloat16 torch.float16 False False",
        "refused: dtype must be a torch.dtype (got str)",  # torch's own error, through the runner's wrapper
    ]
    assert "DeprecationWarning" not in autocast_state_run.stderr.split("ampfix run:")[0]


def test_verify_shows_the_originals_deprecated_calls(autocast_state_verify: Job) -> None:
    assert autocast_state_verify.returncode == 0, autocast_state_verify.stderr
    assert autocast_state_verify.report["equivalent"] is True
    lines = autocast_state_verify.stderr.splitlines()  # one line each: stderr is no terminal
    # Both steps skipped, as on a GPU: the loss sums 2x4 outputs, so the gradient of each is the scale, 65536 (inf in
    # float16); at 32768 the bias's gradient sums the batch's two: 65536 again.
    assert "original: exit 0, 0 optimizer steps, 2 losses, 2 autocast sites, 21 deprecated API calls at 19 sites" \
        in lines
    assert "rewrite : exit 0, 0 optimizer steps, 2 losses, 2 autocast sites" in lines


def test_a_rewrite_left_calling_a_state_function_is_not_migrated(autocast_state_engine_verify: Job) -> None:
    # ampfix's rewrite leaves `from torch import set_autocast_cpu_enabled` (its twin has another name) and the
    # reference `read = torch.get_autocast_xla_dtype` (a partial only under --unsafe-fixes).
    report = autocast_state_engine_verify.report
    assert autocast_state_engine_verify.returncode == 1, autocast_state_engine_verify.stderr
    assert report["equivalent"] is False
    assert report["first_difference"] == (
        "the rewrite still calls a deprecated API at autocast_state.py:46 and 1 other site(s) ("
        + _state_message("set_autocast_cpu_enabled", "set_autocast_enabled", "cpu") + "): not migrated"
    )


def _cpu_state_lines(job: Job) -> dict[str, str]:
    assert job.returncode == 0, job.stderr
    return dict(line.split(": ", 1) for line in job.stdout.splitlines())


# What cpu_autocast_state.py's cpu_state() prints: the new CPU queries, the deprecated ones, then CUDA's
# (with "cuda" and without a device).
_CPU_OFF = "cpu False torch.bfloat16 | deprecated False torch.bfloat16"
_CPU_HALF = "cpu True torch.float16 | deprecated True torch.float16"


def test_a_cuda_region_leaves_the_scripts_cpu_autocast_state_as_on_a_gpu(cpu_autocast_state_run: Job) -> None:
    lines = _cpu_state_lines(cpu_autocast_state_run)
    assert [(name, lines[name]) for name in ("outside", "cuda region", "available", "end")] == [
        ("outside", f"{_CPU_OFF} | cuda False False"),
        ("cuda region", f"{_CPU_OFF} | cuda True True torch.float16"),  # CPU autocast runs it, and is not shown
        ("available", f"True True {_CPU_OFF} | cuda True True"),
        ("end", f"{_CPU_OFF} | cuda False False"),
    ]


def test_cpu_and_cuda_regions_nest_both_ways_as_on_a_gpu(cpu_autocast_state_run: Job) -> None:
    lines = _cpu_state_lines(cpu_autocast_state_run)
    names = ("cpu in cuda", "cuda again", "cuda in cpu", "cpu again", "cuda in cpu off")
    assert [(name, lines[name]) for name in names] == [
        ("cpu in cuda", f"{_CPU_HALF} | cuda True True"),
        ("cuda again", f"{_CPU_OFF} | cuda True True"),
        ("cuda in cpu", f"{_CPU_HALF} | cuda True True torch.float16"),  # the script's float16, not the run's bfloat16
        ("cpu again", f"{_CPU_HALF} | cuda False False"),
        ("cuda in cpu off", f"{_CPU_OFF} | cuda True True"),
    ]


def test_cpu_state_set_in_a_cuda_region_is_the_scripts_and_stays_after_it(cpu_autocast_state_run: Job) -> None:
    lines = _cpu_state_lines(cpu_autocast_state_run)
    names = ("set in cuda", "cpu default in cuda", "unset in cuda", "after cuda", "deprecated set in cuda",
             "inner cuda", "outer cuda", "after both", "refused")  # fmt: skip
    assert [(name, lines[name]) for name in names] == [
        ("set in cuda", f"{_CPU_HALF} | cuda True True torch.float16"),
        ("cpu default in cuda", f"{_CPU_HALF} | cuda True True"),  # a dtype-less "cpu" region takes the script's
        # CPU autocast off, as the script asked: the "cuda" region still runs autocast.
        ("unset in cuda", "cpu False torch.float16 | deprecated False torch.float16 | cuda True True torch.float16"),
        ("after cuda", f"{_CPU_HALF} | cuda False False"),  # set_autocast_cpu_enabled(True) outlives the region
        ("deprecated set in cuda", f"{_CPU_OFF} | cuda True True"),
        ("inner cuda", "cpu False torch.float16 | deprecated False torch.float16 | cuda True True"),
        ("outer cuda", "cpu False torch.float16 | deprecated False torch.float16 | cuda True True"),
        ("after both", "cpu False torch.float16 | deprecated False torch.float16 | cuda False False"),
        ("refused", "set_autocast_dtype(): argument 'dtype' (position 2) must be torch.dtype, not str"),  # torch's
    ]
    report = cpu_autocast_state_run.report
    # Each model call in a "cuda" region ran in float16 (the run's default: as asked), whatever the script set on the
    # CPU there.
    assert report["op_dtypes"] == {"float16": 4}
    calls = {(item["line"], item["message"], item["count"]) for item in report["deprecations"]}
    assert calls == {
        (17, _state_message("is_autocast_cpu_enabled", "is_autocast_enabled", "cpu"), 17),  # each cpu_state()
        (17, _state_message("get_autocast_cpu_dtype", "get_autocast_dtype", "cpu"), 17),
        (45, _state_message("set_autocast_cpu_enabled", "set_autocast_enabled", "cpu"), 1),
        (48, _state_message("set_autocast_cpu_enabled", "set_autocast_enabled", "cpu"), 1),
        (49, _state_message("set_autocast_cpu_dtype", "set_autocast_dtype", "cpu"), 1),
    }  # fmt: skip


def test_verify_rewrites_the_local_modules_the_script_imports(project_verify: Job) -> None:
    report = project_verify.report
    assert project_verify.returncode == 0, project_verify.stderr
    assert report["equivalent"] is True
    root = FIXTURES / "project_amp"
    assert report["notes"][1:] == [
        f"rewrite: ampfix's own of the script and the 2 local module(s) it imports, run from the rewrite side's copy of {root}",
        "files rewritten: exp/exp_main.py",
    ]
    assert report["original"]["deprecations"] and not report["rewritten"]["deprecations"]
    assert (root / "exp" / "exp_main.py").read_text().count("torch.cuda.amp.") == 2  # the caller's file is untouched


def test_verify_of_the_same_unmigrated_source_is_never_equivalent(project_unmigrated_verify: Job) -> None:
    report = project_unmigrated_verify.report
    assert project_unmigrated_verify.returncode == 1
    assert report["equivalent"] is False
    assert report["first_difference"] == (
        "the rewrite still calls a deprecated API at exp_main.py:12 and 1 other site(s) "
        "(`torch.cuda.amp.GradScaler(args...)` is deprecated. Please use `torch.amp.GradScaler('cuda', args...)` "
        "instead.): not migrated"
    )
    assert "the rewrite side still uses the deprecated API in exp/exp_main.py: line 12 AMP002, line 17 AMP001" in report["notes"]
    assert "equivalent:" not in project_unmigrated_verify.stderr


def test_verify_names_a_nested_region_whose_effective_settings_differ(nested_idiomatic_verify: Job) -> None:
    report = nested_idiomatic_verify.report
    assert nested_idiomatic_verify.returncode == 1
    assert report["first_difference"] == (
        "step 0: original autocast(device=cuda dtype=float16 enabled=True cache_enabled=True) at nested_call.py:13; "
        "rewrite autocast(device=cuda dtype=bfloat16 enabled=True cache_enabled=False) at nested_call.idiomatic.py:13 "
        "(the region's effective dtype and cache_enabled differ: an autocast that does not give them takes the "
        "enclosing region's, where the deprecated torch.cuda.amp.autocast() and torch.cpu.amp.autocast() give their "
        "own defaults)"
    )


def test_verify_of_ampfixs_own_rewrite_of_the_nesting_is_equivalent(nested_engine_verify: Job) -> None:
    # ampfix's rewrite writes the old defaults where the nesting is across a call (docs/autocast-defaults.md).
    assert nested_engine_verify.returncode == 0, nested_engine_verify.stderr
    assert nested_engine_verify.report["equivalent"] is True
    assert nested_engine_verify.report["notes"][-1] == "files rewritten: nested_call.py"


def test_verify_of_the_explicit_nested_rewrite_is_equivalent(nested_explicit_verify: Job) -> None:
    assert nested_explicit_verify.returncode == 0, nested_explicit_verify.stderr
    assert nested_explicit_verify.report["equivalent"] is True
    region = next(r for r in nested_explicit_verify.report["rewritten"]["autocast_regions"] if r["line"] == 13)
    assert (region["dtype_requested"], region["cache_enabled_requested"]) == ("float16", True)
