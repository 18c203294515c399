"""Continuation lines kept against their bracket once a rewrite moved it (`ampfix.engine.continuation`)."""

from __future__ import annotations

import pytest

from ampfix.engine.continuation import realigned


@pytest.mark.parametrize(("old", "new", "expected"), [
    # the bracket moved left: the lines under it follow, a closing bracket under it too
    ("x = torch.cuda.amp.f(a,\n                     b,\n                     )\n",
     "x = torch.amp.f(a,\n                     b,\n                     )\n",
     "x = torch.amp.f(a,\n                b,\n                )\n"),
    # a bracket after the edit on its line moved right; the outer bracket did not move
    ("f(g(a), h(b,\n          c),\n  d)\n", "f(g('cuda', a), h(b,\n          c),\n  d)\n",
     "f(g('cuda', a), h(b,\n                  c),\n  d)\n"),
    # a hanging indent follows the line of its bracket (a block dedented around the call)
    ("if x:\n    s = f(\n        a,\n    )\n", "s = f(\n        a,\n    )\n", "s = f(\n    a,\n)\n"),
    # lines that stood elsewhere than under the bracket, or inside a string, are not this module's to move
    ("x = torch.cuda.f(a,\n        b)\n", "x = torch.f(a,\n        b)\n", "x = torch.f(a,\n        b)\n"),
    ('x = torch.cuda.f("""a\n                 b""",\n                 c)\n',
     'x = torch.f("""a\n                 b""",\n                 c)\n',
     'x = torch.f("""a\n                 b""",\n            c)\n'),
    # a line indented with a tab is left
    ("x = torch.cuda.f(a,\n\t\t\t\t b)\n", "x = torch.f(a,\n\t\t\t\t b)\n", "x = torch.f(a,\n\t\t\t\t b)\n"),
])
def test_realigned(old: str, new: str, expected: str):
    assert realigned(old, new) == expected
    assert realigned(expected, expected) == expected


def test_nothing_to_realign_is_not_tokenized():
    # an unterminated string would not tokenize: the cheap check says no continuation line can have moved
    assert realigned("x = 'a\ny = 1\n", "x = 'b\ny = 1\n") == "x = 'b\ny = 1\n"


def test_crlf_lines_are_realigned_and_old_mac_ones_left():
    old, new = "x = torch.cuda.f(a,\r\n                 b)\r\n", "x = torch.f(a,\r\n                 b)\r\n"
    assert realigned(old, new) == "x = torch.f(a,\r\n            b)\r\n"
    assert realigned(old.replace("\r\n", "\r"), new.replace("\r\n", "\r")) == new.replace("\r\n", "\r")
