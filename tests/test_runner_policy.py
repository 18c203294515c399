"""The runner's op policy for "cuda" autocast, verify on scripts that write, --timeout, signals, --json
checked up front, and an install that survives a torch without one of the private names it uses.

The CLI jobs start a child Python with torch each (seconds); tests/runner_jobs.py runs them, each in
its own folder with its own TMPDIR.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from runner_jobs import FIXTURES, Job, define_job_fixtures

from ampfix.runner.gpu import cpu_gaps, cuda_autocast

AUTOCAST_HEADER = Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"


def _checkpoint_folder(folder: Path, *, stale_run: bool) -> Path:
    """A working directory as the checkpoint writer expects it: its config, maybe a previous run's folder."""
    cwd = folder / "project"
    (cwd / "config").mkdir(parents=True)
    (cwd / "config" / "lr.txt").write_text("0.1\n")
    if stale_run:
        (cwd / "checkpoints").mkdir()
    return cwd


CHECKPOINT_VERIFY = ["verify", "checkpoint_writer.py", "--rewritten", "checkpoint_writer.migrated.py"]

JOBS = {
    "cuda_policy": ["run", "op_dtypes.py"],
    "cpu_policy": ["run", "--autocast-policy", "cpu", "op_dtypes.py"],
    "checkpoints": CHECKPOINT_VERIFY,
    "stale_checkpoints": CHECKPOINT_VERIFY,
    "timeout": ["run", "--timeout", "10", "never_ends.py"],
}

define_job_fixtures(
    JOBS,
    globals(),
    {
        "cuda_policy": lambda folder: folder,
        "cpu_policy": lambda folder: folder,
        "checkpoints": lambda folder: _checkpoint_folder(folder, stale_run=False),
        "stale_checkpoints": lambda folder: _checkpoint_folder(folder, stale_run=True),
        "timeout": lambda folder: folder,
    },
)


def _dtypes(job: Job) -> dict[str, str]:
    assert job.returncode == 0, job.stderr
    return json.loads(job.stdout.strip().splitlines()[-1])


# -- CUDA's op policy --------------------------------------------------------------------------------

# What CUDA autocast gives for each probe in fixtures/run/op_dtypes.py, written from PyTorch's
# "Autocast Op Reference" (CUDA ops that can autocast to float16 / to float32 / to the widest input
# type; ops not listed run in their inputs' type), and the aten op called. The run's low precision is
# float16 (the default), as on a GPU: the dtypes printed are a GPU's. Ops in UNLISTED have no autocast kernel: type promotion
# decides, or the input's dtype, or (a composite) the kernels of its parts.
LOW, F32 = "float16", "float32"
BCE_REFUSED = "error: torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast."
CUDA_EXPECTED: dict[str, tuple[str, str]] = {
    "matmul": ("matmul", LOW), "mm": ("mm", LOW), "bmm": ("bmm", LOW), "addmm": ("addmm", LOW),
    "baddbmm": ("baddbmm", LOW), "linear": ("linear", LOW), "conv2d": ("conv2d", LOW), "conv1d": ("conv1d", LOW),
    "addmv": ("addmv", LOW), "mv": ("mv", LOW), "einsum": ("einsum", LOW),
    "layer_norm": ("layer_norm", F32), "group_norm": ("group_norm", F32), "exp": ("exp", F32), "log": ("log", F32),
    "pow": ("pow.Tensor_Scalar", F32), "rsqrt": ("rsqrt", F32), "mse_loss": ("mse_loss", F32),
    "nll_loss": ("nll_loss", F32), "bce_with_logits": ("binary_cross_entropy_with_logits", F32),
    "logsumexp": ("logsumexp", F32), "cosine_similarity": ("cosine_similarity", F32),
    "softmax": ("softmax.int", F32), "log_softmax": ("log_softmax.int", F32), "sum": ("sum", F32),
    "sum_dim": ("sum.dim_IntList", F32), "cumsum": ("cumsum", F32), "prod": ("prod", F32),
    "softmax_with_dtype": ("softmax.int", LOW),  # dtype= given: kept
    "norm": ("norm.Scalar", F32),
    "cross_entropy": ("cross_entropy_loss", F32),  # log_softmax and nll_loss inside it
    "addcmul": ("addcmul", F32), "addcmul_low": ("addcmul", LOW), "atan2": ("atan2", F32), "dot": ("dot", F32),
    "cat": ("cat", F32), "stack_low": ("stack", LOW),
    "relu": ("relu", LOW), "gelu": ("gelu", LOW), "add": ("add.Tensor", LOW), "max_pool2d": ("max_pool2d", LOW),
    "binary_cross_entropy": ("binary_cross_entropy", BCE_REFUSED),
}  # fmt: skip
UNLISTED = {"cross_entropy_loss", "cat", "stack", "relu", "gelu", "add.Tensor", "max_pool2d"}
POLICY_OF_EXPECTED = {LOW: ("lower_precision_fp", "promote", "fp32_set_opt_dtype"), F32: ("fp32", "fp32_set_opt_dtype", "fp32_append_dtype", "promote"), BCE_REFUSED: ("banned",)}

