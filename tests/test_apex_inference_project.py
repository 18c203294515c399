"""initialize for inference with its model handed on, in a project whose training module scales losses
(TimeSeriesPredictionPlatform's inference.py): left, the reason naming the hand-off a person must migrate, before
the project's other modules (fixtures/projects/apex_inference_handed_on)."""

from __future__ import annotations

import shutil
from pathlib import Path

from typer.testing import CliRunner

from ampfix.cli.app import app

PROJECT = Path(__file__).resolve().parent.parent / "fixtures" / "projects" / "apex_inference_handed_on"


def test_the_model_handed_to_an_evaluator_is_the_reason_given(tmp_path: Path, monkeypatch) -> None:
    root = tmp_path / "project"
    shutil.copytree(PROJECT, root)
    (root / ".git").mkdir()
    monkeypatch.chdir(root)
    for flags in ([], ["--unsafe-fixes"]):
        result = CliRunner().invoke(app, ["rewrite", *flags, "."])
        assert result.exit_code == 1
        (initialize,) = [line for line in result.stdout.splitlines()
                         if line.startswith("inference/inference.py:") and " AMP101 " in line]
        assert "; not rewritten: the model `model` is handed on or kept on line 14 (`evaluator.predict(model)`): what " \
            "runs it there is not put under autocast; " in initialize, initialize
        inference = "inference/inference.py"
        assert (root / inference).read_bytes() == (PROJECT / inference).read_bytes()


def test_handed_on_in_a_whole_statement_it_is_an_unsafe_fix_naming_the_modules_that_scale_losses(
        tmp_path: Path, monkeypatch) -> None:
    """TimeSeriesPredictionPlatform's own shape (fixtures/unsafe_fixes/apex_inference_model_handed_on) beside the
    training module: where both ran in one process, apex's loss scale started again at this initialize; the note says
    so, and --unsafe-fixes rewrites the module as the fixture's output."""
    fixture = PROJECT.parent.parent / "unsafe_fixes" / "apex_inference_model_handed_on"
    root = tmp_path / "project"
    shutil.copytree(PROJECT, root)
    (root / ".git").mkdir()
    inference = root / "inference" / "inference.py"
    inference.write_bytes(fixture.with_suffix(".in.py").read_bytes())
    monkeypatch.chdir(root)
    note = ("; other modules of the project scale losses (apex.amp.scale_loss at training/trainer.py:9): where one "
            "runs in the same process after this initialize, apex made its loss scalers anew here (the loss scale back "
            "to its start); without this initialize, that module's scale goes on (run as an entry point of its own, "
            "nothing changes)")
    default = CliRunner().invoke(app, ["rewrite", "."])
    (left,) = [line for line in default.stdout.splitlines()
               if line.startswith("inference/inference.py:24:") and " AMP101 left: " in line]
    assert default.exit_code == 1
    assert f"{note} (an unsafe fix exists: --unsafe-fixes); suggested: " in left, left
    assert inference.read_bytes() == fixture.with_suffix(".in.py").read_bytes()
    unsafe = CliRunner().invoke(app, ["rewrite", "--unsafe-fixes", "."])
    assert unsafe.exit_code == 1, unsafe.stdout  # files changed
    (fixed,) = [line for line in unsafe.stdout.splitlines()
                if line.startswith("inference/inference.py:24:") and " AMP101 fixed (unsafe): " in line]
    assert fixed.endswith(note), fixed
    assert inference.read_bytes() == fixture.with_suffix(".out.py").read_bytes()
