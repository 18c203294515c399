"""Verify without apex (issue 12): `ampfix run` / `ampfix verify` provide apex.amp's O1 when no apex
has it, and verify holds a native rewrite to the apex original. Each job runs once for the module
(see runner_jobs); the unit tests below start no torch child."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch
from runner_jobs import FIXTURES, Job, autocast_region, define_job_fixtures

from ampfix.runner.apex.provider import ApexProvider
from ampfix.runner.host.compare import first_difference
from ampfix.runner.host.model import RunReport
from ampfix.runner.trace.observe import Recorder

JOBS: dict[str, list[str]] = {
    "apex_run": ["run", "apex_yolo.py"],
    "apex_o2_run": ["run", "apex_glue.py", "--fp16_opt_level", "O2"],
    "apex_thread_run": ["run", "apex_thread.py"],
    "apex_restore_run": ["run", "apex_restore.py"],
    "objectives_verify": ["verify", "apex_objectives.py", "--rewritten", "apex_objectives.native.py"],
    "objectives_off_verify": ["verify", "apex_objectives.py", "--rewritten", "apex_objectives.native.py", "--",
                              "--fp16", "0"],
    "objectives_per_iteration_verify": ["verify", "apex_objectives.py", "--rewritten",
                                        "apex_objectives.update_per_iteration.py"],
    "yolo_verify": ["verify", "apex_yolo.py", "--rewritten", "apex_yolo.native.py"],
    "yolo_wrong_eval_verify": ["verify", "apex_yolo.py", "--rewritten", "apex_yolo.wrong_eval.py"],
    "yolo_wrong_update_verify": ["verify", "apex_yolo.py", "--rewritten", "apex_yolo.wrong_update.py"],
    "yolo_wrong_step_verify": ["verify", "apex_yolo.py", "--rewritten", "apex_yolo.wrong_step.py"],
    "glue_verify": ["verify", "apex_glue.py", "--rewritten", "apex_glue.native.py"],
    "glue_wrong_clip_verify": ["verify", "apex_glue.py", "--rewritten", "apex_glue.wrong_clip.py"],
    "ddp_verify": ["verify", "apex_ddp.py", "--rewritten", "apex_ddp.native.py"],
    "condition_verify": ["verify", "apex_condition.py", "--rewritten", "apex_condition.native.py"],
    "condition_off_verify": ["verify", "apex_condition.py", "--rewritten", "apex_condition.native.py", "--",
                             "--fp16", "0"],
    "trainer_verify": ["verify", "apex_trainer.py", "--rewritten", "apex_trainer.native.py"],
    "trainer_off_verify": ["verify", "apex_trainer.py", "--rewritten", "apex_trainer.native.py", "--", "--fp16", "0"],
    "trainer_wrong_clip_verify": ["verify", "apex_trainer.py", "--rewritten", "apex_trainer.wrong_clip.py"],
    "clip_helpers_verify": ["verify", "apex_clip_helpers.py", "--rewritten", "apex_clip_helpers.native.py"],
    "clip_helpers_wrong_verify": ["verify", "apex_clip_helpers.py", "--rewritten", "apex_clip_helpers.wrong_clip.py"],
    # bfloat16 (--amp-dtype): these two compare figures no float16 overflow disturbs (in float16 a step of each
    # side is skipped at the first scale, and the losses shown are float16's).
    "losses_verify": ["verify", "apex_losses.py", "--rewritten", "apex_losses.native.py", "--amp-dtype", "bfloat16"],
    "dcgan_verify": ["verify", "apex_dcgan.py", "--rewritten", "apex_dcgan.native.py"],
    "validate_verify": ["verify", "apex_validate.py", "--rewritten", "apex_validate.native.py"],
    "optimizers_verify": ["verify", "apex_optimizers.py", "--rewritten", "apex_optimizers.native.py"],
    "optimizers_wrong_clip_verify": ["verify", "apex_optimizers.py", "--rewritten",
                                     "apex_optimizers.wrong_clip.py", "--amp-dtype", "bfloat16"],
    "init_trainer_verify": ["verify", "apex_init_trainer.py", "--rewritten", "apex_init_trainer.native.py"],
    "init_trainer_step_verify": ["verify", "apex_init_trainer_step.py", "--rewritten",
                                 "apex_init_trainer_step.native.py"],
    "single_file_verify": ["verify", "apex_single_file.py", "--rewritten", "apex_single_file.native.py"],
    "condition_key_verify": ["verify", "apex_condition_key.py", "--rewritten", "apex_condition_key.native.py"],
    "setup_box_verify": ["verify", "apex_setup_box.py", "--rewritten", "apex_setup_box.native.py"],
    "setup_box_off_verify": ["verify", "apex_setup_box.py", "--rewritten", "apex_setup_box.native.py", "--",
                             "--fp16", "0"],
    "setup_box_wrong_order_verify": ["verify", "apex_setup_box.py", "--rewritten", "apex_setup_box.wrong_order.py"],
    "imagenet_verify": ["verify", "apex_imagenet.py", "--rewritten", "apex_imagenet.native.py", "--", "--opt-level",
                        "O1"],
    "switch_verify": ["verify", "apex_switch.py", "--rewritten", "apex_switch.native.py"],
    "switch_first_verify": ["verify", "apex_switch_first.py", "--rewritten", "apex_switch_first.native.py"],
    "switch_first_native_verify": ["verify", "apex_switch_first.py", "--rewritten", "apex_switch_first.native.py",
                                   "--", "--apex-amp", "0", "--native-amp", "1"],
    "bert_glue_verify": ["verify", "apex_bert_glue.py", "--rewritten", "apex_bert_glue.native.py"],
    "bert_glue_off_verify": ["verify", "apex_bert_glue.py", "--rewritten", "apex_bert_glue.native.py", "--", "--fp16",
                             "0"],
    "imagenet_wrong_eval_verify": ["verify", "apex_imagenet.py", "--rewritten", "apex_imagenet.wrong_eval.py", "--",
                                   "--opt-level", "O1"],
    "inference_handed_on_verify": ["verify", "apex_inference_handed_on.py", "--rewritten",
                                   "apex_inference_handed_on.native.py"],
    "inference_handed_on_wrong_eval_verify": ["verify", "apex_inference_handed_on.py", "--rewritten",
                                              "apex_inference_handed_on.wrong_eval.py"],
    "inference_handed_on_fp32_verify": ["verify", "apex_inference_handed_on.py", "--rewritten",
                                        "apex_inference_handed_on.native.py", "--", "--precision", "fp32"],
    "inference_handed_on_other_kind_verify": ["verify", "apex_inference_handed_on.py", "--rewritten",
                                              "apex_inference_handed_on.native.py", "--", "--kind", "lookup"],
}

define_job_fixtures(JOBS, globals())

EMULATED_O1 = "apex.amp O1 (float16 autocast from initialize on, dynamic loss scaling from 2**16)"
APEX_SCALER = {
    "device": "cuda", "init_scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000,
    "enabled": True,
}  # fmt: skip


# -- ampfix run on an apex script --------------------------------------------------------------


def test_the_optional_apex_import_gets_the_emulation_and_mixed_precision_is_on(apex_run: Job) -> None:
    report = apex_run.report
    assert apex_run.returncode == 0, apex_run.stderr
    script = str(FIXTURES / "apex_yolo.py")
    assert report["emulated"] == [{"feature": EMULATED_O1, "file": script, "line": 72, "count": 1}]
    assert report["unemulated"] == []
    # One region, opened by amp.initialize and never left: O1 is global.
    region = autocast_region(report, 72)
    assert (region["device_requested"], region["dtype_requested"], region["device_run"], region["dtype"]) == (
        "cuda", "float16", "cpu", "float16",
    )  # fmt: skip
    assert (region["enabled"], region["entered"]) == (True, 1)
    assert len(report["autocast_regions"]) == 1
    # The evaluation after the epoch ran in mixed precision too (float16, as apex gives it on a GPU).
    assert "eval loss" in apex_run.stdout and apex_run.stdout.rstrip().endswith("(torch.float16)")


def test_a_thread_started_after_initialize_runs_in_mixed_precision(apex_thread_run: Job) -> None:
    report = apex_thread_run.report
    assert apex_thread_run.returncode == 0, apex_thread_run.stderr
    assert report["emulated"] == [{"feature": EMULATED_O1, "file": str(FIXTURES / "apex_thread.py"), "line": 13, "count": 1}]
    # Only the thread runs ops after initialize: its randn (float32), its linear in the AMP dtype,
    # and its softmax in float32 as CUDA's policy gives it; none of them counted without autocast.
    assert report["op_dtypes"] == {"float32": 2, "float16": 1}
    # linear ran in float16, as a GPU gives it.
    assert apex_thread_run.stdout == "in the thread: linear torch.float16, softmax torch.float32, autocast True\n"
    region = autocast_region(report, 13)
    assert (region["device_requested"], region["dtype_requested"], region["dtype"], region["entered"]) == (
        "cuda", "float16", "float16", 1,
    )  # fmt: skip


def test_apex_loss_scaling_is_reported_as_its_grad_scaler_twin(apex_run: Job) -> None:
    report = apex_run.report
    (scaler,) = report["grad_scalers"]
    assert scaler == {**APEX_SCALER, "emulating": "apex.amp loss scaler", "file": str(FIXTURES / "apex_yolo.py"), "line": 72, "process": "main"}
    # scale_loss on each of the 6 batches (apex unscales and updates the scale inside each), a step every 2.
    assert report["scaler"] == {"scale": 6, "unscale": 0, "step": 0, "update": 6, "skipped_steps": 0}
    assert report["optimizer_steps"] == 3
    assert report["apex_loss_scales"] == [65536.0]  # no overflow in 6 updates: the scale apex started with
    printed = [float(line.split()[3]) for line in apex_run.stdout.splitlines() if line.startswith("batch ")]
    assert [round(loss, 5) for loss in report["losses"]] == printed  # the unscaled losses


def test_the_summary_says_apex_was_emulated(apex_run: Job) -> None:
    summary = " ".join(apex_run.stderr.split())  # rich wraps lines
    assert f"emulated apex_yolo.py:72 {EMULATED_O1} (×1)" in summary
    # In apex's terms: apex has no scaler.step() (the script steps its optimizer), so no "step 0".
    assert ("apex.amp loss scaling scale_loss 6 · loss scale updates 6 · optimizer steps skipped (inf/NaN gradients) 0 "
            "· optimizer steps taken 3 · loss scale now 65536 created at apex_yolo.py:72 (apex.amp loss scaler, "
            "emulated; as a GradScaler):") in summary
    assert "GradScaler calls" not in summary


def test_o2_is_not_emulated_and_fails_as_a_missing_feature(apex_o2_run: Job) -> None:
    report = apex_o2_run.report
    assert apex_o2_run.returncode == 1 and report["exit_code"] == 1
    assert report["unemulated"] == [
        {
            "feature": "apex.amp opt_level O2 (only O1 and O0 are emulated)",
            "file": str(FIXTURES / "apex_glue.py"), "line": 95, "count": 1,
        }
    ]  # fmt: skip
    assert report["emulated"] == [] and report["optimizer_steps"] == 0
    # The traceback ends with the refusal; the summary follows it.
    error = "NotImplementedError: ampfix run: apex.amp opt_level='O2' is not emulated: it casts the model to float16"
    assert any(line.startswith(error) for line in apex_o2_run.stderr.splitlines()), apex_o2_run.stderr
    assert "not emulated apex_glue.py:95 apex.amp opt_level O2" in " ".join(apex_o2_run.stderr.split())


def test_initialize_again_on_the_same_optimizer_fails_as_apex_did(apex_restore_run: Job) -> None:
    """allennlp 1.0's checkpoint restore, cut down: the second initialize of the trainer's optimizer is refused as
    apex's `_process_optimizer` refused it, a refusal a GPU run with apex shares (why ampfix reports the module
    rather than drop that call: fixtures/apex/initialize_again_to_restore)."""
    report = apex_restore_run.report
    assert apex_restore_run.returncode == 1 and report["exit_code"] == 1
    assert report["optimizer_steps"] == 1 and len(report["losses"]) == 1  # the step before the restore
    stderr = " ".join(apex_restore_run.stderr.split())
    assert "FailsOnTheGpuToo: A given optimizer should only be passed through amp.initialize once." in stderr
    assert "why: the runner reproduces a GPU's own refusal here: the script fails the same way on CUDA" in stderr


# -- verify: apex original against native rewrites ----------------------------------------------


@pytest.mark.parametrize("job_name", ["yolo_verify", "glue_verify"])
def test_a_correct_native_rewrite_is_equivalent_to_the_apex_original(job_name: str, jobs) -> None:
    job = jobs.result(job_name)
    report = job.report
    assert job.returncode == 0, job.stderr
    assert report["equivalent"] is True and report["first_difference"] is None
    assert report["original"]["emulated"][0]["feature"] == EMULATED_O1
    assert report["rewritten"]["emulated"] == []
    assert report["original"]["losses"] == report["rewritten"]["losses"]  # bit for bit
    assert "equivalent to the emulated apex.amp" in job.stderr


def test_the_canonical_apex_example_runs_with_apex_parallel_emulated_and_verifies_against_its_rewrite(
        ddp_verify: Job) -> None:
    """apex's examples/simple/distributed shape: apex.parallel imported unconditionally (issue 21)."""
    report = ddp_verify.report
    assert ddp_verify.returncode == 0, ddp_verify.stderr
    assert report["equivalent"] is True and report["first_difference"] is None
    parallel = "apex.parallel (one process: DistributedDataParallel and convert_syncbn_model return the module)"
    script = str(FIXTURES / "apex_ddp.py")
    assert report["original"]["emulated"] == [
        {"feature": parallel, "file": script, "line": 9, "count": 1},
        {"feature": EMULATED_O1, "file": script, "line": 23, "count": 1}]
    # the rewrite uses torch's DistributedDataParallel (AMP110), under the same WORLD_SIZE test: nothing emulated
    assert report["rewritten"]["emulated"] == []
    assert report["original"]["losses"] == report["rewritten"]["losses"] and len(report["original"]["losses"]) == 20


