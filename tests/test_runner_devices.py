"""`ampfix run` as the GPU would: devices read, CUDA's refusals, several GPUs, memory, and a module (issue 28).

Each expected line is what a CUDA GPU gives for the fixture's line (the allocator's figures from its rules:
every storage rounded up to 512 bytes, a view adds nothing, segments of 2 MiB / 20 MiB / the request).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from runner_jobs import FIXTURES, Job, define_job_fixtures

PROJECT = FIXTURES.parent / "projects" / "cuda_only_tests"

JOBS: dict[str, list[str]] = {
    "devices_run": ["run", "gpu/devices_read.py"],
    "refusals_run": ["run", "--gpus", "2", "gpu/gpu_refusals.py"],
    "forgot_cuda_run": ["run", "gpu/forgot_cuda.py"],
    "forgot_cuda_forgiven_run": ["run", "--no-device-checks", "gpu/forgot_cuda.py"],
    "memory_run": ["run", "gpu/memory.py"],
    "origins_run": ["run", "gpu/origins.py"],
    "out_of_memory_run": ["run", "--gpu-memory", "64MiB", "gpu/out_of_memory.py"],
    "pytest_module_run": ["run", "-m", "pytest", "--", str(PROJECT / "tests"), "-q", "-p", "no:cacheprovider"],
}

define_job_fixtures(JOBS, globals())

SCRIPT_DIR = FIXTURES / "gpu"
CUDA0 = "device(type='cuda', index=0)"


def test_every_device_read_says_what_a_gpu_says(devices_run: Job) -> None:
    assert devices_run.returncode == 0, devices_run.stderr
    assert devices_run.stdout.splitlines() == [
        "factory: ('cuda:0', 'cuda', 0, True, 0, True)",
        "host: ('cpu', False, -1)",
        "parameter: cuda:0",
        "buffer: cuda:0",
        f"output: ({CUDA0}, {CUDA0}, {CUDA0}, {CUDA0}, {CUDA0})",
        "gradient: cuda:0",
        "cpu copy: (device(type='cpu'), device(type='cpu'), (3, 2))",
        f"moved back: ({CUDA0}, {CUDA0}, {CUDA0}, {CUDA0})",
        f"like: ({CUDA0}, {CUDA0}, {CUDA0})",
        "from numpy: cpu",
        "scalar joins: cuda:0",
        "type: ('torch.cuda.FloatTensor', 'torch.FloatTensor')",
        "repr: tensor([1., 1.], device='cuda:0')",
        "load: ('cuda:0', 'cpu')",
        "load map_location=cpu: ('cpu', 'cpu')",
        f"batch: (device(type='cpu'), True, {CUDA0})",
        # torch.autocast(device_type=x.device.type) is CUDA autocast: float16 (the stand-in, read as float16).
        "autocast from x.device.type: torch.float16",
        f"default device: ({CUDA0}, {CUDA0})",
        "current device: (0, 1)",
        # GradScaler's state is per device: found_inf and the clipped norm on cuda:0, a new scale given on it.
        "clipped norm: cuda:0",
        "scaler: 1024.0",
    ]
    assert devices_run.report["devices_used"] == ["cpu", "cuda:0"]


def test_tensors_made_where_the_mode_cannot_see_read_the_gpus_device_and_none_is_refused(origins_run: Job) -> None:
    assert origins_run.returncode == 0, origins_run.stderr
    assert origins_run.stdout.splitlines() == [
        "as_tensor: cuda:0 cpu",
        "asarray: cuda:0",
        "as_tensor on its own device is itself: True True",
        "module.to(device=): cuda:0",
        "meta: meta meta meta",
        "jit.script: cuda:0",
        "jit.trace: cuda:0",
        "jit.script module: cuda:0",
        "__torch_function__ of another class: cuda:0",
        "autograd.grad allow_unused: None cuda:0",
        "autograd.grad two devices: cuda:0 cpu",
        "dlpack: cuda:0 cuda:0",
        "vmap: cuda:0",
        "func.grad: cuda:0",
        "compile: cuda:0 [3.0, 3.0, 3.0]",
        # fake tensors' meta memory is never marked: export's fake tensor asserts its elem reads meta
        "torch.export: cpu",
    ]
    assert origins_run.report["gpu_refusals"] == []
    # inductor's Triton kernels need a GPU: dynamo's graph ran as aot_eager, and the report says so at the call
    assert [(Path(item["file"]).name, item["line"]) for item in origins_run.report["unemulated"]] == [
        ("origins.py", 59)
    ]
    assert origins_run.report["unemulated"][0]["feature"].startswith("torch.compile with inductor")


SAME_DEVICE = "Expected all tensors to be on the same device, but found at least two devices"
NUMPY = "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first."


def test_what_a_gpu_refuses_is_refused_with_its_message_and_what_it_allows_runs(refusals_run: Job) -> None:
    assert refusals_run.returncode == 0, refusals_run.stderr
    assert refusals_run.stdout.splitlines() == [
        f"cuda + cpu: RuntimeError: {SAME_DEVICE}, cuda:0 and cpu!",
        f"cpu + cuda: RuntimeError: {SAME_DEVICE}, cuda:0 and cpu!",
        f"module on cuda, batch on cpu: RuntimeError: {SAME_DEVICE}, cuda:0 and cpu!",
        f"numpy: TypeError: {NUMPY}",
        f"np.asarray: TypeError: {NUMPY}",
        "0-dim cpu tensor: ok cuda:0",
        "python scalar: ok cuda:0",
        "cpu index tensor: ok cuda:0",
        "item: ok -0.0",
        f"cuda:0 + cuda:1: RuntimeError: {SAME_DEVICE}, cuda:0 and cuda:1!",
        "cuda:1 after set_device: ok cuda:1",
        "cuda:2 of two GPUs: RuntimeError: CUDA error: invalid device ordinal",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
        "incorrect.",
        "with torch.cuda.device(0): ok cuda:0",
        "after the with block: ok cuda:1",
    ]
    refused = [(item["line"], item["message"]) for item in refusals_run.report["gpu_refusals"]]
    assert refused == [
        (19, f"{SAME_DEVICE}, cuda:0 and cpu!"), (20, f"{SAME_DEVICE}, cuda:0 and cpu!"),
        (21, f"{SAME_DEVICE}, cuda:0 and cpu!"), (22, NUMPY), (23, NUMPY), (29, f"{SAME_DEVICE}, cuda:0 and cuda:1!"),
    ]  # fmt: skip
    assert refusals_run.report["devices_used"] == ["cpu", "cuda:0", "cuda:1"]


def test_a_batch_left_on_the_host_fails_the_run_at_the_scripts_line(forgot_cuda_run: Job) -> None:
    assert forgot_cuda_run.returncode == 1
    assert forgot_cuda_run.stdout == ""
    assert f"RuntimeError: {SAME_DEVICE}, cuda:0 and cpu!\n" in forgot_cuda_run.stderr
    assert "why: the runner reproduces a GPU's own refusal here: the script fails the same" in forgot_cuda_run.stderr
    failure = forgot_cuda_run.report["processes"][0]["failure"]
    assert (failure["type"], failure["gpu_too"]) == ("RuntimeError", True)
    assert [(item["file"], item["line"]) for item in forgot_cuda_run.report["gpu_refusals"]] == [
        (str(SCRIPT_DIR / "forgot_cuda.py"), 9)
    ]


def test_no_device_checks_lets_the_run_past_and_lists_where_a_gpu_fails(forgot_cuda_forgiven_run: Job) -> None:
    assert forgot_cuda_forgiven_run.returncode == 0, forgot_cuda_forgiven_run.stderr
    assert forgot_cuda_forgiven_run.stdout == "stepped\n"
    assert forgot_cuda_forgiven_run.report["gpu_refusals"] == [
        {"message": f"{SAME_DEVICE}, cuda:0 and cpu!", "file": str(SCRIPT_DIR / "forgot_cuda.py"), "line": 9,
         "count": 1}
    ]
    assert "fails on a GPU forgot_cuda.py:9 Expected all tensors" in forgot_cuda_forgiven_run.stderr


def test_memory_figures_follow_the_caching_allocators_rules(memory_run: Job) -> None:
    assert memory_run.returncode == 0, memory_run.stderr
    lines = memory_run.stdout.splitlines()
    host_total = lines.pop()  # mem_get_info: no --gpu-memory, so the host's memory is the total
    assert host_total.startswith("mem_get_info: (") and host_total.endswith(", True)")
    block = 4_000_256  # 1000 * 1000 * 4 bytes, rounded up to 512
    linear = block + 4096  # weight and bias (4000 bytes -> 4096)
    activations = 400_384 + 512  # the input (100 x 1000) and the loss; the output is freed by .sum() (not saved)
    assert lines == [
        "start: 0",
        f"empty(1000, 1000): {block}",
        f"+ empty(10, float16): {block + 512}",
        f"+ a view: {block + 512}",
        f"reserved: {(20 + 2) << 20}",  # a 20 MiB segment (1 MiB to 10 MiB requests) and a 2 MiB one (small)
        "freed: 512",
        f"peak: {block + 512}",
        "peak after reset: 512",
        "a host tensor adds nothing: 512",
        f"+ Linear(1000, 1000): {512 + linear}",
        f"+ input, output and loss: {512 + linear + activations}",
        f"+ gradients: {512 + 2 * linear + activations}",
        "stats: (True, 0)",
    ]
    (memory,) = memory_run.report["gpu_memory"]
    assert (memory["device"], memory["peak_allocated"], memory["peak_file"]) == (
        "cuda:0", 512 + 2 * linear + activations, str(SCRIPT_DIR / "memory.py"))


def test_past_the_gpus_memory_cuda_s_out_of_memory_error(out_of_memory_run: Job) -> None:
    assert out_of_memory_run.returncode == 1
    assert out_of_memory_run.stdout.splitlines() == [
        "OutOfMemoryError True",
        "CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacity of 64.00 MiB of which 44.00 MiB "
        "is free. Including non-PyTorch memory, this process has 20.00 MiB memory in use. Of the allocated memory "
        "4.00 MiB is allocated by PyTorch, and 16.00 MiB is reserved by PyTorch but unallocated.",
        "num_ooms 1",
        f"still allocated {4 << 20}",
    ]
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB." in out_of_memory_run.stderr
    assert out_of_memory_run.report["processes"][0]["failure"]["gpu_too"] is True


def test_a_projects_gpu_only_tests_run_under_the_runner(pytest_module_run: Job) -> None:
    assert pytest_module_run.returncode == 0, pytest_module_run.stdout + pytest_module_run.stderr
    assert pytest_module_run.stdout.splitlines()[-1].startswith("4 passed")
    assert pytest_module_run.report["script"] == "-m pytest"


def test_on_a_plain_cpu_the_same_tests_are_skipped() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", str(PROJECT / "tests"), "-q", "-p", "no:cacheprovider"],
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).parent,
    )
    assert completed.returncode == 0, completed.stdout
    assert completed.stdout.splitlines()[-1].startswith("1 passed, 3 skipped")
