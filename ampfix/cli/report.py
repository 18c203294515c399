"""Renderers: results in, text out. Plain text unless a terminal asks for colour; never prints."""

from __future__ import annotations

from typing import TYPE_CHECKING
from collections.abc import Iterable, Sequence

from ampfix.engine import INTERNAL_ERROR_CODE, SYNTAX_ERROR_CODE
from ampfix.io.files import READ_ERROR_CODE, WRITE_ERROR_CODE, shown_message

if TYPE_CHECKING:  # the rule table is only needed by `ampfix rules` and SARIF: `check` does not import it
    from ampfix.engine import Finding
    from ampfix.io.files import FileResult
    from ampfix.core.rules import Rule, Target
    from ampfix.io.declared_torch import Target as TorchTarget


# What the error codes mean, for formats that describe every code they use (SARIF).
ERROR_TITLES = {
    INTERNAL_ERROR_CODE: "internal error: the file was left unchanged",
    SYNTAX_ERROR_CODE: "the file does not parse",
    READ_ERROR_CODE: "the file or folder cannot be read, the file is not valid in its encoding or not a regular file",
    WRITE_ERROR_CODE: "the rewrite could not be written: the file was left as it was",
}


_STYLES = {"bold": "1", "red": "31", "green": "32", "yellow": "33", "dim": "2"}


def paint(text: str, style: str, colour: bool) -> str:
    """`text` in an ANSI style when `colour` (a terminal, NO_COLOR unset), else as it is."""
    return f"\033[{_STYLES[style]}m{text}\033[0m" if colour else text


def finding_lines(result: FileResult, mode: str, colour: bool = False) -> list[str]:
    lines = []
    for finding in result.findings:
        if mode == "check":
            mark = " [*]" if finding.fixable and not finding.unsafe else " [unsafe]" if finding.fixable else ""
        elif finding.fixed:
            mark = f" {_done(finding, mode)}{' (unsafe)' if finding.unsafe else ''}:"
        else:  # left: said once, where the message does not say it already
            mark = "" if "left: " in finding.message else " left:"
        where = paint(f"{result.path}:{_place(finding)}:", "bold", colour)
        code = paint(finding.code, "green" if finding.fixed else "red", colour)
        lines.append(f"{where} {code}{mark} {shown_message(finding)}")
    return lines


def _place(finding: Finding) -> str:
    """`line:col`, or `cell N:line:col` in a notebook."""
    cell = "" if finding.cell is None else f"cell {finding.cell}:"
    return f"{cell}{finding.line}:{finding.col}"


def _done(finding: Finding, mode: str) -> str:
    """What `rewrite` did to a fixed finding (what `--diff` would do), in every format."""
    if mode == "diff":
        return "would follow its import" if finding.follows else "would fix"
    return "followed its import" if finding.follows else "fixed"


def summary(results: Sequence[FileResult], mode: str) -> str:
    findings = [f for r in results for f in r.findings]
    errors = sum(1 for r in results if r.error)
    # A file that could not be processed has an error finding; a notebook one per cell.
    error_findings = sum(1 for f in findings if f.code in ERROR_TITLES)
    fixed = sum(1 for f in findings if f.fixed)
    left = len(findings) - fixed
    followed = sum(1 for f in findings if f.fixed and f.follows)  # no text of their own: not fixes
    if mode == "check" and not findings and not errors:
        return "All checks passed!"  # as ruff says it
    parts = []
    if mode == "check":
        safe = sum(1 for f in findings if f.fixable and not f.unsafe)
        unsafe = sum(1 for f in findings if f.fixable and f.unsafe)
        parts.append(f"{_count(len(findings) - error_findings, 'finding')}"
                     f" ({safe} fixable with `ampfix rewrite`, {unsafe} more with --unsafe-fixes)")
    else:
        changed = sum(1 for r in results if r.changed)
        verb = "would rewrite" if mode == "diff" else "rewrote"
        uses = f"; {_count(followed, 'use')} followed {'its' if followed == 1 else 'their'} import" if followed else ""
        parts.append(f"{verb} {_count(changed, 'file')} ({_count(fixed - followed, 'fix', 'fixes')}{uses})")
        parts.append(f"{_count(left - error_findings, 'finding')} left")
    if errors:
        parts.append(f"{_count(errors, 'file')} could not be processed")
    return "; ".join(parts) + "."