def test_an_inference_rewrite_with_no_grad_scaler_verifies_against_apex_initialize_given_the_model_alone(
        validate_verify: Job) -> None:
    """GPUNet's validate.py: apex's loss scaler, made by initialize and used by no scale_loss, is not counted against
    the rewrite, which makes no GradScaler; every model call is under float16 autocast on both sides."""
    report = validate_verify.report
    assert validate_verify.returncode == 0, validate_verify.stderr
    assert report["equivalent"] is True and report["first_difference"] is None
    assert report["original"]["emulated"][0]["feature"] == EMULATED_O1
    assert len(report["original"]["grad_scalers"]) == 1 and report["rewritten"]["grad_scalers"] == []
    assert report["original"]["optimizer_steps"] == report["rewritten"]["optimizer_steps"] == 0
    assert "equivalent to the emulated apex.amp" in validate_verify.stderr


def test_the_rewrite_of_a_local_import_under_a_condition_verifies_with_the_flag_on(condition_verify: Job) -> None:
    report = condition_verify.report
    assert condition_verify.returncode == 0, condition_verify.stderr
    assert report["equivalent"] is True and report["first_difference"] is None
    assert report["original"]["losses"] == report["rewritten"]["losses"] and len(report["original"]["losses"]) == 4
    # apex unscaled before each clipping inside scale_loss; the rewrite's unscale_ before the clipping
    assert report["rewritten"]["scaler"] == {"scale": 4, "unscale": 4, "step": 4, "update": 4, "skipped_steps": 0}


