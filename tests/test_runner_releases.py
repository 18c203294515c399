"""The runner on the torch the user has (2.2 .. 2.15): each adaptation to what a release lacks, tested on the
installed torch by faking the absence (a torch namespace without the feature), and the packaging's range.

benchmarks/torch_matrix.py runs every test_runner* module, this one included, on the real releases.
"""

from __future__ import annotations

import abc
import types
from pathlib import Path

import pytest
import torch

from ampfix.runner.config import RUNNER_DIR
from ampfix.runner.gpu import amp_patches, compiler, cpu_gaps, cuda_autocast, fake_cuda, torch_features
from ampfix.runner.gpu.devices import DeviceModel
from ampfix.runner.host import failures
from ampfix.runner.trace.observe import Recorder, Site

ROOT = Path(__file__).resolve().parent.parent


class _Calls:
    """A stand-in torch before 2.4: one autocast state function per device; records each call."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        names = [name for names in torch_features.LEGACY_AUTOCAST_STATE.values() for name in names]
        for name in names:
            setattr(self, name, self._function(name))

    def _function(self, name: str):
        def call(*args):
            self.calls.append((name, *args))
            return name

        return call


def test_before_2_4_the_autocast_state_is_read_per_device_from_the_old_functions() -> None:
    legacy = _Calls()
    state = torch_features.AutocastState(legacy)
    assert not state.per_device
    assert (state.get_dtype("cpu"), state.get_dtype("cuda")) == ("get_autocast_cpu_dtype", "get_autocast_gpu_dtype")
    assert (state.is_enabled("cpu"), state.is_enabled("cuda")) == ("is_autocast_cpu_enabled", "is_autocast_enabled")
    state.set_dtype("cuda", torch.float16)
    state.set_enabled("cpu", True)
    assert legacy.calls[-2:] == [("set_autocast_gpu_dtype", torch.float16), ("set_autocast_cpu_enabled", True)]
    with pytest.raises(RuntimeError, match="unsupported autocast device_type 'xla'"):
        state.get_dtype("xla")


def test_the_installed_torchs_autocast_state_reads_as_torch_does() -> None:
    state = torch_features.AutocastState(torch)
    assert state.per_device == hasattr(torch, "get_autocast_dtype")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert state.is_enabled("cpu") is True
        assert state.get_dtype("cpu") == torch.bfloat16
    assert state.is_enabled("cpu") is False


@pytest.fixture
def torch_restored(monkeypatch: pytest.MonkeyPatch):
    """Whatever a test installs into torch's autocast state functions is undone after it."""
    for name in ("is_autocast_enabled", "get_autocast_dtype", "set_autocast_enabled", "set_autocast_dtype",
                 "set_autocast_cpu_enabled", "set_autocast_cpu_dtype", "is_autocast_cpu_enabled",
                 "get_autocast_cpu_dtype"):
        if hasattr(torch, name):
            monkeypatch.setattr(torch, name, getattr(torch, name))
    return monkeypatch


def test_before_2_4_the_script_gets_is_autocast_enabled_without_a_device(torch_restored) -> None:
    """On torch 2.2, ``torch.is_autocast_enabled("cuda")`` is a TypeError on a GPU: the emulation keeps it one, and
    adds no ``torch.get_autocast_dtype``."""
    legacy = torch_features.AutocastState(_Calls())
    torch_restored.setattr(amp_patches, "AUTOCAST_STATE", legacy)
    if hasattr(torch, "get_autocast_dtype"):
        torch_restored.delattr(torch, "get_autocast_dtype")
    amp_patches.install_autocast_state_queries(amp_patches.ActiveRegions())
    assert not hasattr(torch, "get_autocast_dtype")
    with pytest.raises(TypeError):
        torch.is_autocast_enabled("cuda")
    assert torch.is_autocast_enabled() is False  # CUDA's: no "cuda" region open


