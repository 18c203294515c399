"""The file's own quote character, for the strings ampfix inserts (as ruff's fixes do).

The style is read from the tokens: the quote most of the file's simple string literals use (one quote
character, not triple-quoted, not an f-string: docstrings and f-strings say little about a file's
habit); a tie, or no such literal: the double quote (PEP 8 leaves it open; black and ruff default to it).
"""

from __future__ import annotations

import io
import tokenize

from ampfix.syntax.context import ModuleContext

DOUBLE, SINGLE = '"', "'"


def preferred_quote(source: str) -> str:
    counts = {DOUBLE: 0, SINGLE: 0}
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type != tokenize.STRING:
                continue
            body = token.string.lstrip("rRbBuUfF")
            if body[:3] in ('"""', "'''") or "f" in token.string[: len(token.string) - len(body)].lower():
                continue
            counts[body[0]] += 1
    except (tokenize.TokenError, SyntaxError):
        pass  # the counts so far: the engine has parsed the file, a tokenizer quirk must not stop it
    return SINGLE if counts[SINGLE] > counts[DOUBLE] else DOUBLE


def quoted(value: str, quote: str) -> str:
    """`value` (plain text: no quote nor backslash) as a literal in `quote`."""
    return f"{quote}{value}{quote}"


def module_quote(context: ModuleContext) -> str:
    """The module's quote (a `ModuleContext.fact`: read once, only for a module that gets a string)."""
    return preferred_quote(context.source)