def test_with_the_flag_off_the_rewrite_differs_only_by_its_disabled_scaler(condition_off_verify: Job) -> None:
    """`--fp16 0`: apex was never imported, the rewrite creates a disabled GradScaler (a pass-through); verify
    names that object as the difference, and everything it produces is the same."""
    report = condition_off_verify.report
    assert report["equivalent"] is False
    assert "enabled=False) at apex_condition.native.py:17" in report["first_difference"]
    original, rewritten = report["original"], report["rewritten"]
    assert original["emulated"] == [] and original["grad_scalers"] == []
    assert original["losses"] == rewritten["losses"] and len(original["losses"]) == 4
    assert original["optimizer_steps"] == rewritten["optimizer_steps"] == 4
    assert [(r["enabled"], r["entered"]) for r in rewritten["autocast_regions"]] == [(False, 4)]


def test_a_trainers_scaler_in_self_verifies_across_its_methods(trainer_verify: Job) -> None:
    """transformers 2.11's Trainer: initialize in `train`, the backward in `_training_step`; the rewrite's
    `self.scaler` scales each of the 6 micro-steps' losses and steps at each of the 3 accumulation boundaries."""
    report = trainer_verify.report
    assert trainer_verify.returncode == 0, trainer_verify.stderr
    assert report["equivalent"] is True and report["first_difference"] is None
    assert report["original"]["losses"] == report["rewritten"]["losses"] and len(report["original"]["losses"]) == 6
    assert report["rewritten"]["scaler"] == {"scale": 6, "unscale": 3, "step": 3, "update": 3, "skipped_steps": 0}


def test_a_trainer_set_up_in_its_init_verifies_with_its_scaler_in_self(init_trainer_verify: Job) -> None:
    """Issue 21's first example with its forward pass in the trainer: `self.scaler` made in `__init__` where
    initialize was, each of the 4 steps' losses the same bit for bit, clipping unscaled as apex's was."""
    report = init_trainer_verify.report
    assert init_trainer_verify.returncode == 0, init_trainer_verify.stderr
    assert report["equivalent"] is True and report["first_difference"] is None
    assert report["original"]["losses"] == report["rewritten"]["losses"] and len(report["original"]["losses"]) == 4
    assert report["rewritten"]["scaler"] == {"scale": 4, "unscale": 4, "step": 4, "update": 4, "skipped_steps": 0}


def test_a_trainer_given_its_loss_by_the_caller_is_named_as_losing_the_callers_autocast(
        init_trainer_step_verify: Job) -> None:
    """The issue's example as given (the unsafe rewrite): the caller's forward pass, under O1 in the original, runs
    outside any autocast in the rewrite, and verify says so at the caller's line."""
    report = init_trainer_step_verify.report
    assert init_trainer_step_verify.returncode == 1, init_trainer_step_verify.stderr
    assert report["first_difference"] == (
        "step 0: original call of Sequential under autocast(cuda float16) at apex_init_trainer_step.py:32; rewrite "
        "call of Sequential outside autocast at apex_init_trainer_step.native.py:28")


def test_a_config_key_as_the_condition_verifies_as_a_flag_does(condition_key_verify: Job) -> None:
    """`if args["fp16"]:` (simpletransformers' settings dict) goes to `enabled=` as `args.fp16` does: 4 losses bit
    for bit, the clipping unscaled before as apex's was."""
    report = condition_key_verify.report
    assert condition_key_verify.returncode == 0, condition_key_verify.stderr
    assert report["equivalent"] is True and report["first_difference"] is None
    assert report["original"]["losses"] == report["rewritten"]["losses"] and len(report["original"]["losses"]) == 4
    assert report["rewritten"]["scaler"] == {"scale": 4, "unscale": 4, "step": 4, "update": 4, "skipped_steps": 0}


def test_the_apex_value_of_a_switch_taking_the_native_path_verifies(switch_verify: Job) -> None:
    """Transformer-XL's `--amp apex|pytorch` switch, rewritten under --unsafe-fixes (the apex value takes the module's
    native path): the 6 losses bit for bit, the clipping unscaled as apex's was, the scale saved and loaded back
    through the checkpoint as apex's was."""
    report = switch_verify.report
    assert switch_verify.returncode == 0, switch_verify.stderr
    assert report["equivalent"] is True and report["first_difference"] is None
    assert report["original"]["losses"] == report["rewritten"]["losses"] and len(report["original"]["losses"]) == 6
    assert report["rewritten"]["scaler"] == {"scale": 6, "unscale": 6, "step": 6, "update": 6, "skipped_steps": 0}


