"""Every planned edit lands exactly where it was planned: a rename is planned on every dotted name
and every plain string literal of every fixture (`tests/edit_probe.py`), applied as `rewrite` applies
edits, and compared with the same replacements made by slicing the text at the planned spans.
benchmarks/edit_landing.py does the same over torch's own source."""

from __future__ import annotations

import pytest

from fixture_cases import CASES, FIXTURES, read_source

from edit_probe import probe

SOURCES = sorted({path for case in CASES for path in (case.in_path, case.expected_path)}
                 | set(FIXTURES.joinpath("run").glob("*.py")) | set(FIXTURES.joinpath("demo").glob("*.py")))


@pytest.mark.parametrize("path", SOURCES, ids=[p.relative_to(FIXTURES).as_posix() for p in SOURCES])
def test_every_edit_in_a_fixture_lands_where_planned(path):
    source, _ = read_source(path)
    expected, actual, planned = probe(source)
    assert planned > 0
    assert actual == expected


TRICKY = {
    "fstring_in_concatenation": 'msg = ("a{" f"{torch.cuda.amp.autocast(x)}" "b" f"{y!r:>{w}}")\n',
    "nested_fstring_spec": 'msg = f"{value:{width}.{precision}}" + f"{d[\'key\']}"\n',
    "nfkc": "with torch.cuda.ａｍｐ.autocast(enabled=False):\n    ｘ = 1\n",
    "non_ascii_before": 'é = "é"; x = torch.cuda.amp.autocast()\n',
    "parenthesised": "x = ((torch.cuda.amp).autocast)()\ny = (a\n  .b\n  .c)\n",
    "semicolons": "import torch; a = torch.x; b = 'amp'\nc = a\n",
    "decorators": "@a.b\n@c(d.e)\ndef f(x: t.T = u.v) -> r.R:\n    return x\n",
    "continuation": "x = a.b + \\\n    c.d\n",
    "crlf": "import torch\r\nx = torch.cuda.amp.autocast()\r\nif x:\r\n    y = 'z'\r\n",
    "tabs": "if a:\n\tb = c.d\n\tif e:\n\t\tf = 'g'\n",
    "match": "match p:\n    case Color.RED if q.r:\n        s = t\n    case {'k': v, **rest}:\n        pass\n",
    "walrus_and_comprehension": "if (n := len(a.b)) > 1:\n    c = [x.y for x in d if x.z]\n",
    "class_body": "class A(B.C, metaclass=M.N):\n    x: T.U = V.W\n    def f(self):\n        del self.x\n",
    "no_trailing_newline": "a = b.c",
    "global_and_star": "def f():\n    global g\n    g, *h = i.j\n",
    # A line break inside the parentheses is followed by the block's indentation, which LibCST
    # prints from its state: a node re-printed alone must be given it.
    "parenthesised_across_lines_in_a_block": "def f():\n    if a:\n        x = (\n            b.c  # note\n        )\n"
                                             "        y = g(\n            h,\n        )\n",
}


@pytest.mark.parametrize("source", TRICKY.values(), ids=TRICKY.keys())
def test_edits_land_in_syntax_where_ast_and_cst_differ(source):
    expected, actual, planned = probe(source)
    assert planned > 0
    assert actual == expected
