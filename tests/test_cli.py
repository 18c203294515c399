"""The command line as users and CI meet it: exit codes, what is written, what is printed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ampfix.cli.app import app

DEPRECATED = "import torch\nwith torch.cuda.amp.autocast(True):\n    pass\n"
MIGRATED = 'import torch\nwith torch.amp.autocast("cuda", enabled=True):\n    pass\n'
LEFT_ONLY = "import torch\nctx = torch.cuda.amp.autocast\n"


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "old.py").write_text(DEPRECATED)
    (tmp_path / "pkg" / "clean.py").write_text("import torch\nx = torch.zeros(1)\n")
    return tmp_path


def test_check_clean_tree_exits_0(tmp_path: Path):
    (tmp_path / "a.py").write_text(MIGRATED)
    result = invoke("check", str(tmp_path))
    assert result.exit_code == 0
    assert result.stdout == "All checks passed!\n"  # as ruff says it


def test_check_reports_findings_exits_1_and_writes_nothing(tree: Path):
    result = invoke("check", str(tree))
    assert result.exit_code == 1
    path = tree / "pkg" / "old.py"
    assert result.stdout.splitlines()[0] == (
        f"{path}:2:6: AMP001 [*] `torch.cuda.amp.autocast(...)` -> `torch.amp.autocast(...)` "
        'with device "cuda", positional arguments named enabled'
    )
    assert path.read_text() == DEPRECATED


def test_check_json_shape(tree: Path):
    result = invoke("check", "--output-format", "json", str(tree))
    assert result.exit_code == 1
    rows = json.loads(result.stdout)
    assert rows == [
        {
            "path": str(tree / "pkg" / "old.py"),
            "line": 2,
            "col": 6,
            "code": "AMP001",
            "message": '`torch.cuda.amp.autocast(...)` -> `torch.amp.autocast(...)` with device "cuda", '
            "positional arguments named enabled",
            "fixable": True,
            "unsafe": False,
            "fixed": False,
            "follows": False,
            "suggestion": 'torch.amp.autocast("cuda", enabled=..., dtype=..., cache_enabled=...)',
            "target_torch": None,  # no flag, no key, no project metadata: the newest
            "target_source": None,
        }
    ]


def test_rewrite_changes_files_and_exits_1_then_0(tree: Path):
    first = invoke("rewrite", str(tree))
    assert first.exit_code == 1
    assert (tree / "pkg" / "old.py").read_text() == MIGRATED
    second = invoke("rewrite", str(tree))
    assert second.exit_code == 0
    assert second.stdout == "rewrote 0 files (0 fixes); 0 findings left.\n"


def test_rewrite_exits_1_when_findings_are_left(tmp_path: Path):
    (tmp_path / "a.py").write_text(LEFT_ONLY)
    result = invoke("rewrite", str(tmp_path))
    assert result.exit_code == 1
    assert (tmp_path / "a.py").read_text() == LEFT_ONLY
    assert "AMP001 left: `torch.cuda.amp.autocast` is referenced without a call" in result.stdout


def test_diff_prints_a_diff_and_writes_nothing(tree: Path):
    path = tree / "pkg" / "old.py"
    before = path.stat().st_mtime_ns
    result = invoke("rewrite", "--diff", str(tree))
    assert result.exit_code == 1
    assert result.stdout == (
        f"--- a/{path}\n+++ b/{path}\n@@ -1,3 +1,3 @@\n import torch\n"
        "-with torch.cuda.amp.autocast(True):\n"
        '+with torch.amp.autocast("cuda", enabled=True):\n'
        "     pass\n"
    )
    assert path.read_text() == DEPRECATED
    assert path.stat().st_mtime_ns == before


def test_unparsable_file_is_reported_and_the_others_still_rewritten(tree: Path):
    bad = tree / "pkg" / "broken.py"
    bad.write_bytes(b"def f(:\n    amp = 1\n")
    result = invoke("rewrite", str(tree))
    assert result.exit_code == 2
    assert bad.read_bytes() == b"def f(:\n    amp = 1\n"
    assert (tree / "pkg" / "old.py").read_text() == MIGRATED
    assert f"{bad}:1:7: AMP901 left: cannot parse: invalid syntax" in result.stdout


def test_file_not_valid_in_its_encoding_is_left_untouched(tmp_path: Path):
    bad = tmp_path / "latin.py"
    data = b"import torch\n# caf\xe9\nwith torch.cuda.amp.autocast():\n    pass\n"
    bad.write_bytes(data)
    result = invoke("check", str(tmp_path))
    assert result.exit_code == 2
    assert "AMP902" in result.stdout and "not valid in its declared encoding" in result.stdout
    invoke("rewrite", str(tmp_path))
    assert bad.read_bytes() == data


def test_missing_path_is_an_error(tmp_path: Path):
    result = invoke("check", str(tmp_path / "nope.py"))
    assert result.exit_code == 2
    assert "AMP902" in result.stdout


def test_crlf_and_bom_are_kept_byte_for_byte(tmp_path: Path):
    path = tmp_path / "win.py"
    path.write_bytes(b"\xef\xbb\xbfimport torch\r\n\r\nwith torch.cuda.amp.autocast():  # x\r\n    pass\r\n")
    assert invoke("rewrite", str(path)).exit_code == 1
    assert path.read_bytes() == (
        b'\xef\xbb\xbfimport torch\r\n\r\nwith torch.amp.autocast("cuda"):  # x\r\n    pass\r\n'
    )


def test_coding_cookie_file_is_rewritten_in_its_encoding(tmp_path: Path):
    path = tmp_path / "latin.py"
    path.write_bytes(b"# -*- coding: latin-1 -*-\nimport torch\ns = 'caf\xe9'\nx = torch.cuda.amp.GradScaler()\n")
    assert invoke("rewrite", str(path)).exit_code == 1
    assert path.read_bytes() == (
        b"# -*- coding: latin-1 -*-\nimport torch\ns = 'caf\xe9'\nx = torch.amp.GradScaler('cuda')\n"  # the file's quotes
    )


def test_unchanged_file_is_not_written(tmp_path: Path):
    path = tmp_path / "a.py"
    path.write_text(LEFT_ONLY)
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    invoke("rewrite", str(tmp_path))
    assert path.stat().st_mtime_ns == 1_000_000_000


def test_write_keeps_mode_and_goes_through_a_symlink(tmp_path: Path):
    real = tmp_path / "real.py"
    real.write_text(DEPRECATED)
    real.chmod(0o751)
    link = tmp_path / "link.py"
    link.symlink_to(real)
    assert invoke("rewrite", str(link)).exit_code == 1
    assert link.is_symlink()
    assert real.read_text() == MIGRATED
    assert oct(real.stat().st_mode & 0o777) == oct(0o751)


def test_folders_skip_virtualenvs_and_site_packages(tmp_path: Path):
    venv = tmp_path / "env"
    (venv / "lib" / "site-packages").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr\n")
    (venv / "lib" / "site-packages" / "dep.py").write_text(DEPRECATED)
    (tmp_path / "site-packages").mkdir()
    (tmp_path / "site-packages" / "dep.py").write_text(DEPRECATED)
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "hook.py").write_text(DEPRECATED)
    (tmp_path / "notes.txt").write_text(DEPRECATED)
    result = invoke("check", str(tmp_path))
    assert result.exit_code == 0


def test_unsafe_fixes_flag(tmp_path: Path):
    path = tmp_path / "a.py"
    path.write_text("import torch\nclass S(torch.cuda.amp.GradScaler):\n    pass\n")
    assert invoke("rewrite", str(path)).exit_code == 1
    assert "torch.cuda.amp.GradScaler" in path.read_text()
    assert invoke("rewrite", "--unsafe-fixes", str(path)).exit_code == 1
    assert path.read_text() == "import torch\nclass S(torch.amp.GradScaler):\n    pass\n"


def test_target_torch_holds_back_newer_rules(tmp_path: Path):
    path = tmp_path / "a.py"
    source = "import torch\ns = torch.cuda.amp.GradScaler()\nwith torch.cuda.amp.autocast():\n    pass\n"
    path.write_text(source)
    result = invoke("rewrite", "--target-torch", "2.2", str(path))
    assert result.exit_code == 1
    assert path.read_text() == (
        'import torch\ns = torch.cuda.amp.GradScaler()\nwith torch.amp.autocast("cuda"):\n    pass\n'
    )
    assert "needs torch >= 2.3; the target is torch 2.2" in result.stdout


def test_bad_target_torch_is_a_usage_error(tmp_path: Path):
    assert invoke("check", "--target-torch", "two", str(tmp_path)).exit_code == 2


def test_rules_table_lists_every_code():
    result = invoke("rules")
    assert result.exit_code == 0
    for code in ("AMP001", "AMP002", "AMP003", "AMP004", "AMP005", "AMP006", "AMP010", "AMP011"):
        assert code in result.stdout
    rows = json.loads(invoke("rules", "--output-format", "json").stdout)
    assert {"code": "AMP006", "title": 'torch.amp with a literal "cuda" (device targets only)',
            "old": "torch.autocast", "new": "torch.autocast(<the device target>)", "min_torch": "1.10",
            "fix": "safe; with --device cpu|auto or --device-expr only", "held_back": False} in rows
    assert {"code": "AMP002", "title": "GradScaler", "old": "torch.cuda.amp.GradScaler",
            "new": 'torch.amp.GradScaler("cuda")', "min_torch": "2.3", "fix": "safe; references unsafe",
            "held_back": False} in rows


def test_rules_fix_column_tells_calls_from_references():
    """Calls and type positions are safe; a reference without a call is an unsafe fix (partial)
    for GradScaler / custom_fwd / custom_bwd and autocast (with the old defaults), report-only for _cast; no
    twin: report only."""
    fix = {(row["code"], row["old"]): row["fix"] for row in json.loads(invoke("rules", "--output-format", "json").stdout)}
    assert fix["AMP001", "torch.cuda.amp.autocast"] == "safe; references unsafe"
    assert fix["AMP002", "torch.cpu.amp.GradScaler"] == "safe; references unsafe"
    assert fix["AMP003", "torch.cuda.amp.custom_fwd"] == "safe; references unsafe"
    assert fix["AMP004", "torch.cuda.amp.custom_bwd"] == "safe; references unsafe"
    assert fix["AMP005", "torch.cuda.amp.autocast_mode._cast"] == "safe; references report only"
    assert fix["AMP010", "torch.cuda.amp.grad_scaler.OptState"] == "safe"
    assert fix["AMP010", "torch.cuda.amp"] == "safe; as a value report only"
    assert fix["AMP011", "torch.cuda.amp.common"] == "report only"
    text = invoke("rules").stdout
    assert "AMP001  torch.cuda.amp.autocast                   torch.amp.autocast(\"cuda\")                1.10   safe; refs unsafe\n" in text
    assert "AMP005  torch.cuda.amp.autocast_mode._cast        torch.amp.autocast_mode._cast(\"cuda\")     2.4    safe; refs report\n" in text
    assert text.rstrip().endswith("what it fixes, what it leaves and why, examples.")
    # What the column says is what rewrite does: the references of each kind, in one file.
    source = ("import torch\nA = torch.cuda.amp.autocast\nS = torch.cuda.amp.GradScaler\n"
              "F = torch.cuda.amp.custom_fwd\n")
    from ampfix.engine import fix_source
    from ampfix.core.options import Options

    safe, unsafe = fix_source(source), fix_source(source, Options(unsafe_fixes=True))
    assert [f.fixed for f in safe.findings] == [False, False, False]
    assert [(f.code, f.fixed) for f in unsafe.findings] == [("AMP001", True), ("AMP002", True), ("AMP003", True)]


def test_the_rules_table_fits_120_columns_and_wraps_a_long_name_at_a_dot():
    text = invoke("rules").stdout
    assert max(len(line) for line in text.splitlines()) <= 120
    assert ("AMP010  torch.cuda.amp.grad_scaler.               torch.amp.grad_scaler.                    2.3    safe\n"
            "        _refresh_per_optimizer_state              _refresh_per_optimizer_state\n") in text


AMP011_PAGE = """AMP011: no torch.amp twin