def test_the_apex_value_of_a_switch_with_the_apex_branch_first_verifies(switch_first_verify: Job) -> None:
    """timm's switch (GPUNet's train.py), the apex branch first, timm's scalers in a module beside the script (apex's
    scale_loss called there): rewritten under --unsafe-fixes, `has_apex` kept True, the apex value takes the native
    branch. The 6 losses bit for bit, apex's initialize emulated on the original side only, the clipping unscaled."""
    report = switch_first_verify.report
    assert switch_first_verify.returncode == 0, switch_first_verify.stderr
    assert report["equivalent"] is True and report["first_difference"] is None
    assert report["original"]["losses"] == report["rewritten"]["losses"] and len(report["original"]["losses"]) == 6
    assert [item["line"] for item in report["original"]["emulated"]] == [54]
    assert report["rewritten"]["emulated"] == []
    assert report["rewritten"]["scaler"] == {"scale": 6, "unscale": 6, "step": 6, "update": 6, "skipped_steps": 0}


def test_the_native_value_of_the_apex_first_switch_runs_as_it_ran(switch_first_native_verify: Job) -> None:
    """`--native-amp 1`: the `elif` that became the `if` runs for "native" as before."""
    report = switch_first_native_verify.report
    assert switch_first_native_verify.returncode == 0, switch_first_native_verify.stderr
    assert report["equivalent"] is True and report["first_difference"] is None
    assert report["original"]["losses"] == report["rewritten"]["losses"] and len(report["original"]["losses"]) == 6


def test_a_module_import_with_initialize_under_the_flag_verifies_as_the_local_import_does(
    single_file_verify: Job,
) -> None:
    """Issue 29's single-file shape: `from apex import amp` at module level, `if args.fp16: initialize` and `if
    args.fp16: scale_loss / else: backward` in `train(args)`; the rewrite's scaler and autocast are enabled by the
    same flag. The 4 losses are the same bit for bit."""
    report = single_file_verify.report
    assert single_file_verify.returncode == 0, single_file_verify.stderr
    assert report["equivalent"] is True and report["first_difference"] is None
    assert report["original"]["losses"] == report["rewritten"]["losses"] and len(report["original"]["losses"]) == 4


def test_a_set_up_method_with_its_flag_set_after_initialize_verifies_stage_by_stage(setup_box_verify: Job) -> None:
    """torchdistill's shape: initialize in `setup` (called by `__init__`, then again for the second stage) under an
    `if` testing the stage's config, `self.apex` set True after it; the scaler made after the `if`, `enabled=` the
    flag, once per stage as apex made its loss scaler once per initialize. The 6 losses are the same bit for bit."""
    report = setup_box_verify.report
    assert setup_box_verify.returncode == 0, setup_box_verify.stderr
    assert report["equivalent"] is True and report["first_difference"] is None
    original, rewritten = report["original"], report["rewritten"]
    assert original["losses"] == rewritten["losses"] and len(original["losses"]) == 6
    assert original["optimizer_steps"] == rewritten["optimizer_steps"] == 6
    assert [s["line"] for s in original["grad_scalers"]] == [28, 28]
    assert [s["line"] for s in rewritten["grad_scalers"]] == [22, 22]
    assert rewritten["scaler"] == {"scale": 6, "unscale": 0, "step": 6, "update": 6, "skipped_steps": 0}


def test_a_set_up_method_with_apex_off_differs_only_by_its_disabled_scaler(setup_box_off_verify: Job) -> None:
    report = setup_box_off_verify.report
    assert setup_box_off_verify.returncode == 1, setup_box_off_verify.stderr
    assert report["first_difference"] == (
        "step 0: original call of Sequential outside autocast at apex_setup_box.py:39; rewrite loss "
        "scaler(device='cuda' init_scale=65536.0 growth_factor=2.0 backoff_factor=0.5 growth_interval=2000 "
        "enabled=False) at apex_setup_box.native.py:22")
    original, rewritten = report["original"], report["rewritten"]
    assert original["emulated"] == [] and original["grad_scalers"] == []
    assert original["losses"] == rewritten["losses"] and len(original["losses"]) == 6
    assert [(r["enabled"], r["entered"]) for r in rewritten["autocast_regions"]] == [(False, 6)]


def test_a_scaler_made_before_its_flag_is_known_is_not_equivalent(setup_box_wrong_order_verify: Job) -> None:
    """The scaler made before the `if` reads the flag while it is still False: disabled where apex scaled."""
    report = setup_box_wrong_order_verify.report
    assert setup_box_wrong_order_verify.returncode == 1, setup_box_wrong_order_verify.stderr
    assert report["first_difference"] == (
        "loss scaling: original loss scaler(device='cuda' init_scale=65536.0 growth_factor=2.0 backoff_factor=0.5 "
        "growth_interval=2000 enabled=True) at apex_setup_box.py:28; rewrite loss scaler(device='cuda' "
        "init_scale=65536.0 growth_factor=2.0 backoff_factor=0.5 growth_interval=2000 enabled=False) at "
        "apex_setup_box.wrong_order.py:18")


def test_a_trainer_with_the_flag_off_differs_only_by_its_disabled_scaler(trainer_off_verify: Job) -> None:
    report = trainer_off_verify.report
    assert report["equivalent"] is False
    assert "enabled=False) at apex_trainer.native.py:34" in report["first_difference"]
    original, rewritten = report["original"], report["rewritten"]
    assert original["emulated"] == [] and original["grad_scalers"] == []
    assert original["losses"] == rewritten["losses"] and len(original["losses"]) == 6
    assert original["optimizer_steps"] == rewritten["optimizer_steps"] == 3
    assert [(r["enabled"], r["entered"]) for r in rewritten["autocast_regions"]] == [(False, 6)]


def test_a_trainer_clipping_scaled_gradients_is_not_equivalent(trainer_wrong_clip_verify: Job) -> None:
    report = trainer_wrong_clip_verify.report
    assert trainer_wrong_clip_verify.returncode == 1, trainer_wrong_clip_verify.stderr
    assert report["first_difference"] == (
        "step 0: original clip_grad_norm_ max_norm=1.0 at apex_trainer.py:47; rewrite clip_grad_norm_ max_norm=1.0 "
        "on gradients still scaled by 65536.0 at apex_trainer.wrong_clip.py:36")


def test_the_projects_own_gradient_helpers_after_unscale_are_equivalent(clip_helpers_verify: Job) -> None:
    report = clip_helpers_verify.report
    assert clip_helpers_verify.returncode == 0, clip_helpers_verify.stderr
    assert report["equivalent"] is True
    original, rewritten = report["original"], report["rewritten"]
    assert original["losses"] == rewritten["losses"] and len(original["losses"]) == 4
    assert original["optimizer_steps"] == rewritten["optimizer_steps"] == 4


def test_the_projects_own_gradient_helpers_on_scaled_gradients_are_not_equivalent(
        clip_helpers_wrong_verify: Job) -> None:
    report = clip_helpers_wrong_verify.report
    assert clip_helpers_wrong_verify.returncode == 1, clip_helpers_wrong_verify.stderr
    assert report["first_difference"] == (
        "step 0: original clip_grad_norm_ max_norm=1.0 at apex_clip_helpers.py:12; rewrite clip_grad_norm_ "
        "max_norm=1.0 on gradients still scaled by 65536.0 at apex_clip_helpers.wrong_clip.py:8")