# Where the CPU's own policy gives another dtype for the same probes (torch 2.13).
CPU_DIFFERS = {
    "addmv": F32, "mv": F32, "layer_norm": LOW, "group_norm": LOW, "exp": LOW, "log": LOW, "pow": LOW,
    "rsqrt": LOW, "logsumexp": LOW, "cosine_similarity": LOW, "softmax": LOW, "log_softmax": LOW, "sum": LOW,
    "sum_dim": LOW, "cumsum": LOW, "norm": LOW,
    "dot": "error: dot : expected both vectors to have same dtype, but found Float and Half",
    "binary_cross_entropy": F32,
}  # fmt: skip


def test_each_op_gives_the_dtype_cuda_autocast_gives(cuda_policy: Job) -> None:
    assert _dtypes(cuda_policy) == {name: dtype for name, (_, dtype) in CUDA_EXPECTED.items()}


def test_the_expectations_agree_with_the_runners_policy_table() -> None:
    for name, (op, dtype) in CUDA_EXPECTED.items():
        if op in UNLISTED:
            assert op not in cuda_autocast.CUDA_POLICY, name
        else:
            assert cuda_autocast.CUDA_POLICY[op] in POLICY_OF_EXPECTED[dtype], name


def test_the_cpu_policy_stays_available_and_differs_where_documented(cpu_policy: Job) -> None:
    cuda = {name: dtype for name, (_, dtype) in CUDA_EXPECTED.items()}
    assert _dtypes(cpu_policy) == {**cuda, **CPU_DIFFERS}


def test_ops_inside_autocast_count_what_the_gpu_would_give(cuda_policy: Job, cpu_policy: Job) -> None:
    cuda, cpu = cuda_policy.report, cpu_policy.report
    # The matmul that makes h and every probe that ran (not the two refused ones) were counted.
    assert cuda["op_dtypes"]["float32"] > cpu["op_dtypes"]["float32"]
    assert cuda["op_dtypes"]["float16"] < cpu["op_dtypes"]["float16"]


def _header_lists() -> dict[str, list[str]]:
    text = AUTOCAST_HEADER.read_text()
    lists = {}
    for macro in ("AT_FORALL_LOWER_PRECISION_FP", "AT_FORALL_FP32", "AT_FORALL_FP32_SET_OPT_DTYPE", "AT_FORALL_PROMOTE"):
        # The macro's lines: each continued by a trailing backslash, and the one that ends it.
        body = re.search(rf"#define {macro}\(_\)((?:.*\\\n)*.*)", text).group(1)
        lists[macro] = [op + (f".{overload}" if overload else "") for op, overload in re.findall(r"_\((\w+)(?:, (\w+))?\)", body)]
    lists["AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE"] = re.findall(r'"(norm\.\w+)"', text)
    return lists


def _cuda_registered() -> set[str]:
    return {
        name.removeprefix("aten::")
        for name in torch._C._dispatch_get_all_op_names()
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, "AutocastCUDA")
    }


