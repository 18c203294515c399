"""initialize in a set-up function that returns its optimizer to its one caller, which scales the loss (BERT's
run_glue.py: `init_optimizer_and_amp` -> `main`; fixtures/unsafe_fixes/apex_set_up_returned_to_caller): the scaler is
the module's, bound where initialize was; each condition that fails is said."""

from __future__ import annotations

from pathlib import Path

import pytest

from ampfix.core.options import Options
from ampfix.engine import fix_source

ROOT = Path(__file__).resolve().parent.parent

SET_UP = """\
import torch
from apex import amp


def set_up(model, use_fp16):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if {test}:
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    return model, optimizer


def main(args, model, loader):
    model, optimizer = set_up(model, args.fp16)
{extra}    for x, y in loader:
        loss = model(x).sum()
        if {scaled}:
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
        else:
            loss.backward()
        optimizer.step()
"""

REWRITTEN = """\
import torch


scaler = torch.amp.GradScaler("cuda", enabled=False)


def set_up(model, use_fp16):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if use_fp16:
        global scaler
        scaler = torch.amp.GradScaler("cuda")
    return model, optimizer


def main(args, model, loader):
    model, optimizer = set_up(model, args.fp16)
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16, enabled=scaler.is_enabled()):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
"""


def _source(test: str = "use_fp16", extra: str = "", scaled: str = "args.fp16") -> str:
    return SET_UP.format(test=test, extra=extra, scaled=scaled)


def test_o1_is_rewritten_in_the_default_mode_the_scaler_the_modules() -> None:
    result = fix_source(_source())
    assert result.new_source == REWRITTEN
    messages = {f.code: f.message for f in result.findings}
    assert messages == {
        "AMP101": "`amp.initialize` (O1) -> `scaler = torch.amp.GradScaler(\"cuda\")`, the module's (`global scaler` in "
                  "`set_up`, bound disabled at the module's top until initialize's place runs), read by `main`, which "
                  "steps the optimizer `set_up` returns on line 13; the `if args.fp16:` around scale_loss in `main` "
                  "tests what `set_up` is given for the condition of initialize; `optimizer.step()` on line 21 -> "
                  "`scaler.step(optimizer)` and `scaler.update()`; O1 put every call after initialize in mixed "
                  "precision, the autocast added covers the forward passes: calls outside `main` (evaluation "
                  "elsewhere) are outside it (float32 unless under an autocast of their own)",
        "AMP102": "`if args.fp16: with amp.scale_loss(...)` and its `else: ....backward(...)` -> "
                  "`scaler.scale(...).backward(...)` (where the scaler is disabled, scale() returns the loss as it "
                  "is); line 15 before it run under `torch.autocast(\"cuda\", dtype=torch.float16, "
                  "enabled=scaler.is_enabled())`",
    }
    assert fix_source(REWRITTEN).new_source == REWRITTEN


def test_an_unconditional_set_up_returning_the_names_initialize_bound() -> None:
    """initialize under no `if`, binding other names (`model, opt`), which the set-up returns: apex returned the
    objects it was given, so those names are rebound to them, and the scaler is always enabled where it ran."""
    source = (SET_UP.replace("    if {test}:\n        model, optimizer = amp.initialize", "    model, opt = amp.initialize")
              .replace("    return model, optimizer\n", "    return model, opt\n")
              .replace("        if {scaled}:\n            with amp.scale_loss(loss, optimizer) as scaled_loss:\n"
                       "                scaled_loss.backward()\n        else:\n            loss.backward()\n",
                       "        with amp.scale_loss(loss, optimizer) as scaled_loss:\n"
                       "            scaled_loss.backward()\n")
              .format(extra=""))
    assert "amp.initialize(model, optimizer" in source and "if " not in source
    result = fix_source(source)
    assert result.new_source == REWRITTEN.replace(
        "    if use_fp16:\n        global scaler\n        scaler = torch.amp.GradScaler(\"cuda\")\n"
        "    return model, optimizer\n",
        "    global scaler\n    scaler = torch.amp.GradScaler(\"cuda\")\n    model, opt = model, optimizer\n"
        "    return model, opt\n")
    assert "`amp.initialize` (O1) -> `scaler = torch.amp.GradScaler(\"cuda\")`, the module's" in \
        [f.message for f in result.findings if f.code == "AMP101"][0]


