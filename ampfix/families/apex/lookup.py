"""Which apex rule lists a qualified name (read by the detection and by the rewrite)."""

from __future__ import annotations

from ampfix.core.rules import Rule
from ampfix.families.apex import rules

_CODES: dict[str, Rule] = {name: rule for rule in rules.APEX_RULES for name in rule.symbols}


def longest(table: dict, qname: str) -> str | None:
    """The longest dotted prefix of `qname` that `table` holds."""
    parts = qname.split(".")
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if name in table:
            return name
    return None


def rule_of(qname: str) -> Rule | None:
    name = longest(_CODES, qname)
    return None if name is None else _CODES[name]