def test_the_table_is_the_installed_torchs_header() -> None:
    """Each list, less the ops the installed torch does not register (another release's), is its header's."""
    if "#define AT_FORALL_FP32(_)" not in AUTOCAST_HEADER.read_text():
        pytest.skip(f"torch {torch.__version__} declares its lists in autocast_mode.cpp, which it does not ship")
    lists, registered = _header_lists(), _cuda_registered()

    def of_this_torch(table) -> list[str]:
        return [name for name in table if name in registered and name not in cuda_autocast.BESIDE_THE_HEADER]

    assert set(of_this_torch(cuda_autocast.LOWER_PRECISION_FP)) == set(lists["AT_FORALL_LOWER_PRECISION_FP"])
    assert of_this_torch(cuda_autocast.FP32) == lists["AT_FORALL_FP32"]
    assert of_this_torch(cuda_autocast.FP32_SET_OPT_DTYPE) == lists["AT_FORALL_FP32_SET_OPT_DTYPE"]
    assert of_this_torch(cuda_autocast.PROMOTE) == lists["AT_FORALL_PROMOTE"]
    assert of_this_torch(cuda_autocast.FP32_APPEND_DTYPE) == lists["AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE"]


def test_the_table_covers_every_op_cuda_autocast_registers() -> None:
    """Every op the installed torch registers for CUDA autocast (2.14.1's CUDA build: _cudnn_rnn and
    linalg_matrix_sqrth too) has its policy, and a run installs each (less those the CPU's kernel already runs
    as CUDA does)."""
    registered = _cuda_registered()
    assert registered <= set(cuda_autocast.CUDA_POLICY)
    installed = cuda_autocast.ops_to_install(registered)
    assert installed == {name for name in registered - cuda_autocast.CPU_KERNEL_IS_CUDA_POLICY}


def test_the_ops_beside_the_header_run_the_policy_cuda_autocast_gives_them() -> None:
    """Not in autocast_mode.h: the policy of each registered one is read from CUDA autocast itself, run on fake
    CUDA tensors (FakeTensorMode runs the real AutocastCUDA kernels on a machine without a GPU)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    registered = _cuda_registered()
    probes = {"linalg_matrix_sqrth": (lambda x: torch.ops.aten.linalg_matrix_sqrth(x), "fp32")}
    probes = {name: probe for name, probe in probes.items() if name in registered}
    if not probes:
        pytest.skip(f"torch {torch.__version__} registers none of them")
    before = torch.get_autocast_dtype("cuda"), torch.is_autocast_enabled("cuda")
    with FakeTensorMode(allow_non_fake_inputs=True):
        x = torch.empty(4, 4, device="cuda", dtype=torch.float16)
        torch.set_autocast_dtype("cuda", torch.float16)
        torch.set_autocast_enabled("cuda", True)
        try:
            given = {name: "fp32" if call(x).dtype == torch.float32 else "other" for name, (call, _) in probes.items()}
        finally:
            torch.set_autocast_dtype("cuda", before[0])
            torch.set_autocast_enabled("cuda", before[1])
    assert given == {name: cuda_autocast.CUDA_POLICY[name] for name in probes}


def test_ops_left_to_the_cpu_kernel_are_registered_there() -> None:
    cpu_registered = {
        name.removeprefix("aten::")
        for name in torch._C._dispatch_get_all_op_names()
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, "AutocastCPU")
    }
    assert cuda_autocast.CPU_KERNEL_IS_CUDA_POLICY <= cpu_registered
    cuda_lower = {name for name, policy in cuda_autocast.CUDA_POLICY.items() if policy == "lower_precision_fp"}
    assert cuda_autocast.CPU_KERNEL_IS_CUDA_POLICY - cuda_lower == {"mkldnn_rnn_layer", "cat", "stack", "index_copy"}
    with torch.autocast("cpu"):  # two of them, as the CPU runs them: float32 in, bfloat16 out
        x = torch.randn(2, 3)
        assert torch.nn.functional.linear(x, torch.randn(4, 3)).dtype == torch.bfloat16
        assert torch.addmm(torch.randn(4), torch.randn(4, 3), torch.randn(3, 4)).dtype == torch.bfloat16


# -- verify on a script that writes files --------------------------------------------------------------


def test_verify_gives_each_side_its_own_working_directory(checkpoints: Job) -> None:
    job = checkpoints
    assert job.returncode == 0, job.stderr
    assert job.report["equivalent"] is True
    assert len(job.report["original"]["losses"]) == 3 == len(job.report["rewritten"]["losses"])
    assert f"each side ran in its own copy of {job.cwd}" in job.report["notes"]
    # Both sides read config/lr.txt by relative path; neither wrote into the caller's folder.
    assert sorted(path.name for path in job.cwd.iterdir()) == ["config"]
    assert _ampfix_folders(job.tmpdir) == []


def test_verify_shows_why_the_original_failed(stale_checkpoints: Job) -> None:
    job = stale_checkpoints  # a previous run left checkpoints/: the script refuses it
    assert job.returncode == 3  # it died of an exception: a crash, named by its line
    assert job.report["error"] == (
        "the original crashed: FileExistsError: [Errno 17] File exists: 'checkpoints'; nothing to compare against; "
        "no sign of the runner's emulation in the failure (raised outside ampfix, no bfloat16 stand-in named): the "
        "script's own"
    )
    assert "--- original stderr (last lines) ---" in job.stderr
    assert "os.makedirs(args.out)" in job.stderr
    assert sorted(path.name for path in (job.cwd / "checkpoints").iterdir()) == []


# -- --timeout and signals --------------------------------------------------------------------------------


def _ampfix_folders(tmpdir: Path) -> list[Path]:
    """What ampfix made in TMPDIR (torch keeps its own caches there too)."""
    return [path for path in tmpdir.iterdir() if path.name.startswith("ampfix-")]


def _gone(pid: int) -> bool:
    """Ended: no such process, or a zombie nobody has reaped yet."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_gone(pids: list[int], seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if all(_gone(pid) for pid in pids):
            return True
        time.sleep(0.1)
    return False


