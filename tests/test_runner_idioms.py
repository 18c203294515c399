"""`ampfix run` on the common CUDA idioms of real training scripts (issue 11): DataParallel, the
torch.accelerator API (and the report of which device path the script took), streams with pinned
memory, forked worker processes, DistributedDataParallel's device arguments. Each job runs once
for the module (see runner_jobs)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from runner_jobs import FIXTURES, Job, autocast_region, define_job_fixtures

JOBS: dict[str, list[str]] = {
    "data_parallel_run": ["run", "data_parallel.py"],
    "accelerator_run": ["run", "accelerator_generic.py"],
    "stream_prefetch_run": ["run", "stream_prefetch.py"],
    # bfloat16: the shards' steps are never skipped (in float16 their scaled gradients overflow at the first
    # scales), so that each process's own steps are counted.
    "fork_run": ["run", "--amp-dtype", "bfloat16", "fork_workers.py"],
    "fork_verify": ["verify", "fork_workers.py", "--amp-dtype", "bfloat16"],
    # Bounded: before the fix this run never ended (Pool.terminate() waited on the worker for ever).
    "pool_blocked_run": ["run", "--timeout", "120", "pool_blocked_worker.py"],
}

define_job_fixtures(JOBS, globals())

# torch.accelerator arrived in torch 2.6: before it, the device-generic script fails as on a GPU with that torch.
HAS_ACCELERATOR = hasattr(torch, "accelerator")
needs_accelerator = pytest.mark.skipif(not HAS_ACCELERATOR, reason=f"torch {torch.__version__} has no torch.accelerator")


def test_data_parallel_trains_its_module_as_one_replica(data_parallel_run: Job) -> None:
    report = data_parallel_run.report
    assert data_parallel_run.returncode == 0, data_parallel_run.stderr
    # The wrapped module itself trained (its BatchNorm counted the 3 batches), `model.module`
    # saved and reloaded, and the wrapper gives what its module gives.
    assert "batches seen by BatchNorm: 3" in data_parallel_run.stdout
    assert "device_ids [0] and [0, 1]; wrapper and module agree: True" in data_parallel_run.stdout
    assert "two-GPU wrapper output (8, 4)" in data_parallel_run.stdout
    training, evaluation = autocast_region(report, 31), autocast_region(report, 47)
    assert (training["device_requested"], training["dtype_requested"], training["device_run"], training["dtype"]) == (
        "cuda", "float16", "cpu", "float16",
    )  # fmt: skip
    assert (training["entered"], evaluation["entered"]) == (3, 1)
    # linear, batch_norm, relu, linear per forward: 3 training steps, then three forwards in evaluation.
    assert report["op_dtypes"]["float16"] == 4 * 6
    assert report["scaler"] == {"scale": 3, "unscale": 0, "step": 3, "update": 3, "skipped_steps": 0}
    assert report["optimizer_steps"] == 3 and len(report["losses"]) == 3
    assert report["unemulated"] == [
        {
            "feature": "DataParallel over 2 devices (ran as one replica on the CPU)",
            "file": str(FIXTURES / "data_parallel.py"), "line": 46, "count": 1,
        }
    ]  # fmt: skip


@needs_accelerator
def test_a_device_generic_script_takes_its_cuda_path(accelerator_run: Job) -> None:
    report = accelerator_run.report
    if hasattr(torch.accelerator, "memory_allocated"):
        assert accelerator_run.returncode == 0, accelerator_run.stderr
    else:  # torch 2.6 .. 2.8: the script's last line names what its torch lacks and fails, as on a GPU with it
        assert accelerator_run.returncode == 1
        assert "module 'torch.accelerator' has no attribute 'memory_allocated'" in accelerator_run.stderr
        assert "the script's own" in accelerator_run.stderr
    assert "training on cuda: 1 device(s), index 0, amp True" in accelerator_run.stdout
    region = autocast_region(report, 34)
    assert (region["device_requested"], region["dtype_requested"], region["device_run"], region["dtype"]) == (
        "cuda", "bfloat16", "cpu", "bfloat16",
    )  # fmt: skip
    assert region["enabled"] is True and region["entered"] == 4
    (scaler,) = report["grad_scalers"]
    assert (scaler["device"], scaler["enabled"]) == ("cuda", True)
    assert report["scaler"]["step"] == 4 and report["optimizer_steps"] == 4


@pytest.mark.skipif(HAS_ACCELERATOR, reason="torch.accelerator exists: emulated")
def test_before_torch_2_6_naming_torch_accelerator_fails_as_on_a_gpu(accelerator_run: Job) -> None:
    """Nothing emulated where torch has no torch.accelerator, nothing said about it: the script's AttributeError is
    its own, as on a GPU with that torch."""
    assert accelerator_run.returncode == 1
    assert "AttributeError: module 'torch' has no attribute 'accelerator'" in accelerator_run.stderr
    assert "the script's own" in accelerator_run.stderr
    assert "could not emulate" not in accelerator_run.stderr


@needs_accelerator
def test_the_report_says_which_device_path_was_taken(accelerator_run: Job) -> None:
    queries = [(item["line"], item["query"], item["answer"], item["count"]) for item in accelerator_run.report["device_queries"]]
    # torch.backends.mps.is_available() (line 12) is not asked: the accelerator branch was taken.
    assert queries == [
        (10, "torch.accelerator.is_available()", "True", 1),
        (11, "torch.accelerator.current_accelerator()", "cuda", 1),
        (20, "torch.accelerator.device_count()", "1", 1),
        (22, "torch.cuda.is_available()", "True", 1),
        (22, "torch.cuda.get_device_capability()", "(8, 0)", 1),
        (24, "torch.cuda.is_bf16_supported()", "True", 1),
    ]
    assert {item["file"] for item in accelerator_run.report["device_queries"]} == {str(FIXTURES / "accelerator_generic.py")}
    summary = accelerator_run.stderr
    assert "device queries" in summary and "torch.accelerator.current_accelerator()" in summary


def test_stream_prefetcher_with_pinned_memory_behaves_as_on_a_gpu(stream_prefetch_run: Job) -> None:
    report = stream_prefetch_run.report
    # The script asserts what a CUDA user relies on: pinned loader batches, the side stream as the
    # current stream inside `torch.cuda.stream`, device copies that are not pinned and do not follow
    # a refilled staging buffer, record_stream accepted, events that time.
    assert stream_prefetch_run.returncode == 0, stream_prefetch_run.stderr
    assert "6 steps, last loss" in stream_prefetch_run.stdout
    region = autocast_region(report, 65)
    assert (region["device_run"], region["dtype"], region["enabled"], region["entered"]) == ("cpu", "float16", True, 6)
    assert report["scaler"] == {"scale": 6, "unscale": 0, "step": 6, "update": 6, "skipped_steps": 0}
    assert report["optimizer_steps"] == 6 and len(report["losses"]) == 6
    assert report["unemulated"] == [] and report["device_queries"] == []
    assert "pin_memory" not in stream_prefetch_run.stderr  # no "no accelerator is found" warning


def test_forked_processes_and_pool_workers_are_reported(fork_run: Job) -> None:
    report = fork_run.report
    assert fork_run.returncode == 0, fork_run.stderr
    assert fork_run.stdout.startswith("pool losses ")
    labels = [process["label"] for process in report["processes"]]
    # Process-1 trained; the `with` Pool's workers are 2 and 3 (one may have run every shard); 4 is
    # the evaluation worker, which only its Pool's terminate() ended.
    assert labels[0] == "main" and labels[-2:] == ["ForkPoolWorker-4", "ForkProcess-1"]
    assert labels[1:-2] in (["ForkPoolWorker-2"], ["ForkPoolWorker-3"], ["ForkPoolWorker-2", "ForkPoolWorker-3"])
    assert autocast_region(report, 23, process="ForkProcess-1")["entered"] == 2
    assert autocast_region(report, 42, process="ForkPoolWorker-4")["entered"] == 1
    shards = [region for region in report["autocast_regions"] if region["process"] in labels[1:-2]]
    assert {(region["line"], region["device_run"], region["dtype"]) for region in shards} == {(23, "cpu", "bfloat16")}
    assert sum(region["entered"] for region in shards) == 3 * 2  # three shards of two steps
    main = report["processes"][0]
    assert main["autocast_regions"] == [] and main["optimizer_steps"] == 0  # each process reports its own
    assert report["optimizer_steps"] == 4 * 2 and len(report["losses"]) == 8
    assert report["scaler"] == {"scale": 8, "unscale": 0, "step": 8, "update": 8, "skipped_steps": 0}
    deprecations = {(item["line"], item["count"]) for item in report["deprecations"]}
    assert deprecations == {(20, 4), (23, 8)}  # a GradScaler per shard, an autocast per step


def test_verify_of_a_pool_script_does_not_depend_on_which_worker_ran_which_task(fork_verify: Job) -> None:
    report = fork_verify.report
    assert fork_verify.returncode == 0, fork_verify.stderr
    assert report["equivalent"] is True and report["first_difference"] is None
    for side in ("original", "rewritten"):
        workers = [process for process in report[side]["processes"] if process["pool_worker"]]
        assert sum(process["optimizer_steps"] for process in workers) == 3 * 2  # the evaluation worker takes none
        assert {process["label"] for process in workers} >= {"ForkPoolWorker-4"}
    assert sorted(report["original"]["losses"]) == sorted(report["rewritten"]["losses"])


def test_a_pool_worker_blocked_in_native_code_is_ended_by_terminate_and_reported(pool_blocked_run: Job) -> None:
    # Its main thread never returns to Python, so no Python signal handler runs in it: the runner's
    # watching thread writes its observation and ends it (SIGKILL), and terminate() returns.
    report = pool_blocked_run.report
    assert pool_blocked_run.returncode == 0, pool_blocked_run.stderr
    assert pool_blocked_run.stdout == "terminated\n"
    assert [process["label"] for process in report["processes"]] == ["main", "ForkPoolWorker-1"]
    region = autocast_region(report, 22, process="ForkPoolWorker-1")
    assert (region["device_run"], region["dtype"], region["entered"]) == ("cpu", "float16", 1)


# -- DistributedDataParallel and init_process_group: arguments adjusted, a bad call left to torch ------------

DDP_CALLS = """
import json, os, sys, tempfile
import torch
import torch.distributed as dist
from ampfix.runner.gpu import process_patches
from ampfix.runner.gpu.devices import DeviceModel
from ampfix.runner.trace.observe import Recorder

