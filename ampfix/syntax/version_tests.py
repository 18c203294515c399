"""A version test decided over the torch versions the code must run on.

`ampfix.syntax.guards` builds a `Test` from an `if` test where it is made of comparisons of the installed
version with version literals, both read by the same parser (`V(torch.__version__) >= V("1.6.0")`),
`not`, `and` and `or`; any other part is `UNKNOWN`. `outcomes` then evaluates the test at every
version of the range `[target, newest)` where its value can change: each comparison changes value
only at its literal, so the range's low end, each literal and the first version after it, and a
version newer than any literal, stand for the whole range.

Versions are releases `X.Y.Z` (a local build such as `+cu118` sorts just after its release under
every parser here, so it behaves as the next release does); pre-releases and nightlies are not modelled.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

Version = tuple[int, ...]
# Three parts: torch's releases are X.Y.Z. A part this large is no literal anyone writes.
NEWEST: Version = (10**9, 0, 0)

_LITERAL = re.compile(r"[0-9]{1,8}(?:\.[0-9]{1,8}){0,2}")


@dataclass(frozen=True)
class Parser:
    """How a version class orders versions. Objects of different parsers do not compare."""

    name: str
    # packaging and StrictVersion read "1.6" as 1.6.0; LooseVersion compares the parts as written,
    # so LooseVersion("1.6") < LooseVersion("1.6.0").
    padded: bool
    min_parts: int = 1  # StrictVersion rejects "1"


PACKAGING = Parser("packaging", padded=True)
STRICT = Parser("StrictVersion", padded=True, min_parts=2)
LOOSE = Parser("LooseVersion", padded=False)

# The callables that parse a version string, by qualified name.
PARSERS: dict[str, Parser] = {
    "packaging.version.parse": PACKAGING,
    "packaging.version.Version": PACKAGING,
    "pkg_resources.parse_version": PACKAGING,
    "distutils.version.StrictVersion": STRICT,
    "distutils.version.LooseVersion": LOOSE,
    "looseversion.LooseVersion": LOOSE,
}

_OPERATORS: dict[type, tuple[str, Callable[[Any, Any], bool]]] = {
    ast.Lt: ("<", operator.lt), ast.LtE: ("<=", operator.le), ast.Gt: (">", operator.gt),
    ast.GtE: (">=", operator.ge), ast.Eq: ("==", operator.eq), ast.NotEq: ("!=", operator.ne),
}
_FUNCTIONS = dict(_OPERATORS.values())
_NEGATED = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}
_MIRRORED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}


@dataclass(frozen=True)
class Literal:
    text: str  # as written
    version: Version


def parse_literal(text: str, parser: Parser) -> Literal | None:
    if not _LITERAL.fullmatch(text) or text.count(".") + 1 < parser.min_parts:
        return None
    return Literal(text, tuple(int(part) for part in text.split(".")))


def operator_symbol(op: ast.cmpop) -> str | None:
    found = _OPERATORS.get(type(op))
    return None if found is None else found[0]


@dataclass(frozen=True)
class Comparison:
    """`V(torch) op V("1.6") op ...`: each operand the installed version (None) or a literal."""

    parser: Parser
    operands: tuple[Literal | None, ...]
    symbols: tuple[str, ...]

    def at(self, torch: Version) -> bool:
        keys = [self._key(torch if operand is None else operand.version) for operand in self.operands]
        return all(_FUNCTIONS[symbol](left, right) for symbol, left, right in zip(self.symbols, keys, keys[1:]))

    def _key(self, version: Version) -> Version:
        return (version + (0, 0, 0))[:3] if self.parser.padded else version

    def describe(self, holds: bool) -> str | None:
        """`torch >= 1.6.0` (or its negation): for a plain comparison of the version with one literal."""
        if len(self.symbols) != 1:
            return None
        left, right = self.operands
        symbol = self.symbols[0]
        if left is not None:  # `V("1.6") < V(torch)`: say it with torch first
            left, right, symbol = right, left, _MIRRORED[symbol]
        if left is not None or right is None:
            return None
        return f"torch {symbol if holds else _NEGATED[symbol]} {right.text}"


@dataclass(frozen=True)
class Not:
    operand: Test


@dataclass(frozen=True)
class BoolOp:
    is_and: bool
    operands: tuple[Test, ...]


class _Unknown:
    """A part of a test that says nothing ampfix can evaluate."""

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = _Unknown()
Test = Comparison | Not | BoolOp | _Unknown


def evaluate(test: Test, torch: Version) -> bool | None:
    """The test's truth on this torch; None where an unknown part decides it (three-valued logic:
    `False and x` is false, `True or x` is true, whatever x is)."""
    if isinstance(test, Comparison):
        return test.at(torch)
    if isinstance(test, Not):
        value = evaluate(test.operand, torch)
        return None if value is None else not value
    if isinstance(test, BoolOp):
        values = [evaluate(operand, torch) for operand in test.operands]
        decisive = not test.is_and  # `and` stops at a false operand, `or` at a true one
        if decisive in values:
            return decisive
        return None if None in values else not decisive
    return None


def literals(test: Test) -> Iterator[Literal]:
    if isinstance(test, Comparison):
        yield from (operand for operand in test.operands if operand is not None)
    elif isinstance(test, Not):
        yield from literals(test.operand)
    elif isinstance(test, BoolOp):
        for operand in test.operands:
            yield from literals(operand)


def outcomes(test: Test, target: tuple[int, int] | None) -> frozenset[bool | None]:
    """The values the test takes over the torch versions from `target` on (None: the newest torch only)."""
    if target is None:
        points = {NEWEST}
    else:
        low = (*target, 0)
        points = {low, NEWEST}
        for literal in literals(test):
            padded = (literal.version + (0, 0, 0))[:3]
            points |= {padded, (*padded[:2], padded[2] + 1)}
        points = {point for point in points if point >= low}
    return frozenset(evaluate(test, point) for point in points)


def describe(test: Test, holds: bool) -> str | None:
    """What the branch taken when the test is `holds` is for, where the test is one comparison."""
    if isinstance(test, Not):
        return describe(test.operand, not holds)
    if isinstance(test, Comparison):
        return test.describe(holds)
    return None