def test_several_losses_on_one_grad_scaler_differ_only_by_the_number_of_scales(losses_verify: Job) -> None:
    """`num_losses=2`/`loss_id` (an unsafe rewrite): apex kept a scale per loss, the rewrite one GradScaler; verify
    names that as the difference, and the losses (bit for bit), the steps and the autocast are the same."""
    report = losses_verify.report
    assert losses_verify.returncode == 1, losses_verify.stderr
    assert report["first_difference"].startswith("loss scaling: the original has 2 loss scalers, the rewrite 1; ")
    original, rewritten = report["original"], report["rewritten"]
    assert original["losses"] == rewritten["losses"] and len(original["losses"]) == 8
    assert original["optimizer_steps"] == rewritten["optimizer_steps"] == 4
    assert rewritten["scaler"] == {"scale": 8, "unscale": 0, "step": 4, "update": 4, "skipped_steps": 0}


def test_apexs_dcgan_on_one_grad_scaler_differs_only_by_the_number_of_scales(dcgan_verify: Job) -> None:
    """issue 44: apex's DCGAN loop (three loss_ids, a GAN's alternating steps), rewritten under --unsafe-fixes: verify
    names the number of loss scales as the one difference; the 18 losses bit for bit, the 12 steps, one update per
    iteration."""
    report = dcgan_verify.report
    assert dcgan_verify.returncode == 1, dcgan_verify.stderr
    assert report["first_difference"].startswith("loss scaling: the original has 3 loss scalers, the rewrite 1; ")
    original, rewritten = report["original"], report["rewritten"]
    assert original["losses"] == rewritten["losses"] and len(original["losses"]) == 18
    assert original["optimizer_steps"] == rewritten["optimizer_steps"] == 12
    assert rewritten["scaler"] == {"scale": 18, "unscale": 0, "step": 12, "update": 6, "skipped_steps": 0}


def test_apexs_imagenet_with_the_scaler_handed_to_train_is_equivalent(imagenet_verify: Job) -> None:
    """issue 44: apex's ImageNet shapes (a `try` of apex imports, initialize in `main`, scale_loss in `train`,
    evaluation in `validate`), rewritten under --unsafe-fixes --apex-opt-level O1: equivalent, the 6 losses bit for
    bit, each step through the one scaler handed to `train`."""
    report = imagenet_verify.report
    assert imagenet_verify.returncode == 0, imagenet_verify.stderr
    assert report["equivalent"] is True and report["first_difference"] is None
    original, rewritten = report["original"], report["rewritten"]
    assert EMULATED_O1 in [use["feature"] for use in original["emulated"]]
    assert original["losses"] == rewritten["losses"] and len(original["losses"]) == 6
    assert original["optimizer_steps"] == rewritten["optimizer_steps"] == 6
    assert rewritten["scaler"] == {"scale": 6, "unscale": 0, "step": 6, "update": 6, "skipped_steps": 0}


def test_berts_set_up_returning_to_main_verifies_with_the_modules_scaler(bert_glue_verify: Job) -> None:
    """issue 44: BERT's run_glue.py (initialize in `init_optimizer_and_amp`, under `if use_fp16:`, which returns the
    optimizer to `main`), rewritten under --unsafe-fixes: the module's scaler, bound where initialize was and read in
    `main`, is equivalent, the 6 losses bit for bit, 3 steps at the accumulation boundary through it."""
    report = bert_glue_verify.report
    assert bert_glue_verify.returncode == 0, bert_glue_verify.stderr
    assert report["equivalent"] is True and report["first_difference"] is None
    original, rewritten = report["original"], report["rewritten"]
    assert EMULATED_O1 in [use["feature"] for use in original["emulated"]]
    assert original["losses"] == rewritten["losses"] and len(original["losses"]) == 6
    assert original["optimizer_steps"] == rewritten["optimizer_steps"] == 3
    assert rewritten["scaler"] == {"scale": 6, "unscale": 0, "step": 3, "update": 3, "skipped_steps": 0}


def test_berts_set_up_with_fp16_off_differs_only_by_the_disabled_placeholder(bert_glue_off_verify: Job) -> None:
    """`--fp16 0`: initialize never ran and apex.amp was never used; the rewrite steps through the module's disabled
    placeholder (a pass-through), which verify names as the difference; everything it produces is the same."""
    report = bert_glue_off_verify.report
    assert report["equivalent"] is False
    assert "enabled=False) at apex_bert_glue.native.py:37" in report["first_difference"]
    original, rewritten = report["original"], report["rewritten"]
    assert original["emulated"] == [] and original["grad_scalers"] == []
    assert original["losses"] == rewritten["losses"] and len(original["losses"]) == 6
    assert original["optimizer_steps"] == rewritten["optimizer_steps"] == 3
    assert [(r["enabled"], r["entered"]) for r in rewritten["autocast_regions"]] == [(False, 6), (False, 1)]


def test_imagenet_without_the_autocast_in_validate_is_named(imagenet_wrong_eval_verify: Job) -> None:
    """The same rewrite without the autocast in `validate` (called from `main` after initialize): O1 ran it in
    float16, and verify names its first model call there."""
    report = imagenet_wrong_eval_verify.report
    assert imagenet_wrong_eval_verify.returncode == 1, imagenet_wrong_eval_verify.stderr
    assert "original call of Sequential under autocast(cuda float16) at apex_imagenet.py:" in \
        report["first_difference"]
    assert "rewrite call of Sequential outside autocast at apex_imagenet.wrong_eval.py:" in report["first_difference"]


def test_lists_of_models_and_optimizers_on_one_grad_scaler_are_equivalent(optimizers_verify: Job) -> None:
    """initialize given lists (two models, two optimizers): ampfix's rewrite, one GradScaler with unscale_ and step
    for each optimizer and one update after the last step, is equivalent to apex; the losses bit for bit."""
    report = optimizers_verify.report
    assert optimizers_verify.returncode == 0, optimizers_verify.stderr
    assert report["equivalent"] is True and report["first_difference"] is None
    original, rewritten = report["original"], report["rewritten"]
    assert original["losses"] == rewritten["losses"] and len(original["losses"]) == 4
    assert original["optimizer_steps"] == rewritten["optimizer_steps"] == 8
    assert rewritten["scaler"] == {"scale": 4, "unscale": 8, "step": 8, "update": 4, "skipped_steps": 0}


