"""initialize for inference with the model handed on in whole simple statements (`ampfix.families.apex.rewrite.
inference`, TimeSeriesPredictionPlatform's inference.py): under --unsafe-fixes those statements run under the
autocast, the note saying what that changes; the default mode leaves it, saying so; any other hand-off is left with
today's reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from ampfix.engine import Options, fix_source

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "unsafe_fixes" / "apex_inference_model_handed_on.in.py"
HANDED_ON = "    evaluator.log(predictions, model=model)\n"
NOTE = (
    "opt_level O2 becomes native AMP: O2 and O3 cast the model to float16 (O2 with float32 master copies of the "
    "weights); native AMP keeps float32 weights and runs the forward pass under autocast: the numerics and the memory "
    "use change (NVIDIA's deprecation notice points O1 and O2 users to native AMP); the model `model` is handed on, on "
    "line 28 (`predictions = evaluator.predict(model)`), on line 29 (`evaluator.log(predictions, model=model)`), now "
    "under the autocast: every op that call runs is under autocast, not only the model's forward pass (apex's O2 cast "
    "the model's weights and inputs to float16 and its outputs to float32, the model's forward pass alone; autocast "
    "keeps float32 weights and picks a dtype per op); where the callee keeps the model and runs it later, outside that "
    "statement, that run is outside the autocast (not seen here); the autocast is enabled by `autocast_enabled`, made "
    "True in initialize's place under its `if` (`precision == \"fp16\" and importlib.util.find_spec(\"apex\")`): where "
    "that test was false (apex not installed, for `find_spec`), the call runs in float32, as it did")


def _initialize(source: str, unsafe: bool) -> tuple[str, str, bool]:
    result = fix_source(source, Options(unsafe_fixes=unsafe))
    (initialize,) = [f for f in result.findings if f.code == "AMP101"]
    return result.new_source, initialize.message, initialize.fixed


def test_under_unsafe_fixes_the_statements_handing_the_model_on_run_under_autocast() -> None:
    new, message, fixed = _initialize(FIXTURE.read_text(encoding="utf-8"), True)
    assert fixed
    assert message == (
        "`amp.initialize` (O2, the model alone: inference) is removed, no scaler made (nothing is scaled); the "
        "statements that hand it on (lines 28, 29) run under `torch.autocast(\"cuda\", dtype=torch.float16, "
        "enabled=autocast_enabled)`; O1 put every call after initialize in mixed precision: calls outside "
        f"`run_inference` are outside the autocast (float32 unless under one of their own); {NOTE}")
    assert new == FIXTURE.with_name("apex_inference_model_handed_on.out.py").read_text(encoding="utf-8")


def test_in_the_default_mode_it_is_left_saying_what_the_unsafe_fix_changes() -> None:
    source = FIXTURE.read_text(encoding="utf-8")
    new, message, fixed = _initialize(source, False)
    assert (new, fixed) == (source, False)
    assert message.endswith(f"; not rewritten: {NOTE} (an unsafe fix exists: --unsafe-fixes)")


def test_directly_under_its_if_the_if_goes_and_the_autocast_reads_its_test() -> None:
    """No `if` around initialize's: its test's names are bound at the hand-off, so the autocast reads the test, in
    `bool(...)` (find_spec returns a ModuleSpec or None; torch.autocast takes a bool only)."""
    source = FIXTURE.read_text(encoding="utf-8").replace(
        '    if not config.dataset.get("xgb", False):\n', "").replace(
        "    else:\n        model.load(cfg.checkpoint)\n", "").replace("\n        ", "\n    ")
    new, message, fixed = _initialize(source, True)
    assert fixed
    assert new[new.index("def run_inference"):] == (
        "def run_inference(cfg, config):\n"
        "    evaluator = hydra.utils.instantiate(config.evaluator)\n"
        "    model = hydra.utils.instantiate(config.model)\n"
        "    model.load_state_dict(torch.load(cfg.checkpoint))\n"
        "    model.to(device=torch.device(cfg.device))  # maybe change depending on evaluator\n"
        "    precision = cfg.precision\n"
        "\n"
        "    with torch.autocast(\"cuda\", dtype=torch.float16, enabled=bool(precision == \"fp16\" and "
        "importlib.util.find_spec(\"apex\"))):\n"
        "        predictions = evaluator.predict(model)\n"
        "        evaluator.log(predictions, model=model)\n"
        "    return evaluator.evaluate(predictions)\n")
    assert "from apex" not in new and "\nimport importlib\n" in new
    assert message.endswith("the autocast is enabled by the test of initialize's `if` (`precision == \"fp16\" and "
                            "importlib.util.find_spec(\"apex\")`): where that test was false (apex not installed, for "
                            "`find_spec`), the call runs in float32, as it did")


@pytest.mark.parametrize(("statement", "reason"), [
    ("    evaluator.model = model\n", "handed on or kept on line 29 (`evaluator.model = model`)"),
    ("    models = [model]\n", "handed on or kept on line 29 (`[model]`)"),
    ("    if evaluator.check(model):\n        pass\n", "handed on or kept on line 29 (`evaluator.check(model)`)"),
    ("    for p in evaluator.predict(model):\n        pass\n",
     "handed on or kept on line 29 (`evaluator.predict(model)`)"),
    ("    print(evaluator.predict(model))\n", "handed on or kept on line 29 (`evaluator.predict(model)`)"),
    ("    model = evaluator.wrap(model)\n", "handed on or kept on line 29 (`evaluator.wrap(model)`)"),
    ("    return evaluator.predict(model)\n", "handed on or kept on line 29 (`evaluator.predict(model)`)"),
])
def test_any_other_hand_off_is_left_with_its_line(statement: str, reason: str) -> None:
    source = FIXTURE.read_text(encoding="utf-8").replace(HANDED_ON, statement)
    new, message, fixed = _initialize(source, True)
    assert (new, fixed) == (source, False)
    assert message.endswith(f"not rewritten: the model `model` is {reason}: what runs it there is not put under "
                            "autocast")


def test_the_model_in_a_lambda_or_called_outside_no_grad_is_left() -> None:
    source = FIXTURE.read_text(encoding="utf-8")
    _, lambda_read, fixed = _initialize(source.replace(HANDED_ON, "    later = lambda: evaluator.predict(model)\n"),
                                        True)
    assert not fixed and lambda_read.endswith(
        "the model's name `model` is read on line 29 in a function, lambda or generator inside `run_inference`, which "
        "may run outside the autocast added")
    _, called, fixed = _initialize(source.replace(HANDED_ON, "    model(predictions)\n"), True)
    assert not fixed and called.endswith(
        "the model `model` is called on line 29 outside a `no_grad`/`inference_mode` block after initialize (O1 ran "
        "it in float16; no autocast is added there)")


def test_the_other_branch_counts_as_after_initialize_inside_a_loop() -> None:
    """Around a loop, the `else` may run after initialize, at the next iteration: `model.load` there is a read."""
    lines = FIXTURE.read_text(encoding="utf-8").splitlines(keepends=True)
    start = lines.index('    if not config.dataset.get("xgb", False):\n')
    end = lines.index("        model.load(cfg.checkpoint)\n")
    looped = lines[:start] + ["    for _ in range(2):\n"] + ["    " + line for line in lines[start:end + 1]] \
        + lines[end + 1:]
    new, message, fixed = _initialize("".join(looped), True)
    assert not fixed
    assert message.endswith("the model `model` is handed on or kept on line 27 (`model.load`): what runs it there is "
                            "not put under autocast")


def test_a_hand_off_inside_a_no_grad_block_given_the_autocast_gets_no_with_of_its_own() -> None:
    source = FIXTURE.read_text(encoding="utf-8").replace(
        "    predictions = evaluator.predict(model)\n    evaluator.log(predictions, model=model)\n",
        "    with torch.no_grad():\n        predictions = evaluator.predict(model)\n    evaluator.log(predictions, "
        "model=model)\n")
    new, message, fixed = _initialize(source, True)
    assert fixed
    assert new[new.index("    else:\n"):] == (
        "    else:\n"
        "        model.load(cfg.checkpoint)\n"
        "\n"
        "    with torch.no_grad(), torch.autocast(\"cuda\", dtype=torch.float16, enabled=autocast_enabled):\n"
        "        predictions = evaluator.predict(model)\n"
        "    with torch.autocast(\"cuda\", dtype=torch.float16, enabled=autocast_enabled):\n"
        "        evaluator.log(predictions, model=model)\n"
        "    return evaluator.evaluate(predictions)\n")
    assert "; the `no_grad`/`inference_mode` blocks on line 28, which hold every call of `model` after it and the " \
        "statements that hand it on (lines 29, 30) run under " in message