def target_lines(results: Sequence[FileResult], mode: str, targets: Sequence[TorchTarget]) -> list[str]:
    """Each target torch the files were worked at and what set it, one a line, when anything was found; the newest
    (a target no version bounds) says what the fixes made the code require: `target torch: the newest (none
    declared); the output needs torch >= 2.3 (AMP002)`."""
    if not any(result.findings for result in results):
        return []  # nothing found: the target decided nothing
    lines = [target.describe() for target in targets]
    needs = _needs(results, mode)
    if needs is None:
        return lines
    unbounded = [index for index, target in enumerate(targets) if target.version is None]
    if not unbounded:
        return [*lines, needs]
    lines[unbounded[-1]] += f"; {needs}"
    return lines


def _needs(results: Sequence[FileResult], mode: str) -> str | None:
    """What the fixes make the code require, in the files worked at the newest torch (a declared target holds
    back every newer fix: the output runs on it): `the output needs torch >= 2.4 (AMP003, AMP004)`. A module
    path's rename (AMP010) needs what the names it moves need, each reported under its own rule: not counted."""
    done = [finding for result in results if result.target is not None and result.target.version is None
            for finding in result.findings if (finding.fixed if mode != "check" else finding.fixable)]
    if not done:
        return None
    from ampfix.families import MODULE_PATH_CODE

    minimum = {rule.code: rule.min_torch for rule in _all_rules() if rule.min_torch is not None}
    needed = {finding.code: minimum[finding.code] for finding in done
              if finding.code in minimum and finding.code != MODULE_PATH_CODE}
    if not needed:
        return None
    top = max(needed.values())
    codes = ", ".join(sorted(code for code, version in needed.items() if version == top))
    said = {"check": "the fixes need", "diff": "the output would need", "rewrite": "the output needs"}[mode]
    return f"{said} torch >= {version_text(top)} ({codes})"


def terminal_summary(results: Sequence[FileResult], mode: str, scanned: int, seconds: float) -> str:
    """What a person at a terminal also gets: files scanned, changed, findings by rule, errors."""
    verb = {"check": "checked", "diff": "would change", "rewrite": "changed"}[mode]
    changed = sum(1 for r in results if r.changed)
    errors = sum(1 for r in results if r.error)
    by_rule: dict[str, int] = {}
    for result in results:
        for finding in result.findings:
            if finding.code not in ERROR_TITLES:  # errors are counted on their own
                by_rule[finding.code] = by_rule.get(finding.code, 0) + 1
    parts = [f"scanned {_count(scanned, 'file')} in {seconds:.1f} s"]
    if mode != "check":
        parts.append(f"{verb} {_count(changed, 'file')}")
    parts.append("findings by rule: " + (", ".join(f"{code} {n}" for code, n in sorted(by_rule.items())) or "none"))
    parts.append(_count(errors, "error"))
    return "; ".join(parts)


def _count(n: int, singular: str, plural: str | None = None) -> str:
    return f"{n} {singular if n == 1 else plural or singular + 's'}"


def findings_json(results: Iterable[FileResult]) -> str:
    rows = [
        {
            "path": r.path,
            **({} if f.cell is None else {"cell": f.cell}),  # a notebook's: line and col are within it
            "line": f.line,
            "col": f.col,
            "code": f.code,
            "message": f.message,
            "fixable": f.fixable,
            "unsafe": f.unsafe,
            "fixed": f.fixed,
            # Its fix changes no text of its own: the use follows its moved import (the text summary counts
            # these apart from the fixes); with `fixed` false, it would.
            "follows": f.follows,
            "suggestion": f.suggestion,
            # The target torch the file was worked at ("2.0"; null: the newest) and what set it: "--target-torch",
            # "pyproject.toml [tool.ampfix]", the project metadata file; null: nothing (docs/rules.md).
            **_target_fields(r.target),
        }
        for r in results
        for f in r.findings
    ]
    import json

    return json.dumps(rows, indent=2)


