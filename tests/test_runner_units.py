"""The runner's parent-side pieces, without starting torch: comparison, reports, environment, imports."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from ampfix.runner.host import api, compare, cpu_target, failures, launch, project, render
from ampfix.runner.config import CONFIG_ENV, ROLE_ENV, RunnerConfig
from ampfix.runner.host.model import RunReport
from ampfix.runner.trace.observe import CustomFwdKey, Recorder, RegionKey, Site, event_what

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "run"


def _process(label: str = "main", trace: list[dict] | None = None, **fields) -> dict:
    recorder = Recorder("main" if label == "main" else "child")
    data = recorder.to_dict(label)
    data["trace"] = trace or []
    data.update(fields)
    return data


def _event(step: int, kind: str, what: str = "", where: str = "/x/train.py:10", **fields) -> dict:
    """A trace event as the Recorder writes it: a request's arguments as ``fields``, other events' text as ``what``."""
    return {"step": step, "kind": kind, **({"fields": fields} if fields else {"what": what}), "where": where}


def _report(*processes: dict, exit_code: int = 0) -> RunReport:
    return RunReport("/x/train.py", exit_code, list(processes))


TRACE = [
    _event(0, "grad_scaler", device="cuda", init_scale=65536.0),
    _event(0, "autocast", device="cuda", dtype="float16", enabled=True, cache_enabled=True),
    _event(0, "loss", (0.6931471824645996).hex()),
    _event(1, "optimizer_step", "1"),
]


def test_importing_the_commands_imports_neither_torch_nor_libcst() -> None:
    code = (
        "import sys, ampfix.runner.host.commands, ampfix.runner.host.api\n"
        "print(sorted(name for name in ('torch', 'libcst', 'numpy') if name in sys.modules))"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert completed.stdout.strip() == "[]"


def test_child_environment_is_a_copy_with_the_bootstrap_first() -> None:
    base = {"PATH": "/bin", "PYTHONPATH": "/user/lib"}
    config = RunnerConfig(out_dir="/tmp/out", seed=7, threads=3, amp_dtype="keep", max_steps=5)
    env = launch.child_environment(base, config, extra_paths=["/original/dir"])
    assert base == {"PATH": "/bin", "PYTHONPATH": "/user/lib"}
    paths = env["PYTHONPATH"].split(os.pathsep)
    assert paths[:3] == [str(launch.BOOTSTRAP_DIR), "/original/dir", "/user/lib"]
    assert (Path(launch.BOOTSTRAP_DIR) / "sitecustomize.py").is_file()
    assert RunnerConfig.from_env_value(env[CONFIG_ENV]) == config
    assert env[ROLE_ENV] == "main"
    assert env["PYTHONHASHSEED"] == "7"
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "3"


def test_identical_traces_are_equivalent() -> None:
    assert compare.first_difference(_report(_process(trace=TRACE)), _report(_process(trace=list(TRACE)))) is None


def test_line_numbers_are_shown_not_compared() -> None:
    moved = [{**event, "where": "/tmp/copy/train.py:11"} for event in TRACE]
    assert compare.first_difference(_report(_process(trace=TRACE)), _report(_process(trace=moved))) is None


def test_a_loss_one_bit_apart_is_a_difference() -> None:
    other = 0.6931471824645996 + 2**-52
    changed = [*TRACE[:2], _event(0, "loss", other.hex()), TRACE[3]]
    difference = compare.first_difference(_report(_process(trace=TRACE)), _report(_process(trace=changed)))
    assert difference == (
        "step 0: original loss 0.6931471824645996 (0x1.62e4300000000p-1) at train.py:10; "
        f"rewrite loss {other!r} ({other.hex()}) at train.py:10"
    )


def test_a_rewrite_that_stops_early_is_a_difference() -> None:
    difference = compare.first_difference(_report(_process(trace=TRACE)), _report(_process(trace=TRACE[:2])))
    assert difference.startswith("step 0: the rewrite stopped before loss 0.6931471824645996")


def test_child_process_traces_are_compared_too() -> None:
    original = _report(_process(), _process("SpawnProcess-1", trace=TRACE))
    rewritten = _report(_process(), _process("SpawnProcess-1", trace=TRACE[:1]))
    assert compare.first_difference(original, rewritten).startswith("process SpawnProcess-1: step 0:")
    missing = _report(_process())
    assert compare.first_difference(original, missing) == "process SpawnProcess-1: ran in the original, not in the rewrite"


def _task(shard_loss: float, steps_before: int) -> list[dict]:
    """One Pool task's events, numbered as a worker that already took `steps_before` steps does."""
    return [
        _event(steps_before, "autocast", device="cuda", dtype="float16", enabled=True, cache_enabled=True),
        _event(steps_before, "loss", shard_loss.hex()),
        _event(steps_before + 1, "optimizer_step", str(steps_before + 1)),
    ]


