"""The torch oracle: each runnable fixture's ``.in.py`` and ``.out.py`` create the same AMP objects.
(A case without ``.out.py`` is left unchanged: there is nothing to compare.)

tests/amp_recorder.py records the bound arguments of every ``torch.amp`` autocast / GradScaler /
custom_fwd / custom_bwd / ``_cast`` call that a script makes (the deprecated APIs call these, so both sides
are seen), plus the FutureWarnings about ``torch.cuda.amp`` / ``torch.cpu.amp``.

In the areas that move CUDA code to the CPU (``fixture_cases.CPU_TARGET_AREAS``: ``--device cpu`` and
``--device auto``, run on this CPU-only machine) the ``.out.py`` must build every object on "cpu", with
every other argument the original's, except the documented changes (``_on_the_cpu``); and the probes
must show the AMP path really on: a linear layer inside an enabled autocast returns its lower dtype
(bfloat16), and a GradScaler built enabled is enabled.

This checks the fixtures themselves (that the hand-written expected output means what the input meant on
torch 2.13): it does not call the engine.

How it is run, and why: starting a process that imports torch costs ~1-2 s, and there are ~100 files to run
(in + out per case). One process per file would cost minutes on 2 cores. Instead the ``.in.py`` files
run in one set of processes and the ``.out.py`` files in another, never together, so an input and its
output can't see each other; within one process the recorder runs each file in a fresh ``runpy``
namespace, clears its records and resets torch's global autocast state between files. The list is split
into chunks so that all cores are used; all processes run concurrently.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from unittest import mock

import pytest

from fixture_cases import CASE_IDS, CASES, CPU_TARGET_AREAS, ROOT, Case, read_source

from ampfix.core.options import Options
from ampfix.engine import fix_source
from ampfix.engine.nesting import Nesting
from ampfix.families import ALL_RULES

import torch  # noqa: F401,E402 - a test dependency: its absence must fail the run, not skip it

RECORDER = Path(__file__).resolve().parent / "amp_recorder.py"
TIMEOUT_S = 300


def _chunks(items: list, n: int) -> list[list]:
    return [items[i::n] for i in range(n) if items[i::n]]


def _run_all(cases: list[Case]) -> dict[str, dict]:
    """{script path: recorder result} for the .in.py and .out.py of every case given."""
    n_chunks = max(1, (os.cpu_count() or 2) // 2)
    jobs = []
    tmp = tempfile.TemporaryDirectory(prefix="ampfix-oracle-")
    env = dict(os.environ, PYTHONHASHSEED="0", CUDA_VISIBLE_DEVICES="")
    env.pop("AMPFIX_FIXTURE_USE_AMP", None)
    env.pop("AMPFIX_FIXTURE_DISABLE_AMP", None)
    for side in ("in", "out"):
        for k, chunk in enumerate(_chunks(cases, n_chunks)):
            scripts = [str(c.in_path if side == "in" else c.out_path) for c in chunk]
            out_json = Path(tmp.name) / f"{side}-{k}.json"
            proc = subprocess.Popen(
                [sys.executable, str(RECORDER), str(out_json), *scripts],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            jobs.append((proc, out_json, scripts))
    results: dict[str, dict] = {}
    try:
        for proc, out_json, scripts in jobs:
            output, _ = proc.communicate(timeout=TIMEOUT_S)
            if proc.returncode != 0 or not out_json.exists():
                failure = {"crash": f"recorder exited {proc.returncode}:\n{output.decode(errors='replace')[-4000:]}"}
                results.update({s: failure for s in scripts})
            else:
                results.update(json.loads(out_json.read_text(encoding="utf-8")))
    finally:
        for proc, _, _ in jobs:
            if proc.poll() is None:
                proc.kill()
        tmp.cleanup()
    return results


RUNNABLE = [c for c in CASES if c.changes and c.not_runnable_reason() is None]


@pytest.fixture(scope="session")
def oracle() -> dict[str, dict]:
    return _run_all(RUNNABLE)


# Cases the oracle cannot execute are not collected (a skipped test would read as a pass);
# this list is asserted below so that a new one is a decision, not an accident.
NOT_RUNNABLE = {"reported/too_many_positional", "unchanged/apex_amp", "device_cpu/suppressed",
                "apex/initialize_for_inference_only", "apex/initialize_twice_train_and_eval_models",
                "apex/optional_handler_warns",
                "apex/o1_forward_holds_torch_cuda_amp", "apex/o1_script", "apex/o1_train_function",
                "apex/o1_with_torch_cuda_amp", "apex/o1_without_torch_import", "apex/yolov5_optional_import",
                "apex/optional_flags_in_try", "apex/optional_flag_cleared_before",
                "apex/optional_flag_cleared_before_commented", "apex/o1_script_resumes", "apex/o1_resume_helper_present",
                "apex/optional_without_flag", "apex/o1_clip_model_parameters", "apex/condition_clip_pair",
                "apex/condition_else_with_comments", "apex/local_import_in_function",
                "apex/local_import_under_condition", "apex/o1_script_with_apex_parallel",
                "apex/opt_level_from_argparse_default_o1", "apex/parallel_rewritten", "unsafe_fixes/apex_opt_level_o2",
                "apex/private_loss_scale_read", "apex/private_loss_scale_written", "apex/private_loss_scale_settings", "apex/private_state_import",
                "apex/flair_trainer", "apex/o1_model_method_evaluates_after_initialize",
                "apex/o1_plain_backward_beside_scale_loss", "apex/o1_plain_backward_in_a_helper", "apex/trainer_conditional_import",
                "apex/local_imports_in_two_functions", "unsafe_fixes/apex_several_losses", "apex/optional_none_check_alone", "apex/optional_none_checks_alone", "apex/o1_torch_from_star_import",
                "apex/apex_parallel_torch_imported_by_the_rewrite",
                "apex/trainer_init_forward_in_method", "apex/trainer_init_module_import_state",
                "unsafe_fixes/apex_trainer_init_step_given_the_loss", "apex/several_optimizers_lists",
                "apex/several_optimizers_clipped", "apex/several_optimizers_list_names",
                "apex/several_optimizers_clipped_before_steps",
                "unsafe_fixes/apex_several_optimizers_losses", "apex/flag_set_after_initialize",
                "apex/flag_set_after_initialize_in_function", "apex/condition_config_key",
                "apex/trainer_setup_method_condition", "apex/initialize_in_a_loop", "apex/condition_scale_and_clip",
                "apex/parallel_import_in_its_own_paragraph", "apex/import_torch_with_the_torch_imports", "apex/torch_imported_for_type_checkers_only",
                "apex/o1_gradients_read_by_the_projects_code", "apex/gradients_read_in_the_micro_steps",
                "apex/gradients_read_between_two_backwards", "apex/gradients_read_in_the_steps_condition",
                "unsafe_fixes/apex_parallel_import_where_functools_goes",
                "apex/o1_plain_backward_in_a_nested_helper", "apex/o1_gradients_read_by_a_nested_helper",
                "apex/trainer_gradients_read_by_an_inherited_method", "apex/o1_step_on_an_unended_last_line",
                "apex/condition_module_import", "apex/condition_module_import_trainer",
                "apex/condition_module_import_other_flag", "apex/condition_module_import_changed_by_a_helper",
                "apex/condition_module_import_global_rebound", "apex/condition_module_import_scale_loss_unguarded",
                "unsafe_fixes/apex_condition_module_import_opt_level_argument",
                "apex/declared_opt_level_o1", "unsafe_fixes/apex_declared_opt_level_o2",
                "unsafe_fixes/apex_static_loss_scale", "apex/parallel_import_in_try_that_raises",
                "apex/parallel_local_import_in_try", "apex/parallel_local_import_in_another_block",
                "apex/import_in_try_that_raises", "apex/parallel_through_import_apex",
                "apex/parallel_through_import_apex_kept",
                "unsafe_fixes/apex_gan_alternating", "apex/scale_loss_in_a_profiler_range",
                "roots/star_import_torch", "apex/register_half_function_on_the_float16_list",
                "unsafe_fixes/apex_computed_loss_scale", "apex/initialize_optimizers_keyword",
                # issue 44, apex's ImageNet example's shapes
                "apex/imports_in_a_try_that_raises", "apex/imports_in_a_try_that_raises_commented",
                "unsafe_fixes/apex_imports_in_a_try_that_raises",
                "unsafe_fixes/apex_imports_in_a_try_that_raises_optimizers_read",
                "apex/scale_loss_in_a_function_it_calls", "apex/scale_loss_in_a_function_called_elsewhere",
                "unsafe_fixes/apex_loss_scale_option", "unsafe_fixes/apex_parallel_delay_allreduce",
                "unsafe_fixes/apex_native_switch",
                # issue 44, timm's switch (GPUNet's train.py): apex.amp and apex.parallel imported
                "unsafe_fixes/apex_switch_first", "apex/apex_switch_first_default",
                # issue 44, BERT's run_glue.py
                "unsafe_fixes/apex_set_up_returned_to_caller",
                # issue 44, TimeSeriesPredictionPlatform's inference.py (its runnable twin: fixtures/run/
                # apex_inference_handed_on.py)
                "unsafe_fixes/apex_inference_model_handed_on"}


def test_only_the_known_cases_are_not_runnable() -> None:
    assert {c.id for c in CASES if c.not_runnable_reason() is not None} == NOT_RUNNABLE


def _params():
    for case, case_id in zip(CASES, CASE_IDS):
        if case.changes and case.not_runnable_reason() is None:
            yield pytest.param(case, id=case_id)


# The rules that move code already on torch.amp (a device target's): their inputs are not deprecated.
ALREADY_MIGRATED_CODES = {rule.code for rule in ALL_RULES if rule.device_target_only}
_DEVICE_ARGUMENT = {"GradScaler": "device"}  # the others name it device_type


def _on_the_cpu(record: dict, mode: str) -> dict:
    """What an object the .in.py built for CUDA must be once moved to the CPU by --device `mode`.

    The dtype autocast uses on CUDA, float16 (the old class's default, or given), becomes bfloat16:
    under --device cpu an explicit float16 is rewritten so, and a default stands for the CPU's own,
    bfloat16. (--device auto keeps an explicit float16, so its fixtures give autocast none.)
    custom_fwd's cast_inputs=float16 becomes bfloat16 under --device cpu only.
    """
    moved = dict(record)
    key = _DEVICE_ARGUMENT.get(record["api"], "device_type")
    if moved.get(key) != "cuda":
        return moved
    moved[key] = "cpu"
    if record["api"] == "autocast" and moved["dtype"] == "torch.float16":
        moved["dtype"] = "torch.bfloat16"
    if record["api"] == "autocast_state" and record["op"] in ("get_dtype", "set_dtype") and (
            mode == "cpu" or record["op"] == "get_dtype") and moved["value"] == "torch.float16":
        moved["value"] = "torch.bfloat16"  # set: rewritten so under --device cpu; read: the CPU's default
    if record["api"] == "custom_fwd" and mode == "cpu" and moved["cast_inputs"] == "torch.float16":
        moved["cast_inputs"] = "torch.bfloat16"
    return moved


def _assert_runs_on_the_cpu(case: Case, before: dict, after: dict) -> None:
    mode = CPU_TARGET_AREAS[case.area]
    expected = [_on_the_cpu(record, mode) for record in before["records"]]
    assert after["records"] == expected, (
        f"{case.id}: the AMP objects are not the original's moved to the CPU\n"
        f"expected: {json.dumps(expected, indent=1)}\nout: {json.dumps(after['records'], indent=1)}"
    )
    for record in after["records"]:
        assert record[_DEVICE_ARGUMENT.get(record["api"], "device_type")] == "cpu", f"{case.id}: {record}"
    for probe in after["probes"]:
        if probe["api"] == "autocast":
            lower = probe["dtype"] if probe["enabled"] else "torch.float32"
            assert probe["linear_dtype"] == lower, f"{case.id}: autocast is not on: {probe}"
    scalers = [r for r in after["records"] if r["api"] == "GradScaler"]
    enabled = [p["is_enabled"] for p in after["probes"] if p["api"] == "GradScaler"]
    assert enabled == [r["enabled"] for r in scalers], f"{case.id}: a GradScaler is not as enabled as asked"


@pytest.mark.parametrize("case", list(_params()))
def test_in_and_out_behave_the_same(case: Case, oracle: dict[str, dict]) -> None:
    before = oracle[str(case.in_path)]
    after = oracle[str(case.out_path)]
    for side, run in (("in", before), ("out", after)):
        assert "crash" not in run, f"{case.id} ({side}): {run['crash']}"
        assert run["error"] is None, f"{case.id}: .{side}.py raised:\n{run['error']}\noutput:\n{run['output']}"

    if case.area in CPU_TARGET_AREAS:
        _assert_runs_on_the_cpu(case, before, after)
    else:
        assert before["records"] == after["records"], (
            f"{case.id}: the AMP objects differ\n"
            f"in:  {json.dumps(before['records'], indent=1)}\nout: {json.dumps(after['records'], indent=1)}"
        )
        assert _regions(before) == _regions(after), f"{case.id}: a region runs under other autocast settings"
    assert before["records"], f"{case.id}: the fixture creates no AMP object, so the oracle checks nothing"

    findings = case.expected_findings() or []
    if not any(not fixed for _, _, fixed in findings) and case.area != "suppress":
        # nothing is left deprecated: the migrated file must not warn about the old API (a
        # suppressed line keeps the old API without a finding)
        assert after["deprecation_warnings"] == [], f"{case.id}: .out.py still warns: {after['deprecation_warnings']}"
    already_migrated = bool(findings) and all(code in ALREADY_MIGRATED_CODES for _, code, _ in findings)
    if case.area != "unsafe_fixes" and not already_migrated:
        # a rewritten input must really run something deprecated, or the comparison proves little
        # (unsafe_fixes rewrite strings such as mock.patch targets, which need not run deprecated code;
        # a device target also moves code already on torch.amp, which is not deprecated)
        assert before["deprecation_warnings"], f"{case.id}: .in.py ran no deprecated API"


def _regions(run: dict) -> list[tuple[str, str, bool]]:
    """Each autocast region entered: its device, and the dtype and cache setting in force inside it."""
    return [(p["device_type"], p["region_dtype"], p["region_cache_enabled"]) for p in run["probes"]
            if p["api"] == "autocast"]


# The cases whose rewrite writes the old autocast defaults because the code shows nesting: without them (the
# idiomatic `torch.amp.autocast(device)`) a region would run under other settings, so the comparison above
# can fail on them.
NESTED_CASES = {"autocast/nested_same_function", "autocast/nested_across_call",
                "autocast/nested_after_set_autocast_dtype", "autocast/nested_multiline", "device_cpu/nested_autocast"}


@pytest.fixture(scope="session")
def idiomatic(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """{case id: recorder result} of each nested case rewritten as if no nesting were seen."""
    folder = tmp_path_factory.mktemp("idiomatic")
    scripts = {}
    with mock.patch.object(Nesting, "reason", return_value=None):
        for case in (c for c in CASES if c.id in NESTED_CASES):
            text, _ = read_source(case.in_path)
            result = fix_source(text, Options(**case.options))  # type: ignore[arg-type]
            assert result.error is None and result.new_source != read_source(case.out_path)[0], case.id
            path = folder / (case.id.replace("/", "__") + ".py")
            path.write_text(result.new_source, encoding="utf-8")
            scripts[case.id] = path
    out_json = folder / "records.json"
    env = dict(os.environ, PYTHONHASHSEED="0", CUDA_VISIBLE_DEVICES="")
    subprocess.run([sys.executable, str(RECORDER), str(out_json), *map(str, scripts.values())], cwd=ROOT, env=env,
                   check=True, timeout=TIMEOUT_S, capture_output=True)
    recorded = json.loads(out_json.read_text(encoding="utf-8"))
    return {case_id: recorded[str(path)] for case_id, path in scripts.items()}


def test_the_nested_cases_are_known() -> None:
    assert NESTED_CASES <= {c.id for c in RUNNABLE}


@pytest.mark.parametrize("case_id", sorted(NESTED_CASES))
def test_the_idiomatic_rewrite_of_a_nested_case_would_differ(case_id: str, oracle: dict[str, dict],
                                                             idiomatic: dict[str, dict]) -> None:
    case = next(c for c in CASES if c.id == case_id)
    before, plain = oracle[str(case.in_path)], idiomatic[case_id]
    assert plain["error"] is None, plain["error"]
    if case.area in CPU_TARGET_AREAS:
        expected = [_on_the_cpu(record, CPU_TARGET_AREAS[case.area]) for record in before["records"]]
        assert plain["records"] != expected
    else:
        assert plain["records"] != before["records"]
        assert _regions(plain) != _regions(before)


# The unsafe fix of a referenced autocast class (docs/rules.md, AMP001): a functools.partial with the device and
# the old defaults. The case above shows calls without arguments and by keyword unchanged; here the fixture's own
# code is called with a positional argument, which the old class takes as `enabled`.
POSITIONAL_CALL = "\nfor precision in ('16-mixed', 'bf16-mixed'):\n    with get_autocast(precision)(False):\n        pass\n"


def test_a_positional_call_of_the_autocast_partial_fails_loudly(tmp_path: Path) -> None:
    case = next(c for c in CASES if c.id == "unsafe_fixes/autocast_reference_returned")
    scripts = []
    for side, path in (("in", case.in_path), ("out", case.out_path)):
        script = tmp_path / f"{side}.py"
        script.write_text(read_source(path)[0] + POSITIONAL_CALL, encoding="utf-8")
        scripts.append(script)
    out_json = tmp_path / "records.json"
    env = dict(os.environ, PYTHONHASHSEED="0", CUDA_VISIBLE_DEVICES="")
    subprocess.run([sys.executable, str(RECORDER), str(out_json), *map(str, scripts)], cwd=ROOT, env=env,
                   check=True, timeout=TIMEOUT_S, capture_output=True)
    recorded = json.loads(out_json.read_text(encoding="utf-8"))
    before, after = recorded[str(scripts[0])], recorded[str(scripts[1])]
    assert before["error"] is None, before["error"]
    assert [(r["device_type"], r["enabled"]) for r in before["records"][-2:]] == [("cuda", False), ("cpu", False)]
    assert after["error"] is not None
    first_line = after["error"].splitlines()[0]
    assert first_line.startswith("TypeError") and "multiple values for argument 'dtype'" in first_line, after["error"]
    # It fails at the first positional call, before creating anything more than the fixture's own objects.
    assert after["records"] == before["records"][:-2]