def _started_pids(stdout: str) -> list[int]:
    for line in stdout.splitlines():
        if line.startswith("script "):
            _, script, _, helper = line.split()
            return [int(script), int(helper)]
    return []


def test_timeout_ends_the_script_and_its_processes(timeout: Job) -> None:
    job = timeout
    assert job.returncode == 2
    assert job.report["exit_code"] is None
    assert job.report["error"] == "timed out after 10 s (--timeout)"
    assert "ampfix run: never_ends.py: timed out after 10 s (--timeout)" in job.stderr
    assert job.seconds < 10 + 5 + 60  # the limit, the grace to stop, and the start of two Pythons at worst
    pids = _started_pids(job.stdout)  # printed right after torch's import
    assert len(pids) == 2, job.stdout
    if sys.platform.startswith("linux"):
        assert _wait_gone(pids)
    assert _ampfix_folders(job.tmpdir) == []


def _sigint_as_at_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("signal_name, expected_status", [("SIGTERM", 128 + 15), ("SIGINT", None)])
def test_a_signal_to_ampfix_ends_the_script_and_cleans_up(tmp_path: Path, signal_name: str, expected_status) -> None:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-m", "ampfix", "run", str(FIXTURES / "never_ends.py")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmpdir)},
        # As a terminal starts it: a shell without job control starts a background job (`cmd &`, CI under nohup)
        # with SIGINT ignored, which ampfix and the script would inherit, and Ctrl-C would reach neither.
        preexec_fn=_sigint_as_at_a_terminal,
    )
    try:
        pids = _started_pids(process.stdout.readline())
        assert len(pids) == 2
        assert [path.name[: len("ampfix-run-")] for path in _ampfix_folders(tmpdir)] == ["ampfix-run-"]
        process.send_signal(getattr(signal, signal_name))
        status = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    stderr = process.stderr.read()
    if expected_status is not None:
        assert status == expected_status, stderr
    else:  # Ctrl-C: passed on to the script, which stops; the summary is still printed
        assert "ampfix run: never_ends.py exited" in stderr
        assert status != 0
    assert _wait_gone(pids)
    assert _ampfix_folders(tmpdir) == []