def test_pool_workers_are_compared_as_one_group_whatever_the_scheduling() -> None:
    def worker(label: str, *tasks: list[dict]) -> dict:
        process = _process(label, trace=[event for task in tasks for event in task])
        process["pool_worker"] = True
        return process

    # Three tasks; the scheduler gave them to the two workers differently on each side.
    original = _report(_process(), worker("ForkPoolWorker-1", _task(0.5, 0), _task(0.25, 1)), worker("ForkPoolWorker-2", _task(0.125, 0)))
    rewritten = _report(_process(), worker("ForkPoolWorker-1", _task(0.125, 0)), worker("ForkPoolWorker-2", _task(0.5, 0), _task(0.25, 1)))
    assert compare.first_difference(original, rewritten) is None
    one_worker = _report(_process(), worker("ForkPoolWorker-1", _task(0.25, 0), _task(0.125, 1), _task(0.5, 2)))
    assert compare.first_difference(original, one_worker) is None
    changed = _report(_process(), worker("ForkPoolWorker-1", _task(0.5, 0), _task(0.25, 1), _task(0.375, 2)))
    assert compare.first_difference(original, changed) == "Pool workers: loss 0.125 (0x1.0000000000000p-3) ran 1 more time(s) in the original"


def test_exit_status_is_compared_after_the_traces() -> None:
    difference = compare.first_difference(_report(_process(trace=TRACE)), _report(_process(trace=TRACE), exit_code=1))
    assert difference == "exit status: original 0, rewrite 1"


def test_verify_cannot_compare_when_the_original_fails() -> None:
    report = api.compare_runs(_report(_process(), exit_code=1), _report(_process()))
    assert report.equivalent is None and report.exit_code == 2
    assert "original exited with status 1" in report.error


def test_verify_cannot_compare_when_a_side_did_not_run() -> None:
    broken = RunReport("/x/train.py", None, [], error="timed out after 5 s")
    report = api.compare_runs(_report(_process()), broken)
    assert report.exit_code == 2 and report.error == "the rewrite could not be run: timed out after 5 s"


def test_verify_refuses_a_rewrite_that_does_not_compile_without_running_anything(tmp_path: Path) -> None:
    rewrite = tmp_path / "cnn_amp.py"
    rewrite.write_text("with torch.amp.autocast('cuda'\n")
    report = api.verify_scripts(FIXTURES / "cnn_amp.py", rewrite)
    assert report.exit_code == 2 and report.original is None
    assert "does not compile" in report.error
    assert json.loads(json.dumps(report.to_json()))["equivalent"] is None


def test_run_report_sums_processes() -> None:
    main = _process(op_dtypes={"float32": 1}, optimizer_steps=0)
    deprecation = {"message": "old", "category": "FutureWarning", "file": "/x/train.py", "line": 3, "count": 2}
    rank = _process("SpawnProcess-1", op_dtypes={"bfloat16": 5, "float32": 2}, optimizer_steps=3, losses=[1.0, 0.5], deprecations=[deprecation])
    rank2 = _process("SpawnProcess-2", optimizer_steps=3, losses=[2.0], deprecations=[deprecation])
    report = _report(main, rank, rank2).to_json()
    assert report["op_dtypes"] == {"bfloat16": 5, "float32": 3}
    assert report["optimizer_steps"] == 6
    assert report["losses"] == [1.0, 0.5, 2.0]
    assert report["deprecations"] == [{**deprecation, "count": 4}]
    assert "trace" not in report["processes"][1]


def test_recorder_traces_script_regions_and_counts_torch_ones() -> None:
    recorder = Recorder("main")
    def region(origin: str) -> RegionKey:
        return RegionKey(Site("/x/train.py", 9, origin), "cuda", "float16", True, True, "cpu", "bfloat16", True)
    recorder.region_created(region("script"))
    recorder.region_entered(region("script"), Site("/x/train.py", 9))
    recorder.region_created(region("torch"))
    recorder.region_entered(region("torch"), Site("/x/train.py", 20))
    recorder.loss(0.25, Site("/x/train.py", 12))
    data = recorder.to_dict("main")
    assert [event["kind"] for event in data["trace"]] == ["autocast", "autocast_enter", "loss"]
    assert data["trace"][2]["what"] == "0x1.0000000000000p-2"
    assert [(r["origin"], r["entered"], r["dtype"]) for r in data["autocast_regions"]] == [("script", 1, "bfloat16"), ("torch", 1, "bfloat16")]


