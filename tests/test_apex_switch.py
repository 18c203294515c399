"""The switch between apex.amp and the module's own native path on a string (`ampfix.families.apex.rewrite.switch`,
DeepLearningExamples' Transformer-XL): what each message says, what the default mode leaves, and why a switch that
reads its value otherwise is left."""

from __future__ import annotations

from pathlib import Path

from ampfix.engine import Options, fix_source

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
WHERE = "the switch on `args.amp` ('pytorch' native, 'apex' apex.amp)"


def _read(name: str) -> str:
    return (FIXTURES / f"{name}.in.py").read_text(encoding="utf-8")


def test_the_apex_value_takes_the_native_path_and_each_use_says_so() -> None:
    result = fix_source(_read("unsafe_fixes/apex_native_switch"), Options(unsafe_fixes=True))
    by_line = {f.line: f.message for f in result.findings if f.fixed}
    assert by_line[69] == (
        f"{WHERE}: 'apex' now takes the native path 'pytorch' took (torch.amp's autocast and GradScaler; apex.amp is "
        "gone, so it could only fail), each `args.amp == 'pytorch'` reads `args.amp in ('pytorch', 'apex')`, and the "
        "apex branch it left dead is removed")
    assert by_line[39] == by_line[53] == by_line[25] == by_line[69]
    assert by_line[76].startswith("`amp.load_state_dict(checkpoint['amp_state'])` -> "
                                  "`scaler.load_state_dict(grad_scaler_state(...))`: into the native branch's scaler")
    assert by_line[76].endswith("a checkpoint an apex run saved still resumes")
    assert by_line[9].startswith("the optional `from apex import amp` and its `except` branch are removed")


def test_in_the_default_mode_the_note_says_what_the_apex_value_loses() -> None:
    """The `else` the apex value ran stepped `optimizer_sparse`; the native body it takes now does not."""
    source = _read("unsafe_fixes/apex_native_switch")
    result = fix_source(source)
    assert result.new_source == source
    (initialize,) = [f for f in result.findings if f.code == "AMP101"]
    assert initialize.message.endswith(
        f"not rewritten: {WHERE}: 'apex' now runs torch.amp's autocast and a GradScaler with torch's defaults, not "
        "apex's opt_level (`args.apex_amp_opt_level`: O2's float16 model and float32 master weights have no native "
        "twin) nor its loss scaler's settings; where it ran the `else` of the `if` on line 54, it runs that `if`'s "
        "body, as the native value did (so `optimizer_sparse` is no longer stepped there) (an unsafe fix exists: "
        "--unsafe-fixes)")


def test_a_switch_whose_value_is_read_otherwise_is_left_saying_where() -> None:
    source = _read("unsafe_fixes/apex_native_switch_other_comparison")
    result = fix_source(source, Options(unsafe_fixes=True))
    assert result.new_source == source
    (initialize,) = [f for f in result.findings if f.code == "AMP101"]
    assert initialize.message.endswith(f"; {WHERE}: line 13 compares `args.amp` otherwise")


def test_an_apex_branch_that_steps_what_the_native_one_does_not_says_so() -> None:
    source = _read("unsafe_fixes/apex_native_switch_other_comparison").replace(
        "    if args.amp == 'apex':\n        print('apex amp')\n", "").replace(
        "            optimizer.step()\n", "            optimizer.step()\n            other.step()\n")
    result = fix_source(source)
    (initialize,) = [f for f in result.findings if f.code == "AMP101"]
    assert "; the apex branch on line 20 is removed (so `other` is no longer stepped there) (an unsafe fix exists" \
        in initialize.message


def _other_comparison_made(new: str) -> str:
    """The switch fixture with its extra `if args.amp == 'apex':` replaced by `new`."""
    return _read("unsafe_fixes/apex_native_switch_other_comparison").replace(
        "    if args.amp == 'apex':\n        print('apex amp')\n", new)


def _reason(source: str) -> str:
    result = fix_source(source, Options(unsafe_fixes=True))
    assert result.new_source == source
    (initialize,) = [f for f in result.findings if f.code == "AMP101"]
    return initialize.message.partition(f"; {WHERE}: ")[2]


def test_a_switch_value_read_other_than_compared_is_left() -> None:
    assert _reason(_other_comparison_made("    print(args.amp)\n")) == (
        "line 13 reads `args.amp` otherwise (what it does with 'apex' is not known)")


