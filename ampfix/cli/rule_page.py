"""`ampfix rule CODE`: one rule's page, from the rule's data: what it migrates, its minimum torch, what is
fixed and what is left and why, and its examples (the ones the tests run). Never prints."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ampfix.cli.report import FIX_MEANINGS, rule_rows, table_lines, version_text

# The page's prose lines; examples and the name table keep their own width.
_WIDTH = 110

if TYPE_CHECKING:
    from ampfix.core.rules import Example, Rule


def find_rule(code: str) -> Rule | None:
    from ampfix.families import ALL_RULES

    return next((rule for rule in ALL_RULES if rule.code == code.strip().upper()), None)


def rule_page(rule: Rule) -> str:
    rows = rule_rows([rule])
    parts = [f"{rule.code}: {rule.title}", "", _minimum(rule), ""]
    if rows:
        headers: dict[str, str | bool] = {"old": "old", "new": "new", "label": "fix"}
        parts += [*table_lines(headers, rows), "", *_meanings(rule, rows), ""]
    else:
        parts += ["names: none of its own (it concerns code around the names, as its examples show)", ""]
    for n, example in enumerate(rule.examples, 1):
        parts += [*_example(n, example), ""]
    return "\n".join(parts).rstrip("\n")


def _minimum(rule: Rule) -> str:
    if rule.min_torch is None:
        return "minimum torch: - (nothing in torch to migrate to, or no torch API of its own)"
    return (f"minimum torch: {version_text(rule.min_torch)} (its fix runs on torch >= {version_text(rule.min_torch)}; "
            "at an older --target-torch it is reported, not rewritten)")


def _meanings(rule: Rule, rows: list[dict[str, str | bool]]) -> list[str]:
    """What each part of the fix column means; a pattern's own note says what it rewrites."""
    labels = {str(row["label"]): None for row in rows}
    keys = {part: None for label in labels for part in label.replace("; else report", "").split("; ")}
    lines = []
    for key in keys:
        meaning = rule.fix_note if key == "pattern" and rule.fix_note else FIX_MEANINGS[key].format(name=rows[0]["old"])
        lines += _wrapped(f"{key}: {meaning}", "  ")
    return lines


def _wrapped(text: str, indent: str, first: str = "") -> list[str]:
    """A paragraph within the page's width; the lines after the first indented."""
    import textwrap

    return textwrap.wrap(text, _WIDTH, initial_indent=first, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False)


def _example(n: int, example: Example) -> list[str]:
    flags = [flag for flag, given in (("--unsafe-fixes", example.unsafe_fixes),
                                      (f"--device {example.device}", example.device != "cuda"),
                                      (f"--target-torch {version_text(example.target_torch)}",
                                       example.target_torch is not None)) if given]
    head = f"example {n}" + (f" (with {' '.join(flags)})" if flags else "") + ":"
    lines = [head, *_indented(example.before)]
    if example.after is not None:
        return [*lines, "becomes:", *_indented(example.after)]
    if example.reported is None:
        return [*lines, "is left as it is: nothing to change"]
    return [*lines, "is left and reported:", *_reasons(example)]


def _indented(source: str) -> list[str]:
    return [f"    {line}".rstrip() for line in source.rstrip("\n").split("\n")]


def _reasons(example: Example) -> list[str]:
    """The engine's own findings on the example: the reason it is left, as `ampfix check` says it."""
    from ampfix.core.options import Options
    from ampfix.engine import check_source

    options = Options(unsafe_fixes=example.unsafe_fixes, device=example.device, target_torch=example.target_torch)
    findings = check_source(example.before, options).findings
    return [line for f in findings if f.code == example.reported
            for line in _wrapped(f"{f.line}:{f.col}: {f.code} {f.message}", " " * 6, " " * 4)]
