"""The torch functions whose apex registration the rewrite drops (`ampfix.families.apex.rewrite.registrations`):
each is a function of the installed torch and its op is on the CUDA autocast float16 list the runner declares."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ampfix.engine import fix_source
from ampfix.families.apex.rewrite.registrations import TORCH_FLOAT16_FUNCTIONS
from ampfix.runner.gpu.cuda_autocast import CUDA_POLICY

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "apex"


def test_each_name_is_a_torch_function_on_autocasts_float16_list() -> None:
    for name in sorted(TORCH_FLOAT16_FUNCTIONS):
        assert callable(getattr(torch, name, None)), name  # apex raised for a name the module lacks
        policies = {policy for op, policy in CUDA_POLICY.items() if op.partition(".")[0] == name}
        assert policies == {"lower_precision_fp"}, (name, policies)



@pytest.mark.parametrize(("name", "reason"), [
    ("register_half_function_off_the_float16_list", "apex.amp is used otherwise too (apex.amp.register_half_function)"),
    ("register_half_function_in_an_if_that_calls",
     "the `if` on line 12 holds only registrations that autocast makes no-ops, and its test or its `else` does more"),
    ("register_half_function_all_its_block_holds",
     "removing the registration on line 19 (or the `if` holding only registrations) would leave its block empty"),
])
def test_a_registration_that_is_no_no_op_twin_holds_the_rewrite_back_with_its_reason(name: str, reason: str) -> None:
    source = (FIXTURES / f"{name}.in.py").read_text(encoding="utf-8")
    result = fix_source(source)
    assert result.new_source == source
    (initialize,) = [f for f in result.findings if f.code == "AMP101"]
    assert initialize.message.endswith(f"not rewritten: {reason}")


@pytest.mark.parametrize(("name", "suggested"), [
    ("register_half_function_in_an_if_that_calls",
     "nothing: torch.einsum is on CUDA autocast's float16 list, so under the autocast of the migration it runs in "
     "float16 already; the registration goes with apex.amp's set-up (ampfix removes it where it rewrites that set-up)"),
    ("register_half_function_off_the_float16_list",
     'wrap the calls: with torch.autocast("cuda", enabled=False): f(x.float()) (float32), or cast the inputs to '
     "float16 before the call"),
])
def test_a_registration_left_suggests_what_its_function_needs(name: str, suggested: str) -> None:
    """Left with its set-up (Transformer-XL's einsum beside initialize in another function): a function autocast runs
    in float16 needs nothing by hand; another needs its calls wrapped."""
    result = fix_source((FIXTURES / f"{name}.in.py").read_text(encoding="utf-8"))
    (registration,) = [f for f in result.findings if f.code == "AMP105"]
    assert not registration.fixed and registration.suggestion == suggested