# -- --json checked before the script runs ---------------------------------------------------------------


@pytest.mark.parametrize("command", ["run", "verify"])
def test_a_json_path_that_cannot_be_written_is_refused_before_starting(tmp_path: Path, command: str) -> None:
    for target, reason in ((tmp_path / "missing" / "r.json", f"no such folder: {tmp_path / 'missing'}"), (tmp_path, "it is a folder")):
        completed = subprocess.run(
            [sys.executable, "-m", "ampfix", command, "--json", str(target), str(FIXTURES / "never_ends.py")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert completed.returncode == 2
        assert completed.stdout == ""  # the script never started
        assert f"ampfix {command}: cannot write the report to {target}: {reason}" in " ".join(completed.stderr.split())


# -- custom_fwd's cast_inputs under each --amp-dtype ----------------------------------------------------------

F16, BF16, FP32 = torch.float16, torch.bfloat16, torch.float32


@pytest.mark.parametrize(
    ("amp_dtype", "expected"),
    [
        # cast_inputs for "cuda": float16, bfloat16, float32, None
        ("bfloat16", (BF16, BF16, FP32, None)),
        # float16, the default, keeps a bfloat16 request (float16-cpu too: only how float16 is computed differs).
        ("float16", (F16, BF16, FP32, None)),
        ("float16-cpu", (F16, BF16, FP32, None)),
        ("keep", (F16, BF16, FP32, None)),
        ("explicit", (F16, BF16, FP32, None)),  # cast_inputs is always written: kept
    ],
)
def test_a_cuda_custom_fwd_casts_a_low_precision_request_to_the_runs_amp_dtype(amp_dtype: str, expected: tuple) -> None:
    from ampfix.runner.gpu.amp_patches import AmpPlan

    plan = AmpPlan(amp_dtype)
    assert tuple(plan.run_cast_inputs("cuda", dtype) for dtype in (F16, BF16, FP32, None)) == expected
    # A custom_fwd the script asked for on the CPU runs as written, as a "cpu" autocast region does.
    assert plan.run_cast_inputs("cpu", F16) is F16


# -- a torch without one of the private names --------------------------------------------------------------

WITHOUT_A_PRIVATE_NAME = """
import json, sys, tempfile
import torch
del torch._C._dispatch_tls_set_dispatch_key_included  # as if a later torch had renamed it
from ampfix.runner.gpu import harness
from ampfix.runner.config import RunnerConfig
from ampfix.runner.trace.observe import Recorder
harness.install(torch, Recorder("main"), RunnerConfig(out_dir=tempfile.mkdtemp()))
x = torch.randn(2, 4, device="cuda")
with torch.autocast("cuda"):
    print(json.dumps([str(torch.softmax(x @ x.T, -1).dtype), torch.cuda.is_available()]))
"""


def test_a_missing_private_name_disables_only_its_own_emulation() -> None:
    completed = subprocess.run(
        [sys.executable, "-c", WITHOUT_A_PRIVATE_NAME], capture_output=True, text=True, timeout=120, check=False
    )
    assert completed.returncode == 0, completed.stderr
    # The CPU's policy instead of CUDA's (softmax in bfloat16, which the script reads as float16, not
    # CUDA's float32); the device emulation still works.
    assert json.loads(completed.stdout) == ["torch.float16", True]
    assert (
        f"ampfix run: could not emulate CUDA's autocast op policy on torch {torch.__version__} (AttributeError: "
        in completed.stderr
    )
    assert completed.stderr.count("could not emulate") == 1


def _cpu_lacks_low_precision() -> dict[str, tuple[str, ...]]:
    """The ops the installed torch's OpInfo database declares CUDA, not CPU, support for in a low-precision
    dtype, kept where the CPU kernel raises on OpInfo's own sample inputs in that dtype."""
    if "expecttest" not in sys.modules:  # torch's test helpers import it for their TestCase only
        import types
        import unittest

        stand_in = types.ModuleType("expecttest")
        setattr(stand_in, "TestCase", unittest.TestCase)  # noqa: B010
        sys.modules["expecttest"] = stand_in
    # OpInfo's CUDA dtypes of several ops (the half-precision FFTs up to 2.13, some bfloat16 kernels) depend on
    # the GPU it finds (``SM53OrLater``); without one they read as a pre-2016 GPU's. Ask as every GPU of today
    # (compute capability 5.3 or later): set before the definitions are imported, which read it once.
    from torch.testing._internal import common_cuda

    common_cuda.SM53OrLater = True
    from torch.testing._internal.common_methods_invocations import op_db

    low = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.complex32: "complex32"}
    table: dict[str, set[str]] = {}
    for op in op_db:
        if op.name.startswith("torch.ops.") or _no_public_callable(op.name):
            continue  # a CUDA-only kernel (flash attention), or no public name a torch call can reach us by
        for dtype in set(op.dtypesIfCUDA or ()) - set(op.dtypes or ()):
            if dtype in low and _cpu_refuses(op, dtype):
                table.setdefault(op.name, set()).add(low[dtype])
    return {name: tuple(sorted(dtypes)) for name, dtypes in sorted(table.items())}


def _no_public_callable(name: str) -> bool:
    """No ``torch.<name>`` to call (OpInfo's name of an internal or a lambda-made op)."""
    value: object = torch
    for part in name.split("."):
        value = getattr(value, part, None)
    return not callable(value)


def _cpu_refuses(op, dtype) -> bool:
    for sample in list(op.sample_inputs("cpu", dtype))[:8]:
        try:
            op.op(sample.input, *sample.args, **sample.kwargs)
        except (RuntimeError, NotImplementedError, TypeError):
            return True
    return False


def test_the_ops_the_cpu_lacks_in_low_precision_are_the_installed_torchs() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        derived = _cpu_lacks_low_precision()
    table = "".join(f'    "{name}": {dtypes!r},\n' for name, dtypes in derived.items()).replace("'", '"')
    assert cpu_gaps.cpu_lacks_low_precision() == derived, f"the table for torch {torch.__version__}:\n{table}"
    assert {"fft.rfft", "fft.irfft", "fft.fft"} <= set(derived)


# -- the working-directory mirror and the options, without torch ---------------------------------------


def test_mirror_copies_small_entries_and_links_big_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ampfix.runner.host import workdir

    monkeypatch.setattr(workdir, "COPY_LIMIT_BYTES", 100)
    source, target, outside = tmp_path / "source", tmp_path / "target", tmp_path / "outside"
    for folder in (source / "config", source / "data", target, outside):
        folder.mkdir(parents=True)
    (source / "config" / "lr.txt").write_text("0.1")
    (source / "data" / "big.bin").write_bytes(b"x" * 101)
    (source / "ckpt.pt").write_bytes(b"weights")
    (source / "latest.pt").symlink_to("ckpt.pt")
    (source / "shared").symlink_to(outside)
    (source / "ampfix-verify-1").mkdir()

    linked = workdir.mirror(source, target, exclude=source / "ampfix-verify-1")

    assert linked == ["data" + os.sep]
    assert sorted(path.name for path in target.iterdir()) == ["ckpt.pt", "config", "data", "latest.pt", "shared"]
    assert not (target / "config").is_symlink() and (target / "config" / "lr.txt").read_text() == "0.1"
    assert not (target / "ckpt.pt").is_symlink()
    assert os.readlink(target / "data") == str(source / "data")
    assert os.readlink(target / "latest.pt") == "ckpt.pt"  # inside the folder: the copy's own
    assert os.readlink(target / "shared") == str(outside)  # leading out: the same place
    (target / "ckpt.pt").write_bytes(b"overwritten")
    assert (source / "ckpt.pt").read_bytes() == b"weights"


def test_run_options_reject_an_unknown_autocast_policy() -> None:
    from ampfix.runner.host import api

    with pytest.raises(ValueError, match="autocast_policy must be one of cuda, cpu"):
        api.RunOptions(autocast_policy="gpu")
