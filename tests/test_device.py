"""Device targets (`--device cpu|auto`, `--device-expr`): what the fixtures do not show on their own.

The fixture areas fixtures/device_cpu, device_auto and device_expr hold the rewrites themselves (and the
torch oracle runs them); here: the flags and the config key, errors, --keep-dtype, --target-torch, and
`check` agreeing with `rewrite` in every mode.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ampfix.cli.app import app
from ampfix.engine import check_source, fix_source
from ampfix.core.options import Options

SOURCE = (
    "import torch\n"
    "scaler = torch.cuda.amp.GradScaler()\n"
    "with torch.cuda.amp.autocast(dtype=torch.float16):  # half\n"
    "    pass\n"
)
MIGRATED = 'import torch\nwith torch.autocast(device_type="cuda"):\n    pass\n'


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_rewrite_device_cpu_writes_the_cpu_version(tmp_path: Path):
    path = tmp_path / "train.py"
    path.write_text(SOURCE)
    result = invoke("rewrite", "--device", "cpu", str(path))
    assert result.exit_code == 1, result.output
    assert path.read_text() == (
        "import torch\n"
        'scaler = torch.amp.GradScaler("cpu")\n'
        'with torch.amp.autocast("cpu", dtype=torch.bfloat16):  # half\n'
        "    pass\n"
    )
    assert "dtype=torch.float16 -> torch.bfloat16" in result.output
    assert invoke("rewrite", "--device", "cpu", str(path)).exit_code == 0  # a second run: nothing to do


def test_keep_dtype_keeps_float16_and_says_so():
    result = fix_source(SOURCE, Options(device="cpu", keep_dtype=True))
    assert 'torch.amp.autocast("cpu", dtype=torch.float16)' in result.new_source
    assert any("dtype=torch.float16 kept (--keep-dtype)" in f.message for f in result.findings)


def test_the_default_target_is_todays_output_and_leaves_migrated_code():
    assert fix_source(SOURCE).new_source == fix_source(SOURCE, Options(device="cuda")).new_source
    assert 'torch.amp.autocast("cuda", dtype=torch.float16)' in fix_source(SOURCE).new_source
    result = fix_source(MIGRATED)
    assert (result.new_source, result.findings) == (MIGRATED, ())


@pytest.mark.parametrize("bad", ["cfg.", "a b", "x = 1", "a, b", "", "a\nb"])
def test_device_expr_must_be_one_expression(tmp_path: Path, bad: str):
    path = tmp_path / "train.py"
    path.write_text(SOURCE)
    result = invoke("rewrite", "--device-expr", bad, str(path))
    assert result.exit_code == 2
    assert "--device-expr" in result.output
    assert path.read_text() == SOURCE


def test_unknown_device_is_a_usage_error(tmp_path: Path):
    (tmp_path / "a.py").write_text(SOURCE)
    result = invoke("check", "--device", "gpu", str(tmp_path / "a.py"))
    assert result.exit_code == 2
    assert "expected one of cuda, cpu, auto" in result.output


def test_device_expr_is_put_at_every_cuda_site(tmp_path: Path):
    path = tmp_path / "train.py"
    path.write_text(SOURCE)
    assert invoke("rewrite", "--device-expr", "cfg.device_type", str(path)).exit_code == 1
    assert path.read_text() == (
        "import torch\n"
        "scaler = torch.amp.GradScaler(cfg.device_type)\n"
        "with torch.amp.autocast(cfg.device_type, dtype=torch.float16):  # half\n"
        "    pass\n"
    )


def test_device_key_in_pyproject(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text('[tool.ampfix]\ndevice = "auto"\n')
    path = tmp_path / "train.py"
    path.write_text(MIGRATED)
    assert invoke("rewrite", str(path)).exit_code == 1
    assert path.read_text() == (
        "import torch\n"
        "\n"  # PEP 8's blank line after the imports (black and isort would add it)
        'AMP_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"\n'
        "with torch.autocast(device_type=AMP_DEVICE):\n"
        "    pass\n"
    )
    # the flag wins over the file
    path.write_text(MIGRATED)
    assert invoke("rewrite", "--device", "cuda", str(path)).exit_code == 0
    assert path.read_text() == MIGRATED


@pytest.mark.parametrize("options", [Options(), Options(device="cpu"), Options(device="auto"),
                                     Options(device_expr="cfg.device_type")], ids=["cuda", "cpu", "auto", "expr"])
@pytest.mark.parametrize("source", [SOURCE, MIGRATED, "import torch\nx = torch.autocast\n"], ids=["old", "new", "ref"])
def test_check_reports_a_fix_exactly_when_rewrite_changes(options: Options, source: str):
    checked = check_source(source, options)
    fixed = fix_source(source, options)
    assert any(f.fixable and not f.unsafe for f in checked.findings) == fixed.changed


def test_target_torch_holds_gradscaler_back_in_every_mode():
    for options in (Options(device="cpu", target_torch=(2, 2)), Options(device="auto", target_torch=(2, 2))):
        result = fix_source("import torch\nscaler = torch.cuda.amp.GradScaler()\n", options)
        assert not result.changed
        assert [f.message for f in result.findings] == [
            "`torch.cuda.amp.GradScaler` left: needs torch >= 2.3; the target is torch 2.2"]


def test_auto_adds_its_name_once_in_two_runs():
    source = "import torch\nwith torch.cuda.amp.autocast():\n    pass\nwith torch.autocast('cuda'):\n    pass\n"
    once = fix_source(source, Options(device="auto")).new_source
    twice = fix_source(once, Options(device="auto"))
    assert once.count("AMP_DEVICE = ") == 1
    assert twice.new_source == once and twice.findings == ()


def test_auto_without_a_torch_import_adds_one():
    source = "from torch.cuda.amp import autocast\nwith autocast():\n    pass\n"
    assert fix_source(source, Options(device="auto")).new_source == (
        "from torch.amp import autocast\n"
        "import torch\n"
        "\n"
        'AMP_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"\n'
        "with autocast(AMP_DEVICE):\n"
        "    pass\n"
    )


def test_auto_leaves_a_module_where_torch_is_something_else():
    source = "from torch.cuda.amp import autocast\ntorch = None\nwith autocast():\n    pass\n"
    result = fix_source(source, Options(device="auto"))
    assert not result.changed
    assert any("`torch` is bound to something else" in f.message for f in result.findings)


MODES = {"cpu": Options(device="cpu"), "auto": Options(device="auto"), "expr": Options(device_expr="cfg.device_type")}


@pytest.mark.parametrize("mode", MODES)
def test_every_fixture_in_every_mode_parses_and_a_second_run_changes_nothing(mode: str):
    """All 140-odd fixture inputs (every area's, whatever options their area has) under each device target."""
    import ast

    from fixture_cases import CASES, read_source

    options = MODES[mode]
    for case in CASES:
        source, _ = read_source(case.in_path)
        once = fix_source(source, options)
        assert once.error is None, f"{case.id}: {once.error}"
        ast.parse(once.new_source)
        twice = fix_source(once.new_source, options)
        assert twice.new_source == once.new_source, f"{case.id}: a second --device {mode} run changes the output"