minimum torch: - (nothing in torch to migrate to, or no torch API of its own)

old                                                 new        fix
--------------------------------------------------  ---------  -----------
torch.cuda.amp.amp_definitely_not_available         (no twin)  report only
torch.cuda.amp.common                               (no twin)  report only
torch.cuda.amp.common.amp_definitely_not_available  (no twin)  report only

report only: reported, never rewritten: nothing in torch takes its place

example 1:
    from torch.cuda.amp.common import amp_definitely_not_available
    ok = not amp_definitely_not_available()
is left and reported:
    1:35: AMP011 `torch.cuda.amp.common.amp_definitely_not_available` import left:
      `torch.cuda.amp.common.amp_definitely_not_available` has no torch.amp twin

example 2:
    import torch
    with torch.cuda.amp.scale_loss(loss, opt) as scaled:
        pass
is left and reported:
    2:6: AMP011 `torch.cuda.amp.scale_loss` is not a name torch defines; there is nothing to migrate it to
"""


def test_a_rules_page_names_its_fix_its_minimum_torch_and_its_examples_with_the_reasons_left():
    assert invoke("rule", "AMP011").stdout == AMP011_PAGE
    assert invoke("rules", "amp011").stdout == AMP011_PAGE  # `ampfix rules CODE` is the same page
    page = invoke("rule", "AMP004").stdout
    assert page.startswith("AMP004: custom_bwd\n\nminimum torch: 2.4 (its fix runs on torch >= 2.4; at an older "
                           "--target-torch it is reported, not rewritten)\n")
    assert ("refs unsafe: a use without a call (`f = torch.cuda.amp.custom_bwd`) is rewritten to functools.partial "
            "only\n  with --unsafe-fixes (the object is not the same)\n") in page
    assert page.endswith('becomes:\n    from torch.amp import custom_bwd\n    @custom_bwd(device_type="cuda")\n'
                         "    def backward(ctx, g): ...\n")


def test_every_rule_has_a_page_holding_each_of_its_examples():
    from ampfix.families import ALL_RULES

    for rule in ALL_RULES:
        result = invoke("rule", rule.code)
        assert result.exit_code == 0, rule.code
        for example in rule.examples:
            assert "".join(f"    {line}".rstrip() + "\n" for line in example.before.splitlines()) in result.stdout
            if example.reported is not None:  # a left example says why, in the engine's words
                assert f": {example.reported} " in result.stdout


def test_an_unknown_rule_is_an_error():
    result = invoke("rule", "AMP999")
    assert result.exit_code == 2
    assert result.stderr == "ampfix: error: no rule 'AMP999'; `ampfix rules` lists them\n"


def test_left_findings_carry_a_suggestion_and_unsafe_fixes_say_so(tmp_path: Path):
    path = tmp_path / "a.py"
    path.write_text("import torch\nS = torch.cuda.amp.GradScaler\nA = torch.cuda.amp.autocast\n")
    left = invoke("rewrite", str(path))
    assert left.stdout.splitlines()[:2] == [
        f"{path}:2:5: AMP002 left: `torch.cuda.amp.GradScaler` is referenced without a call; its calls cannot "
        "be given the device here; `S` is bound at the top of a module or class on line 2, where another module "
        "may read it (an unsafe fix exists: --unsafe-fixes); suggested: "
        'functools.partial(torch.amp.GradScaler, "cuda")',
        f"{path}:3:5: AMP001 left: `torch.cuda.amp.autocast` is referenced without a call; its calls cannot "
        "be given the device here; `A` is bound at the top of a module or class on line 3, where another module "
        'may read it; functools.partial(torch.amp.autocast, "cuda", dtype=torch.float16, '
        "cache_enabled=True) keeps the old defaults, and a positional call raises TypeError instead of shifting "
        "its arguments (an unsafe fix exists: --unsafe-fixes)",  # the partial said once: no "suggested:" repeating it
    ]
    fixed = invoke("rewrite", "--unsafe-fixes", str(path))
    assert fixed.stdout.splitlines()[0].startswith(f"{path}:2:5: AMP002 fixed (unsafe): ")
    assert fixed.stdout.splitlines()[1].startswith(f"{path}:3:5: AMP001 fixed (unsafe): ")
    assert path.read_text() == (
        'import torch\nimport functools\nS = functools.partial(torch.amp.GradScaler, "cuda")\n'
        'A = functools.partial(torch.amp.autocast, "cuda", dtype=torch.float16, cache_enabled=True)\n'
    )
