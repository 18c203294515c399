"""The file's own style in what ampfix inserts: the quote read from the tokens (ampfix.syntax.quotes)."""

from __future__ import annotations

import pytest

from ampfix.syntax.quotes import preferred_quote


@pytest.mark.parametrize(("source", "quote"), [
    ("x = 1\n", '"'),  # no string: double
    ("'''doc'''\nx = 1\n", '"'),  # triple-quoted strings do not count
    ("a = f'{x}'\nb = 'y'\nc = \"z\"\n", '"'),  # f-strings do not count; a tie: double
    ("a = 'x'\nb = b'y'\nc = \"it's\"\n", "'"),  # prefixed strings count; the majority wins
    ("a = 'x'\nb = (\n", '"'),  # a source that does not parse: the default (the engine asks only of parsed files)
    ("a = ('x' 'y'\n     'z')\nb = \"w\"\nc = \"v\"\n", '"'),  # an implicit concatenation is one literal
])
def test_preferred_quote(source: str, quote: str) -> None:
    assert preferred_quote(source) == quote


# -- counts: a fix is a change a reviewer sees in the diff (issue 20, point 6) ---------------------------------

import ast  # noqa: E402
import difflib  # noqa: E402

from fixture_cases import CASE_IDS, CASES, Case, read_source  # noqa: E402

from ampfix.engine import Options, fix_source  # noqa: E402
from ampfix.families import VERSION_BRANCH_CODE  # noqa: E402
from ampfix.families.apex.rules import APEX_RULES  # noqa: E402


def _changed_old_lines(old: str, new: str) -> set[int]:
    """1-based lines of `old` that the diff replaces or deletes."""
    matcher = difflib.SequenceMatcher(a=old.splitlines(), b=new.splitlines(), autojunk=False)
    return {i + 1 for tag, i1, i2, _, _ in matcher.get_opcodes() if tag != "equal" for i in range(i1, i2)}


def _innermost_statement(tree: ast.Module, line: int) -> tuple[int, int]:
    best = (1, len(tree.body) and max(getattr(s, "end_lineno", 1) or 1 for s in tree.body))
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or node.lineno):
            if (node.end_lineno or node.lineno) - node.lineno <= best[1] - best[0]:
                best = (node.lineno, node.end_lineno or node.lineno)
    return best


# Rules whose one fix rewrites a whole pattern (several statements), each named in its message.
PATTERN_CODES = frozenset({VERSION_BRANCH_CODE, *(rule.code for rule in APEX_RULES)})


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_the_fix_count_agrees_with_the_diff(case: Case) -> None:
    """Every counted fix changes its own statement; every changed line belongs to a statement with a counted
    fix; a use that only follows its import is not counted (it is reported apart)."""
    source, _ = read_source(case.in_path)
    result = fix_source(source, Options(**case.options))  # type: ignore[arg-type]
    if result.error is not None:
        return
    changed = _changed_old_lines(source, result.new_source)
    fixes = [f for f in result.findings if f.fixed and not f.follows]
    assert bool(fixes) == (result.new_source != source), case.id
    fix_lines = {f.line for f in fixes}
    tree = ast.parse(source)
    for line in fix_lines:
        start, end = _innermost_statement(tree, line)
        assert changed & set(range(start, end + 1)), f"{case.id}: a counted fix on line {line} changes nothing there"
    if any(f.code in PATTERN_CODES for f in fixes):
        return  # one pattern fix rewrites several statements (apex's O1 pattern, an outdated version branch)
    for line in changed:
        start, end = _innermost_statement(tree, line)
        assert any(start <= fixed <= end for fixed in fix_lines), f"{case.id}: line {line} changes with no fix counted"


def test_the_summary_counts_changed_sites_and_followers_apart() -> None:
    from ampfix.cli.report import summary
    from ampfix.io.files import FileResult

    source = ("from typing import Optional\n\nfrom torch.cuda.amp import GradScaler, autocast\n\n\n"
              "def step(scaler: Optional[GradScaler]):\n    with autocast():\n        pass\n    return GradScaler()\n")
    result = fix_source(source)
    assert [(f.line, f.fixed, f.follows) for f in result.findings] == [
        (3, True, False), (6, True, True), (7, True, False), (9, True, False)]
    assert _changed_old_lines(source, result.new_source) == {3, 7, 9}
    line = summary([FileResult("a.py", result.findings, changed=True)], "rewrite")
    assert line == "rewrote 1 file (3 fixes; 1 use followed its import); 0 findings left."