def _target_fields(target: TorchTarget | None) -> dict[str, object]:
    if target is None:  # the file never reached the engine (an error reading it)
        return {"target_torch": None, "target_source": None}
    return {"target_torch": None if target.version is None else version_text(target.version),
            "target_source": target.source}


def version_text(version: tuple[int, int] | None) -> str:
    return "-" if version is None else ".".join(map(str, version))


def _fix(rule: Rule, target: Target | None) -> str:
    """What `rewrite` does with the name: calls and type positions, then a reference without a call."""
    if rule.fix_note is not None:
        return rule.fix_note
    if target is None:
        return "report only"
    if rule.device_target_only:
        return "safe; with --device cpu|auto or --device-expr only"
    if target.module:
        return "safe; as a value report only"
    if rule.shape is None:
        return "safe"
    from ampfix.core.rules import partial_with_defaults  # the rule pages only: a report of findings needs none

    partial = rule.shape.partial_keeps_meaning or partial_with_defaults(rule.shape, target)
    return "safe; references " + ("unsafe" if partial else "report only")


# The table's short fix labels, each part with what it means (the legend, and a rule's page).
FIX_MEANINGS = {
    "safe": "`ampfix rewrite` fixes calls, imports and type positions (annotations, isinstance)",
    "refs unsafe": "a use without a call (`f = {name}`) is rewritten to functools.partial only "
                   "with --unsafe-fixes (the object is not the same)",
    "refs report": "a use without a call is reported and left to a person (no rewrite keeps its meaning)",
    "value report": "the module used as a value (`m = {name}`) is reported: it has no drop-in twin as a value",
    "--device only": "rewritten only with --device cpu|auto or --device-expr; the plain rewrite leaves it",
    "report only": "reported, never rewritten: nothing in torch takes its place",
    "pattern": "a whole pattern is rewritten where the code proves it right (the rule's page says which); "
               "else reported",
}

RULES_LEGEND = (
    "fix: `safe`: calls, imports and type positions (annotations, isinstance) are rewritten; `refs`: uses\n"
    "without a call (`f = torch.cuda.amp.GradScaler`), `unsafe` ones rewritten with --unsafe-fixes (to\n"
    "functools.partial), `report` ones left to a person; `value`: the module as a value; `pattern`: a whole\n"
    "pattern is rewritten. `ampfix rule CODE` shows one rule: what it fixes, what it leaves and why, examples."
)


def fix_label(rule: Rule, target: Target | None) -> str:
    """The table's short form of `_fix`: parts of FIX_MEANINGS, joined by "; "."""
    if rule.fix_note is not None:
        return "pattern; else report"
    if target is None:
        return "report only"
    if rule.device_target_only:
        return "--device only"
    if target.module:
        return "safe; value report"
    if rule.shape is None:
        return "safe"
    from ampfix.core.rules import partial_with_defaults  # the rule pages only: a report of findings needs none

    partial = rule.shape.partial_keeps_meaning or partial_with_defaults(rule.shape, target)
    return "safe; refs " + ("unsafe" if partial else "report")


def _held_back(rule: Rule, target: TorchTarget | None) -> bool:
    """Is the rule reported only at the target (its fix needs a newer torch)?"""
    version = None if target is None else target.version
    return version is not None and rule.min_torch is not None and rule.min_torch > version