def test_torch_accelerator_is_emulated_only_where_it_exists(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """Before torch 2.6 there is no torch.accelerator: nothing to emulate, nothing said, and a script that names it
    fails with the AttributeError it has on a GPU with that torch."""
    monkeypatch.delattr(torch, "accelerator", raising=False)
    assert not torch_features.has_accelerator()
    fake_cuda.install_accelerator(Recorder("main"), DeviceModel(Recorder("main"), 1, None))
    assert not hasattr(torch, "accelerator")
    assert capsys.readouterr() == ("", "")


def test_the_fake_stream_and_event_pass_dynamos_device_interface_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch 2.1 .. 2.5: importing torch._dynamo asserts that torch.cuda.Event derives from
    ``torch._streambase._EventBase`` ("DeviceInterface member Event should be inherit from _EventBase")."""

    class _StreamBase(abc.ABC):  # as torch/_streambase.py declares them
        @abc.abstractmethod
        def query(self) -> bool: ...

    class _EventBase(abc.ABC):
        @abc.abstractmethod
        def query(self) -> bool: ...

    streambase = types.ModuleType("torch._streambase")
    vars(streambase).update(_StreamBase=_StreamBase, _EventBase=_EventBase)
    monkeypatch.setattr(torch, "_streambase", streambase, raising=False)
    assert torch_features.stream_and_event_bases() == (_StreamBase, _EventBase)
    fake_cuda.register_with_torchs_stream_bases()
    assert issubclass(fake_cuda.FakeEvent, _EventBase) and issubclass(fake_cuda.FakeStream, _StreamBase)


def _current_stream_in_c(device):  # stands in for torch 2.15's torch._C._dynamo.utils.get_current_stream
    raise RuntimeError("Found no NVIDIA driver on your system.")


def _dynamo_modules(get_current_stream) -> dict[str, types.SimpleNamespace]:
    return {
        "torch._dynamo.utils": types.SimpleNamespace(get_current_stream=get_current_stream),
        "torch._dynamo.guards": types.SimpleNamespace(get_current_stream=get_current_stream),
        # dynamo's tracing-time lookup is its own Python function on every release: left alone
        "torch._dynamo.variables.streams": types.SimpleNamespace(get_current_stream=len),
        "a_scripts_module": types.SimpleNamespace(get_current_stream=get_current_stream),
    }


def test_dynamos_current_stream_is_the_emulated_accelerators_where_torch_looks_it_up_in_c() -> None:
    """torch 2.15: the code dynamo generates and its guards ask torch._C._dynamo.utils.get_current_stream, which
    initialises CUDA (a compiled function failed on the CPU); 2.14's Python function asked torch.accelerator."""
    accelerator = types.SimpleNamespace(current_stream=lambda device: f"emulated stream of {device}")
    torch_2_15 = types.SimpleNamespace(
        _C=types.SimpleNamespace(_dynamo=types.SimpleNamespace(utils=types.SimpleNamespace(
            get_current_stream=_current_stream_in_c))),
        accelerator=accelerator,
    )
    modules = _dynamo_modules(_current_stream_in_c)
    compiler.streams_asked_of_the_emulated_accelerator(torch_2_15, modules)
    assert [modules[name].get_current_stream("cuda:0") for name in ("torch._dynamo.utils", "torch._dynamo.guards")
            ] == ["emulated stream of cuda:0"] * 2
    assert modules["torch._dynamo.variables.streams"].get_current_stream is len
    assert modules["a_scripts_module"].get_current_stream is _current_stream_in_c
    # Up to 2.14 there is no such C function: nothing is replaced.
    torch_2_14 = types.SimpleNamespace(_C=types.SimpleNamespace(_dynamo=types.SimpleNamespace(
        utils=types.SimpleNamespace())), accelerator=accelerator)
    modules = _dynamo_modules(len)
    compiler.streams_asked_of_the_emulated_accelerator(torch_2_14, modules)
    assert all(module.get_current_stream is len for module in modules.values())


def test_a_fake_tensor_on_the_emulated_gpu_makes_no_cuda_context() -> None:
    """torch 2.8 (2.5-2.11): a fake tensor on "cuda" made a real CUDA tensor first, where torch.cuda.is_available()
    (emulated True), and dynamo makes its fakes with the mode stack cleared: torch.compile failed in
    torch.cuda._lazy_init. Another device's context is still torch's to make."""
    made: list[str] = []

    def init_gpu_context(device):  # torch 2.8's, which makes torch.empty(1, device=device)
        made.append(str(device))
        if device.type == "cuda":
            raise RuntimeError("Found no NVIDIA driver on your system.")

    fake_tensor = types.SimpleNamespace(init_gpu_context=init_gpu_context)
    compiler.no_cuda_context_for_fake_tensors(fake_tensor)
    fake_tensor.init_gpu_context(torch.device("cuda", 0))
    fake_tensor.init_gpu_context(device=torch.device("cuda"))
    fake_tensor.init_gpu_context(torch.device("xpu"))
    assert made == ["xpu"]
    compiler.no_cuda_context_for_fake_tensors(types.SimpleNamespace())  # a torch without the step: nothing to do


def test_a_failure_raised_in_ampfixs_own_modules_is_never_the_scripts() -> None:
    """torch 2.2 lacked a name the runner read when its module was imported: the report blamed the script."""
    from ampfix.runner.child import process

    def raise_from(filename: str) -> BaseException:
        code = compile("def fail():\n    raise AttributeError(\"module 'torch' has no attribute 'x'\")\n", filename, "exec")
        namespace: dict = {}
        exec(code, namespace)
        try:
            namespace["fail"]()
        except AttributeError as error:
            return error
        raise AssertionError

    for filename, module in ((f"{RUNNER_DIR}gpu/amp_patches.py", "gpu/amp_patches"),
                             (str(ROOT / "ampfix" / "families" / "rules.py"), "../families/rules")):
        error = raise_from(filename)
        failure = process._failure(type(error), error, error.__traceback__)
        assert (failure["runner_module"], failure["runner_function"]) == (module, "fail")
        assert "the script's own" not in failures.explain(failure)


def test_the_cuda_policy_covers_the_ops_a_newer_torch_registers() -> None:
    """torch 2.14 registers _cudnn_rnn and linalg_matrix_sqrth for CUDA autocast, 2.13 does not: the table holds
    every release's ops, and the runner installs those the installed torch has."""
    assert cuda_autocast.CUDA_POLICY["_cudnn_rnn"] == "lower_precision_fp"
    assert "linalg_matrix_sqrth" in cuda_autocast.CUDA_POLICY
    assert cuda_autocast.ops_to_install({"mm", "linalg_matrix_sqrth"}) == {"linalg_matrix_sqrth"}


def test_the_runner_extra_is_a_range_and_the_test_extra_a_pin() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert [r for r in extras["runner"] if r.startswith("torch")] == ["torch>=2.4"]
    assert [r for r in extras["test"] if r.startswith("torch")] == ["torch==2.13.0"]



def test_the_ops_the_cpu_lacks_in_low_precision_are_the_releases() -> None:
    """torch 2.5's CPU lacks float16 grid_sample and pad, which 2.13's has; 2.14's cuFFT path takes bfloat16,
    2.13's refuses it (tests/test_runner_policy.py checks the installed release's table against its OpInfo)."""
    older, base, newer = (cpu_gaps.cpu_lacks_low_precision(version) for version in ("2.5.1", "2.13.0", "2.14.1+cu130"))
    assert base == cuda_autocast.CPU_LACKS_LOW_PRECISION
    assert older["nn.functional.grid_sample"] == older["grid_sampler_2d"] == ("bfloat16", "float16")
    assert "nn.functional.grid_sample" not in base and "logaddexp" not in older
    assert (base["fft.rfft"], newer["fft.rfft"]) == (("float16",), ("bfloat16", "float16"))
    # A release not measured takes the nearest measured one below it, the oldest below all.
    assert [cpu_gaps.measured_release(v) for v in ("2.2.2", "2.12.0", "2.15.0")] == [(2, 5), (2, 11), (2, 14)]
    assert cpu_gaps.cpu_lacks_low_precision("2.11.0")["trace"] == ("bfloat16", "complex32", "float16")


def test_the_runner_runs_the_installed_releases_cpu_gaps_in_float32() -> None:
    from ampfix.runner.gpu import boundaries

    handled = boundaries.CpuGaps(Recorder("main"), None).handlers(lambda function, args, kwargs: None)
    expected = {function for name in cpu_gaps.cpu_lacks_low_precision() for _, function in boundaries._variants(name)}
    assert set(handled) == expected


def test_custom_fwds_own_region_is_torchs_where_no_python_frame_of_torch_calls_it(monkeypatch: pytest.MonkeyPatch,
                                                                                tmp_path: Path) -> None:
    """torch 2.14 made Function.apply the C function itself: custom_fwd's wrapper is called straight from the
    script's line, and the autocast region it opens was reported as the script's."""
    import os

    from ampfix.runner.trace import sites

    for name in ("_torch_dir", "_plumbing_prefixes", "_helper_prefixes"):
        monkeypatch.setattr(sites, name, getattr(sites, name))
    monkeypatch.setattr(sites, "_kind_by_file", {})
    torch_dir = os.path.dirname(torch.__file__)
    sites.configure(torch_dir)
    namespace: dict = {"find_site": sites.find_site}
    wrappers = "def decorate_fwd():\n    return find_site()\n\ndef autocast_enter():\n    return find_site()\n"
    exec(compile(wrappers, os.path.join(torch_dir, "amp", "autocast_mode.py"), "exec"), namespace)
    script = str(tmp_path / "train.py")
    exec(compile("def forward():\n    return decorate_fwd()\n\ndef enter():\n    return autocast_enter()\n",
                 script, "exec"), namespace)
    assert namespace["forward"]() == Site(script, 2, "torch")
    assert namespace["enter"]() == Site(script, 5, "script")  # the script's own `with autocast(...)`


def test_an_op_the_cpu_lacks_in_low_precision_still_gets_float32_inside_a_region() -> None:
    """Autocast runs multi_margin_loss (2.5: mse_loss too) in float32: inside a region its bfloat16 inputs reach the
    CPU kernel as float32 and the result is float32, as CUDA's; outside, the bfloat16 a GPU gives."""
    from ampfix.runner.gpu import boundaries

    handlers = boundaries.CpuGaps(Recorder("main"), types.SimpleNamespace(stand_in=False)).handlers(
        lambda function, args, kwargs: function(*args, **kwargs))
    loss = handlers[torch.nn.functional.multi_margin_loss]
    inputs = (torch.randn(4, 5, dtype=torch.bfloat16), torch.tensor([0, 1, 2, 3]))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert loss(inputs, {}).dtype == torch.float32
    assert loss(inputs, {}).dtype == torch.bfloat16
