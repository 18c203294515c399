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