def rule_rows(rules: Sequence[Rule], run_target: TorchTarget | None = None) -> list[dict[str, str | bool]]:
    rows: list[dict[str, str | bool]] = []
    for rule in rules:
        for old, target in rule.symbols.items():
            if target is None:
                new = "(no twin)"
            else:
                device = f'"{target.device}"' if target.device else ""
                if rule.shape and rule.shape.device_keyword:
                    device = f"{rule.shape.device_keyword}={device}"
                new = f"{target.new}({device})" if rule.shape and device else target.new
                if rule.device_target_only:
                    new = f"{target.new}(<the device target>)"
            rows.append({"code": rule.code, "title": rule.title, "old": old, "new": new,
                         "min_torch": version_text(rule.min_torch), "fix": _fix(rule, target),
                         "held_back": _held_back(rule, run_target), "label": fix_label(rule, target)})
    return rows


def _all_rules() -> Sequence[Rule]:
    from ampfix.families import ALL_RULES

    return ALL_RULES


# The text table's widest columns (old, new, fix): with code and torch, 119 characters; a longer cell wraps.
_TABLE_WIDTHS = {"code": 6, "old": 40, "new": 40, "min_torch": 5, "label": 20}


def rules_text(rules: Sequence[Rule] | None = None, target: TorchTarget | None = None) -> str:
    """The table, within 120 columns; with a target torch, a line naming it and the rules held back at it first."""
    rows = rule_rows(_all_rules() if rules is None else rules, target)
    headers: dict[str, str | bool] = {"code": "code", "old": "old", "new": "new", "min_torch": "torch", "label": "fix"}
    return "\n".join([*_target_lines(rows, target), *table_lines(headers, rows, _TABLE_WIDTHS), "", RULES_LEGEND])


def table_lines(headers: dict[str, str | bool], rows: Sequence[dict[str, str | bool]],
                caps: dict[str, int] | None = None) -> list[str]:
    """Columns as wide as their widest cell, at most `caps`; a longer cell wraps onto the row's next lines."""
    widths = {k: max(len(str(r[k])) for r in [headers, *rows]) for k in headers}
    if caps:
        widths = {k: min(width, caps.get(k, width)) for k, width in widths.items()}
    lines = []
    for row in [headers, *rows]:
        cells = [wrap_cell(str(row[k]), widths[k]) for k in headers]
        for n in range(max(map(len, cells))):
            lines.append("  ".join((cell[n] if n < len(cell) else "").ljust(widths[k])
                                   for cell, k in zip(cells, headers)).rstrip())
    lines.insert(1, "  ".join("-" * widths[k] for k in headers))
    return lines