DDP = torch.nn.parallel.DistributedDataParallel

def error_of(call):
    try:
        call()
    except TypeError as error:
        return str(error)

bad_calls = [
    lambda: DDP(torch.nn.Linear(2, 2), device_ids=[0], no_such_option=1),
    lambda: dist.init_process_group("nccl", no_such_option=1),
]
before = [error_of(call) for call in bad_calls]
recorder = Recorder("main")
for _, install in process_patches.installers(recorder, DeviceModel(recorder)):
    install()
after = [error_of(call) for call in bad_calls]
store = os.path.join(tempfile.mkdtemp(), "store")
dist.init_process_group("nccl", init_method="file://" + store, rank=0, world_size=1)
model = DDP(torch.nn.Linear(2, 2), device_ids=[0], output_device=0)
subgroup = dist.new_group([0])
backend, device_ids = dist.get_backend(), model.device_ids
dist.destroy_process_group()
del model, subgroup  # their groups' last users: the groups stay until the process exits
print(json.dumps({
    "before": before, "after": after, "backend": backend, "device_ids": device_ids,
    "unemulated": [feature for feature, _, _ in recorder.unemulated],
    "groups_kept": len(process_patches._made_groups),
}))
"""


def test_ddp_and_process_groups_run_on_the_cpu_and_a_bad_call_raises_torchs_own_error() -> None:
    completed = subprocess.run([sys.executable, "-c", DDP_CALLS], capture_output=True, text=True, timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr
    # The last line: torch 2.8's gloo prints "[Gloo] Rank 0 is connected to 0 peer ranks..." to stdout before it.
    result = json.loads(completed.stdout.splitlines()[-1])
    # The same errors as without the patches, from the functions themselves (a signature's bind
    # would say only "got an unexpected keyword argument").
    assert result["after"] == result["before"]
    assert result["after"][0] == "DistributedDataParallel.__init__() got an unexpected keyword argument 'no_such_option'"
    assert result["after"][1].endswith("init_process_group() got an unexpected keyword argument 'no_such_option'")
    assert (result["backend"], result["device_ids"]) == ("gloo", None)
    assert result["unemulated"] == ["NCCL backend (ran with gloo on the CPU)"]
    assert result["groups_kept"] == 2  # the default group and the subgroup (process_patches: a gloo hang at exit)


# -- autocast, custom_fwd/custom_bwd, GradScaler and clipping: a bad call left to torch -----------------------

AMP_CALLS = """
import json, tempfile
import torch
from ampfix.runner.gpu import harness
from ampfix.runner.config import RunnerConfig
from ampfix.runner.trace.observe import Recorder

