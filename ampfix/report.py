"""Renderers: results in, text out. Plain text unless a terminal asks for colour; never prints."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Sequence

from ampfix.engine import INTERNAL_ERROR_CODE, SYNTAX_ERROR_CODE
from ampfix.files import READ_ERROR_CODE

if TYPE_CHECKING:  # the rule table is only needed by `ampfix rules`: `check` does not import it
    from ampfix.files import FileResult
    from ampfix.rules import Rule


# Errors (internal, syntax, read) carry no rewrite to suggest.
_NO_SUGGESTION_CODES = frozenset({INTERNAL_ERROR_CODE, SYNTAX_ERROR_CODE, READ_ERROR_CODE})


def finding_lines(result: FileResult, mode: str) -> list[str]:
    lines = []
    for finding in result.findings:
        if mode == "check":
            mark = " [*]" if finding.fixable and not finding.unsafe else " [unsafe]" if finding.fixable else ""
        else:
            done = "would fix" if mode == "diff" else "fixed"
            mark = f" {done}{' (unsafe)' if finding.unsafe else ''}:" if finding.fixed else " left:"
        message = finding.message
        needs_hand = not finding.fixed and not (finding.fixable and not finding.unsafe)
        if needs_hand and finding.suggestion and finding.code not in _NO_SUGGESTION_CODES:
            message += f"; suggested: {finding.suggestion}"
        lines.append(f"{result.path}:{finding.line}:{finding.col}: {finding.code}{mark} {message}")
    return lines


def summary(results: Sequence[FileResult], mode: str) -> str:
    findings = [f for r in results for f in r.findings]
    errors = sum(1 for r in results if r.error)
    fixed = sum(1 for f in findings if f.fixed)
    left = len(findings) - fixed
    parts = []
    if mode == "check":
        safe = sum(1 for f in findings if f.fixable and not f.unsafe)
        unsafe = sum(1 for f in findings if f.fixable and f.unsafe)
        parts.append(f"{_count(len(findings) - errors, 'finding')}"
                     f" ({safe} fixable with `ampfix rewrite`, {unsafe} more with --unsafe-fixes)")
    else:
        changed = sum(1 for r in results if r.changed)
        verb = "would rewrite" if mode == "diff" else "rewrote"
        parts.append(f"{verb} {_count(changed, 'file')} ({_count(fixed, 'fix', 'fixes')})")
        parts.append(f"{_count(left - errors, 'finding')} left")
    if errors:
        parts.append(f"{_count(errors, 'file')} could not be processed")
    return "; ".join(parts) + "."


def _count(n: int, singular: str, plural: str | None = None) -> str:
    return f"{n} {singular if n == 1 else plural or singular + 's'}"


def findings_json(results: Iterable[FileResult]) -> str:
    rows = [
        {
            "path": r.path,
            "line": f.line,
            "col": f.col,
            "code": f.code,
            "message": f.message,
            "fixable": f.fixable,
            "unsafe": f.unsafe,
            "fixed": f.fixed,
            "suggestion": f.suggestion,
        }
        for r in results
        for f in r.findings
    ]
    import json

    return json.dumps(rows, indent=2)


def _version(version: tuple[int, int] | None) -> str:
    return "-" if version is None else ".".join(map(str, version))


def _rule_rows(rules: Sequence[Rule]) -> list[dict[str, object]]:
    rows = []
    for rule in rules:
        for old, target in rule.symbols.items():
            if target is None:
                new, fix = "(no twin)", "report only"
            else:
                device = f'"{target.device}"' if target.device else ""
                if rule.shape and rule.shape.device_keyword:
                    device = f"{rule.shape.device_keyword}={device}"
                new = f"{target.new}({device})" if rule.shape and device else target.new
                fix = "safe"
            rows.append({"code": rule.code, "title": rule.title, "old": old, "new": new,
                         "min_torch": _version(rule.min_torch), "fix": fix})
    return rows


def _all_rules() -> Sequence[Rule]:
    from ampfix.rules import ALL_RULES

    return ALL_RULES


def rules_text(rules: Sequence[Rule] | None = None) -> str:
    rows = _rule_rows(_all_rules() if rules is None else rules)
    headers = {"code": "code", "old": "old", "new": "new", "min_torch": "torch", "fix": "fix"}
    widths = {k: max(len(str(r[k])) for r in [headers, *rows]) for k in headers}
    lines = ["  ".join(str(row[k]).ljust(widths[k]) for k in headers).rstrip() for row in [headers, *rows]]
    lines.insert(1, "  ".join("-" * widths[k] for k in headers))
    return "\n".join(lines)


def rules_json(rules: Sequence[Rule] | None = None) -> str:
    import json

    return json.dumps(_rule_rows(_all_rules() if rules is None else rules), indent=2)
