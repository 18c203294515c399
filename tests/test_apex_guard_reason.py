"""The reason given where initialize's `if` holds more than the rewrite replaces (BERT's run_glue.py,
fixtures/apex/initialize_not_alone_with_else): the other statements' lines and the `else`'s, each said only where
it is so."""

from __future__ import annotations

from pathlib import Path

import pytest

from ampfix.core.options import Options
from ampfix.engine import fix_source

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "apex" / "initialize_not_alone_with_else.in.py"


def _reason(source: str, unsafe: bool = False) -> str:
    result = fix_source(source, Options(unsafe_fixes=unsafe))
    assert result.new_source == source
    (message,) = [f.message for f in result.findings if f.code == "AMP101"]
    return message.rsplit("not rewritten: ", 1)[1]


@pytest.mark.parametrize("unsafe", [False, True])
def test_run_glue_names_the_other_statements_and_the_else(unsafe: bool) -> None:
    assert _reason(FIXTURE.read_text(encoding="utf-8"), unsafe) == (
        "initialize is not alone under its `if`: 3 other statements there (lines 12, 13, 22), and the `if` has an "
        "`else` (its block from line 26)")


TRAIN = """\
import torch
from apex import amp


def train(args, model, optimizer, loader):
    if args.fp16:
{body}
    for x, y in loader:
        loss = model(x, y)
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
"""
INIT = '        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")'


def test_one_other_statement_and_no_else() -> None:
    body = f"        print('fp16')\n{INIT}"
    assert _reason(TRAIN.format(body=body)) == \
        "initialize is not alone under its `if`: 1 other statement there (line 7)"


def test_an_else_alone() -> None:
    body = f"{INIT}\n    else:\n        print('fp32')"
    assert _reason(TRAIN.format(body=body)) == \
        "initialize is under its `if`, which has an `else` (its block from line 9)"


def test_a_local_import_is_named_with_the_if() -> None:
    source = TRAIN.replace("from apex import amp\n", "").format(
        body=f"        from apex import amp\n        print('fp16')\n{INIT}")
    assert _reason(source) == "initialize is not alone under its `if` (with the import): 1 other statement there " \
        "(line 7)"


def test_initialize_in_the_else() -> None:
    body = f"        print('fp32')\n    else:\n{INIT}"
    assert _reason(TRAIN.format(body=body)) == "initialize is in the `else` of the `if` on line 6"