def test_one_initialize_per_objective_is_one_grad_scaler_updated_after_each_step(objectives_verify: Job) -> None:
    """sentence-transformers' loop (one initialize per objective, each objective stepping its own optimizer):
    ampfix's rewrite, one GradScaler made in place of the loop for every optimizer and an update after each step, is
    equivalent to apex, the overflow of objective 0 at step 1 included (its step skipped, objective 1 scaled by the
    halved scale). apex made a loss scaler at each initialize, each replacing the one before, before any scale_loss:
    verify counts the one that served, as the rewrite's one."""
    report = objectives_verify.report
    assert objectives_verify.returncode == 0, objectives_verify.stderr
    assert report["equivalent"] is True and report["first_difference"] is None
    original, rewritten = report["original"], report["rewritten"]
    assert len(original["grad_scalers"]) == 2 and len(rewritten["grad_scalers"]) == 1
    assert original["losses"] == rewritten["losses"] and len(original["losses"]) == 6
    assert original["optimizer_steps"] == rewritten["optimizer_steps"] == 5
    assert rewritten["scaler"] == {"scale": 6, "unscale": 6, "step": 6, "update": 6, "skipped_steps": 1}


def test_the_objectives_with_the_flag_off_differ_only_by_the_disabled_scaler(objectives_off_verify: Job) -> None:
    """`--fp16 0`: apex was never imported, the `if fp16:` kept around the backward and the clipping takes its
    `else`, the rewrite's disabled GradScaler passes the steps through: only that object differs."""
    report = objectives_off_verify.report
    assert report["equivalent"] is False
    assert "enabled=False) at apex_objectives.native.py:24" in report["first_difference"]
    original, rewritten = report["original"], report["rewritten"]
    assert original["emulated"] == [] and original["grad_scalers"] == []
    assert original["losses"] == rewritten["losses"] and len(original["losses"]) == 6
    assert original["optimizer_steps"] == rewritten["optimizer_steps"] == 6


def test_one_update_per_iteration_of_the_objectives_is_not_equivalent(objectives_per_iteration_verify: Job) -> None:
    """PyTorch's advice for several optimizers, one update per iteration, misplaced here: apex updated its scale
    at each objective's scale_loss, so after objective 0's overflow objective 1's loss was scaled by half."""
    report = objectives_per_iteration_verify.report
    assert objectives_per_iteration_verify.returncode == 1, objectives_per_iteration_verify.stderr
    assert report["first_difference"] == "step 2: original scaler.scale(32768.0); rewrite scaler.scale(65536.0)"


def test_a_second_optimizer_clipped_without_its_unscale_is_not_equivalent(optimizers_wrong_clip_verify: Job) -> None:
    report = optimizers_wrong_clip_verify.report
    assert optimizers_wrong_clip_verify.returncode == 1, optimizers_wrong_clip_verify.stderr
    # The decoder's gradients were clipped while scaled (Adam takes the tiny step that follows nearly in stride):
    # the losses part at the third step.
    assert report["first_difference"] == (
        "step 2: original loss 1.155810832977295 (0x1.27e3380000000p+0) at apex_optimizers.py:16; rewrite loss "
        "1.156628966331482 (0x1.2818d60000000p+0) at apex_optimizers.wrong_clip.py:13")


def test_the_yolov5_rewrite_runs_with_amp_active_and_its_scaler_stepping(yolo_verify: Job) -> None:
    rewrite = yolo_verify.report["rewritten"]
    assert rewrite["exit_code"] == 0
    training, evaluation = autocast_region(rewrite, 76), autocast_region(rewrite, 92)
    assert (training["dtype_requested"], training["dtype"], training["enabled"], training["entered"]) == (
        "float16", "float16", True, 6,
    )  # fmt: skip
    assert evaluation["entered"] == 1
    assert rewrite["grad_scalers"][0]["line"] == 66
    assert rewrite["scaler"] == {"scale": 6, "unscale": 0, "step": 3, "update": 3, "skipped_steps": 0}
    assert rewrite["optimizer_steps"] == 3 and len(rewrite["losses"]) == 6


def test_the_run_glue_rewrite_unscales_before_clipping_and_checkpoints_its_scaler(glue_verify: Job) -> None:
    rewrite = glue_verify.report["rewritten"]
    assert rewrite["exit_code"] == 0
    assert autocast_region(rewrite, 47)["entered"] == 8
    # 8 micro-batches, a step every 2, over the two phases around the checkpoint.
    assert rewrite["scaler"] == {"scale": 8, "unscale": 4, "step": 4, "update": 4, "skipped_steps": 0}
    assert rewrite["optimizer_steps"] == 4
    original = glue_verify.report["original"]
    assert original["scaler"] == {"scale": 8, "unscale": 0, "step": 0, "update": 8, "skipped_steps": 0}


@pytest.mark.parametrize(
    ("job_name", "difference"),
    [
        (
            "yolo_wrong_eval_verify",
            "step 3: original call of TinyDetector under autocast(cuda float16) at apex_yolo.py:101; "
            "rewrite call of TinyDetector outside autocast at apex_yolo.wrong_eval.py:91",
        ),
        (
            "yolo_wrong_update_verify",
            # Batch 1 matches up to its backward; then the original goes on to batch 2's forward.
            "step 1: original call of TinyDetector under autocast(cuda float16) at apex_yolo.py:82; rewrite "
            "GradScaler.update() with no scaler.step() since the last update (update per micro-step?) at "
            "apex_yolo.wrong_update.py:87",
        ),
        (
            "yolo_wrong_step_verify",
            "step 1: original optimizer_step(1); rewrite optimizer.step() on gradients still scaled by 65536.0 "
            "(the GradScaler never steps: no scaler.step(optimizer)) at apex_yolo.wrong_step.py:84",
        ),
        (
            "glue_wrong_clip_verify",
            "step 0: original clip_grad_norm_ max_norm=1.0 at apex_glue.py:60; "
            "rewrite clip_grad_norm_ max_norm=1.0 on gradients still scaled by 65536.0 at apex_glue.wrong_clip.py:55",
        ),
    ],
)
def test_a_classic_migration_mistake_is_reported_by_name(job_name: str, difference: str, jobs) -> None:
    job = jobs.result(job_name)
    if job_name == "yolo_wrong_update_verify":  # torch's GradScaler then fails its update: the crash is the cause
        assert job.returncode == 3, job.stderr
        assert job.report["crashed"] == "rewrite" and job.report["error"].startswith(
            "the rewrite crashed: AssertionError: No inf checks were recorded prior to update.; ")
    else:
        assert job.returncode == 1, job.stderr
        assert job.report["equivalent"] is False
    assert job.report["first_difference"] == difference


# -- the comparison, on traces made by hand -----------------------------------------------------


def _event(step: int, kind: str, what: str = "", **fields) -> dict:
    """A trace event as the Recorder writes it: a request's arguments as ``fields``, other events' text as ``what``."""
    return {"step": step, "kind": kind, **({"fields": fields} if fields else {"what": what}), "where": "/x/train.py:10"}


def _report(trace: list[dict], emulated: list[dict] | None = None) -> RunReport:
    process = Recorder("main").to_dict("main")
    process["trace"] = trace
    process["emulated"] = emulated or []
    return RunReport("/x/train.py", 0, [process])


