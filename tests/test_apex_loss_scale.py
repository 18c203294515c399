"""A loss_scale read at run time (fixtures/unsafe_fixes/apex_computed_loss_scale, BERT's): the GradScaler the rewrite
makes chooses as apex chose on each value the command line may give (`--loss_scale`, 0 for dynamic): apex's dynamic
scale (GradScaler's defaults: 2**16, grown after 2000 clean steps) for 0, None and "dynamic", else a static twin
that starts at float(value) and never grows."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import torch

OUT = Path(__file__).resolve().parent.parent / "fixtures" / "unsafe_fixes" / "apex_computed_loss_scale.out.py"
NEVER_GROWS = 2**31 - 1


@pytest.mark.parametrize(("given", "init_scale", "growth_interval"), [
    (0, 2.0**16, 2000), (0.0, 2.0**16, 2000), (None, 2.0**16, 2000), ("dynamic", 2.0**16, 2000),
    (128.0, 128.0, NEVER_GROWS), ("256", 256.0, NEVER_GROWS),
])
def test_the_rewritten_scaler_reads_the_value_as_apex_did(given: object, init_scale: float,
                                                          growth_interval: int) -> None:
    (line,) = [line.strip() for line in OUT.read_text(encoding="utf-8").splitlines() if "GradScaler(" in line]
    # the same call on the CPU (a CUDA scaler is disabled where no GPU is, and keeps no scale)
    scaler = eval(line.removeprefix("scaler = ").replace('"cuda"', '"cpu"'),  # noqa: S307 (the fixture's own line)
                  {"torch": torch, "args": types.SimpleNamespace(loss_scale=given)})
    assert (scaler.get_scale(), scaler.get_growth_interval()) == (init_scale, growth_interval)


def test_initialize_in_both_branches_of_a_loss_scale_test_names_the_one_call_that_says_the_same() -> None:
    """BERT's run_squad.py (fixtures/apex/initialize_per_loss_scale_branches): left in both modes, the reason naming
    the one call a person may write instead (the call above, read at run time)."""
    from ampfix.core.options import Options
    from ampfix.engine import fix_source

    source = (OUT.parent.parent / "apex" / "initialize_per_loss_scale_branches.in.py").read_text(encoding="utf-8")
    for unsafe in (False, True):
        result = fix_source(source, Options(unsafe_fixes=unsafe))
        assert result.new_source == source
        initializes = [f.message for f in result.findings if f.code == "AMP101"]
        assert len(initializes) == 2 and all(message.endswith(
            "not rewritten: initialize is called in both branches of `if args.loss_scale == 0:` on line 8, alike but "
            'for loss_scale: they are one call given `loss_scale="dynamic" if args.loss_scale == 0 else '
            "args.loss_scale` (not merged here: written so by hand, that call's loss_scale is read at run time, under "
            "--unsafe-fixes)") for message in initializes), initializes