def error_of(call):
    try:
        call()
    except Exception as error:
        return f"{type(error).__name__}: {error}"

def forward(ctx, x):
    return x

parameters = [torch.nn.Parameter(torch.ones(2))]
bad_calls = [
    lambda: torch.autocast("cuda", no_such_option=1),
    lambda: torch.amp.autocast("cuda", torch.float16, True, True, "one too many"),
    lambda: torch.autocast(device_type=0),
    lambda: torch.amp.custom_fwd(forward, device_type="cuda", no_such_option=1),
    lambda: torch.amp.custom_fwd(cast_inputs=torch.float16),
    lambda: torch.amp.custom_fwd(forward, device_type=0),
    lambda: torch.amp.custom_bwd(forward, "cuda"),
    lambda: torch.amp.GradScaler("cuda", no_such_option=1),
    lambda: torch.nn.utils.clip_grad_norm_(parameters),
    lambda: torch.nn.utils.clip_grad_value_(parameters, 1.0, no_such_option=1),
]
before = [error_of(call) for call in bad_calls]
recorder = Recorder("main")
harness.install(torch, recorder, RunnerConfig(out_dir=tempfile.mkdtemp(), verify_observations=True))
after = [error_of(call) for call in bad_calls]
print(json.dumps({"before": before, "after": after, "traced": [event["kind"] for event in recorder.trace]}))
"""


def test_amp_patches_leave_a_bad_call_to_torchs_own_error() -> None:
    completed = subprocess.run([sys.executable, "-c", AMP_CALLS], capture_output=True, text=True, timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr
    assert "could not emulate" not in completed.stderr  # every wrapper was installed
    result = json.loads(completed.stdout)
    assert result["after"] == result["before"]
    # The functions' own messages (a signature's bind would say only "got an unexpected keyword
    # argument 'no_such_option'", "too many positional arguments", "missing a required argument").
    assert result["after"] == [
        "TypeError: autocast.__init__() got an unexpected keyword argument 'no_such_option'",
        "TypeError: autocast.__init__() takes from 2 to 5 positional arguments but 6 were given",
        "ValueError: Expected `device_type` of type `str`, got: `<class 'int'>`",
        "TypeError: custom_fwd() got an unexpected keyword argument 'no_such_option'",
        "TypeError: custom_fwd() missing 1 required keyword-only argument: 'device_type'",
        "ValueError: Expected `device_type` of type `str`, got: `<class 'int'>`",
        "TypeError: custom_bwd() takes from 0 to 1 positional arguments but 2 were given",
        "TypeError: GradScaler.__init__() got an unexpected keyword argument 'no_such_option'",
        "TypeError: clip_grad_norm_() missing 1 required positional argument: 'max_norm'",
        "TypeError: clip_grad_value_() got an unexpected keyword argument 'no_such_option'",
    ]
    # The two calls that bind and that torch itself refuses were seen by the wrappers first.
    assert result["traced"] == ["autocast", "custom_fwd"]
