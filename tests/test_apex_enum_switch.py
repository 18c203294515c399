"""The switch between apex.amp and the project's own native path on an enum's members, across modules
(`ampfix.families.apex.rewrite.enum_switch`, vissl's `AmpType`): fixtures/projects/apex_enum_switch, a task module
(the set-up, the checkpoint), a step module (autocast, backward, step) and a clipping module that uses no apex but
compares `AmpType.PYTORCH` (so the apex value must unscale there too). Rewritten together under --unsafe-fixes, or
none; the default mode reports the unsafe fix."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from ampfix.cli.app import app

PROJECT = Path(__file__).resolve().parent.parent / "fixtures" / "projects" / "apex_enum_switch"
EXPECTED = PROJECT.parent / "apex_enum_switch.expected"
REWRITTEN = ("pkg/clip.py", "pkg/step.py", "pkg/task.py")
WHERE = ("the switch on `AmpType` across the project's modules (`AmpType.PYTORCH` native, `AmpType.APEX` "
         "apex.amp)")
SAID = (f"{WHERE}: `AmpType.APEX` now takes the path `AmpType.PYTORCH` took (torch.amp's autocast and GradScaler; "
        "apex.amp is gone, so it could only fail): each `X == AmpType.PYTORCH` of the project's modules reads "
        "`X in (AmpType.PYTORCH, AmpType.APEX)`, and the apex branches are removed")
LOST = ("`AmpType.APEX` now runs torch.amp's autocast and a GradScaler with torch's defaults, not apex's opt_level "
        "(O2's float16 model and float32 master weights have no native twin) nor its loss scaler's settings")
STEP_LOST = (f"{LOST}; the apex branch on line 18 is removed; where it took the `else` value of the conditional "
             "expression on line 13, it takes the first, as the native value did; where it ran the `else` of the "
             "`if` on line 29, it runs that `if`'s body, as the native value did")
TASK_LOST = (f"{LOST}; the apex branch on line 19 is removed; the apex branch on line 30 is removed (initialize "
             "there was given `**self.amp_args`: none of it applies now)")
LOAD = ("pkg/task.py:38:21: AMP104 fixed (unsafe): `apex.amp.load_state_dict(state[\"amp\"])` -> "
        "`self.amp_grad_scaler.load_state_dict(grad_scaler_state(state[\"amp\"]))`: into the native value's scaler, "
        "through `grad_scaler_state` (added at module level), which also reads the format apex.amp.state_dict() "
        "wrote ({'loss_scaler0': {'loss_scale', 'unskipped'}}): a checkpoint an apex run saved still resumes")


def _project(tmp_path: Path, monkeypatch, name: str = "project") -> Path:
    root = tmp_path / name
    shutil.copytree(PROJECT, root)
    (root / ".git").mkdir()
    monkeypatch.chdir(root)
    return root


def _unchanged(root: Path, *except_for: str) -> None:
    for path in sorted(PROJECT.rglob("*.py")):
        relative = path.relative_to(PROJECT).as_posix()
        if relative not in except_for:
            assert (root / relative).read_bytes() == path.read_bytes(), relative


def _findings(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("pkg/")]


def test_every_module_that_reads_the_members_is_rewritten_together(tmp_path: Path, monkeypatch) -> None:
    """The apex member takes the native member's path in the three modules (the clipping module unscales for it
    too), the apex branches and imports go, the checkpoint loads through the helper; a second run changes nothing."""
    root = _project(tmp_path, monkeypatch)
    first = CliRunner().invoke(app, ["rewrite", "--unsafe-fixes", "."])
    assert first.exit_code == 1, first.stdout  # files changed
    assert _findings(first.stdout) == [
        f"pkg/clip.py:7:8: AMP109 fixed (unsafe): {SAID}; {LOST}",
        f"pkg/step.py:19:14: AMP102 fixed (unsafe): {SAID}; {STEP_LOST}",
        f"pkg/task.py:31:42: AMP101 fixed (unsafe): {SAID}; {TASK_LOST}",
        LOAD]
    for name in REWRITTEN:
        assert (root / name).read_bytes() == (EXPECTED / name).read_bytes(), name
    _unchanged(root, *REWRITTEN)
    again = CliRunner().invoke(app, ["rewrite", "--unsafe-fixes", "."])
    assert again.exit_code == 0, again.stdout
    assert _findings(again.stdout) == []
    for name in REWRITTEN:
        assert (root / name).read_bytes() == (EXPECTED / name).read_bytes(), name


def test_the_default_mode_reports_the_unsafe_fix_and_changes_nothing(tmp_path: Path, monkeypatch) -> None:
    root = _project(tmp_path, monkeypatch)
    result = CliRunner().invoke(app, ["rewrite", "."])
    assert result.exit_code == 1, result.stdout  # findings left, none fixed
    initialize, scale_loss = (next(line for line in _findings(result.stdout) if f" {code} " in line)
                              for code in ("AMP101", "AMP102"))
    assert scale_loss == (
        "pkg/step.py:19:14: AMP102 left: `apex.amp.scale_loss` was removed from apex in 2025; not rewritten: "
        f"{WHERE}: {STEP_LOST} (an unsafe fix exists: --unsafe-fixes); suggested: scaler.scale(loss).backward(); "
        "scaler.step(optimizer); scaler.update()")
    assert f"; not rewritten: {WHERE}: {TASK_LOST} (an unsafe fix exists: --unsafe-fixes); suggested:" in initialize
    assert not any(line.startswith("pkg/clip.py") for line in _findings(result.stdout))
    _unchanged(root)


def test_a_module_given_without_the_others_is_left_naming_them(tmp_path: Path, monkeypatch) -> None:
    """A pre-commit hook given the step module alone, or the two apex modules without the clipping one: nothing
    is rewritten (the clipping module would still skip the unscale for the apex value)."""
    root = _project(tmp_path, monkeypatch)
    alone = CliRunner().invoke(app, ["rewrite", "--unsafe-fixes", "pkg/step.py"])
    assert alone.exit_code == 1
    (scale_loss,) = _findings(alone.stdout)
    assert (f"; {WHERE}: every module that reads its members must be rewritten in the same run: pkg/clip.py, "
            "pkg/task.py (give this run every such module, or the project's folder); suggested:") in scale_loss
    both = CliRunner().invoke(app, ["rewrite", "--unsafe-fixes", "pkg/step.py", "pkg/task.py"])
    assert [line.split(" ")[1] for line in _findings(both.stdout)] == ["AMP102", "AMP101", "AMP104"]
    assert all(" left: " in line for line in _findings(both.stdout))
    assert (f"; {WHERE}: every module that reads its members must be rewritten in the same run: pkg/clip.py "
            "(give this run") in _findings(both.stdout)[0]
    _unchanged(root)


def test_a_module_that_reads_a_member_otherwise_leaves_every_module(tmp_path: Path, monkeypatch) -> None:
    """`task.amp_type is AmpType.PYTORCH` in the clipping module: its part is not planned, so no module is
    rewritten, each saying where."""
    root = _project(tmp_path, monkeypatch)
    clip = root / "pkg" / "clip.py"
    clip.write_text(clip.read_text().replace("task.amp_type == AmpType.PYTORCH", "task.amp_type is AmpType.PYTORCH"))
    result = CliRunner().invoke(app, ["rewrite", "--unsafe-fixes", "."])
    assert result.exit_code == 1
    findings = _findings(result.stdout)
    assert findings[0] == (f"pkg/clip.py:7:25: AMP109 left: not rewritten: {WHERE}: line 7 reads `AmpType.PYTORCH` "
                           "otherwise than as `X == AmpType.PYTORCH`")
    assert [line.split(" ")[1:3] for line in findings[1:]] == [["AMP102", "left:"], ["AMP101", "left:"],
                                                                ["AMP104", "left:"]]
    assert f"; {WHERE}: the part in pkg/clip.py is not rewritten (its findings say why); suggested:" in findings[1]
    _unchanged(root, "pkg/clip.py")


def test_a_module_rewritten_already_is_known_by_its_shape(tmp_path: Path, monkeypatch) -> None:
    """The clipping module written already (by another worker of the run, or by hand): the two apex modules, given
    alone, are rewritten to match."""
    root = _project(tmp_path, monkeypatch)
    shutil.copy(EXPECTED / "pkg" / "clip.py", root / "pkg" / "clip.py")
    result = CliRunner().invoke(app, ["rewrite", "--unsafe-fixes", "pkg/task.py", "pkg/step.py"])
    assert result.exit_code == 1, result.stdout
    for name in REWRITTEN:
        assert (root / name).read_bytes() == (EXPECTED / name).read_bytes(), name


def _verify(tmp_path: Path, original: Path, rewritten: Path) -> dict:
    report_path = tmp_path / "verify.json"
    subprocess.run([sys.executable, "-m", "ampfix", "verify", str(original / "run.py"), "--rewritten",
                    str(rewritten / "run.py"), "--json", str(report_path)], capture_output=True, text=True,
                   timeout=300, cwd=tmp_path)
    return json.loads(report_path.read_text())


def test_the_rewrite_trains_as_the_apex_original_and_the_clipping_module_is_needed(tmp_path: Path,
                                                                                    monkeypatch) -> None:
    """run.py trains three steps with `AmpType.APEX` and clips each step's gradients: the rewritten project against
    the apex original (the runner's emulation) is equivalent, the 3 losses bit for bit, each clip on unscaled
    gradients; with the clipping module left as it was (the apex value skipping the unscale), it is not."""
    original = tmp_path / "original"
    shutil.copytree(PROJECT, original)
    root = _project(tmp_path, monkeypatch, "rewritten")
    assert CliRunner().invoke(app, ["rewrite", "--unsafe-fixes", "."]).exit_code == 1
    report = _verify(tmp_path, original, root)
    assert report["equivalent"] is True and report["first_difference"] is None
    assert len(report["original"]["losses"]) == 3 and report["original"]["losses"] == report["rewritten"]["losses"]
    assert report["rewritten"]["scaler"] == {"scale": 3, "unscale": 3, "step": 3, "update": 3, "skipped_steps": 0}
    shutil.copy(PROJECT / "pkg" / "clip.py", root / "pkg" / "clip.py")
    report = _verify(tmp_path, original, root)
    assert report["equivalent"] is False
    assert report["first_difference"] == ("step 0: original clip_grad_norm_ max_norm=1.0 at clip.py:9; rewrite "
                                          "clip_grad_norm_ max_norm=1.0 on gradients still scaled by 65536.0 at "
                                          "clip.py:9")


def test_a_third_member_compared_leaves_every_module(tmp_path: Path, monkeypatch) -> None:
    """`AmpType.BFLOAT16` compared in the clipping module: which member is native is not one, nothing is rewritten."""
    root = _project(tmp_path, monkeypatch)
    clip = root / "pkg" / "clip.py"
    clip.write_text(clip.read_text().replace(
        "    torch.nn.utils", "    if task.amp_type == AmpType.BFLOAT16:\n        return\n    torch.nn.utils"))
    result = CliRunner().invoke(app, ["rewrite", "--unsafe-fixes", "."])
    assert result.exit_code == 1
    findings = _findings(result.stdout)
    assert [line.split(" ")[1:3] for line in findings] == [["AMP102", "left:"], ["AMP101", "left:"],
                                                           ["AMP104", "left:"]]
    assert ("; apex.amp is used under `AmpType.APEX` tests, and the project's modules compare `AmpType` to other "
            "members than one native one: `AmpType.PYTORCH` (this module:13), `AmpType.BFLOAT16` (pkg/clip.py:9); "
            "suggested:") in findings[0]
    _unchanged(root, "pkg/clip.py")


def test_an_if_on_the_apex_member_with_an_else_leaves_every_module(tmp_path: Path, monkeypatch) -> None:
    """`if task.amp_type == AmpType.APEX: ... else: <the scaler's step>`: the native value ran the `else`, which the
    switch does not move out of it; the step module says why, the others name it."""
    root = _project(tmp_path, monkeypatch)
    step = root / "pkg" / "step.py"
    step.write_text(step.read_text().replace(
        "    if task.amp_type == AmpType.PYTORCH:\n        task.amp_grad_scaler.step(task.optimizer)\n"
        "        task.amp_grad_scaler.update()\n    else:\n        task.optimizer.step()\n",
        "    if task.amp_type == AmpType.APEX:\n        task.optimizer.step()\n    else:\n"
        "        task.amp_grad_scaler.step(task.optimizer)\n        task.amp_grad_scaler.update()\n"))
    result = CliRunner().invoke(app, ["rewrite", "--unsafe-fixes", "."])
    assert result.exit_code == 1
    clip, scale_loss, initialize, _ = _findings(result.stdout)
    assert clip == f"pkg/clip.py:7:25: AMP109 left: not rewritten: {WHERE}: the part in pkg/step.py is not rewritten " \
        "(its findings say why)"
    assert (f"; {WHERE}: the `if` on line 29 that tests `AmpType.APEX` has an `else`, and is neither followed by an "
            "`elif` on the native member nor a load of apex's state beside the native scaler's; suggested:") \
        in scale_loss
    assert f"; {WHERE}: the part in pkg/step.py is not rewritten (its findings say why); suggested:" in initialize
    _unchanged(root, "pkg/step.py")
