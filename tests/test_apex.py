"""NVIDIA apex (AMP100-AMP109) end to end: `check` exits 1 on apex and never imports torch, `rewrite`
turns the O1 training pattern into native AMP that runs under `ampfix run` with the scaler stepping."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ampfix.cli.app import app

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "data" / "apex_o1_train.py"


def test_check_exits_1_on_apex_and_0_once_rewritten(tmp_path: Path):
    path = tmp_path / "train.py"
    shutil.copy(SCRIPT, path)
    checked = CliRunner().invoke(app, ["check", str(path)])
    assert checked.exit_code == 1
    assert [line.split(": ")[1].split()[0] for line in checked.stdout.splitlines() if ": AMP" in line] == [
        "AMP101", "AMP102", "AMP103", "AMP104"]
    rewritten = CliRunner().invoke(app, ["rewrite", str(path)])
    assert rewritten.exit_code == 1, rewritten.stdout  # it rewrote something
    text = path.read_text()
    assert "from apex import amp" not in text and "amp.initialize" not in text and "amp.scale_loss" not in text
    assert CliRunner().invoke(app, ["check", str(path)]).exit_code == 0


def test_check_on_apex_imports_neither_apex_nor_torch():
    code = (
        "import sys\n"
        "from ampfix.engine import check_source, fix_source\n"
        f"source = open({str(SCRIPT)!r}).read()\n"
        "assert check_source(source).findings\n"
        "assert fix_source(source).changed\n"
        "print(sorted(m for m in ('torch', 'apex') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_rewrite_runs_with_amp_active_and_the_scaler_stepping(tmp_path: Path):
    path = tmp_path / "train.py"
    shutil.copy(SCRIPT, path)
    assert CliRunner().invoke(app, ["rewrite", str(path)]).exit_code == 1
    report_path = tmp_path / "report.json"
    run = subprocess.run([sys.executable, "-m", "ampfix", "run", "--json", str(report_path), str(path)],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    report = json.loads(report_path.read_text())
    # 6 micro-steps, a step every 2: each loss scaled, the gradients unscaled once before each clipping.
    assert report["scaler"] == {"scale": 6, "unscale": 3, "step": 3, "update": 3, "skipped_steps": 0}
    assert report["optimizer_steps"] == 3
    (scaler,) = report["grad_scalers"]
    assert (scaler["device"], scaler["enabled"]) == ("cuda", True)
    # the forward pass of every micro-step ran under autocast
    assert sum(region["entered"] for region in report["autocast_regions"]) == 6
    printed = run.stdout.splitlines()
    assert [line.split()[1] for line in printed if line.startswith("step ")] == ["0", "1", "2", "3", "4", "5"]
    # the scaler's state_dict, where apex's was returned
    assert printed[-1] == "['_growth_tracker', 'backoff_factor', 'growth_factor', 'growth_interval', 'scale']"


@pytest.mark.parametrize(("name", "unsafe"), [("apex_ddp", False), ("apex_condition", False),
                                             ("apex_trainer", False), ("apex_losses", True),
                                             ("apex_init_trainer", False), ("apex_init_trainer_step", True),
                                             ("apex_optimizers", False), ("apex_setup_box", False),
                                             ("apex_condition_key", False), ("apex_objectives", False),
                                             ("apex_clip_helpers", False), ("apex_single_file", False),
                                             ("apex_dcgan", True), ("apex_validate", False),
                                             ("apex_switch", True), ("apex_switch_first", True),
                                             ("apex_bert_glue", True),
                                             ("apex_inference_handed_on", True)])
def test_the_runnable_apex_shapes_are_rewritten_to_their_committed_native_twins(name: str, unsafe: bool):
    """fixtures/run/<name>.native.py, which tests/test_runner_apex.py verifies against the apex original (with
    --unsafe-fixes where the rewrite changes the numerics: several losses on one scale)."""
    from ampfix.engine import Options, fix_source

    run = ROOT / "fixtures" / "run"
    source = (run / f"{name}.py").read_text()
    assert fix_source(source, Options(unsafe_fixes=unsafe)).new_source == (run / f"{name}.native.py").read_text()
    if unsafe:
        assert fix_source(source).new_source == source


@pytest.mark.parametrize("script", [SCRIPT, ROOT / "fixtures" / "apex" / "o1_script_resumes.in.py",
                                    ROOT / "fixtures" / "run" / "apex_yolo.py"], ids=lambda path: path.name)
def test_the_rewrite_keeps_the_files_line_endings(script: Path):
    from ampfix.engine import fix_source

    source = script.read_text()
    expected = fix_source(source).new_source
    assert expected != source
    for newline in ("\r\n", "\r"):
        result = fix_source(source.replace("\n", newline))
        assert result.new_source == expected.replace("\n", newline)
        assert fix_source(result.new_source).new_source == result.new_source


def test_a_comment_on_a_rebuilt_line_holds_the_rewrite_back_whatever_the_line_endings():
    from ampfix.engine import fix_source

    source = SCRIPT.read_text().replace("            scaled_loss.backward()\n", "            scaled_loss.backward()  # keep\n")
    for newline in ("\n", "\r\n", "\r"):
        text = source.replace("\n", newline)
        result = fix_source(text)
        assert result.new_source == text, repr(newline)
        (initialize,) = [f for f in result.findings if f.code == "AMP101"]
        assert initialize.message.endswith("not rewritten: a comment sits on a line that would be rebuilt")


def test_the_device_options_reach_the_scaler_and_autocast():
    from ampfix.engine import fix_source
    from ampfix.core.options import Options

    source = SCRIPT.read_text()
    cpu = fix_source(source, Options(device="cpu")).new_source
    assert 'scaler = torch.amp.GradScaler("cpu")\n' in cpu
    assert 'with torch.autocast("cpu", dtype=torch.bfloat16):\n' in cpu
    kept = fix_source(source, Options(device="cpu", keep_dtype=True)).new_source
    assert 'with torch.autocast("cpu", dtype=torch.float16):\n' in kept
    expr = fix_source(source, Options(device_expr="args.device")).new_source
    assert "scaler = torch.amp.GradScaler(args.device)\n" in expr
    assert "with torch.autocast(args.device, dtype=torch.float16):\n" in expr
    auto = fix_source(source, Options(device="auto"))
    assert auto.new_source == source  # held back: this rewrite adds no module device name
    (initialize,) = [f for f in auto.findings if f.code == "AMP101"]
    assert not initialize.fixed and "not rewritten: --device auto" in initialize.message


def test_a_suppressed_use_holds_the_whole_rewrite_back():
    from ampfix.engine import fix_source

    source = SCRIPT.read_text().replace("    return amp.state_dict()\n", "    return amp.state_dict()  # noqa: AMP104\n")
    result = fix_source(source)
    assert result.new_source == source
    (initialize,) = [f for f in result.findings if f.code == "AMP101"]
    assert "not rewritten: a suppression comment holds the use on line 26" in initialize.message
    assert "AMP104" not in [f.code for f in result.findings]


def _rewrite_and_verify(script: Path, tmp_path: Path) -> tuple[str, dict]:
    """ampfix's rewrite of `script`, and `ampfix verify` of the apex original against it (the runner emulates
    apex.amp O1): the rewritten text and verify's report, which must say equivalent."""
    original, native = tmp_path / "train_apex.py", tmp_path / "train_native.py"
    shutil.copy(script, original)
    shutil.copy(script, native)
    assert CliRunner().invoke(app, ["rewrite", str(native)]).exit_code == 1
    report_path = tmp_path / "verify.json"
    verify = subprocess.run([sys.executable, "-m", "ampfix", "verify", str(original), "--rewritten", str(native),
                             "--json", str(report_path)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    report = json.loads(report_path.read_text())
    assert verify.returncode == 0, verify.stderr
    assert report["equivalent"] is True and report["first_difference"] is None
    return native.read_text(), report


def test_the_rewrite_is_equivalent_to_the_apex_original_under_verify(tmp_path: Path):
    """The runner emulates apex.amp O1 (issue 12, verify half): the original runs, and verify compares it
    step by step with ampfix's own rewrite."""
    _, report = _rewrite_and_verify(SCRIPT, tmp_path)
    assert len(report["original"]["losses"]) == 6
    assert report["original"]["losses"] == report["rewritten"]["losses"]
    assert report["rewritten"]["scaler"] == {"scale": 6, "unscale": 3, "step": 3, "update": 3, "skipped_steps": 0}


def test_the_yolov5_optional_import_rewrite_keeps_mixed_precision_on_and_is_equivalent(tmp_path: Path):
    """yolov5's shape (fixtures/run/apex_yolo.py): the optional import with its flag, `if flag:` around
    initialize and around scale_loss/else, an EMA evaluated under no_grad after the epoch."""
    text, report = _rewrite_and_verify(ROOT / "fixtures" / "run" / "apex_yolo.py", tmp_path)
    code = text.split('"""', 2)[2]  # below the docstring
    assert not any(name in code for name in ("from apex import amp", "amp.initialize", "amp.scale_loss"))
    assert "mixed_precision = True\n" in text and "mixed_precision = False" not in text
    rewrite = report["rewritten"]
    assert rewrite["exit_code"] == 0 and rewrite["emulated"] == []
    assert report["original"]["losses"] == rewrite["losses"] and len(rewrite["losses"]) == 6  # bit for bit
    (scaler,) = rewrite["grad_scalers"]
    assert (scaler["device"], scaler["enabled"]) == ("cuda", True)
    assert rewrite["scaler"] == {"scale": 6, "unscale": 0, "step": 3, "update": 3, "skipped_steps": 0}
    assert rewrite["optimizer_steps"] == 3
    # mixed precision on: the 6 forward passes, then the evaluation in the no_grad block
    regions = [(r["line"], r["enabled"], r["entered"]) for r in rewrite["autocast_regions"]]
    assert regions == [(77, True, 6), (94, True, 1)]
    assert text.splitlines()[93] == (
        '    with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=mixed_precision):')


NOT_AVAILABILITY = "not rewritten: initialize is under an `if` whose test is not whether apex imported: "
TWICE = ("not rewritten: initialize is called 2 times (in two branches, or again to restore a checkpoint): a scaler "
         "is created once, in one place")


@pytest.mark.parametrize(("case", "code", "reason"), [
    # the single-file shape (`if args.fp16: initialize` beside a module-level import), told apart
    ("condition_module_import_other_flag", "AMP101",
     "not rewritten: the scale_loss on line 16 is under `if args.amp:`, not under initialize's condition `args.fp16`: "
     "a scaler enabled by that condition would not mean the same there"),
    ("condition_module_import_changed_by_a_helper", "AMP101",
     "not rewritten: `args.fp16`, the condition of initialize, may be changed on line 10 (the scaler and the "
     "autocast there would disagree)"),
    ("condition_module_import_global_rebound", "AMP101",
     "not rewritten: `USE_AMP`, the condition of initialize, may be changed on line 9 (the scaler and the autocast "
     "there would disagree)"),
    ("condition_module_import_scale_loss_unguarded", "AMP101",
     "not rewritten: the scale_loss on line 15 is not under `if args.fp16:`, initialize's condition: where it is "
     "false apex raised there (\"amp.initialize(...) must be called before `with amp.scale_loss`\"), and a disabled "
     "scaler would train on"),
    ("optional_flag_also_from_args", "AMP101",
     NOT_AVAILABILITY + "`mixed_precision` is set on line 12 to something other than whether apex imported"),
    ("optional_scale_loss_without_else", "AMP101",
     "not rewritten: a scale_loss under a flag is not alone in its `if`, or its `else` is not the same loss's "
     "`.backward(...)` with the same arguments"),
    ("optional_handler_does_more", "AMP101",
     "not rewritten: the optional import's `except` does more than set `amp = None` and flags False, pass, print, warn or "
     "raise (removing it would drop that)"),
    # adapter-transformers 1.0.1's regularization loss: its backward would add unscaled gradients to scaled ones
    ("o1_plain_backward_beside_scale_loss", "AMP101",
     "not rewritten: `fusion_reg_loss.backward(...)` on line 16 is a backward not through scale_loss: apex had "
     "unscaled the gradients when scale_loss exited (and kept those of an earlier backward aside, unscaled), a "
     "GradScaler keeps them scaled until its step, so that backward's gradients would be added to scaled ones and "
     "divided by the scale (by hand: `scaler.scale(...).backward()` for it too)"),
    ("o1_plain_backward_in_a_helper", "AMP101",
     "not rewritten: `fusion.regularization_loss().backward(...)` on line 8 is a backward not through scale_loss: "
     "apex had unscaled the gradients when scale_loss exited (and kept those of an earlier backward aside, unscaled), "
     "a GradScaler keeps them scaled until its step, so that backward's gradients would be added to scaled ones and "
     "divided by the scale (by hand: `scaler.scale(...).backward()` for it too)"),
    # timm's wrapper: the module has no initialize, so scale_loss's finding says why
    ("timm_apex_scaler", "AMP102",
     "not rewritten: no `apex.amp.initialize` in this module: mixed precision is switched on elsewhere, where the "
     "forward passes to put under autocast and apex's one process-wide loss scaler are, so the uses here cannot be "
     "rewritten alone (a wrapper class such as timm's ApexScaler becomes a class holding a torch.amp.GradScaler by "
     "hand)"),
    # a trainer set up in __init__ (issue 21's first example): what is not proved is reported, not guessed
    ("trainer_init_condition_rebound", "AMP101",
     "not rewritten: `self.use_amp`, the condition of initialize as the methods test it, is assigned on line 15"),
    ("trainer_init_optimizer_reassigned", "AMP101",
     "not rewritten: `self.optimizer` is assigned again on line 15 (initialize's optimizer must be the one every "
     "method scales and steps)"),
    ("trainer_init_condition_not_assigned", "AMP101",
     "not rewritten: `use_amp`, the condition of initialize in `__init__`, is not a parameter assigned to an "
     "attribute before it (`self.flag = flag`) for the other methods to test"),
    ("trainer_init_step_given_the_loss", "AMP101",
     "not rewritten: the forward pass that computes `loss` is not in `step` but in its callers: O1 ran it in mixed "
     "precision, it now runs in float32 unless they put it under `torch.autocast(\"cuda\", dtype=torch.float16, "
     "enabled=bool(self.use_amp))` (an unsafe fix exists: --unsafe-fixes)"),
    ("trainer_imports_in_each_method", "AMP101",
     "not rewritten: torch is not imported where the local `from apex import amp` is"),
    # the `import torch` the rewrite adds would bind a `torch` that a deprecated name is read through
    ("o1_torch_read_unbound", "AMP101",
     "not rewritten: `torch` is bound to nothing here, yet `torch.cuda.amp.autocast` is read through it on line 9 (a "
     "star import's?): the `import torch` this rewrite adds would bind it, and the next run would rewrite that too "
     "(by hand: import torch, then run ampfix again)"),
    # a function of the project's own handed the model after each micro-step's backward: apex had unscaled there
    ("gradients_read_in_the_micro_steps", "AMP101",
     "not rewritten: gradients are read on line 16, between a backward and the step of an accumulation, where a "
     "scaler keeps them scaled (apex had unscaled them)"),
    # a clip between two losses' backwards: apex had unscaled the first's gradients, a scaler unscales after the last
    ("gradients_read_between_two_backwards", "AMP101",
     "not rewritten: gradients are read on line 15, between two backwards of one step, where a scaler keeps them "
     "scaled (apex had unscaled them; a scaler unscales once per step, after the last backward)"),
    # the step's own condition reads the gradients: no unscale_ can go before it without a step after it
    ("gradients_read_in_the_steps_condition", "AMP101",
     "not rewritten: gradients are read on line 17, in a condition the step on line 18 depends on, where a scaler "
     "keeps them scaled (apex had unscaled them)"),
    # a plain backward in a helper the training function defines and calls between the backward and the step
    ("o1_plain_backward_in_a_nested_helper", "AMP101",
     "not rewritten: `fusion.regularization_loss().backward(...)` on line 11 is a backward not through scale_loss: "
     "apex had unscaled the gradients when scale_loss exited (and kept those of an earlier backward aside, unscaled), "
     "a GradScaler keeps them scaled until its step, so that backward's gradients would be added to scaled ones and "
     "divided by the scale (by hand: `scaler.scale(...).backward()` for it too)"),
    # torch bound only for type checkers: the names the rewrite writes would raise NameError at run time
    ("torch_imported_for_type_checkers_only", "AMP101",
     "not rewritten: `torch` is imported only for type checkers (under `if TYPE_CHECKING:`), and the names this "
     "rewrite writes need it at run time (by hand: `import torch` at run time, then run ampfix again)"),
    # initialize given the model alone (inference): every call of the model after it must be in an evaluation block
    ("initialize_for_inference_model_handed_on", "AMP101",
     "not rewritten: the model `model` is handed on or kept on line 13 (`evaluator.predict(model)`): what runs it "
     "there is not put under autocast"),
    ("initialize_for_inference_called_outside_no_grad", "AMP101",
     "not rewritten: the model `model` is called on line 9 outside a `no_grad`/`inference_mode` block after "
     "initialize (O1 ran it in float16; no autocast is added there)"),
    ("initialize_for_inference_generator", "AMP101",
     "not rewritten: the model's name `model` is read on line 10 in a function, lambda or generator inside "
     "`predictions`, which may run outside the autocast added"),
    ("initialize_for_inference_script_function", "AMP101",
     "not rewritten: the model's name `model` is read on line 10 in a function, lambda or generator inside the "
     "script's top level, which may run outside the autocast added"),
    ("initialize_for_inference_commented", "AMP101",
     "not rewritten: a comment sits on a line that would be rebuilt"),
    # BERT's run_squad.py: the project's clipper after every micro-step's backward, the step at the boundary
    ("clip_in_every_micro_step", "AMP101",
     "not rewritten: clipping over master_params on line 24 runs after every micro-step's backward, before the `if` "
     "on line 26 that steps: apex had unscaled the gradients when each scale_loss exited, so it clipped the unscaled "
     "sum so far, and the next micro-step added to the clipped one; a GradScaler keeps them scaled until its step "
     "and unscales them once per step (a second `unscale_` before `update()` raises), so no scaler call gives that "
     "clipping unscaled gradients there (by hand: `scaler.unscale_(optimizer)` and the clipping right before "
     "`scaler.step(optimizer)`, the same where every micro-step steps, one accumulation step; with more, the "
     "accumulated gradients are clipped once)"),
    # DeepSpeed's engine, classy_vision's task: the keywords are a dict's
    ("initialize_with_keyword_dict", "AMP101",
     "not rewritten: initialize is given `**amp_params`: its keywords, opt_level among them, cannot be read here (by "
     "hand: the native pattern for the opt_level and loss scale it holds)"),
    # espnet's updaters: initialize in `train`, scale_loss in another class told through its constructor
    ("updater_flag_through_constructor", "AMP101",
     "not rewritten: in `update_core`: apex.amp is used with no initialize in that function (initialize is in "
     "`train`, which hands `BPTTUpdater` its flag on line 59, `use_apex=use_apex`, tested in `update_core` as "
     "`self.use_apex`): the scaler would have to be made in `BPTTUpdater.__init__` from that flag, which changes what "
     "the flag means to every caller of `BPTTUpdater`, those in other modules too (one that ran apex's initialize "
     "itself would get a GradScaler over apex's optimizer: under O2, whose float32 gradients only scale_loss fills, "
     "no step would change the weights); by hand, with every caller: `self.scaler = torch.amp.GradScaler(\"cuda\", "
     "enabled=use_apex)` in `__init__`, the forward pass in `update_core` under `torch.autocast(\"cuda\", "
     "dtype=torch.float16, enabled=self.use_apex)`, `self.scaler.scale(loss).backward()`, "
     "`self.scaler.step(optimizer)` then `self.scaler.update()`, initialize and its import removed from `train`; O1 "
     "also ran the other forward passes (evaluation) in float16; opt_level `args.train_dtype` is not a literal: a run "
     "with O0 (plain float32, loss scale 1) must get the flag false, or the scaler and autocast turn mixed precision "
     "on"),
])
def test_a_shape_outside_the_provable_one_says_why(case: str, code: str, reason: str):
    from ampfix.engine import fix_source

    source = (ROOT / "fixtures" / "apex" / f"{case}.in.py").read_text()
    result = fix_source(source)
    assert result.new_source == source
    (finding,) = [f for f in result.findings if f.code == code]
    assert finding.message.endswith(reason), finding.message


def test_clipping_in_every_micro_step_is_left_under_unsafe_fixes_too():
    """BERT's run_squad.py loop (fixtures/apex/clip_in_every_micro_step): its computed loss_scale is an unsafe fix, but
    no fix gives its clipping unscaled gradients, so --unsafe-fixes leaves it with the same reason."""
    from ampfix.engine import Options, fix_source

    source = (ROOT / "fixtures" / "apex" / "clip_in_every_micro_step.in.py").read_text()
    result = fix_source(source, Options(unsafe_fixes=True))
    assert result.new_source == source
    (message,) = [f.message for f in result.findings if f.code == "AMP101"]
    assert "not rewritten: clipping over master_params on line 24 runs after every micro-step's backward, before the " \
        "`if` on line 26 that steps" in message and "(an unsafe fix exists" not in message, message


def test_initialize_names_the_calls_of_the_models_methods_left_outside_the_autocast():
    """flair 0.5.1/0.6.1's `train` evaluates the dev set through a method of the model after each epoch: O1 ran it
    in float16, the rewrite leaves it in float32, so the finding names its line and the method, as it names the calls
    of the model itself; nn.Module's own methods that run no forward pass (`train`, `eval`, `state_dict`) are not."""
    from ampfix.engine import fix_source

    case = ROOT / "fixtures" / "apex" / "o1_model_method_evaluates_after_initialize"
    result = fix_source(case.with_suffix(".in.py").read_text())
    assert result.new_source == case.with_suffix(".out.py").read_text()
    (finding,) = [f for f in result.findings if f.code == "AMP101"]
    assert finding.message.endswith(
        "; O1 put every call after initialize in mixed precision, the autocast added covers the forward passes: the "
        "calls of `self.model` on line 27 (`self.model.evaluate`: a method of the model, which may run it), and any "
        "call outside `train`, are outside it (float32 unless under an autocast of their own)"), finding.message


UPDATER_ELSEWHERE = ("not rewritten: in `update_core`: apex.amp is used with no initialize in that function "
                     "(initialize is in `train`): the scaler it becomes cannot reach these uses")


@pytest.mark.parametrize(("old", "new", "reason"), [
    # the flag handed positionally, the attribute set in a tuple assignment: the same handover, named as a keyword
    ("BPTTUpdater(model, optimizer, gradclip=args.gradclip, use_apex=use_apex, accum_grad=args.accum_grad)",
     "BPTTUpdater(model, optimizer, args.gradclip, use_apex, args.accum_grad)",
     "`train`, which hands `BPTTUpdater` its flag on line 59, `use_apex=use_apex`, tested"),
    # the attribute the method tests is not the constructor's parameter: no handover is claimed
    ("        self.use_apex = use_apex\n", "        self.use_apex = bool(use_apex)\n", UPDATER_ELSEWHERE),
    # the name called in `train` is a local, not the class
    ("    updater = BPTTUpdater(", "    BPTTUpdater = dict\n    updater = BPTTUpdater(", UPDATER_ELSEWHERE),
    # the class is not built by initialize's function
    ("    updater = BPTTUpdater(", "    return model, optimizer\n\n\ndef build(args, model, optimizer, use_apex):\n"
     "    updater = BPTTUpdater(", UPDATER_ELSEWHERE),
])
def test_an_updater_told_through_its_constructor_is_left_with_the_handover_named(old: str, new: str, reason: str):
    """espnet's updaters (fixtures/apex/updater_flag_through_constructor): the reason names the constructor call
    only where it hands the flag the method tests; --unsafe-fixes does not rewrite it either (the class's other
    callers cannot be seen)."""
    from ampfix.core.options import Options
    from ampfix.engine import fix_source

    source = (ROOT / "fixtures" / "apex" / "updater_flag_through_constructor.in.py").read_text()
    assert source.count(old) == 1
    source = source.replace(old, new)
    for options in (Options(), Options(unsafe_fixes=True)):
        result = fix_source(source, options)
        assert result.new_source == source
        (initialize,) = [f for f in result.findings if f.code == "AMP101"]
        assert not initialize.fixed and reason in initialize.message, initialize.message


@pytest.mark.parametrize(("case", "reason"), [
    ("initialize_again_to_restore",
     "not rewritten: initialize is called again on line 38 with `self.optimizer`, the optimizer initialize on line 18 "
     "was given and bound: where both run, apex raised RuntimeError there (\"A given optimizer should only be passed "
     "through amp.initialize once\"), so that path never ran with apex, and a rewrite would make it run (by hand: "
     "drop the second call; the scaler made where the first was loads the state)"),
    ("initialize_again_on_a_new_optimizer", TWICE),
    ("initialize_in_two_branches", TWICE),
    ("initialize_in_a_loop_same_optimizer",
     "not rewritten: initialize is called in a loop (line 8), once per iteration: a scaler is created once, in one "
     "place"),
    # an evaluation model's initialize once losses were scaled: apex's second call reset its loss scalers there
    ("initialize_twice_eval_model_after_scaling",
     "not rewritten: initialize is called again on line 15 for a model alone, not as a statement beside the "
     "unconditional first before any loss is scaled: apex's second call made fresh loss scalers there (the scale back "
     "to its start), which one GradScaler does not do"),
])
def test_initialize_called_more_than_once_says_why_at_each_call(case: str, reason: str):
    """A scaler is made once, in one place. Where a later call is given the optimizer an earlier one bound
    (allennlp 1.0's trainer initializes again to restore a checkpoint), apex refused it (its `_process_optimizer`
    raised; the runner's emulation does too), so the reason says that path never ran with apex; the near shapes
    (an optimizer made anew, two branches of which one runs) say only the first. Given the same optimizer at each
    iteration of a loop, only that a scaler is made once (a loop over list items: below)."""
    from ampfix.engine import fix_source

    source = (ROOT / "fixtures" / "apex" / f"{case}.in.py").read_text()
    result = fix_source(source)
    assert result.new_source == source
    initializes = [f for f in result.findings if f.code == "AMP101"]
    assert initializes and all(f.message.endswith(reason) for f in initializes), [f.message for f in initializes]


LOOP = ("not rewritten: initialize is called in a loop (line {line}), once per list item: one GradScaler would serve "
        "every optimizer (apex's last loss scaler did), but ")


@pytest.mark.parametrize(("case", "line", "reason"), [
    ("initialize_in_a_loop_list_given", 13, "`optimizers` is not a list made in initialize's function"),
    ("initialize_in_a_loop_list_grown", 18, "`optimizers` is used on line 23 otherwise than indexed or measured after "
                                            "the loop (it could hold an optimizer apex never saw)"),
    ("initialize_in_a_loop_item_bound_in_a_branch", 18, "`optimizer` is read on line 34 where no `optimizer = "
                                                        "optimizers[...]` before it in its block binds it"),
    ("initialize_in_a_loop_name_read_after", 18, "`model`, which the loop binds, is read on line 42 before being "
                                                 "bound again (the loop cannot go)"),
])
def test_initialize_in_a_loop_over_list_items_says_what_holds_the_scaler_back(case: str, line: int, reason: str):
    """sentence-transformers' loop (one initialize per objective) is one GradScaler in place of the loop
    (fixtures/apex/initialize_in_a_loop) only where the loop can go and every optimizer stepped is one initialize was
    given; each near shape says which of those fails, and is left as it is."""
    from ampfix.engine import fix_source

    source = (ROOT / "fixtures" / "apex" / f"{case}.in.py").read_text()
    result = fix_source(source)
    assert result.new_source == source
    (initialize,) = [f for f in result.findings if f.code == "AMP101"]
    assert LOOP.format(line=line) + reason in initialize.message, initialize.message


OPTIONAL = "try:\n    from apex import amp\nexcept ImportError:\n    amp = None\n"
TRAIN = ("def train(model, opt, loader):\n"
         "    if {flag}:\n        model, opt = amp.initialize(model, opt)\n"
         "    for x in loader:\n        loss = model(x)\n"
         "        if {flag}:\n            with amp.scale_loss(loss, opt) as s:\n                s.backward()\n"
         "        else:\n            loss.backward()\n"
         "        opt.step()\n")


@pytest.mark.parametrize(("setup", "flag", "reason"), [
    # a function that turns the flag off: not only apex's availability
    ("use_amp = amp is not None\n\n\ndef off():\n    global use_amp\n    use_amp = False\n", "use_amp",
     NOT_AVAILABILITY + "`use_amp` is set on line 10 to something other than whether apex imported"),
    # `amp is not None` as the test itself: not a flag (reported, not guessed)
    ("", "amp is not None", NOT_AVAILABILITY + "the test is not a single name"),
    ("for use_amp in (True, False):\n    pass\n", "use_amp",
     NOT_AVAILABILITY + "`use_amp` is bound otherwise than by an assignment (line 5)"),
])
def test_a_guard_that_is_not_apex_availability_holds_the_rewrite_back(setup: str, flag: str, reason: str):
    from ampfix.engine import fix_source

    source = OPTIONAL + setup + "\n\n" + TRAIN.format(flag=flag)
    result = fix_source(source)
    assert result.new_source == source
    (initialize,) = [f for f in result.findings if f.code == "AMP101"]
    assert initialize.message.endswith(reason), initialize.message


def test_the_added_helper_loads_an_apex_checkpoint_and_a_native_one_into_a_grad_scaler():
    """The helper `rewrite` adds where amp.load_state_dict was, run: apex's state becomes GradScaler's, with
    apex's count of clean steps as the growth tracker (one more clean step doubles the scale, as in apex)."""
    import torch

    from ampfix.engine import fix_source

    new = fix_source((ROOT / "fixtures" / "apex" / "o1_train_function.in.py").read_text()).new_source
    (helper,) = [node for node in ast.parse(new).body if isinstance(node, ast.FunctionDef)
                 and node.name == "grad_scaler_state"]
    namespace: dict = {}
    exec(ast.get_source_segment(new, helper), namespace)  # noqa: S102
    grad_scaler_state = namespace["grad_scaler_state"]

    scaler = torch.amp.GradScaler("cpu")
    scaler.load_state_dict(grad_scaler_state({"loss_scaler0": {"loss_scale": 1024.0, "unskipped": 1999}}))
    assert scaler.state_dict() == {"scale": 1024.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                                   "growth_interval": 2000, "_growth_tracker": 1999}
    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    scaler.scale((weight * 2).sum()).backward()
    scaler.step(optimizer)
    scaler.update()
    assert (scaler.get_scale(), scaler.state_dict()["_growth_tracker"]) == (2048.0, 0)
    # a checkpoint written by the GradScaler itself goes through unchanged
    again = torch.amp.GradScaler("cpu")
    again.load_state_dict(grad_scaler_state(scaler.state_dict()))
    assert again.state_dict() == scaler.state_dict()


def test_a_suppressed_optional_import_holds_the_rewrite_back():
    from ampfix.engine import fix_source

    path = ROOT / "fixtures" / "apex" / "yolov5_optional_import.in.py"
    source = path.read_text().replace("    from apex import amp\n", "    from apex import amp  # noqa: AMP100\n")
    result = fix_source(source)
    assert result.new_source == source
    (initialize,) = [f for f in result.findings if f.code == "AMP101"]
    assert initialize.message.endswith("not rewritten: a suppression comment holds the use on line 6")


def test_a_flag_set_only_where_apex_is_missing_holds_the_rewrite_back():
    from ampfix.engine import fix_source

    source = OPTIONAL.replace("    amp = None\n", "    amp = None\n    use_amp = False\n") + "\n\n" + TRAIN.format(flag="use_amp")
    result = fix_source(source)
    assert result.new_source == source
    (initialize,) = [f for f in result.findings if f.code == "AMP101"]
    assert initialize.message.endswith(NOT_AVAILABILITY + "`use_amp` is only set where apex failed to import")


def test_the_walk_records_the_try_around_each_import_and_whether_the_module_goes_on_without_it():
    """One record of the optional imports (`ImportRef.tried`, `.optional`), read by detection and by the rewrite's
    recogniser of yolov5's shape."""
    from ampfix.syntax.bindings import Walker

    source = ("try:\n    from apex import amp\n    import a\nexcept ImportError:\n    amp = None\n"
              "try:\n    import b\nexcept (AttributeError, ModuleNotFoundError):\n    pass\n"
              "try:\n    import c\nexcept ImportError:\n    raise SystemExit('needs c')\n"
              "try:\n    import d\nexcept Exception:\n    d = None\n"
              "try:\n    import e\nexcept ImportError:\n    raise\nexcept:\n    e = None\n"
              "try:\n    if x:\n        import f\nexcept ImportError:\n    pass\nelse:\n    import g\n"
              "try:\n    pass\nexcept ImportError:\n    import h\n"
              "def train():\n    try:\n        import i\n    except ImportError:\n        i = None\n"
              "try:\n    import j\nexcept* ImportError:\n    j = None\n")
    tree = ast.parse(source)
    walker = Walker()
    walker.statements(tree.body, walker.module_scope)
    found = {imp.node.names[0].name: (imp.tried is not None, imp.optional) for imp in walker.imports}
    assert found == {"amp": (True, True), "a": (True, True), "b": (True, True), "c": (True, False),
                     "d": (True, False), "e": (True, True), "f": (False, False), "g": (False, False),
                     "h": (False, False), "i": (True, True), "j": (True, True)}
    (amp,) = walker.module_scope.bindings["amp"][:1]
    assert amp.imported_by is walker.imports[0] and amp.imported_by.tried is tree.body[0]


def test_an_optional_apex_import_is_reported_as_such_wherever_it_is_and_a_required_one_is_not():
    from ampfix.engine import check_source

    optional = ("def main():\n    try:\n        from apex import amp\n    except ImportError:\n        amp = None\n"
                "    return amp\n")
    required = "try:\n    from apex import amp\nexcept ImportError:\n    raise SystemExit('install apex')\n"
    (finding,) = [f for f in check_source(optional).findings if f.line == 3]
    assert finding.code == "AMP100" and "the `except` branch runs and training silently goes on in float32" \
        in finding.message
    (finding,) = check_source(required).findings
    assert (finding.line, finding.code) == (2, "AMP100") and "silently" not in finding.message


@pytest.mark.parametrize(("options", "reason"), [
    ({"target_torch": (2, 2)}, "needs torch >= 2.3; the target is torch 2.2"),
    ({"rules": frozenset({"AMP100", "AMP101", "AMP102", "AMP103"})}, "AMP104 is not selected"),
    # both, each said once (four uses of selected rules need 2.3), in the order of their lines
    ({"rules": frozenset({"AMP100", "AMP101", "AMP102", "AMP103"}), "target_torch": (2, 2)},
     "needs torch >= 2.3; the target is torch 2.2; AMP104 is not selected"),
])
def test_the_rule_selection_and_the_target_torch_hold_the_rewrite_back_as_for_torchs_own_rules(options, reason):
    """Weighed where torch's rules are (`ModuleContext.hold_back`): the rules the rewrite changes need torch 2.3."""
    from ampfix.engine import fix_source
    from ampfix.core.options import Options

    source = SCRIPT.read_text()
    result = fix_source(source, Options(**options))
    assert result.new_source == source
    (initialize,) = [f for f in result.findings if f.code == "AMP101"]
    assert not initialize.fixed and initialize.message.endswith(f"not rewritten: {reason}"), initialize.message
    assert fix_source(source, Options(target_torch=(2, 3))).new_source != source


def test_an_apex_training_function_for_a_torch_without_native_amp_is_left():
    """The apex branch of `if torch.__version__ < "1.6": ... else: <native>` exists for a torch that has no
    torch.amp: rewritten, it would fail there (it was, before the rewrite was weighed by `ModuleContext.hold_back`)."""
    from ampfix.engine import fix_source

    source = ("import torch\nfrom apex import amp\n\nif torch.__version__ < \"1.6\":\n"
              "    def train(model, opt, x):\n        model, opt = amp.initialize(model, opt)\n"
              "        loss = model(x)\n        with amp.scale_loss(loss, opt) as scaled:\n"
              "            scaled.backward()\n        opt.step()\n"
              "else:\n    def train(model, opt, x):\n        loss = model(x)\n        loss.backward()\n"
              "        opt.step()\n")
    result = fix_source(source)
    assert result.new_source == source
    (initialize,) = [f for f in result.findings if f.code == "AMP101"]
    assert initialize.message.endswith(
        "not rewritten: inside a branch that tests the torch version; the new name may not exist there")
    # the same function outside the branch is the pattern
    unguarded = source.replace('if torch.__version__ < "1.6":\n', "if True:\n")
    assert fix_source(unguarded).new_source != unguarded


def test_the_rules_table_gives_the_torch_the_apex_rewrite_needs():
    from ampfix.cli.report import rules_json

    rows = json.loads(rules_json())
    assert {(row["code"], row["min_torch"]) for row in rows if row["code"].startswith("AMP10")} == {
        ("AMP100", "2.3"), ("AMP101", "2.3"), ("AMP102", "2.3"), ("AMP103", "2.3"), ("AMP104", "2.3"),
        ("AMP105", "-"), ("AMP106", "-"), ("AMP107", "-"), ("AMP108", "-"), ("AMP109", "-")}


def test_a_file_importing_torch_under_another_name_gets_its_own_import_torch():
    """The rewrite spells torch's names through `torch` (`_Shape.torch_name`): bound to torch alone, or imported
    where the file has no such name, here beside `th` (both are torch; the file runs either way)."""
    from ampfix.engine import fix_source

    source = ("import torch as th\nfrom apex import amp\n\n\n"
              "def train(model, optimizer, x):\n"
              "    model, optimizer = amp.initialize(model, optimizer)\n"
              "    loss = th.nn.functional.relu(model(x)).sum()\n"
              "    with amp.scale_loss(loss, optimizer) as scaled:\n        scaled.backward()\n"
              "    optimizer.step()\n")
    assert fix_source(source).new_source == (
        "import torch as th\nimport torch\n\n\n"
        "def train(model, optimizer, x):\n"
        '    scaler = torch.amp.GradScaler("cuda")\n'
        '    with torch.autocast("cuda", dtype=torch.float16):\n'
        "        loss = th.nn.functional.relu(model(x)).sum()\n"
        "    scaler.scale(loss).backward()\n"
        "    scaler.step(optimizer)\n    scaler.update()\n")


def test_the_apex_modules_import_by_their_dotted_names():
    """`ampfix.families.apex` is the package (a name in `ampfix.families` once shadowed it with the rules module)."""
    import ampfix.families.apex.detect as detect
    import ampfix.families.apex.rules as apex_rules

    assert apex_rules.APEX_RULES and detect.plan_apex


def _every_apex_name() -> list[str]:
    from ampfix.families.apex import rules

    return sorted({name for rule in rules.APEX_RULES for name in rule.symbols} | set(rules.ADVICE))


def _uses_of(names: list[str], spelling: str) -> tuple[str, dict[int, str]]:
    """Imports, then one statement per name using it (`u<i> = <name>(m)`): the text, and the line of each name."""
    imports: list[str] = []
    statements: list[str] = []
    for i, name in enumerate(names):
        if spelling == "attribute":
            package = name.partition(".")[0]
            if f"import {package}" not in imports:
                imports.append(f"import {package}")
            statements.append(f"u{i} = {name}(m)")
        else:
            parent, _, last = name.rpartition(".")
            imports.append(f"from {parent} import {last} as n{i}")
            statements.append(f"u{i} = n{i}(m)")
    first = len(imports) + 1
    return "\n".join(imports + statements) + "\n", {first + i: name for i, name in enumerate(names)}


@pytest.mark.parametrize("spelling", ["attribute", "from-import"])
def test_every_apex_name_the_rules_know_is_reported_at_its_line_in_one_file(spelling: str):
    from ampfix.engine import check_source, fix_source
    from ampfix.families.apex import rules

    names = _every_apex_name()
    source, lines = _uses_of(names, spelling)
    checked, fixed = check_source(source), fix_source(source)
    assert fixed.new_source == source
    for result in (checked, fixed):
        assert not [f for f in result.findings if not f.code.startswith("AMP1")], result.findings
        codes = {(f.line, f.code) for f in result.findings}
        for line, name in lines.items():
            rule = rules.rule_of(name)
            assert rule is not None and (line, rule.code) in codes, (name, line)


def test_the_o1_pattern_beside_every_other_apex_name_is_rewritten_and_the_others_reported_at_their_lines():
    """apex's own examples/simple/distributed: apex.amp with an apex.parallel name (issue 17: AMP900, KeyError)."""
    from ampfix.engine import check_source, fix_source
    from ampfix.families.apex import rules

    others = [n for n in _every_apex_name() if not n.startswith(rules.AMP_MODULE)]
    uses, lines = _uses_of(others, "from-import")
    pattern = SCRIPT.read_text().split('"""', 2)[2]  # without the docstring
    source = uses + pattern
    checked, fixed = check_source(source), fix_source(source)
    assert fixed.changed and "from apex import amp" not in fixed.new_source
    assert {(f.line, f.code, f.fixable) for f in checked.findings} == {
        (f.line, f.code, f.fixable) for f in fixed.findings}
    assert sorted(f.code for f in fixed.findings if f.fixed) == ["AMP101", "AMP102", "AMP103", "AMP104"]
    left = {(f.line, f.code) for f in fixed.findings if not f.fixed}
    # each use at its line, and each import (line i + 1 imports name i; it fails on current apex)
    imports = {i + 1: name for i, name in enumerate(others)}
    expected = {(line, rule.code) for line, rule in ((n, rules.rule_of(name))
                                                     for n, name in [*lines.items(), *imports.items()])
                if rule is not None}
    assert len(expected) == 2 * len(others) and left == expected


def test_apex_bound_by_importlib_or_dunder_import_is_reported_with_the_binding():
    from ampfix.engine import fix_source

    source = ('import importlib\namp = importlib.import_module("apex.amp")\n'
              'model, optimizer = amp.initialize(model, optimizer)\napex = __import__("apex")\n'
              'with apex.amp.scale_loss(loss, optimizer) as scaled:\n    scaled.backward()\n')
    result = fix_source(source)
    assert not result.changed
    assert [(f.line, f.code, f.fixed) for f in result.findings] == [(2, "AMP100", False), (3, "AMP101", False),
                                                                   (5, "AMP102", False)]
    assert result.findings[0].message == (
        "`apex.amp` was removed from apex in 2025; `importlib.import_module('apex.amp')` imports it by name, a dynamic "
        "import no rewrite moves: it fails on current apex (where a handler catches that, what it guards silently "
        "stops running); migrate by hand")
    assert "not rewritten: `amp` bound by `importlib.import_module('apex.amp')` on line 2, which no rewrite moves " \
           "with its uses" in result.findings[1].message


@pytest.mark.parametrize(("old", "new", "reason"), [
    # an early return: the object may be made without the scaler its methods use
    ("        if use_amp:\n            from apex", "        if not use_amp:\n            return\n"
     "        if use_amp:\n            from apex",
     "`__init__` may return before initialize, leaving the object without the scaler"),
    # a subclass whose own __init__ may not make the scaler (one in another module cannot be seen)
    ("        return loss.item()\n", "        return loss.item()\n\n\nclass Quiet(Trainer):\n"
     "    def __init__(self, model):\n        self.model = model\n",
     "a subclass of `Trainer` has an `__init__` of its own, which may not make the scaler"),
])
def test_a_trainer_set_up_in_init_is_left_where_an_object_may_lack_the_scaler(old: str, new: str, reason: str):
    from ampfix.engine import fix_source

    source = (ROOT / "fixtures" / "apex" / "trainer_init_forward_in_method.in.py").read_text()
    assert source.count(old) == 1
    source = source.replace(old, new)
    result = fix_source(source)
    assert result.new_source == source
    (initialize,) = [f for f in result.findings if f.code == "AMP101"]
    assert not initialize.fixed and initialize.message.endswith(f"not rewritten: {reason}"), initialize.message


def test_a_probe_of_a_removed_module_by_name_is_reported_never_rewritten():
    """pytorch-lightning 1.2's `_APEX_AVAILABLE = _module_available("apex.amp")`: False on current apex, so the apex
    path it guards goes silently dead. Reported at the string under the name's rule; the O1 pattern beside it is
    rewritten as ever, the probe's bytes stay."""
    from ampfix.engine import fix_source

    probe = '_APEX_AVAILABLE = _module_available("apex.amp")\n'
    source = ("from apex import amp\n" + probe + "\n\ndef train(model, opt, x):\n"
              "    model, opt = amp.initialize(model, opt)\n    loss = model(x)\n"
              "    with amp.scale_loss(loss, opt) as scaled:\n        scaled.backward()\n    opt.step()\n")
    result = fix_source(source)
    assert result.new_source.splitlines()[1] == probe.rstrip("\n")
    assert "from apex" not in result.new_source
    left = [(f.line, f.code, f.message) for f in result.findings if not f.fixed]
    assert left == [(2, "AMP100", "`apex.amp` was removed from apex in 2025; `_module_available('apex.amp')` names "
                                  "it: on current apex a probe of this name answers False (an import or a patch of it "
                                  "fails), so the apex path it guards silently goes dead; reported, never rewritten")]


def test_every_setting_that_selects_apex_is_a_string_the_walk_records():
    """AMP109 reads the settings from the strings the walk records (`STRING_PARTS`), not from a walk of its own."""
    from ampfix.families.apex import rules
    from ampfix.syntax.bindings import STRING_PARTS

    values = [value for _, value in rules.CONFIG_SETTINGS] + [rules.DEEPSPEED_AMP_KEY]
    assert values and all(any(part in value for part in STRING_PARTS) for value in values)


_OPT_LEVEL_SCRIPT = '''import argparse

from apex import amp

parser = argparse.ArgumentParser()
parser.add_argument("--opt_level", default={default!r}{choices})
args = parser.parse_args()
config = {{"level": "O1"}}


def train(model, optimizer, loader):
    model, optimizer = amp.initialize(model, optimizer, opt_level={level})
    for x, y in loader:
        loss = model(x, y)
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
'''
_O2_O3 = ("O2 and O3 cast the model to float16 (O2 with float32 master copies of the weights); native AMP keeps "
          "float32 weights and runs the forward pass under autocast: the numerics and the memory use change")
_O0 = ("O0 is plain float32 (loss scale 1): a run that sets it now gets float16 autocast and a dynamic loss scale, "
       "unless the scaler and autocast are given `enabled=False` for it")


@pytest.mark.parametrize(("default", "choices", "level", "unsafe", "names_o0"), [
    ("O1", ', choices=["O1", "O2"]', "args.opt_level", False, False),
    ("O1", ', choices=["O0", "O1", "O2"]', "args.opt_level", False, True),
    ("O1", "", "args.opt_level", False, True),  # no choices: any string, O0 too
    ("O2", ', choices=["O1", "O2"]', "args.opt_level", True, False),
    ("O1", "", 'config["level"]', True, True),  # not readable here
])
def test_an_opt_level_that_is_not_a_literal_names_what_the_runs_it_may_be_lose(
        default: str, choices: str, level: str, unsafe: bool, names_o0: bool):
    from ampfix.core.options import Options
    from ampfix.engine import fix_source

    source = _OPT_LEVEL_SCRIPT.format(default=default, choices=choices, level=level)
    safe = fix_source(source, Options())
    assert (safe.new_source == source) is unsafe
    fixed = fix_source(source, Options(unsafe_fixes=True))
    [initialize] = [f for f in fixed.findings if f.code == "AMP101"]
    assert initialize.fixed and initialize.line == 12
    assert _O2_O3 in initialize.message
    assert (_O0 in initialize.message) is names_o0


@pytest.mark.parametrize(("declared", "default", "choices", "level", "safe", "rewritten"), [
    ("O1", "O2", ', choices=["O1", "O2"]', "args.opt_level", True, True),  # the declaration wins over a default
    ("O1", "O1", "", 'config["level"]', True, True),  # not readable here, declared
    ("O2", "O1", "", "args.opt_level", False, True),  # O2 declared: the numerics change, --unsafe-fixes only
    ("O1", "O2", ', choices=["O2", "O3"]', "args.opt_level", False, False),  # the option cannot run the level
    ("O2", "O1", "", '"O1"', True, True),  # the code says O1: the declaration is not asked
])
def test_a_declared_opt_level_decides_what_the_code_does_not_say(
        declared: str, default: str, choices: str, level: str, safe: bool, rewritten: bool):
    """`--apex-opt-level` (issue 44): the level the project runs, where initialize's opt_level is not a literal. O1 is
    rewritten in the default mode, O2 under --unsafe-fixes only, saying what changes; a literal is what it says."""
    from ampfix.core.options import Options
    from ampfix.engine import fix_source

    source = _OPT_LEVEL_SCRIPT.format(default=default, choices=choices, level=level)
    default_mode = fix_source(source, Options(apex_opt_level=declared))
    assert (default_mode.new_source != source) is (safe and rewritten)
    unsafe = fix_source(source, Options(apex_opt_level=declared, unsafe_fixes=True))
    assert (unsafe.new_source != source) is rewritten
    [initialize] = [f for f in unsafe.findings if f.code == "AMP101"]
    assert initialize.fixed is rewritten
    said = {"O1": "declared O1 (--apex-opt-level): autocast and a GradScaler, as O1 ran",
            "O2": f"declared O2 (--apex-opt-level) becomes native AMP: {_O2_O3}"}[declared]
    assert (said in initialize.message) is (rewritten and level != '"O1"')
    if not rewritten:
        assert f"whose choices (O2, O3) do not hold the declared {declared} (--apex-opt-level)" in initialize.message
    assert _O0 not in initialize.message  # the project said which level runs


def test_an_undeclared_opt_level_read_from_elsewhere_names_the_declaration():
    from ampfix.core.options import Options
    from ampfix.engine import fix_source

    source = _OPT_LEVEL_SCRIPT.format(default="O1", choices="", level='config["level"]')
    [initialize] = [f for f in fix_source(source, Options()).findings if f.code == "AMP101"]
    assert not initialize.fixed
    assert "the project may declare the level it runs: --apex-opt-level O1|O2 (apex-opt-level in [tool.ampfix])" \
        in initialize.message


def test_the_declared_opt_level_is_a_flag_and_a_key(tmp_path: Path):
    """One option, one place: `--apex-opt-level` and `apex-opt-level` in [tool.ampfix] decide alike; another value
    is refused (exit 2)."""
    source = _OPT_LEVEL_SCRIPT.format(default="O1", choices="", level='config["level"]')
    script = tmp_path / "train.py"
    for given in (["--apex-opt-level", "O1"], []):
        script.write_text(source)
        (tmp_path / "pyproject.toml").write_text("" if given else '[tool.ampfix]\napex-opt-level = "O1"\n')
        assert CliRunner().invoke(app, ["rewrite", *given, str(script)]).exit_code == 1
        assert "amp.initialize" not in script.read_text() and "GradScaler" in script.read_text()
    result = CliRunner().invoke(app, ["check", "--apex-opt-level", "O3", str(script)])
    assert result.exit_code == 2 and "expected one of O1, O2, got 'O3'" in result.output


@pytest.mark.parametrize(("loss_scale", "rewritten"), [
    ("128", True), ("1024.0", True), ('"dynamic"', True), ("0", False), ("args.loss_scale", True), ("True", False),
    ("scale()", False),
])
def test_a_static_loss_scale_becomes_the_nearest_grad_scaler(loss_scale: str, rewritten: bool):
    """A positive number literal: GradScaler(init_scale=N, growth_interval=2**31 - 1) under --unsafe-fixes only, the
    finding saying what differs (a skipped step and a halved scale on inf/NaN gradients); a value read at run time
    with no effect of its own, the same choice made at run time as apex made it (None and "dynamic" its dynamic
    scale); anything else is left."""
    from ampfix.core.options import Options
    from ampfix.engine import fix_source

    source = _OPT_LEVEL_SCRIPT.format(default="O1", choices="", level='"O1"').replace(
        'opt_level="O1")', f'opt_level="O1", loss_scale={loss_scale})')
    static = loss_scale[0].isdigit() or loss_scale == "args.loss_scale"
    assert (fix_source(source, Options()).new_source != source) is (rewritten and not static)
    fixed = fix_source(source, Options(unsafe_fixes=True))
    [initialize] = [f for f in fixed.findings if f.code == "AMP101"]
    assert initialize.fixed is rewritten
    assert ("apex's static scale stepped on inf/NaN gradients, the GradScaler skips that step and halves its scale"
            in initialize.message) is (rewritten and static)
    expected = 'torch.amp.GradScaler("cuda")'
    if loss_scale == "args.loss_scale":
        expected = ('torch.amp.GradScaler("cuda", **({} if args.loss_scale in (None, "dynamic") else '
                    '{"init_scale": float(args.loss_scale), "growth_interval": 2147483647}))')
    elif rewritten and static:
        expected = f'torch.amp.GradScaler("cuda", init_scale={float(loss_scale)!r}, growth_interval=2147483647)'
    assert (expected in fixed.new_source) is rewritten
    if loss_scale == "scale()":
        assert 'loss_scale is neither "dynamic", a positive number literal, nor a value read at run time with no ' \
            "effect of its own" in initialize.message
    elif not rewritten:
        assert 'loss_scale is neither "dynamic" nor a positive number literal' in initialize.message


_GAN = """\
import torch
from apex import amp


def train(generator, discriminator, opt_g, opt_d, loader):
    [generator, discriminator], [opt_g, opt_d] = amp.initialize([generator, discriminator], [opt_g, opt_d])
    for x, real in loader:
        discriminator.zero_grad()
        loss_d = discriminator(generator(x).detach()).mean() - discriminator(real).mean()
        with amp.scale_loss(loss_d, opt_d) as scaled_loss:
            scaled_loss.backward()
        {first}.step()
        generator.zero_grad()
        loss_g = -discriminator(generator(x)).mean()
        with amp.scale_loss(loss_g, opt_g) as scaled_loss:
            scaled_loss.backward()
        {second}.step()
"""


@pytest.mark.parametrize(("first", "second", "rewritten"), [
    ("opt_d", "opt_g", True),  # each optimizer steps after the backward of the loss it was given
    ("opt_g", "opt_d", False),  # opt_g steps before loss_g's backward: its gradients would wait for the next update
])
def test_a_gans_alternating_steps_share_one_scaler_under_unsafe_fixes(first: str, second: str, rewritten: bool):
    """issue 44 (apex's DCGAN): a scale_loss given one of several optimizers is an unsafe fix, named in the findings;
    a backward after a step is rewritten only where the optimizer it was given steps after it."""
    from ampfix.core.options import Options
    from ampfix.engine import fix_source

    source = _GAN.format(first=first, second=second)
    default = fix_source(source, Options())
    [initialize] = [f for f in default.findings if f.code == "AMP101"]
    assert default.new_source == source and not initialize.fixed
    assert ("a scale_loss is given one of initialize's optimizers (a GAN's alternating steps)" in initialize.message) \
        is rewritten
    fixed = fix_source(source, Options(unsafe_fixes=True))
    assert (fixed.new_source != source) is rewritten
    if rewritten:
        assert "        scaler.step(opt_d)\n        with torch.autocast(" in fixed.new_source
        assert fixed.new_source.endswith("        scaler.step(opt_g)\n        scaler.update()\n")
    else:
        [initialize] = [f for f in fixed.findings if f.code == "AMP101"]
        assert "a scale_loss comes after a step of one of the optimizers, and is not given one optimizer that steps " \
               "after it" in initialize.message


SPLIT = ROOT / "fixtures" / "projects" / "apex_split_set_up"
_SHARED = ("(apex's loss scaler was one for the process, so the halves are one set-up; one torch.amp.GradScaler the "
           "modules share is not made, docs/apex.md: rewriting one module would leave the other calling apex)")


def test_half_a_set_up_names_the_other_half_in_the_project(tmp_path: Path, monkeypatch):
    """fixtures/projects/apex_split_set_up (farm's shape: initialize in a helper of one module, scale_loss in a trainer
    of another): each half's finding names the other's place, found through the project's modules, also where the
    file is checked alone (a pre-commit hook); nothing is rewritten, --unsafe-fixes neither."""
    root = tmp_path / "split"
    shutil.copytree(SPLIT, root)
    (root / ".git").mkdir()
    monkeypatch.chdir(root)
    lines = CliRunner().invoke(app, ["check", "."]).stdout.splitlines()
    initialize = [line for line in lines if " AMP101 " in line]
    scale_loss = [line for line in lines if " AMP102 " in line]
    assert [line.split(": ")[0] for line in (*initialize, *scale_loss)] == ["pkg/setup.py:9:28", "pkg/train.py:15:18"]
    assert initialize[0].endswith(
        "not rewritten: initialize with no scale_loss beside it: the backward passes are elsewhere (another module, "
        "or inference only), where the scaler it becomes cannot reach; the other half of the set-up is in the "
        f"project: apex.amp.scale_loss at pkg/train.py:15 {_SHARED}; suggested: scaler = torch.amp.GradScaler(\"cuda\"); "
        "torch.autocast(\"cuda\", dtype=torch.float16) around every forward pass and loss (training and evaluation)")
    assert f"the other half of the set-up is in the project: apex.amp.initialize at pkg/setup.py:9 {_SHARED}" \
        in scale_loss[0]
    alone = CliRunner().invoke(app, ["check", "pkg/train.py"]).stdout.splitlines()
    assert [line for line in alone if " AMP102 " in line] == scale_loss
    assert CliRunner().invoke(app, ["rewrite", "--unsafe-fixes", "."]).exit_code == 1  # findings left, none fixed
    for path in sorted(SPLIT.rglob("*.py")):
        assert (root / path.relative_to(SPLIT)).read_bytes() == path.read_bytes(), path
    # the step half alone in its project: the rest is reached otherwise, or is its callers'
    (root / "pkg" / "setup.py").unlink()
    (root / "pkg" / "train.py").write_text((SPLIT / "pkg" / "train.py").read_text().replace(
        "from pkg.setup import initialize_optimizer\n", ""))
    alone = CliRunner().invoke(app, ["check", "pkg/train.py"]).stdout
    assert ("; no other module of the project names apex.amp.initialize through its imports: the rest of the set-up "
            "is reached otherwise (an `amp` handed in as an argument, as Lightning's `configure_apex(amp, ...)`) or is "
            "its callers', outside the project; suggested:") in alone


WHOLE = ROOT / "fixtures" / "projects" / "apex_split_rewrite"
_SAME_RUN = "under --unsafe-fixes, not rewritten across modules: the other half of the set-up must be rewritten in the same run: "


def _whole_split_project(tmp_path: Path, monkeypatch, name: str = "whole") -> Path:
    root = tmp_path / name
    shutil.copytree(WHOLE, root)
    (root / ".git").mkdir()
    monkeypatch.chdir(root)
    return root


def _unchanged(root: Path, *except_for: str) -> None:
    for path in sorted(WHOLE.rglob("*.py")):
        relative = path.relative_to(WHOLE).as_posix()
        if relative not in except_for:
            assert (root / relative).read_bytes() == path.read_bytes(), relative


def test_a_split_set_up_whole_in_the_project_is_rewritten_across_modules(tmp_path: Path, monkeypatch):
    """fixtures/projects/apex_split_rewrite: initialize in the set-up module's `build`, scale_loss and the steps in
    the loop of another that binds `model, optimizer = build(...)`. Rewritten under --unsafe-fixes, both halves in
    one run: the scaler lives in pkg/setup.py, read by pkg/train.py after `build` returned; a second run changes
    nothing."""
    root = _whole_split_project(tmp_path, monkeypatch)
    first = CliRunner().invoke(app, ["rewrite", "--unsafe-fixes", "."])
    assert first.exit_code == 1, first.stdout  # files changed
    assert [line.split(" ")[:3] for line in first.stdout.splitlines()[:2]] == [
        ["pkg/setup.py:8:24:", "AMP101", "fixed"], ["pkg/train.py:13:14:", "AMP102", "fixed"]]
    expected = WHOLE.parent / "apex_split_rewrite.expected"
    for name in ("pkg/setup.py", "pkg/train.py"):
        assert (root / name).read_bytes() == (expected / name).read_bytes(), name
    _unchanged(root, "pkg/setup.py", "pkg/train.py")
    again = CliRunner().invoke(app, ["rewrite", "--unsafe-fixes", "."])
    assert again.exit_code == 0, again.stdout
    for name in ("pkg/setup.py", "pkg/train.py"):
        assert (root / name).read_bytes() == (expected / name).read_bytes(), name
    # the halves named the other way round decide alike, whichever is written first
    other = _whole_split_project(tmp_path, monkeypatch, "reversed")
    assert CliRunner().invoke(app, ["rewrite", "--unsafe-fixes", "pkg/train.py", "pkg/setup.py"]).exit_code == 1
    for name in ("pkg/setup.py", "pkg/train.py"):
        assert (other / name).read_bytes() == (expected / name).read_bytes(), name


def test_one_half_of_a_whole_split_set_up_is_left_naming_the_other(tmp_path: Path, monkeypatch):
    """A pre-commit hook (or `rewrite FILE`) given one half: nothing is rewritten, and the finding says the other
    half must be in the same run, naming it; the default mode reports as before the cross-module rewrite."""
    root = _whole_split_project(tmp_path, monkeypatch)
    steps = CliRunner().invoke(app, ["rewrite", "--unsafe-fixes", "pkg/train.py"])
    assert steps.exit_code == 1
    (scale_loss,) = [line for line in steps.stdout.splitlines() if " AMP102 " in line]
    assert f"; {_SAME_RUN}pkg/setup.py (give this run every module of the set-up, or the project's folder); " \
        "suggested:" in scale_loss
    set_up = CliRunner().invoke(app, ["rewrite", "--unsafe-fixes", "pkg/setup.py"])
    (initialize,) = [line for line in set_up.stdout.splitlines() if " AMP101 " in line]
    assert f"; {_SAME_RUN}pkg/train.py (give this run" in initialize
    _unchanged(root)
    default = CliRunner().invoke(app, ["rewrite", "."])
    assert default.exit_code == 1
    (initialize,) = [line for line in default.stdout.splitlines() if " AMP101 " in line]
    assert initialize == (
        "pkg/setup.py:8:24: AMP101 left: `apex.amp.initialize` was removed from apex in 2025; O1 patched torch for the "
        "whole process from here on; autocast is scoped, so every forward pass (evaluation too) must be under it; not "
        "rewritten: initialize with no scale_loss beside it: the backward passes are elsewhere (another module, or "
        "inference only), where the scaler it becomes cannot reach; the other half of the set-up is in the project: "
        f"apex.amp.scale_loss at pkg/train.py:13 {_SHARED}; suggested: scaler = torch.amp.GradScaler(\"cuda\"); "
        "torch.autocast(\"cuda\", dtype=torch.float16) around every forward pass and loss (training and evaluation)")
    assert "--unsafe-fixes" not in default.stdout.replace("with --unsafe-fixes)", "")
    _unchanged(root)


def test_the_split_rewrite_trains_as_the_apex_original_under_verify(tmp_path: Path, monkeypatch):
    """The rewritten project's run.py against the apex original (the runner's emulation), each importing its own
    package: equivalent, the 3 losses bit for bit; the disabled placeholder scaler nothing calls is not counted."""
    original = tmp_path / "original"
    shutil.copytree(WHOLE, original)
    root = _whole_split_project(tmp_path, monkeypatch)
    assert CliRunner().invoke(app, ["rewrite", "--unsafe-fixes", "."]).exit_code == 1
    report_path = tmp_path / "verify.json"
    verify = subprocess.run([sys.executable, "-m", "ampfix", "verify", str(original / "run.py"), "--rewritten",
                             str(root / "run.py"), "--json", str(report_path)], capture_output=True, text=True,
                            timeout=300, cwd=tmp_path)
    report = json.loads(report_path.read_text())
    assert verify.returncode == 0, verify.stderr
    assert report["equivalent"] is True and report["first_difference"] is None
    assert len(report["original"]["losses"]) == 3 and report["original"]["losses"] == report["rewritten"]["losses"]
    assert report["rewritten"]["scaler"] == {"scale": 3, "unscale": 0, "step": 3, "update": 3, "skipped_steps": 0}
    assert [s["enabled"] for s in report["rewritten"]["grad_scalers"]] == [False, True]


def test_a_half_whose_other_half_is_rewritten_already_is_rewritten_alone(tmp_path: Path, monkeypatch):
    """A half the run (another worker) or a person has written already is known by its rewritten shape: the other
    half, given alone, is then rewritten to match (both ways round)."""
    expected = WHOLE.parent / "apex_split_rewrite.expected"
    for done, given in (("pkg/setup.py", "pkg/train.py"), ("pkg/train.py", "pkg/setup.py")):
        root = _whole_split_project(tmp_path, monkeypatch, done.replace("/", "_"))
        shutil.copy(expected / done, root / done)
        assert CliRunner().invoke(app, ["rewrite", "--unsafe-fixes", given]).exit_code == 1
        for name in ("pkg/setup.py", "pkg/train.py"):
            assert (root / name).read_bytes() == (expected / name).read_bytes(), (done, name)


@pytest.mark.parametrize(("changed", "old", "new", "reason"), [
    # initialize under an `if`: where it was false, apex raised at the other module's scale_loss
    ("pkg/setup.py", "    model, optimizer = amp.initialize(", "    if use_amp:\n        model, optimizer = amp.initialize(",
     "initialize is not a statement of a module-level function's own body (under no `if`: where the `if` was false, "
     "apex raised at the other modules' scale_loss)"),
    # the scaler is read after the set-up's call: a scale_loss before it would find none
    ("pkg/train.py", "    model, optimizer = build(model, use_amp=use_amp)\n    losses = []\n", "    losses = []\n",
     "a scale_loss comes before `model, optimizer = ...` on line 12: the scaler is read after that call"),
])
def test_a_split_set_up_not_in_the_narrow_shape_is_left_in_both_halves(tmp_path: Path, monkeypatch, changed, old,
                                                                       new, reason):
    root = _whole_split_project(tmp_path, monkeypatch)
    text = (root / changed).read_text()
    assert old in text
    (root / changed).write_text(text.replace(old, new) + ("    model, optimizer = build(model, use_amp=use_amp)\n"
                                                           if changed == "pkg/train.py" else ""))
    out = CliRunner().invoke(app, ["rewrite", "--unsafe-fixes", "."]).stdout
    half = [line for line in out.splitlines() if line.startswith(changed) and " AMP10" in line and " left: " in line]
    assert any(f"under --unsafe-fixes, not rewritten across modules: {reason}; suggested:" in line for line in half), out
    other = "pkg/train.py" if changed == "pkg/setup.py" else "pkg/setup.py"
    assert (f"under --unsafe-fixes, not rewritten across modules: the other half of the set-up in {changed} is not "
            "rewritten (its finding says why)") in out
    assert (root / other).read_bytes() == (WHOLE / other).read_bytes()


SCALING_CLASS = ROOT / "fixtures" / "projects" / "apex_scaling_class"
_SETTINGS = ("apex's loss scaler is set through its private `_amp_state.loss_scalers[0]` on lines 26, 27 (`_loss_scale "
             "= loss_scale`, `_scale_seq_len = dls_upscale_interval`): a GradScaler's `init_scale=loss_scale, "
             "growth_interval=dls_upscale_interval` (the scale it starts from, where it is set before the first loss "
             "is scaled; apex doubled its scale after that many clean updates and halved it on inf/NaN gradients, as "
             "a GradScaler does with its default factors; apex counted each scale_loss as an update, a GradScaler "
             "counts each step: they differ with gradient accumulation; apex's scale stopped growing at 2**24, a "
             "GradScaler's has no ceiling)")
_BY_HAND = ("a GradScaler made in `AMPOptimizer.__init__` and used in `AMPOptimizer.step` (scale, `unscale_` before "
            "clipping, step, update)")


_STEP_SAID = ("`AMPOptimizer` holds a torch.amp.GradScaler (`scaler`, made in `__init__`): `step` scales the loss with "
              "it, unscales the gradients before the clipping (over the optimizer's param_groups, what master_params "
              "iterated) and steps and updates through it; apex's dynamic loss scale stopped growing at 2**24, a "
              "GradScaler's has no ceiling; the GradScaler is the object's, where apex's loss scaler was one for the "
              "process: the same where one object is built, as here")
_SET_UP_SAID = ("initialize removed: `AMPOptimizer` (built after it) holds a torch.amp.GradScaler; the forward pass and "
                "loss of `Trainer.iterate` run under `torch.autocast(..., enabled=isinstance(self.fp_optimizer, "
                "AMPOptimizer))`; opt_level O2 becomes native AMP: O2 and O3 cast the model to float16 (O2 with float32 "
                "master copies of the weights); native AMP keeps float32 weights and runs the forward pass under "
                "autocast: the numerics and the memory use change (NVIDIA's deprecation notice points O1 and O2 users "
                "to native AMP); keep_batchnorm_fp32 belongs to a model cast to float16 (O2/O3): native AMP keeps "
                "every weight float32; cast_model_outputs=torch.float16 has no twin: autocast's outputs have the dtype "
                "of the op that made them, so the loss may be computed from float32 outputs where apex gave it "
                "float16 ones; apex's dynamic loss scale stopped growing at 2**24, a GradScaler's has no ceiling; the "
                "model runs under autocast in `Trainer.iterate` only, where its loss reaches `AMPOptimizer`: run "
                "elsewhere (a translator given the same model), it now runs in float32 where O2 had cast it to float16")


def _scaling_class(tmp_path: Path, monkeypatch, name: str = "scaling_class") -> Path:
    root = tmp_path / name
    shutil.copytree(SCALING_CLASS, root)
    (root / ".git").mkdir()
    monkeypatch.chdir(root)
    return root


def test_a_class_that_scales_the_loss_built_after_initialize_is_rewritten_in_both_halves(tmp_path: Path,
                                                                                         monkeypatch):
    """fixtures/projects/apex_scaling_class (DeepLearningExamples' GNMT: the trainer calls initialize, then builds
    `AMPOptimizer`, whose `step` scales the loss and whose `__init__` sets apex's loss scaler through `_amp_state`):
    an unsafe fix in the default mode, nothing on disk changed; under --unsafe-fixes both halves are rewritten
    (apex_scaling_class.expected, checked by hand), each use saying what it became; a second run changes nothing."""
    root = _scaling_class(tmp_path, monkeypatch)
    result = CliRunner().invoke(app, ["check", "."])
    assert result.exit_code == 1
    lines = {line.split(": ")[0]: line for line in result.stdout.splitlines() if ": AMP10" in line}
    assert lines["pkg/fp_optimizers.py:30:14"] == (
        "pkg/fp_optimizers.py:30:14: AMP102 [unsafe] `apex.amp.scale_loss` was removed from apex in 2025; not "
        f"rewritten: {_STEP_SAID} (an unsafe fix exists: --unsafe-fixes); suggested: scaler.scale(loss).backward(); "
        "scaler.step(optimizer); scaler.update()")
    assert lines["pkg/trainer.py:17:42"] == (
        "pkg/trainer.py:17:42: AMP101 [unsafe] `apex.amp.initialize` was removed from apex in 2025; O2 casts the model "
        "to float16 and keeps float32 master weights: native autocast (O1) changes the numerics, so the choice is a "
        "person's; keep_batchnorm_fp32 belongs to a model cast to float16 (O2/O3): native AMP keeps every weight "
        f"float32; not rewritten: {_SET_UP_SAID} (an unsafe fix exists: --unsafe-fixes); suggested: scaler = "
        "torch.amp.GradScaler(\"cuda\"); torch.autocast(\"cuda\", dtype=torch.float16) around every forward pass and "
        "loss (training and evaluation)")
    assert lines["pkg/fp_optimizers.py:25:23"] == (
        "pkg/fp_optimizers.py:25:23: AMP106 [unsafe] apex's private amp state was removed from apex in 2025; "
        f"GradScaler keeps its own; {_SETTINGS}; suggested: scaler.get_scale()")
    for path in sorted(SCALING_CLASS.rglob("*.py")):
        assert (root / path.relative_to(SCALING_CLASS)).read_bytes() == path.read_bytes(), path
    unsafe = CliRunner().invoke(app, ["rewrite", "--unsafe-fixes", "--apex-opt-level", "O1", "."])
    assert unsafe.exit_code == 1  # fixes made
    fixed = sorted(line for line in unsafe.stdout.splitlines() if ": AMP10" in line)
    assert fixed == [
        f"pkg/fp_optimizers.py:25:23: AMP106 fixed (unsafe): {_STEP_SAID}",
        f"pkg/fp_optimizers.py:30:14: AMP102 fixed (unsafe): {_STEP_SAID}",
        f"pkg/fp_optimizers.py:35:33: AMP103 fixed (unsafe): {_STEP_SAID}",
        f"pkg/trainer.py:17:42: AMP101 fixed (unsafe): {_SET_UP_SAID}",
    ]
    expected = SCALING_CLASS.parent / "apex_scaling_class.expected"
    for name in ("pkg/fp_optimizers.py", "pkg/trainer.py"):
        assert (root / name).read_bytes() == (expected / name).read_bytes(), name
    again = CliRunner().invoke(app, ["rewrite", "--unsafe-fixes", "."])
    assert again.exit_code == 0 and again.stdout.endswith("rewrote 0 files (0 fixes); 0 findings left.\n")
    for name in ("pkg/fp_optimizers.py", "pkg/trainer.py"):
        assert (root / name).read_bytes() == (expected / name).read_bytes(), name


def test_the_scaling_class_rewrite_trains_as_the_apex_original_under_verify(tmp_path: Path, monkeypatch):
    """run.py against the apex original under the runner's emulation, which has neither O2 nor `_amp_state`: the
    fixture at O1 without the loss scaler's settings (`AMPOptimizer.__init__` then makes a GradScaler with torch's
    defaults, apex's dynamic scaler's). Two micro-steps per update, clipped: equivalent, the 4 losses bit for bit,
    the gradients unscaled once per step."""
    original = tmp_path / "original"
    shutil.copytree(SCALING_CLASS, original)
    for path, old, new in (
            ("pkg/trainer.py", "                cast_model_outputs=torch.float16,\n                keep_batchnorm_fp32=False,\n"
             "                opt_level='O2')", "                opt_level='O1')"),
            ("pkg/fp_optimizers.py", "import apex.amp._amp_state\n", ""),
            ("pkg/fp_optimizers.py", "\n        loss_scaler = apex.amp._amp_state.loss_scalers[0]\n        loss_scaler._loss_scale "
             "= loss_scale\n        loss_scaler._scale_seq_len = dls_upscale_interval\n", "")):
        text = (original / path).read_text()
        assert old in text, (path, old)
        (original / path).write_text(text.replace(old, new))
    root = tmp_path / "rewritten"
    shutil.copytree(original, root)
    (root / ".git").mkdir()
    monkeypatch.chdir(root)
    assert CliRunner().invoke(app, ["rewrite", "--unsafe-fixes", "."]).exit_code == 1
    assert "        self.scaler = torch.amp.GradScaler(\"cuda\")\n" in (root / "pkg" / "fp_optimizers.py").read_text()
    report_path = tmp_path / "verify.json"
    verify = subprocess.run([sys.executable, "-m", "ampfix", "verify", str(original / "run.py"), "--rewritten",
                             str(root / "run.py"), "--json", str(report_path)], capture_output=True, text=True,
                            timeout=300, cwd=tmp_path)
    report = json.loads(report_path.read_text())
    assert verify.returncode == 0, verify.stderr
    assert report["equivalent"] is True and report["first_difference"] is None
    assert len(report["original"]["losses"]) == 4 and report["original"]["losses"] == report["rewritten"]["losses"]
    assert report["rewritten"]["scaler"] == {"scale": 4, "unscale": 2, "step": 2, "update": 2, "skipped_steps": 0}


def test_a_scaling_class_half_whose_other_half_is_rewritten_already_is_rewritten_alone(tmp_path: Path, monkeypatch):
    """A half written already (by another worker of the run, or a person) is known by its rewritten shape: the other
    half, given alone, is rewritten to match (both ways round)."""
    expected = SCALING_CLASS.parent / "apex_scaling_class.expected"
    for done, given in (("pkg/fp_optimizers.py", "pkg/trainer.py"), ("pkg/trainer.py", "pkg/fp_optimizers.py")):
        root = _scaling_class(tmp_path, monkeypatch, done.replace("/", "_"))
        shutil.copy(expected / done, root / done)
        assert CliRunner().invoke(app, ["rewrite", "--unsafe-fixes", given]).exit_code == 1
        for name in ("pkg/fp_optimizers.py", "pkg/trainer.py"):
            assert (root / name).read_bytes() == (expected / name).read_bytes(), (done, name)


@pytest.mark.parametrize(("changed", "old", "new", "reason", "other_reason"), [
    # a loss scale given to initialize too: the settings would be written twice
    ("pkg/trainer.py", "                opt_level='O2')", "                opt_level='O2', loss_scale=128.0)",
     "initialize is given other keywords than a literal opt_level O1 or O2, keep_batchnorm_fp32 and "
     "cast_model_outputs=torch.float16",
     "the set-up in pkg/trainer.py: initialize is given other keywords than a literal opt_level O1 or O2"),
    # a comment in the scale_loss's `with`, which is rebuilt
    ("pkg/fp_optimizers.py", "            scaled_loss.backward()\n",
     "            scaled_loss.backward()  # scaled\n",
     "a statement the rewrite rebuilds shares its lines with other code or a comment",
     "the other half of the set-up in pkg/fp_optimizers.py is not rewritten (its finding says why)"),
    # the clipping outside the step's `if`: it would clip the micro-steps' scaled gradients
    ("pkg/fp_optimizers.py", "        if update:\n            if self.grad_clip",
     "        clip_grad_norm_(amp.master_params(optimizer), 1.0)\n        if update:\n            if self.grad_clip",
     "scale_loss is not followed by `if <parameter>:` (the step), with no `else`",
     "the class that scales the loss, in pkg/fp_optimizers.py: scale_loss is not followed by `if <parameter>:`"),
])
def test_a_scaling_class_set_up_not_in_the_narrow_shape_is_left_in_both_halves(tmp_path: Path, monkeypatch, changed,
                                                                                old, new, reason, other_reason):
    root = _scaling_class(tmp_path, monkeypatch)
    text = (root / changed).read_text()
    assert old in text
    (root / changed).write_text(text.replace(old, new))
    out = CliRunner().invoke(app, ["rewrite", "--unsafe-fixes", "."]).stdout
    said = [line for line in out.splitlines() if line.startswith(changed) and " left: " in line
            and f"under --unsafe-fixes, not rewritten as a class that scales the loss: {reason}" in line]
    assert said, out
    other = "pkg/trainer.py" if changed == "pkg/fp_optimizers.py" else "pkg/fp_optimizers.py"
    assert any(line.startswith(other) and " left: " in line
               and f"not rewritten as a class that scales the loss: {other_reason}" in line
               for line in out.splitlines()), out
    assert (root / other).read_bytes() == (SCALING_CLASS / other).read_bytes()
    # each half names the class, where it is built, and the shape that is rewritten (not the shape it is not)
    shape = ("rewritten across modules under --unsafe-fixes only in the shape of docs/apex.md's *A class that scales "
             "the loss, built after initialize*")
    assert any(line.startswith("pkg/trainer.py") and " left: " in line and (
        "the loss is scaled in `AMPOptimizer.step` (pkg/fp_optimizers.py:30), an object of which is built on line 24 "
        f"after initialize and kept as `self.fp_optimizer`: {shape} (by hand otherwise: {_BY_HAND}, initialize "
        "removed here") in line for line in out.splitlines()), out
    assert any(line.startswith("pkg/fp_optimizers.py") and " left: " in line and (
        "`AMPOptimizer.step` scales the loss, and the class is built at pkg/trainer.py:24 (at least): "
        f"{shape}, where the set-up's module builds it once, in the statement right after initialize (by hand "
        f"otherwise: {_BY_HAND}, initialize removed where the class is built") in line
               for line in out.splitlines()), out


def test_a_class_that_scales_the_loss_built_nowhere_is_named_as_before(tmp_path: Path, monkeypatch):
    """The class built nowhere in the project (a registry may build it by name): not rewritten, and nothing is said
    of where it is built."""
    root = _scaling_class(tmp_path, monkeypatch)
    trainer = root / "pkg" / "trainer.py"
    trainer.write_text(trainer.read_text().replace("self.fp_optimizer = AMPOptimizer(", "self.fp_optimizer = dict(")
                       .replace("from pkg.fp_optimizers import AMPOptimizer\n", ""))
    (scale_loss,) = [line for line in CliRunner().invoke(app, ["check", "."]).stdout.splitlines() if " AMP102 " in line]
    assert f"{_SHARED}; {_SETTINGS}; suggested:" in scale_loss
    assert CliRunner().invoke(app, ["rewrite", "--unsafe-fixes", "."]).exit_code == 1
    assert (root / "pkg" / "fp_optimizers.py").read_bytes() == (SCALING_CLASS / "pkg" / "fp_optimizers.py").read_bytes()


@pytest.mark.parametrize(("written", "said"), [
    # written directly after an initialize under an `if` (where it did not run, the write raised): left, said
    ("    amp._amp_state.loss_scalers[0]._loss_scale = 2.0**10\n",
     "; apex's loss scaler is set through its private `_amp_state.loss_scalers[0]` on line 6 (`_loss_scale = "
     "2.0**10`): a GradScaler's `init_scale=2.0**10` (the scale it starts from, where it is set before the first "
     "loss is scaled)"),
    # a ceiling, through a name: GradScaler has none
    ("    scaler0 = amp._amp_state.loss_scalers[0]\n    scaler0._max_loss_scale = 2.0**16\n",
     "; apex's loss scaler is set through its private `_amp_state.loss_scalers[0]` on line 7 (`_max_loss_scale = "
     "2.0**16`); `_max_loss_scale` has no GradScaler twin"),
    # read as well as set: not settings alone, nothing said of them
    ("    scaler0 = amp._amp_state.loss_scalers[0]\n    scaler0._loss_scale = 8.0\n    print(scaler0._loss_scale)\n",
     ""),
    # another loss scaler than the first (num_losses): not the one GradScaler's
    ("    amp._amp_state.loss_scalers[1]._loss_scale = 8.0\n", ""),
])
def test_the_loss_scaler_settings_written_through_amp_state_are_read_as_gradscaler_arguments(written, said):
    from ampfix.engine import check_source

    source = ("from apex import amp\n\n\ndef train(model, optimizer, loader, fp16):\n"
              "    if fp16: model, optimizer = amp.initialize(model, optimizer)\n" + written)
    (note,) = [f.message for f in check_source(source).findings if f.code == "AMP106"]
    assert note == "apex's private amp state was removed from apex in 2025; GradScaler keeps its own" + said


def test_the_state_import_read_otherwise_is_named_with_the_module_import():
    """fixtures/apex/private_state_import_read_otherwise: `import apex.amp._amp_state` binds `apex` for
    `apex.optimizers` too, so it cannot go with the rewrite: the reason names both imports and their lines."""
    from ampfix.engine import check_source

    source = (ROOT / "fixtures" / "apex" / "private_state_import_read_otherwise.in.py").read_text()
    (initialize,) = [f.message for f in check_source(source).findings if f.code == "AMP101"]
    assert initialize.endswith(
        "not rewritten: apex.amp is reached through 2 imports (`import apex.amp._amp_state` on line 4, `from apex "
        "import amp` on line 5), where the rewrite takes one `from apex import amp` (at module level, or in the "
        "function of its uses)")