def test_device_queries_are_counted_per_site_and_answer_and_summed_over_processes() -> None:
    recorder = Recorder("main")
    for _ in range(3):
        recorder.device_query("torch.cuda.is_available()", "True", Site("/x/train.py", 5))
    recorder.device_query("torch.cuda.device_count()", "1", Site("/x/train.py", 6))
    assert not recorder.is_empty()
    main = recorder.to_dict("main")
    assert main["device_queries"] == [
        {"query": "torch.cuda.is_available()", "answer": "True", "file": "/x/train.py", "line": 5, "count": 3},
        {"query": "torch.cuda.device_count()", "answer": "1", "file": "/x/train.py", "line": 6, "count": 1},
    ]
    worker = _process("ForkPoolWorker-2", device_queries=[{**main["device_queries"][0], "count": 2}])
    report = _report(main, worker).to_json()
    assert [(item["line"], item["count"]) for item in report["device_queries"]] == [(5, 5), (6, 1)]


@pytest.mark.parametrize(
    "options",
    [{"amp_dtype": "float32"}, {"max_steps": 0}, {"threads": 0}],
)
def test_run_options_reject_nonsense(options: dict) -> None:
    with pytest.raises(ValueError):
        api.RunOptions(**options)


def test_precheck_names_a_missing_file(tmp_path: Path) -> None:
    assert launch.precheck(tmp_path / "absent.py") == f"no such file: {tmp_path / 'absent.py'}"
    assert launch.precheck(FIXTURES / "cnn_amp.py") is None


# -- verify --device cpu: the original's requests as `ampfix rewrite --device cpu` makes them ----------------

CPU_TRACE = [
    _event(0, "grad_scaler", device="cpu", init_scale=65536.0),
    _event(0, "autocast", device="cpu", dtype="bfloat16", enabled=True, cache_enabled=True),
    _event(0, "loss", (0.6931471824645996).hex()),
    _event(1, "optimizer_step", "1"),
]


def test_cpu_target_moves_each_cuda_request_and_its_float16_only() -> None:
    trace = [
        _event(0, "custom_fwd", device_type="cuda", cast_inputs="float16"),
        _event(0, "custom_fwd", device_type="cuda", cast_inputs="float32"),
        _event(0, "custom_bwd", device_type="cuda"),
        _event(0, "grad_scaler", device="cuda", init_scale=1024.0, growth_factor=3.0, enabled=False),
        _event(0, "autocast_enter", device="cuda", dtype="bfloat16", enabled=False, cache_enabled=False),
        _event(0, "autocast", device="cpu", dtype="float16", enabled=True, cache_enabled=True),  # asked for the CPU: kept
        _event(0, "loss", (0.5).hex()),
    ]
    moved = cpu_target.as_cpu_rewrite_promises(_report(_process(trace=trace))).processes[0]["trace"]
    assert [event_what(event) for event in moved] == [
        "device_type=cpu cast_inputs=bfloat16",
        "device_type=cpu cast_inputs=float32",
        "device_type=cpu",
        "device='cpu' init_scale=1024.0 growth_factor=3.0 enabled=False",
        "device=cpu dtype=bfloat16 enabled=False cache_enabled=False",
        "device=cpu dtype=float16 enabled=True cache_enabled=True",
        (0.5).hex(),
    ]
    assert trace[0]["fields"] == {"device_type": "cuda", "cast_inputs": "float16"}  # the original report is not changed


def test_cpu_target_moves_a_request_whatever_its_other_values_read_like() -> None:
    # An argument recorded as its repr, with spaces: once a text no `name=value` reading could split.
    odd = _event(0, "grad_scaler", device="cuda", init_scale="<object at 0x1>")
    moved = cpu_target.as_cpu_rewrite_promises(_report(_process(trace=[odd]))).processes[0]["trace"]
    assert moved == [{**odd, "fields": {"device": "cpu", "init_scale": "<object at 0x1>"}}]
    assert event_what(moved[0]) == "device='cpu' init_scale='<object at 0x1>'"
    # A device that is not the plain "cuda" (a repr of torch.device, "cuda:1") is compared as recorded.
    for device in ("device(type='cuda')", "cuda:1"):
        other = _event(0, "autocast", device=device, dtype="float16", enabled=True, cache_enabled=True)
        assert cpu_target.as_cpu_rewrite_promises(_report(_process(trace=[other]))).processes[0]["trace"] == [other]


