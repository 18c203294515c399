"""ampfix as a LibCST codemod, run through LibCST's own command line: what it writes is, byte for byte, what
`ampfix rewrite` writes, and what it leaves is in the codemod's warnings."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import libcst as cst
from libcst.codemod import CodemodContext
from typer.testing import CliRunner

from ampfix.cli.app import app
from ampfix.codemod import Migrate

ROOT = Path(__file__).resolve().parent.parent
# A handful: the demo (a reference left, imports moved), a CRLF file and one with a BOM (the bytes kept).
FIXTURES = [ROOT / "fixtures/demo/train.py", ROOT / "fixtures/demo/ops.py", ROOT / "fixtures/format/crlf.in.py",
            ROOT / "fixtures/format/utf8_bom.in.py"]


def _copies(folder: Path) -> Path:
    folder.mkdir()
    for path in FIXTURES:
        shutil.copyfile(path, folder / path.name)
    return folder


def _codemod(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "libcst.tool", "codemod", *args, "--no-format", "-j", "1",
                           "--hide-progress"], cwd=cwd, capture_output=True, text=True, timeout=120)


def _tree(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def test_libcsts_codemod_cli_writes_what_ampfix_rewrite_writes(tmp_path: Path):
    by_codemod, by_ampfix = _copies(tmp_path / "codemod"), _copies(tmp_path / "ampfix")
    run = _codemod(tmp_path, "-x", "ampfix.codemod.Migrate", "codemod")
    assert run.returncode == 0, run.stderr
    assert CliRunner().invoke(app, ["rewrite", "-q", str(by_ampfix)]).exit_code == 1
    assert _tree(by_codemod) == _tree(by_ampfix)
    assert _tree(by_codemod) != {path.name: path.read_bytes() for path in sorted(FIXTURES)}  # it did change them
    assert ("WARNING: 29:20: AMP001 `torch.cuda.amp.autocast` is referenced without a call; its calls cannot be "
            "given the device here; `DEFAULT_AUTOCAST` is bound at the top of a module or class on line 29, where "
            'another module may read it; functools.partial(torch.amp.autocast, "cuda", dtype=th.float16, '
            "cache_enabled=True) keeps the old defaults, and a positional call raises TypeError instead of "
            "shifting its arguments (an unsafe fix exists: --unsafe-fixes)\n") in run.stderr
    assert "Transformed 4 files successfully." in run.stderr


def test_the_short_form_from_a_projects_codemod_config_takes_the_engines_options_and_excludes(tmp_path: Path):
    (tmp_path / ".libcst.codemod.yaml").write_text("modules:\n- 'ampfix'\n")
    (tmp_path / "pyproject.toml").write_text('[tool.ampfix]\nextend-exclude = ["ops.py"]\n')
    by_codemod, by_ampfix = _copies(tmp_path / "codemod"), _copies(tmp_path / "ampfix")
    run = _codemod(tmp_path, "codemod.Migrate", "--target-torch", "2.2", "--unsafe-fixes", "codemod")
    assert run.returncode == 0, run.stderr
    CliRunner().invoke(app, ["rewrite", "-q", "--target-torch", "2.2", "--unsafe-fixes", str(by_ampfix)])
    assert _tree(by_codemod) == _tree(by_ampfix)
    # AMP002 needs torch 2.3: GradScaler keeps its import
    assert b"from torch.amp import autocast\nfrom torch.cuda.amp import GradScaler\n" in (by_codemod / "train.py").read_bytes()
    assert "AMP002" in run.stderr and "the target is torch 2.2" in run.stderr
    # LibCST names every file; the excluded one is skipped, as `ampfix rewrite` skips it in a folder
    assert (by_codemod / "ops.py").read_bytes() == (ROOT / "fixtures/demo/ops.py").read_bytes()
    assert "Skipped 1 files." in run.stderr


class _Rename(cst.CSTTransformer):
    """Another codemod's work, before ampfix's in the same context."""

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        return updated.with_changes(value="enabled") if updated.value == "flag" else updated


def test_it_reads_the_module_it_is_given_so_it_composes_with_other_codemods(tmp_path: Path):
    context = CodemodContext(filename=str(tmp_path / "m.py"))
    tree = cst.parse_module("import torch\nwith torch.cuda.amp.autocast(flag):\n    pass\n").visit(_Rename())
    migrate = Migrate(context)
    assert migrate.transform_module(tree).code == (
        'import torch\nwith torch.amp.autocast("cuda", enabled=enabled):\n    pass\n')
    left = Migrate(context).transform_module(cst.parse_module("import torch\nS = torch.cuda.amp.GradScaler\n"))
    assert left.code == "import torch\nS = torch.cuda.amp.GradScaler\n"
    assert context.warnings == ["2:5: AMP002 `torch.cuda.amp.GradScaler` is referenced without a call; its calls "
                                "cannot be given the device here; `S` is bound at the top of a module or class on "
                                "line 2, where another module may read it (an unsafe fix exists: --unsafe-fixes)"]