def wrap_cell(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width`, broken after a dot or at a space (a dotted name, a phrase)."""
    import re

    lines = [""]
    for piece in re.findall(r"[^. ]*(?:\.|$| )", text):
        if lines[-1] and len(lines[-1]) + len(piece.rstrip()) > width:
            lines[-1] = lines[-1].rstrip()
            lines.append("")
        lines[-1] += piece
    return [line.rstrip() for line in lines if line.strip()] or [""]


def _target_lines(rows: Sequence[dict[str, str | bool]], target: TorchTarget | None) -> list[str]:
    if target is None or target.source is None:
        return []
    held = sorted({str(row["code"]) for row in rows if row["held_back"]})
    if target.version is None:
        return [target.describe(), ""]
    said = ", ".join(held) if held else "none"
    held_line = f"held back at torch {version_text(target.version)} (reported, not rewritten): {said}"
    return [target.describe(), held_line, ""]


def rules_json(rules: Sequence[Rule] | None = None, target: TorchTarget | None = None) -> str:
    """The rows; `held_back`: the rule's fix needs a newer torch than the target (false with no target)."""
    import json

    rows = rule_rows(_all_rules() if rules is None else rules, target)
    return json.dumps([{k: v for k, v in row.items() if k != "label"} for row in rows], indent=2)


# GitHub Actions workflow commands: https://docs.github.com/actions/reference/workflow-commands-for-github-actions
def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github_annotations(results: Iterable[FileResult], mode: str = "check") -> str:
    """One `::error` line per finding (a `::notice` for one `rewrite` fixed), shown on the diff."""
    lines = []
    for result in results:
        for finding in result.findings:
            level = "notice" if finding.fixed else "error"
            message = f"{_done(finding, mode)}: {finding.message}" if finding.fixed else shown_message(finding)
            if finding.cell is None:
                where = f"line={finding.line},col={finding.col}"
            else:  # the notebook file's line that holds the cell's line; the cell's place in the message
                where = f"line={finding.file_line}"
                message = f"{_place(finding)}: {message}"
            lines.append(f"::{level} file={_escape_property(result.path)},{where},"
                         f"title={_escape_property(finding.code)}::{_escape_data(message)}")
    return "".join(line + "\n" for line in lines)


SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def sarif(results: Iterable[FileResult], targets: Sequence[TorchTarget] = (), mode: str = "check") -> str:
    """A SARIF 2.1.0 log: one run, every rule and error code described, one result per finding; the
    targets set for the run (`targets`, as the text summary names them) in the run's properties."""
    import json

    from ampfix import __version__

    descriptors = [_sarif_rule(rule) for rule in _all_rules()]
    descriptors += [{"id": code, "name": "error", "shortDescription": {"text": title},
                     "defaultConfiguration": {"level": "error"}} for code, title in ERROR_TITLES.items()]
    index = {descriptor["id"]: i for i, descriptor in enumerate(descriptors)}
    sarif_results = []
    for result in results:
        for finding in result.findings:
            text = f"{_done(finding, mode)}: {finding.message}" if finding.fixed else shown_message(finding)
            region: dict[str, int] = {"startLine": finding.line, "startColumn": finding.col}
            properties: dict[str, object] = {"fixable": finding.fixable, "unsafe": finding.unsafe,
                                             "fixed": finding.fixed, "follows": finding.follows}
            if finding.cell is not None:  # the notebook file's line; the cell's place in the message and properties
                region = {"startLine": finding.file_line or 1}
                text = f"{_place(finding)}: {text}"
                properties.update(cell=finding.cell, cellLine=finding.line, cellColumn=finding.col)
            sarif_results.append({
                "ruleId": finding.code,
                "ruleIndex": index[finding.code],
                "level": "note" if finding.fixed else "error",
                "kind": "pass" if finding.fixed else "fail",
                "message": {"text": text},
                "locations": [{"physicalLocation": {
                    "artifactLocation": {"uri": _uri(result.path)},
                    "region": region,
                }}],
                "properties": properties,
            })
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "ampfix", "version": __version__, "rules": descriptors}},
            # Finding columns count characters (code points), not SARIF's default UTF-16 units.
            "columnKind": "unicodeCodePoints",
            "results": sarif_results,
            "properties": {"targetTorch": [
                {"version": None if t.version is None else version_text(t.version), "source": t.source,
                 "problem": t.problem, "text": t.describe()} for t in targets]},
        }],
    }
    return json.dumps(log, indent=2)


def _sarif_rule(rule: Rule) -> dict[str, object]:
    rows = rule_rows([rule])
    mappings = "; ".join(f"{row['old']} -> {row['new']}" for row in rows)
    minimum = version_text(rule.min_torch)
    return {
        "id": rule.code,
        "name": rule.title,
        "shortDescription": {"text": f"deprecated {rule.title}: " + ", ".join(sorted({str(r["old"]) for r in rows}))},
        "fullDescription": {"text": f"{mappings} (needs torch >= {minimum})" if rule.min_torch else mappings},
        "defaultConfiguration": {"level": "error"},
        # What `rewrite` does, per old name (as `ampfix rules` says it).
        "properties": {"minimumTorch": minimum, "fix": {str(row["old"]): row["fix"] for row in rows}},
    }


def _uri(path: str) -> str:
    """A relative path stays relative (code scanning resolves it from the checkout); others become file URIs."""
    import os
    from pathlib import Path
    from urllib.parse import quote

    if os.path.isabs(path):
        return Path(path).as_uri()
    return quote(path.replace(os.sep, "/"))