def test_cpu_target_with_keep_dtype_moves_only_a_dtype_left_to_cudas_default() -> None:
    trace = [
        _event(0, "custom_fwd", device_type="cuda", cast_inputs="float16"),
        _event(0, "autocast", device="cuda", dtype="float16", enabled=True, cache_enabled=True),
        {**_event(0, "autocast", device="cuda", dtype="float16", enabled=True, cache_enabled=True), "defaulted": ["dtype"]},
        _event(0, "model_call", module="Net", device="cuda", dtype="float16"),
        {**_event(0, "model_call", module="Net", device="cuda", dtype="float16"), "defaulted": ["dtype"]},
    ]
    moved = cpu_target.as_cpu_rewrite_promises(_report(_process(trace=trace)), keep_dtype=True).processes[0]["trace"]
    assert [event_what(event) for event in moved] == [
        "device_type=cpu cast_inputs=float16",
        "device=cpu dtype=float16 enabled=True cache_enabled=True",
        "device=cpu dtype=bfloat16 enabled=True cache_enabled=True",  # autocast("cpu") runs the CPU's default
        "Net under autocast(cpu float16)",
        "Net under autocast(cpu bfloat16)",
    ]
    # Without --keep-dtype, explicit or not, float16 becomes bfloat16.
    moved = cpu_target.as_cpu_rewrite_promises(_report(_process(trace=trace))).processes[0]["trace"]
    assert {event["fields"].get("dtype", event["fields"].get("cast_inputs")) for event in moved} == {"bfloat16"}


def test_cpu_target_takes_its_dtypes_from_the_device_rules() -> None:
    assert cpu_target.CPU_DTYPES == {"float16": "bfloat16", "half": "bfloat16"}
    assert cpu_target.CPU_AMP_DTYPE == "bfloat16"


def test_verify_for_the_cpu_compares_against_the_moved_requests() -> None:
    original, moved = _report(_process(trace=TRACE)), _report(_process(trace=CPU_TRACE))
    report = api.compare_runs(original, moved, device="cpu")
    assert report.equivalent is True and report.first_difference is None
    assert report.notes and "--device cpu" in report.notes[0]
    assert report.original is original  # the report keeps what the original really asked for
    # The default target is exactly the old comparison: the same pair differs in the device.
    default = api.compare_runs(original, moved)
    assert default.equivalent is False
    assert default.first_difference.startswith("step 0: original loss scaler(device='cuda' init_scale=65536.0)")


def test_verify_for_the_cpu_still_finds_a_changed_argument() -> None:
    flipped = [*CPU_TRACE[:1], _event(0, "autocast", device="cpu", dtype="bfloat16", enabled=False, cache_enabled=True),
               *CPU_TRACE[2:]]
    report = api.compare_runs(_report(_process(trace=TRACE)), _report(_process(trace=flipped)), device="cpu")
    assert report.equivalent is False
    assert report.first_difference == (
        "step 0: original autocast(device=cpu dtype=bfloat16 enabled=True cache_enabled=True) at train.py:10; "
        "rewrite autocast(device=cpu dtype=bfloat16 enabled=False cache_enabled=True) at train.py:10"
    )


def test_options_for_the_cpu_run_the_cpu_policy_in_bfloat16() -> None:
    given = api.RunOptions(max_steps=3, seed=5)
    assert api.options_for_device(given, "cuda") is given
    # The rewrite moves AMP to the CPU and keeps the script's .cuda(): on both sides "cuda" tensors are CPU ones.
    assert api.options_for_device(given, "cpu") == api.RunOptions(
        max_steps=3, seed=5, autocast_policy="cpu", amp_dtype="bfloat16", cuda_is_cpu=True
    )
    # --keep-dtype: an explicit dtype runs as given, a defaulted one as the CPU's default.
    assert api.options_for_device(given, "cpu", keep_dtype=True) == api.RunOptions(
        max_steps=3, seed=5, autocast_policy="cpu", amp_dtype="explicit", cuda_is_cpu=True
    )
    assert api.options_for_device(given, "cuda", keep_dtype=True) is given  # as for rewrite: no effect on cuda
    with pytest.raises(ValueError, match="device must be one of cuda, cpu"):
        api.verify_scripts(FIXTURES / "cnn_amp.py", device="auto")


@pytest.mark.parametrize(
    ("flag", "value", "keep_dtype", "needed"),
    [
        ("--autocast-policy", "cuda", [], "cpu"),
        ("--amp-dtype", "keep", [], "bfloat16"),
        ("--amp-dtype", "float16", [], "bfloat16"),
        ("--amp-dtype", "bfloat16", ["--keep-dtype"], "explicit"),
    ],
)
def test_verify_for_the_cpu_refuses_run_options_that_cannot_agree(
    flag: str, value: str, keep_dtype: list[str], needed: str
) -> None:
    script = str(FIXTURES / "cnn_amp.py")
    command = [sys.executable, "-m", "ampfix", "verify", script, "--device", "cpu", *keep_dtype, flag, value]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert completed.returncode == 2
    assert f"runs both sides with {flag} {needed}; {flag} {value} does not apply" in " ".join(completed.stderr.split())
    assert "original:" not in completed.stderr  # nothing was run


