"""The file's own style in what ampfix inserts: the quote read from the tokens (ampfix.syntax.quotes)."""

from __future__ import annotations

import pytest

from ampfix.syntax.quotes import preferred_quote


@pytest.mark.parametrize(("source", "quote"), [
    ("x = 1\n", '"'),  # no string: double
    ("'''doc'''\nx = 1\n", '"'),  # triple-quoted strings do not count
    ("a = f'{x}'\nb = 'y'\nc = \"z\"\n", '"'),  # f-strings do not count; a tie: double
    ("a = 'x'\nb = b'y'\nc = \"it's\"\n", "'"),  # prefixed strings count; the majority wins
    ("a = 'x'\nb = (\n", "'"),  # a tokenizer error ends the count, it does not fail it
])
def test_preferred_quote(source: str, quote: str) -> None:
    assert preferred_quote(source) == quote
