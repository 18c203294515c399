"""What CI reads: the github and sarif formats, --exit-zero, and a --diff that `git apply` takes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from ampfix.cli.app import app
from ampfix.families import ALL_RULES

DEPRECATED = "import torch\nwith torch.cuda.amp.autocast(True):\n    pass\n"
MIGRATED = 'import torch\nwith torch.amp.autocast("cuda", enabled=True):\n    pass\n'
# One finding fixed by `rewrite`, one left (a reference to autocast without a call).
MIXED = "import torch\nscaler = torch.cuda.amp.GradScaler()\nctx = torch.cuda.amp.autocast\n"
SCHEMA = json.loads((Path(__file__).parent / "data" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Work in tmp_path with relative paths, as CI does from the checkout's root."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_github_annotations(in_tmp: Path):
    Path("pkg").mkdir()
    Path("pkg/a.py").write_text(MIXED)
    result = invoke("check", "--output-format", "github", "pkg")
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        "::error file=pkg/a.py,line=2,col=10,title=AMP002::`torch.cuda.amp.GradScaler(...)` -> "
        '`torch.amp.GradScaler(...)` with device "cuda"',
        "::error file=pkg/a.py,line=3,col=7,title=AMP001::`torch.cuda.amp.autocast` is referenced without a "
        "call; its calls cannot be given the device here; `ctx` is bound at the top of a module or class on line 3, "
        "where another module may read it; functools.partial(torch.amp.autocast, \"cuda\", "
        "dtype=torch.float16, cache_enabled=True) keeps the old defaults, and a positional call raises TypeError "
        "instead of shifting its arguments (an unsafe fix exists: --unsafe-fixes)",
    ]


def test_github_annotations_escape_what_the_workflow_syntax_reserves(in_tmp: Path):
    Path("a,b:c%.py").write_text(DEPRECATED)
    result = invoke("check", "--output-format", "github", "a,b:c%.py")
    assert result.stdout.startswith("::error file=a%2Cb%3Ac%25.py,line=2,col=6,title=AMP001::")


def test_github_annotations_after_a_rewrite_say_what_was_fixed(in_tmp: Path):
    Path("a.py").write_text(MIXED)
    result = invoke("rewrite", "--output-format", "github", "a.py")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith("::notice file=a.py,line=2,col=10,title=AMP002::fixed: ")
    assert lines[1].startswith("::error file=a.py,line=3,col=7,title=AMP001::")


def test_sarif_is_valid_against_the_published_schema_and_describes_every_rule(in_tmp: Path):
    Path("a.py").write_text(MIXED)
    Path("broken.py").write_text("import torch.cuda.amp\ndef f(:\n")
    result = invoke("check", "--output-format", "sarif", ".")
    assert result.exit_code == 2
    log = json.loads(result.stdout)
    jsonschema.validate(log, SCHEMA, cls=jsonschema.Draft7Validator)
    (run,) = log["runs"]
    assert log["version"] == "2.1.0"
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [rule.code for rule in ALL_RULES] + ["AMP900", "AMP901", "AMP902", "AMP903"]
    grad_scaler = rules[1]
    assert grad_scaler["name"] == "GradScaler"
    assert grad_scaler["properties"] == {"minimumTorch": "2.3", "fix": dict.fromkeys(
        ["torch.cuda.amp.GradScaler", "torch.cuda.amp.grad_scaler.GradScaler", "torch.cpu.amp.GradScaler",
         "torch.cpu.amp.grad_scaler.GradScaler"], "safe; references unsafe")}
    assert "torch.cuda.amp.GradScaler -> torch.amp.GradScaler(\"cuda\")" in grad_scaler["fullDescription"]["text"]
    assert [(r["ruleId"], r["level"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
             r["locations"][0]["physicalLocation"]["region"]) for r in run["results"]] == [
        ("AMP002", "error", "a.py", {"startLine": 2, "startColumn": 10}),
        ("AMP001", "error", "a.py", {"startLine": 3, "startColumn": 7}),
        ("AMP901", "error", "broken.py", {"startLine": 2, "startColumn": 7}),
    ]
    for sarif_result in run["results"]:
        assert rules[sarif_result["ruleIndex"]]["id"] == sarif_result["ruleId"]
    assert run["columnKind"] == "unicodeCodePoints"


def test_sarif_of_a_clean_tree_is_valid_with_no_results(in_tmp: Path):
    Path("a.py").write_text(MIGRATED)
    result = invoke("check", "--output-format", "sarif", "a.py")
    assert result.exit_code == 0
    log = json.loads(result.stdout)
    jsonschema.validate(log, SCHEMA, cls=jsonschema.Draft7Validator)
    assert log["runs"][0]["results"] == []


def test_the_schema_check_can_fail():
    """The validator really reads the schema: a log without `runs` is refused."""
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"version": "2.1.0"}, SCHEMA, cls=jsonschema.Draft7Validator)


def test_exit_zero(in_tmp: Path):
    Path("a.py").write_text(DEPRECATED)
    check = invoke("check", "--exit-zero", "a.py")
    assert check.exit_code == 0 and "AMP001" in check.stdout
    rewrite = invoke("rewrite", "--exit-zero", "a.py")
    assert rewrite.exit_code == 0 and Path("a.py").read_text() == MIGRATED
    Path("b.py").write_bytes(b"import torch.cuda.amp\ndef f(:\n")
    assert invoke("check", "--exit-zero", "b.py").exit_code == 2  # an error is still an error


def _git(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=True)


def test_diff_applies_with_git_apply(in_tmp: Path):
    """Including what a plain difflib diff gets wrong: no newline at the end, CRLF, a form feed."""
    files = {
        "pkg/plain.py": DEPRECATED.encode(),
        "pkg/no_newline.py": b"import torch\nx = torch.cuda.amp.GradScaler()",
        "pkg/crlf.py": b"import torch\r\nx = torch.cuda.amp.GradScaler()\r\n",
        "pkg/form_feed.py": b"import torch\n\x0c\nx = torch.cuda.amp.GradScaler()  # \x0c\n",
    }
    for name, data in files.items():
        Path(name).parent.mkdir(exist_ok=True)
        Path(name).write_bytes(data)
    _git("init", "-q", cwd=in_tmp)
    expected = {}
    copy = in_tmp / "copy"
    for name in files:
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_bytes(files[name])
    assert invoke("rewrite", "copy/pkg").exit_code == 1
    for name in files:
        expected[name] = (copy / name).read_bytes()
    assert expected["pkg/no_newline.py"] == b'import torch\nx = torch.amp.GradScaler("cuda")'

    result = invoke("rewrite", "--diff", "pkg")
    assert result.exit_code == 1
    Path("changes.patch").write_bytes(result.stdout_bytes)  # (.stdout turns CRLF into LF)
    assert {name: Path(name).read_bytes() for name in files} == files  # --diff wrote nothing
    subprocess.run(["git", "apply", "--check", "changes.patch"], cwd=in_tmp, check=True)
    subprocess.run(["git", "apply", "changes.patch"], cwd=in_tmp, check=True)
    assert {name: Path(name).read_bytes() for name in files} == expected
    assert "\\ No newline at end of file" in result.stdout


def test_json_and_diff_keep_their_streams(in_tmp: Path):
    Path("a.py").write_text(DEPRECATED)
    result = CliRunner().invoke(app, ["rewrite", "--diff", "--output-format", "json", "a.py"])
    assert result.stdout.startswith("--- a/a.py\n+++ b/a.py\n")
    assert json.loads(result.stderr)[0]["code"] == "AMP001"
    assert os.path.exists("a.py") and Path("a.py").read_text() == DEPRECATED


# Line 4's annotation follows its moved import under its own word (no text of its own changes).
FOLLOWS = ("from typing import Optional\n\nfrom torch.cuda.amp import GradScaler\n\n\n"
           "def make(scaler: Optional[GradScaler]):\n    return GradScaler()\n")


def test_every_format_says_which_uses_follow_their_import(in_tmp: Path):
    Path("a.py").write_text(FOLLOWS)
    rows = json.loads(invoke("check", "--output-format", "json", "a.py").stdout)
    assert [(row["line"], row["fixed"], row["follows"]) for row in rows] == [(3, False, False), (6, False, True),
                                                                              (7, False, False)]
    github = invoke("rewrite", "--output-format", "github", "a.py").stdout.splitlines()
    assert [line.split("::")[2].split(":")[0] for line in github] == ["fixed", "followed its import", "fixed"]
    assert github[1] == ("::notice file=a.py,line=6,col=27,title=AMP002::followed its import: "
                         "`torch.cuda.amp.GradScaler` -> `torch.amp.GradScaler` (type position)")
    Path("a.py").write_text(FOLLOWS)
    log = json.loads(invoke("rewrite", "--output-format", "sarif", "a.py").stdout)
    results = log["runs"][0]["results"]
    assert [(r["properties"]["follows"], r["message"]["text"].split(":")[0]) for r in results] == [
        (False, "fixed"), (True, "followed its import"), (False, "fixed")]
    jsonschema.validate(log, SCHEMA)


def test_github_and_sarif_under_diff_say_what_a_rewrite_would_do(in_tmp: Path):
    Path("a.py").write_text(FOLLOWS)
    github = invoke("rewrite", "--diff", "--output-format", "github", "a.py").stderr.splitlines()
    assert [line.split("::")[2].split(":")[0] for line in github] == ["would fix", "would follow its import",
                                                                      "would fix"]
    log = json.loads(invoke("rewrite", "--diff", "--output-format", "sarif", "a.py").stderr)
    assert [r["message"]["text"].split(":")[0] for r in log["runs"][0]["results"]] == [
        "would fix", "would follow its import", "would fix"]
    assert Path("a.py").read_text() == FOLLOWS  # a dry run


def test_a_use_left_by_a_blocked_import_says_left_once(in_tmp: Path):
    Path("a.py").write_text("from torch.cuda import amp\n\nwith amp.autocast():\n    pass\nmodules = [amp]\n")
    lines = invoke("rewrite", "a.py").stdout.splitlines()
    assert "a.py:3:6: AMP001 `torch.cuda.amp.autocast` left: `amp` is also used on line 5 in a way that " \
           'cannot be rewritten; suggested: torch.amp.autocast("cuda", enabled=..., dtype=..., ' \
           'cache_enabled=...)' in lines