SCALER = {
    "device": "cuda", "init_scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000,
    "enabled": True,
}  # fmt: skip
SCALER_TEXT = "device='cuda' init_scale=65536.0 growth_factor=2.0 backoff_factor=0.5 growth_interval=2000 enabled=True"
APEX_EMULATED = [{"feature": EMULATED_O1, "file": "/x/train.py", "line": 5, "count": 1}]
APEX_TRACE = [
    _event(0, "autocast", device="cuda", dtype="float16", enabled=True, cache_enabled=True),
    _event(0, "autocast_enter", device="cuda", dtype="float16", enabled=True, cache_enabled=True),
    _event(0, "grad_scaler", **SCALER),
    _event(0, "model_call", module="Net", device="cuda", dtype="float16"),
    _event(0, "scaler.scale", "65536.0"),
    _event(0, "loss", (0.5).hex()),
    _event(0, "scaler.update"),
    _event(0, "scaler.state_dict", "scale=65536.0"),
    _event(1, "optimizer_step", "1"),
]
# The same training, native: a scaler made first, a region per step, the scaler stepping and updating.
NATIVE_TRACE = [
    _event(0, "grad_scaler", **SCALER),
    _event(0, "autocast", device="cuda", dtype="float16", enabled=True, cache_enabled=True),
    _event(0, "autocast_enter", device="cuda", dtype="float16", enabled=True, cache_enabled=True),
    _event(0, "model_call", module="Net", device="cuda", dtype="float16"),
    _event(0, "scaler.scale", "65536.0"),
    _event(0, "loss", (0.5).hex()),
    _event(0, "scaler.state_dict", "scale=65536.0"),
    _event(0, "scaler.step"),
    _event(1, "optimizer_step", "1"),
    _event(1, "scaler.update"),
]


def test_against_apex_regions_and_scaler_call_timing_are_not_compared() -> None:
    assert first_difference(_report(APEX_TRACE, APEX_EMULATED), _report(NATIVE_TRACE)) is None
    # Without the emulation, the same two traces are compared event by event.
    assert first_difference(_report(APEX_TRACE), _report(NATIVE_TRACE)) is not None


def test_against_apex_a_missing_or_different_grad_scaler_is_named() -> None:
    without = [event for event in NATIVE_TRACE if event["kind"] != "grad_scaler"]
    assert first_difference(_report(APEX_TRACE, APEX_EMULATED), _report(without)) == (
        f"loss scaling: the rewrite creates no GradScaler; the original's loss scaler({SCALER_TEXT}) at train.py:10"
    )
    other = [
        {**event, "fields": {**SCALER, "growth_interval": 1000}} if event["kind"] == "grad_scaler" else event
        for event in NATIVE_TRACE
    ]
    difference = first_difference(_report(APEX_TRACE, APEX_EMULATED), _report(other))
    assert difference is not None and difference.startswith("loss scaling: original loss scaler(") and "growth_interval=1000" in difference


def test_against_apex_a_run_that_ends_before_any_loss_is_scaled_compares_no_loss_scalers() -> None:
    # The run stops before its first step (an error in the data, `--evaluate`): apex's loss scaler no scale_loss used
    # and the rewrite's GradScaler nothing called change nothing; one called is compared.
    apex_made = [{**_event(0, "grad_scaler", **SCALER), "apex_unused": True}, _event(0, "model_call", module="Net")]
    native_made = [{**_event(0, "grad_scaler", **SCALER), "unused": True}, _event(0, "model_call", module="Net")]
    assert first_difference(_report(apex_made, APEX_EMULATED), _report(native_made)) is None
    called = [{key: value for key, value in event.items() if key != "unused"} for event in native_made]
    assert first_difference(_report(apex_made, APEX_EMULATED), _report(called)) == (
        f"loss scaling: the original has none; the rewrite's loss scaler({SCALER_TEXT}) at train.py:10")


def test_against_apex_a_scaler_state_never_checkpointed_is_a_difference() -> None:
    unsaved = [event for event in NATIVE_TRACE if event["kind"] != "scaler.state_dict"]
    assert first_difference(_report(APEX_TRACE, APEX_EMULATED), _report(unsaved)) == (
        "step 0: original loss scaler state saved (scale=65536.0) at train.py:10; rewrite optimizer_step(1) at train.py:10"
    )


def test_against_apex_a_loss_one_bit_apart_is_a_difference() -> None:
    apart = [{**event, "what": (0.5000000000000001).hex()} if event["kind"] == "loss" else event for event in NATIVE_TRACE]
    difference = first_difference(_report(APEX_TRACE, APEX_EMULATED), _report(apart))
    assert difference is not None and difference.startswith("step 0: original loss 0.5 ")


# -- apex's loss scaler ------------------------------------------------------------------------


def test_dynamic_loss_scale_doubles_after_2000_clean_updates_and_halves_on_overflow() -> None:
    from ampfix.runner.apex.amp import LossScaler

    scaler = LossScaler("dynamic", None, 2.0**24)
    assert scaler.loss_scale() == 65536.0
    for _ in range(1999):
        assert scaler.update_scale() is False
    assert scaler.loss_scale() == 65536.0
    scaler.update_scale()
    assert (scaler.loss_scale(), scaler._unskipped) == (131072.0, 0)
    scaler.has_overflow = True
    assert scaler.update_scale() is True  # the next step is skipped
    assert (scaler.loss_scale(), scaler._unskipped) == (65536.0, 0)


def test_loss_scale_bounds_and_static_scaling() -> None:
    from ampfix.runner.apex.amp import LossScaler

    capped = LossScaler("dynamic", None, 2.0**10)
    assert capped.loss_scale() == 1024.0  # min(max_loss_scale, 2**16)
    floored = LossScaler("dynamic", 32768.0, 2.0**24)
    floored.has_overflow = True
    floored.update_scale()
    floored.update_scale()
    assert floored.loss_scale() == 32768.0
    static = LossScaler(128.0, None, 2.0**24)
    static.has_overflow = True
    assert static.update_scale() is False and static.loss_scale() == 128.0  # apex: static scales never skip


def test_an_optimizer_given_to_initialize_again_raises_as_apex_did() -> None:
    """apex's `_process_optimizer` refused an optimizer it had processed (allennlp 1.0's trainer initialized again
    to restore a checkpoint): raised before the loss scalers are replaced, as a refusal a GPU run shares. Another
    optimizer (sentence-transformers' one initialize per objective) is processed, with a new loss scaler. O0: no
    process-wide autocast region is entered in the test's own process."""

    from ampfix.runner.apex.amp import AmpState
    from ampfix.runner.gpu.boundaries import FailsOnTheGpuToo

    state = AmpState(Recorder("main"))
    model = torch.nn.Linear(2, 2)
    first, second = (torch.optim.SGD(model.parameters(), lr=0.1) for _ in range(2))
    assert state.initialize(model, first, opt_level="O0") == (model, first)
    scalers = state.loss_scalers
    with pytest.raises(FailsOnTheGpuToo, match="A given optimizer should only be passed through amp.initialize once"):
        state.initialize(model, first, opt_level="O0")
    assert state.loss_scalers is scalers
    assert state.initialize(model, [second], opt_level="O0") == (model, [second])
    assert state.loss_scalers is not scalers
    with pytest.raises(FailsOnTheGpuToo):
        state.initialize(model, [first, second], opt_level="O0")
    assert state.initialize(model, first, enabled=False) == (model, first)  # apex returned before processing