def test_the_recorder_traces_requests_as_fields_and_shows_them_as_text() -> None:
    recorder, site = Recorder("main"), Site("/x/train.py", 9)
    recorder.region_created(RegionKey(site, "cuda", "float16", True, "'yes'", "cpu", "bfloat16", True))
    recorder.scaler_created({"device": "cuda", "init_scale": 65536.0, "enabled": True}, site)
    recorder.custom_amp_decorator("custom_fwd", {"device_type": "cuda", "cast_inputs": None}, site)
    recorder.model_called("SmallCNN", RegionKey(site, "cuda", "float16", True, True, "cpu", "bfloat16", True), site)
    recorder.model_called("SmallCNN", None, site)
    recorder.loss(0.25, site)
    trace = json.loads(json.dumps(recorder.to_dict("main")))["trace"]  # as the parent reads it back
    assert [event.get("fields") for event in trace] == [
        {"device": "cuda", "dtype": "float16", "enabled": True, "cache_enabled": "'yes'"},
        {"device": "cuda", "init_scale": 65536.0, "enabled": True},
        {"device_type": "cuda", "cast_inputs": None},
        {"module": "SmallCNN", "device": "cuda", "dtype": "float16"},
        {"module": "SmallCNN", "device": None, "dtype": None},
        None,
    ]
    assert [event_what(event) for event in trace] == [
        "device=cuda dtype=float16 enabled=True cache_enabled='yes'",
        "device='cuda' init_scale=65536.0 enabled=True",
        "device_type=cuda cast_inputs=None",
        "SmallCNN under autocast(cuda float16)",
        "SmallCNN outside autocast",
        "0x1.0000000000000p-2",
    ]
    moved = cpu_target.as_cpu_rewrite_promises(_report(_process(trace=trace))).processes[0]["trace"]
    assert [event_what(event) for event in moved] == [
        "device=cpu dtype=bfloat16 enabled=True cache_enabled='yes'",
        "device='cpu' init_scale=65536.0 enabled=True",
        "device_type=cpu cast_inputs=None",
        "SmallCNN under autocast(cpu bfloat16)",
        "SmallCNN outside autocast",
        "0x1.0000000000000p-2",
    ]


def test_a_dtype_left_to_the_default_is_marked_and_not_compared() -> None:
    recorder, site = Recorder("main"), Site("/x/train.py", 9)
    defaulted = RegionKey(site, "cuda", "float16", True, True, "cpu", "bfloat16", True, dtype_defaulted=True)
    recorder.region_created(defaulted)
    recorder.model_called("Net", defaulted, site)
    trace = recorder.to_dict("main")["trace"]
    assert [(event["kind"], event.get("defaulted")) for event in trace] == [("autocast", ["dtype"]), ("model_call", ["dtype"])]
    # The same request spelled out (dtype=torch.float16) is the same request.
    spelled = [{key: value for key, value in event.items() if key != "defaulted"} for event in trace]
    assert compare.first_difference(_report(_process(trace=trace)), _report(_process(trace=spelled))) is None


def test_custom_fwd_sites_are_counted_with_what_ran_and_traced_as_requested() -> None:
    site = Site("/x/train.py", 14)
    recorder = Recorder("main")
    for _ in range(2):  # two Functions decorated at the same line (a decorator factory)
        recorder.custom_fwd_created(CustomFwdKey(site, "cuda", "float16", "cpu", "bfloat16"))
    data = recorder.to_dict("main")
    # verify compares the request only: the run's dtype is the same forced one on both sides.
    assert [event["fields"] for event in data["trace"]] == [{"device_type": "cuda", "cast_inputs": "float16"}] * 2
    other = Recorder("child")
    other.custom_fwd_created(CustomFwdKey(site, "cuda", None, "cpu", None))
    report = _report(_process(trace=data["trace"], custom_fwd=data["custom_fwd"]), other.to_dict("SpawnProcess-1"))
    assert report.custom_fwd == [
        {"device_requested": "cuda", "cast_inputs_requested": "float16", "device_run": "cpu", "cast_inputs": "bfloat16",
         "file": "/x/train.py", "line": 14, "count": 2},
        {"device_requested": "cuda", "cast_inputs_requested": None, "device_run": "cpu", "cast_inputs": None,
         "file": "/x/train.py", "line": 14, "count": 1},
    ]  # fmt: skip
    assert report.to_json()["custom_fwd"] == report.custom_fwd
    console = Console(file=io.StringIO(), width=200)
    render.render_run(report, console)
    assert "custom_fwd           train.py:14 cuda cast_inputs=float16, ran as cpu cast_inputs=bfloat16 (×2)" in (
        console.file.getvalue()
    )