def test_a_set_up_stepping_the_optimizer_itself_is_left() -> None:
    source = _source().replace("    return model, optimizer\n", "    optimizer.step()\n    return model, optimizer\n")
    result = fix_source(source)
    assert result.new_source == source
    (message,) = [f.message for f in result.findings if f.code == "AMP101"]
    assert message.endswith("not rewritten: `optimizer` is stepped in `set_up` too"), message


def test_a_set_up_returning_another_optimizer_is_left() -> None:
    source = _source().replace("    return model, optimizer\n", "    other = optimizer\n    return model, other\n")
    result = fix_source(source)
    assert result.new_source == source
    (message,) = [f.message for f in result.findings if f.code == "AMP101"]
    assert message.endswith("not rewritten: `set_up` does not return the model and the optimizer initialize was "
                            "given, by the names it was given them or bound them to"), message


@pytest.mark.parametrize(("changes", "reason"), [
    ({"extra": "    args.fp16 = False\n"},
     "in `main`, after `set_up(...)` is given `args.fp16` for `use_fp16`: the condition of initialize is assigned on "
     "line 14"),
    ({"scaled": "args.amp"},
     "the scale_loss on line 17 is under `if args.amp:`, not under initialize's condition `args.fp16`: a scaler "
     "enabled by that condition would not mean the same there"),
    ({"extra": "    set_up(model, False)\n"},
     "`set_up` (initialize's function) is not named once in the module, by `names = set_up(...)` in `main`'s own "
     "body, which scales the loss"),
    ({"extra": "    scaler = None\n"},
     "the name `scaler` is used in the module, where the scaler `main` reads would be bound"),
    ({"test": "not use_fp16"},
     "initialize is under `if not use_fp16:` in `set_up`, whose test is not a parameter `set_up` never rebinds: "
     "whether the scaler is enabled where `main` scales the loss cannot be told"),
])
def test_a_condition_that_fails_is_said_in_both_modes(changes: dict[str, str], reason: str) -> None:
    source = _source(**changes)
    for unsafe in (False, True):
        result = fix_source(source, Options(unsafe_fixes=unsafe))
        assert result.new_source == source
        (message,) = [f.message for f in result.findings if f.code == "AMP101"]
        assert message.endswith(f"not rewritten: {reason}"), message


def test_the_scale_loss_outside_initializes_condition_is_left() -> None:
    """Where `use_fp16` was false apex raised at scale_loss; a disabled scaler would train on."""
    source = _source().replace("        if args.fp16:\n            with", "        if True:\n            with")
    result = fix_source(source)
    assert result.new_source == source
    (message,) = [f.message for f in result.findings if f.code == "AMP101"]
    assert message.endswith(
        "not rewritten: the scale_loss on line 17 is not under `if args.fp16:`, initialize's condition: where it is "
        "false apex raised there (\"amp.initialize(...) must be called before `with amp.scale_loss`\"), and a "
        "disabled scaler would train on"), message


def test_run_glue_is_an_unsafe_fix_for_its_o2_and_rewritten_under_unsafe_fixes() -> None:
    """The default mode leaves run_glue's shape, saying what O2 loses; --unsafe-fixes rewrites it (the fixture's
    `.out.py`, read), saying where the scaler lives and what `amp_inits` becomes."""
    source = (ROOT / "fixtures" / "apex" / "set_up_returned_to_caller_default.in.py").read_text(encoding="utf-8")
    result = fix_source(source)
    assert result.new_source == source
    (message,) = [f.message for f in result.findings if f.code == "AMP101"]
    assert message.endswith("(an unsafe fix exists: --unsafe-fixes)") and "opt_level O2 becomes native AMP" in message
    fixture = ROOT / "fixtures" / "unsafe_fixes" / "apex_set_up_returned_to_caller"
    result = fix_source(fixture.with_suffix(".in.py").read_text(encoding="utf-8"), Options(unsafe_fixes=True))
    assert result.new_source == fixture.with_suffix(".out.py").read_text(encoding="utf-8")
    (message,) = [f.message for f in result.findings if f.code == "AMP101"]
    assert ("the module's (`global scaler` in `init_optimizer_and_amp`, bound disabled at the module's top until "
            "initialize's place runs), read by `main`, which steps the optimizer `init_optimizer_and_amp` returns on "
            "line 38; `amp_inits` is bound as apex returned it (given no optimizer, the model alone); the `if "
            "args.fp16:` around scale_loss in `main` tests what `init_optimizer_and_amp` is given for the condition "
            "of initialize; `optimizer.step()` on line 64 -> `scaler.step(optimizer)` and `scaler.update()`") in message