def test_an_if_that_raises_for_the_apex_value_for_another_reason_is_left() -> None:
    """Only a raise where apex is missing (`'apex' not in sys.modules`) goes with apex."""
    source = _other_comparison_made("    if args.amp == 'apex' and args.world_size > 8:\n        raise ValueError\n")
    assert _reason(source) == "line 13 compares `args.amp` otherwise"
    source = _other_comparison_made("    if args.amp == 'apex' and 'apex' not in sys.modules:\n        raise "
                                        "RuntimeError\n").replace("import torch\n", "import sys\n\nimport torch\n")
    result = fix_source(source, Options(unsafe_fixes=True))
    assert "raise RuntimeError" not in result.new_source and "'apex' not in sys.modules" not in result.new_source


def test_an_optional_import_that_sets_a_flag_is_left() -> None:
    """Removing the `try` would leave the flag unbound."""
    source = _other_comparison_made("").replace(
        "from apex import amp\n", "try:\n    from apex import amp\nexcept ImportError:\n    HAS_APEX = False\n")
    assert _reason(source) == ("the optional import's `try` on line 4 sets names (flags, or in its `except`), which "
                               "removing it would leave unbound")


FIRST = "the switch on `use_amp` ('native' native, 'apex' apex.amp)"


def test_the_apex_branch_first_takes_the_native_path_too() -> None:
    """timm's (GPUNet's train.py): `if use_amp == "apex": ... elif use_amp == "native": ...`, `use_amp != "native"`
    choosing apex.parallel, apex.parallel imported in the optional import's `try`."""
    result = fix_source(_read("unsafe_fixes/apex_switch_first"), Options(unsafe_fixes=True))
    by_line = {f.line: f.message for f in result.findings if f.fixed}
    assert by_line[50] == (
        f"{FIRST}: 'apex' now takes the native path 'native' took (torch.amp's autocast and GradScaler; apex.amp is "
        "gone, so it could only fail), each `use_amp == 'native'` reads `use_amp in (\"native\", \"apex\")`, each "
        "`use_amp != 'native'` reads `use_amp not in (\"native\", \"apex\")`, and the apex branch before it is "
        "removed (the `elif` after it becomes the `if`)")
    assert by_line[13] == (
        "the optional `from apex import amp` and its `except` branch are removed, with the apex.parallel imports of "
        "its `try` (torch.amp and torch's names take their place); `has_apex`, True exactly where apex imported, is "
        "now always True: what took apex's place is always there")
    assert by_line[14] == by_line[15] == ("the apex.parallel import is removed with the optional import's `try`: "
                                          "torch's names take its place")
    assert by_line[39] == "`convert_syncbn_model` -> `torch.nn.SyncBatchNorm.convert_sync_batchnorm`"
    assert by_line[63].startswith("`ApexDDP` -> `torch.nn.parallel.DistributedDataParallel`, with "
                                  "device_ids=[args.local_rank]")
    assert [f for f in result.findings if not f.fixed] == []


def test_the_apex_branch_first_in_the_default_mode_says_what_the_apex_value_loses() -> None:
    """It ran apex's SyncBN and DDP (`has_apex and use_amp != "native"`); it now runs the native value's `else`."""
    source = _read("apex/apex_switch_first_default")
    result = fix_source(source)
    assert result.new_source == source
    (initialize,) = [f for f in result.findings if f.code == "AMP101"]
    assert initialize.message.endswith(
        f"not rewritten: {FIRST}: 'apex' now runs torch.amp's autocast and a GradScaler with torch's defaults, not "
        "apex's opt_level (`\"O1\"`: O2's float16 model and float32 master weights have no native twin) nor its loss "
        "scaler's settings; where it ran the body of the `if` on line 37, it runs that `if`'s `else`, as the native "
        "value did (not apex's `convert_syncbn_model(model)`); where it ran the body of the `if` on line 61, it runs "
        "that `if`'s `else`, as the native value did (not apex's `ApexDDP(model, delay_allreduce=True)`) (an unsafe "
        "fix exists: --unsafe-fixes)")
    (parallel_import,) = [f for f in result.findings if f.code == "AMP110" and f.line == 14]
    assert parallel_import.message.endswith(
        "where the import fails (current apex), the `except` branch runs and the code silently goes on without it; "
        "torch's twin is always there, so import nothing instead")