# -- issue 16: a failure explained, a rewrite still deprecated, the local modules found ---------------


def _failure(**fields) -> dict:
    return {
        "type": "RuntimeError", "message": "boom", "runner_module": None, "runner_function": None,
        "gpu_too": False, "stand_in": False, **fields,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        (
            _failure(runner_module="gpu/cuda_autocast", runner_function="kernel"),
            "the failure is inside the runner's emulation (CUDA's autocast op policy, run on the CPU, raised in "
            "ampfix/runner/gpu/cuda_autocast.py); --autocast-policy cpu (CPU autocast's own op lists) changes that",
        ),
        (
            # The device mode passes every torch call on: a torch error there is not the emulation's doing...
            _failure(runner_module="gpu/device_mode", runner_function="call", message="mat1 and mat2 shapes cannot be multiplied"),
            "no sign of the runner's emulation in the failure (raised outside ampfix, no bfloat16 stand-in named): "
            "the script's own",
        ),
        (
            # ...unless it names the bfloat16 that stands in for the script's float16.
            _failure(runner_module="gpu/device_mode", runner_function="call", message="Got unsupported ScalarType BFloat16", stand_in=True),
            "the failure is the runner's: a bfloat16 tensor (the CPU's stand-in for the float16 the script asked for) "
            "reached code that refuses it; --amp-dtype keep runs float16 as asked",
        ),
        (_failure(gpu_too=True), "the runner reproduces a GPU's own refusal here: the script fails the same way on CUDA"),
        (
            # torch 2.15's dynamo stream lookup and 2.8's fake tensors reached it before their fixes (docs/runner.md).
            _failure(message="Found no NVIDIA driver on your system.", reached_real_cuda=True),
            "the failure is the runner's: a call went past its emulated GPU into torch's own CUDA initialisation "
            "(torch.cuda._lazy_init), which fails on a machine without one; no option changes that: please report it",
        ),
        (None, None),
    ],
)
def test_a_failure_says_whether_it_is_inside_the_emulation(failure: dict | None, expected: str | None) -> None:
    assert failures.explain(failure) == expected