# -- which apex wins ---------------------------------------------------------------------------


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch):
    recorder = Recorder("main")
    finder = ApexProvider(recorder)
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, finder])
    for name in [name for name in sys.modules if name == "apex" or name.startswith("apex.")]:
        monkeypatch.delitem(sys.modules, name)
    yield recorder
    for name in [name for name in sys.modules if name == "apex" or name.startswith("apex.")]:
        del sys.modules[name]


def test_the_imports_of_apexs_imagenet_example_work_and_only_to_python_float_runs(provider: Recorder) -> None:
    namespace: dict[str, object] = {}
    exec(compile("from apex.fp16_utils import *\nfrom apex import amp, optimizers\n"  # noqa: S102
                 "from apex.multi_tensor_apply import multi_tensor_applier\n", "imagenet_main_amp.py", "exec"),
         namespace)
    to_python_float = namespace["to_python_float"]
    assert to_python_float(torch.tensor([2.5])) == 2.5 and to_python_float([7, 8]) == 7  # apex: item(), else [0]
    assert {"FP16_Optimizer", "network_to_half", "DynamicLossScaler"} <= namespace.keys()
    with pytest.raises(NotImplementedError, match="apex.optimizers.FusedAdam: ampfix run emulates"):
        namespace["optimizers"].FusedAdam([])  # type: ignore[attr-defined]  # a module object from the namespace
    with pytest.raises(NotImplementedError, match="multi_tensor_applier"):
        namespace["multi_tensor_applier"]()  # type: ignore[operator]  # a stand-in from the namespace
    assert [feature for feature, _, _ in provider.emulated] == [
        "apex.fp16_utils.to_python_float (apex's own: t.item(), or t[0])"]
    assert [feature for feature, _, _ in provider.unemulated] == [
        "apex.optimizers.FusedAdam (not emulated: the import works, a call fails)",
        "apex.multi_tensor_apply.multi_tensor_applier (not emulated: the import works, a call fails)"]


def test_an_installed_apex_amp_wins(provider: Recorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "apex").mkdir()
    (tmp_path / "apex" / "__init__.py").write_text("")
    (tmp_path / "apex" / "amp.py").write_text("REAL = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    amp = importlib.import_module("apex.amp")
    assert amp.REAL is True and amp.__file__ == str(tmp_path / "apex" / "amp.py")


def test_an_apex_without_amp_gets_the_emulated_amp_and_nothing_else(
    provider: Recorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "apex").mkdir()
    (tmp_path / "apex" / "__init__.py").write_text("")  # today's apex: amp, fp16_utils and parallel deleted
    monkeypatch.syspath_prepend(str(tmp_path))
    from apex import amp  # noqa: PLC0415

    assert sys.modules["apex"].__file__ == str(tmp_path / "apex" / "__init__.py")
    assert callable(amp.initialize) and callable(amp.scale_loss)
    with pytest.raises(AttributeError, match="float_function"):
        amp.float_function  # noqa: B018
    parallel = importlib.import_module("apex.parallel")  # NVIDIA's examples import it unconditionally
    assert callable(parallel.DistributedDataParallel) and callable(parallel.convert_syncbn_model)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("apex.contrib")
    features = [feature for feature, _, _ in provider.unemulated]
    assert features == [
        "apex.amp.float_function (not emulated; only initialize, scale_loss, master_params, state_dict, load_state_dict are)",
        "apex.contrib (not installed; ampfix emulates only apex.amp's O1, apex.parallel and the names of "
        "apex.fp16_utils, apex.optimizers, apex.multi_tensor_apply)",
    ]
    assert [feature for feature, _, _ in provider.emulated][-1] == (
        "apex.parallel (one process: DistributedDataParallel and convert_syncbn_model return the module)")


def test_the_model_handed_to_an_evaluator_under_autocast_verifies_against_apex(
        inference_handed_on_verify: Job) -> None:
    """TimeSeriesPredictionPlatform's inference.py (issue 44, --unsafe-fixes): the statement handing the model to the
    evaluator under autocast, enabled by the flag set where initialize ran; at O1, whose patches were the process's,
    the evaluator's model calls are under float16 autocast on both sides, and no GradScaler is made."""
    report = inference_handed_on_verify.report
    assert inference_handed_on_verify.returncode == 0, inference_handed_on_verify.stderr
    assert report["equivalent"] is True and report["first_difference"] is None
    original, rewritten = report["original"], report["rewritten"]
    assert [use["feature"] for use in original["emulated"]] == [EMULATED_O1]
    assert len(original["grad_scalers"]) == 1 and rewritten["grad_scalers"] == []
    assert [(r["enabled"], r["entered"], r["line"]) for r in rewritten["autocast_regions"]] == [(True, 1, 59)]


def test_the_evaluator_outside_the_autocast_is_named(inference_handed_on_wrong_eval_verify: Job) -> None:
    report = inference_handed_on_wrong_eval_verify.report
    assert report["equivalent"] is False
    assert report["first_difference"] == (
        "step 0: original call of Sequential under autocast(cuda float16) at apex_inference_handed_on.py:31; rewrite "
        "call of Sequential outside autocast at apex_inference_handed_on.wrong_eval.py:28")


@pytest.mark.parametrize("job", ["inference_handed_on_fp32_verify", "inference_handed_on_other_kind_verify"])
def test_where_initialize_did_not_run_only_the_disabled_autocast_differs(job: str, request) -> None:
    """`--precision fp32` (the `if` false) and `--kind lookup` (the other branch, where the test's `precision` is
    unbound: the flag, False before the outer `if`, is what the autocast reads): apex emulated nothing, the rewrite
    enters its autocast disabled, and that object is the one difference verify names."""
    verified: Job = request.getfixturevalue(job)
    report = verified.report
    assert verified.returncode != 0 or report["equivalent"] is False
    assert report["original"]["emulated"] == [] and report["original"]["autocast_regions"] == []
    assert [(r["enabled"], r["entered"]) for r in report["rewritten"]["autocast_regions"]] == [(False, 1)]
    assert report["rewritten"]["exit_code"] == report["original"]["exit_code"] == 0
    assert "autocast(device=cuda dtype=float16 enabled=False cache_enabled=True) at " \
        "apex_inference_handed_on.native.py:59" in report["first_difference"]