def test_an_apex_first_switch_whose_native_value_runs_no_torch_amp_is_left() -> None:
    """`if S == 'apex': ... elif S == 'none': ...`: 'none' is no mixed-precision path for 'apex' to take."""
    source = _read("unsafe_fixes/apex_switch_first").replace(
        '        amp_autocast = partial(torch.autocast, "cuda")\n', "")
    result = fix_source(source, Options(unsafe_fixes=True))
    assert "from apex import amp" in result.new_source and "amp.initialize(" in result.new_source
    (initialize,) = [f for f in result.findings if f.code == "AMP101"]
    assert initialize.message.endswith(
        f"; {FIRST}: no `if` that tests `use_amp == 'native'` names torch's autocast or GradScaler: 'native' is not "
        "shown to be a mixed-precision path for 'apex' to take")


def test_where_apex_parallel_is_not_rewritten_the_try_stays_for_it() -> None:
    """apex's DDP given `message_size` (no twin): apex.parallel is left, and only `from apex import amp` leaves the
    `try`, whose `has_apex` is True where apex.parallel imports, as before."""
    source = _read("unsafe_fixes/apex_switch_first").replace(
        "ApexDDP(model, delay_allreduce=True)", "ApexDDP(model, message_size=1)")
    result = fix_source(source, Options(unsafe_fixes=True))
    assert "try:\n    from apex.parallel import DistributedDataParallel as ApexDDP\n    from apex.parallel import " \
        "convert_syncbn_model\n\n    has_apex = True\nexcept ImportError:\n    has_apex = False\n" in result.new_source
    assert "model = convert_syncbn_model(model)" in result.new_source
    assert 'if use_amp in ("native", "apex"):' in result.new_source and "amp." not in result.new_source
    by_line = {f.line: f for f in result.findings}
    assert by_line[13].fixed and by_line[13].message == (
        "the import is removed from the optional import's `try`: what it imported is rewritten; the `try` stays for "
        "`from apex.parallel import DistributedDataParallel as ApexDDP`, `from apex.parallel import "
        "convert_syncbn_model` (`has_apex` True where it imports, as before)")
    assert not by_line[14].fixed and not by_line[15].fixed and not by_line[63].fixed


def test_an_optional_import_whose_try_sets_a_flag_true_keeps_the_flag() -> None:
    """fixtures/run/apex_switch_first.py: `has_apex = True` after the import, `has_apex = False` in the `except`: the
    flag stays where the `try` was, always True, so `--apex-amp` still selects the apex value (now the native path)."""
    source = (FIXTURES / "run" / "apex_switch_first.py").read_text(encoding="utf-8")
    result = fix_source(source, Options(unsafe_fixes=True))
    assert "\nhas_apex = True\n\nparser = " in result.new_source and "try:" not in result.new_source
    (optional,) = [f for f in result.findings if f.code == "AMP100"]
    assert optional.fixed and optional.message == (
        "the optional `from apex import amp` and its `except` branch are removed: no apex.amp use is left, and the "
        "native path that takes its place is always there; `has_apex`, True exactly where apex imported, is now "
        "always True")


def test_where_only_apex_parallel_is_rewritten_the_try_stays_for_apex_amp() -> None:
    """The default mode with torch's DDP given the module alone (no unsafe fix for apex.parallel): its imports leave
    the `try`, which stays for `from apex import amp`, left (the switch is an unsafe fix); the output is stable."""
    source = _read("apex/apex_switch_first_default").replace("ApexDDP(model, delay_allreduce=True)", "ApexDDP(model)")
    result = fix_source(source)
    assert "try:\n    from apex import amp\n\n    has_apex = True\nexcept ImportError:\n    has_apex = False\n" \
        in result.new_source
    by_line = {f.line: f for f in result.findings}
    assert not by_line[13].fixed and not by_line[50].fixed
    assert by_line[14].fixed and by_line[14].message == by_line[15].message == (
        "the import is removed from the optional import's `try`: what it imported is rewritten; the `try` stays for "
        "`from apex import amp` (`has_apex` True where it imports, as before)")
    assert fix_source(result.new_source).new_source == result.new_source