def test_a_failure_in_torchs_own_cuda_initialisation_is_marked_as_such() -> None:
    """The child's record of a real ``torch.cuda._lazy_init`` failure and of a failure elsewhere. In a Python that
    sees no GPU (CUDA_VISIBLE_DEVICES empty), so the initialisation fails on a GPU machine too: AssertionError on a
    CPU build, RuntimeError on a CUDA build."""
    probe = (
        "import json, torch\n"
        "from ampfix.runner.child import process\n"
        "recorded = []\n"
        "for fails in (torch.cuda._lazy_init, lambda: torch.ones(2) @ torch.ones(3)):\n"
        "    try:\n"
        "        fails()\n"
        "    except BaseException as error:\n"
        "        recorded.append(process._failure(type(error), error, error.__traceback__)['reached_real_cuda'])\n"
        "print(json.dumps(recorded))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [True, False]


def test_verify_explains_a_failed_original() -> None:
    failed = _process(failure=_failure(runner_module="gpu/cuda_autocast", runner_function="kernel"))
    report = api.compare_runs(_report(failed, exit_code=1), _report(_process()))
    assert report.exit_code == 3 and report.crashed == "original"  # died of an exception: a crash
    assert report.error == (
        "the original crashed: RuntimeError: boom; nothing to compare against; the failure is inside the runner's "
        "emulation (CUDA's autocast op policy, run on the CPU, raised in ampfix/runner/gpu/cuda_autocast.py); "
        "--autocast-policy cpu (CPU autocast's own op lists) changes that"
    )


def test_verify_names_a_crashed_rewrite_as_the_cause_by_its_exceptions_line() -> None:
    crashed = RunReport("/x/train.py", 1, [_process(failure=_failure(type="TypeError", message="bad dtype"))],
                        stderr="Traceback (most recent call last):\n  ...\nTypeError: bad dtype: True\n")
    report = api.compare_runs(_report(_process(trace=TRACE)), crashed)
    assert report.exit_code == 3 and report.crashed == "rewrite" and report.equivalent is None
    assert report.first_difference is None  # "the rewrite stopped before ...": the crash's doing, not said
    assert report.error == (
        "the rewrite crashed: TypeError: bad dtype: True; no sign of the runner's emulation in the failure "
        "(raised outside ampfix, no bfloat16 stand-in named): the script's own"
    )


def test_a_crashed_rewrite_keeps_the_mismatch_its_trace_showed_before_the_crash() -> None:
    changed = [*TRACE[:1], _event(0, "autocast", device="cuda", dtype="True", enabled=True, cache_enabled=True)]
    crashed = RunReport("/x/train.py", 1, [_process(trace=changed, failure=_failure(type="TypeError"))])
    report = api.compare_runs(_report(_process(trace=TRACE)), crashed)
    assert report.crashed == "rewrite" and report.error.startswith("the rewrite crashed: TypeError: boom; ")
    # A flag landed in `dtype`: no region hands that on, so no word of inherited settings.
    assert report.first_difference == (
        "step 0: original autocast(device=cuda dtype=float16 enabled=True cache_enabled=True) at train.py:10; "
        "rewrite autocast(device=cuda dtype=True enabled=True cache_enabled=True) at train.py:10")


def test_a_side_that_exits_nonzero_without_an_exception_did_not_crash() -> None:
    report = api.compare_runs(_report(_process(trace=TRACE)), _report(_process(trace=TRACE), exit_code=1))
    assert report.exit_code == 1 and report.crashed is None
    assert report.first_difference == "exit status: original 0, rewrite 1"


def test_a_rewrite_that_still_calls_a_deprecated_api_is_not_equivalent() -> None:
    old = {"message": "`torch.cuda.amp.autocast(args...)` is deprecated.", "category": "FutureWarning",
           "file": "/x/exp/model.py", "line": 7, "count": 3}  # fmt: skip
    warned = {**old, "message": "some library's own deprecation", "api": False}
    same = _process(trace=TRACE, deprecations=[{**old, "api": True}])
    assert api.compare_runs(_report(same), _report(same)).first_difference == (
        "the rewrite still calls a deprecated API at model.py:7 (`torch.cuda.amp.autocast(args...)` is deprecated.): "
        "not migrated"
    )
    # A deprecation from the warnings machinery (another library's) does not count against the migration.
    clean = _process(trace=TRACE, deprecations=[warned])
    assert api.compare_runs(_report(same), _report(clean)).equivalent is True


def test_local_imports_follow_the_script_into_its_own_modules_only() -> None:
    root = FIXTURES / "project_amp"
    found = project.local_imports(root / "run.py")
    # `from exp.exp_main import ...` (exp/ has no __init__.py), then its `from .metrics import mae`;
    # torch, numpy and sys are not the project's.
    assert found == [root / "exp" / "exp_main.py", root / "exp" / "metrics.py"]


def _rendered(report: RunReport) -> str:
    console = Console(file=io.StringIO(), width=400)
    render.render_run(report, console)
    text = console.file.getvalue()  # type: ignore[attr-defined]  # the StringIO given above
    return "\n".join(" ".join(line.split()) for line in text.splitlines())  # the grid's padding dropped


def test_apex_loss_scaling_is_shown_in_apexs_terms() -> None:
    # apex steps no scaler: the script's optimizer.step() ran 3 times, and once more skipped after an overflow,
    # which halved the scale.
    apex_scaler = {"device": "cuda", "init_scale": 65536.0, "enabled": True, "emulating": "apex.amp loss scaler",
                   "file": "/x/train.py", "line": 7}
    process = _process(
        scaler={"scale": 4, "unscale": 0, "step": 0, "update": 4, "skipped_steps": 1},
        grad_scalers=[apex_scaler], apex_loss_scales=[32768.0], optimizer_steps=3,
    )
    shown = _rendered(_report(process))
    assert ("\napex.amp loss scaling scale_loss 4 · loss scale updates 4 · optimizer steps skipped (inf/NaN gradients) 1 "
            "· optimizer steps taken 3 · loss scale now 32768\n") in shown
    assert "GradScaler calls" not in shown and "step 0" not in shown
    assert "\ncreated at train.py:7 (apex.amp loss scaler, emulated; as a GradScaler): device='cuda' " \
        "init_scale=65536.0 enabled=True\n" in shown


def test_a_native_grad_scaler_is_shown_in_its_own_terms() -> None:
    native = {"device": "cuda", "init_scale": 65536.0, "enabled": True, "file": "/x/train.py", "line": 7}
    process = _process(scaler={"scale": 3, "unscale": 0, "step": 3, "update": 3, "skipped_steps": 0},
                       grad_scalers=[native], optimizer_steps=3)
    shown = _rendered(_report(process))
    assert "\nGradScaler calls scale 3 · unscale_ 0 · step 3 · update 3 · skipped steps 0\n" in shown
    assert "apex.amp" not in shown


def test_apex_loss_scalers_replaced_before_any_use_are_not_counted() -> None:
    """sentence-transformers' loop: an initialize per objective, each making the loss scaler that replaces the one
    before (apex kept one set, process-wide), before any scale_loss. Those replaced unused are marked in the trace,
    and verify compares the one that served with the rewrite's one GradScaler; a rewrite with two would differ. A
    loss scaler used before it is replaced (torchdistill's initialize per stage) is counted."""
    recorder = Recorder("main")
    arguments = {"device": "cuda", "init_scale": 65536.0}
    for _ in range(2):
        recorder.apex_loss_scalers_replaced()
        recorder.scaler_created(arguments, Site("/x/train.py", 7), emulating="apex.amp loss scaler")
    recorder.apex_loss_scalers_used()
    recorder.apex_loss_scalers_replaced()
    recorder.scaler_created(arguments, Site("/x/train.py", 7), emulating="apex.amp loss scaler")
    recorder.apex_loss_scalers_used()
    assert [event.get("replaced_unused") for event in recorder.trace] == [True, None, None]
    emulated = [{"feature": "apex.amp O1", "file": "/x/train.py", "line": 7, "count": 3}]
    rest = [_event(0, "loss", (0.5).hex()), _event(1, "optimizer_step", "1")]
    original = _report(_process(trace=[*recorder.trace, *rest], emulated=emulated))
    native = _event(0, "grad_scaler", **arguments)
    assert compare.first_difference(original, _report(_process(trace=[native, native, *rest]))) is None
    assert compare.first_difference(original, _report(_process(trace=[native, *rest]))).startswith(
        "loss scaling: the original has 2 loss scalers, the rewrite 1; ")


def test_a_disabled_grad_scaler_nothing_calls_is_not_counted() -> None:
    """The placeholder a set-up split across modules binds until initialize's place runs (`scaler =
    GradScaler("cuda", enabled=False)` at a module's top): made, never called, it changes nothing, and verify does
    not count it against apex's one loss scaler. Once called it is counted; an enabled one nothing called is not
    counted either (a run that ended before its first step made it and scaled nothing)."""
    recorder = Recorder("main")
    arguments = {"device": "cuda", "init_scale": 65536.0}
    recorder.scaler_created(arguments, Site("/x/train.py", 7), emulating="apex.amp loss scaler")
    recorder.apex_loss_scalers_used()
    emulated = [{"feature": "apex.amp O1", "file": "/x/train.py", "line": 7, "count": 1}]
    rest = [_event(0, "loss", (0.5).hex()), _event(1, "optimizer_step", "1")]
    original = _report(_process(trace=[*recorder.trace, *rest], emulated=emulated))
    native = Recorder("main")
    placeholder = native.scaler_created({**arguments, "enabled": False}, Site("/x/setup.py", 5))
    assert placeholder is not None
    placeholder["unused"] = True  # as the runner's GradScaler patch marks it
    native.scaler_created(arguments, Site("/x/setup.py", 11))
    assert compare.first_difference(original, _report(_process(trace=[*native.trace, *rest]))) is None
    native.scaler_used(placeholder)
    assert compare.first_difference(original, _report(_process(trace=[*native.trace, *rest]))).startswith(
        "loss scaling: the original has 1 loss scalers, the rewrite 2; ")
    enabled = {**native.trace[1], "unused": True}
    assert compare.first_difference(original, _report(_process(trace=[native.trace[0], enabled, *rest]))) == (
        "loss scaling: original loss scaler(device='cuda' init_scale=65536.0) at train.py:7; "
        "rewrite loss scaler(device='cuda' init_scale=65536.0 enabled=False) at setup.py:5")


def test_an_apex_loss_scaler_no_scale_loss_used_is_not_counted() -> None:
    """GPUNet's validate.py: initialize given the model alone, for inference, makes apex's loss scaler, which nothing
    scales with; the native rewrite makes no GradScaler, and verify compares them equal. Once a scale_loss ran on
    it, it is counted, and a rewrite with no GradScaler differs."""
    recorder = Recorder("main")
    arguments = {"device": "cuda", "init_scale": 65536.0}
    recorder.scaler_created(arguments, Site("/x/validate.py", 7), emulating="apex.amp loss scaler")
    emulated = [{"feature": "apex.amp O1", "file": "/x/validate.py", "line": 7, "count": 1}]
    rest = [_event(0, "model_call", "Net")]
    inference = _report(_process(trace=[*recorder.trace, *rest], emulated=emulated))
    native = _report(_process(trace=rest))
    assert compare.first_difference(inference, native) is None
    recorder.apex_loss_scalers_used()
    training = _report(_process(trace=[*recorder.trace, *rest], emulated=emulated))
    assert compare.first_difference(training, native) == (
        "loss scaling: the rewrite creates no GradScaler; the original's loss scaler(device='cuda' init_scale=65536.0)"
        " at validate.py:7")
