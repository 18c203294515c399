"""The reason given where initialize's `if` holds more than the rewrite replaces: the other statements' lines and the
`else`'s, each said only where it is so. (BERT's run_glue.py, which gave this reason first, is rewritten now: its
initialize is in a set-up function returning to `main`, fixtures/unsafe_fixes/apex_set_up_returned_to_caller.)"""

from __future__ import annotations


import pytest

from ampfix.core.options import Options
from ampfix.engine import fix_source


def _reason(source: str, unsafe: bool = False) -> str:
    result = fix_source(source, Options(unsafe_fixes=unsafe))
    assert result.new_source == source
    (message,) = [f.message for f in result.findings if f.code == "AMP101"]
    return message.rsplit("not rewritten: ", 1)[1]


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


@pytest.mark.parametrize("unsafe", [False, True])
def test_the_other_statements_and_the_else_are_named(unsafe: bool) -> None:
    body = (f"        print('fp16')\n        optimizer = make(model)\n{INIT}\n        scheduler = None\n    else:\n"
            "        print('fp32')")
    assert _reason(TRAIN.format(body=body), unsafe) == (
        "initialize is not alone under its `if`: 3 other statements there (lines 7, 8, 10), and the `if` has an "
        "`else` (its block from line 12)")


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
