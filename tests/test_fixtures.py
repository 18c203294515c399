"""The hand-written fixture pairs are the spec: ``fix_source(<case>.in.py) == <case>.out.py``, byte for byte.

Cases live in ``fixtures/<area>/`` (see tests/fixture_cases.py); ``fixtures/unsafe_fixes/`` runs with
``Options(unsafe_fixes=True)``, every other area with the default options.
"""

from __future__ import annotations

import ast
import difflib

import pytest

from fixture_cases import CASE_IDS, CASES, Case, encode_source, read_source

from ampfix.engine import Options, fix_source


def _options(case: Case) -> Options:
    return Options(unsafe_fixes=True) if case.unsafe else Options()


def _diff(expected: bytes, actual: bytes) -> str:
    exp = expected.decode("latin-1").splitlines(keepends=True)
    act = actual.decode("latin-1").splitlines(keepends=True)
    lines = difflib.unified_diff(exp, act, "expected (.out.py)", "actual (fix_source)")
    # repr() each line so that \r, tabs and trailing spaces show
    return "\n".join(line if line.startswith(("---", "+++", "@@")) else repr(line) for line in lines)


def _findings(result) -> list[tuple[int, str, bool]]:
    return sorted((f.line, f.code, bool(f.fixed)) for f in result.findings)


def _fmt(findings) -> str:
    return "\n".join(f"{line} {code} {'fixed' if fixed else 'left'}" for line, code, fixed in findings)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_fixture(case: Case) -> None:
    assert case.out_path.exists(), f"{case.id}: missing expected output {case.out_path.name}"
    source, encoding = read_source(case.in_path)
    expected = case.out_path.read_bytes()

    result = fix_source(source, _options(case))

    assert result.error is None, f"{case.id}: engine error: {result.error}"
    actual = encode_source(result.new_source, encoding)
    assert actual == expected, f"{case.id}: output differs\n{_diff(expected, actual)}"

    want = case.expected_findings()
    if want is not None:
        got = _findings(result)
        assert got == want, f"{case.id}: findings differ\nexpected:\n{_fmt(want)}\nactual:\n{_fmt(got)}"


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_fixture_files_are_valid(case: Case) -> None:
    """Both sides of every pair are Python, and unchanged cases really are byte-identical (no engine needed)."""
    assert case.out_path.exists(), f"{case.id}: missing expected output {case.out_path.name}"
    for path in (case.in_path, case.out_path):
        text, _ = read_source(path)
        ast.parse(text, filename=str(path))
    if case.area == "unchanged":
        assert case.in_path.read_bytes() == case.out_path.read_bytes()
    want = case.expected_findings()
    if want is not None:
        n_lines = len(read_source(case.in_path)[0].splitlines())
        assert all(1 <= line <= n_lines for line, _, _ in want)
    if case.area != "unchanged" and case.in_path.read_bytes() == case.out_path.read_bytes():
        # a case that changes nothing must say what it reports
        assert want and not any(fixed for _, _, fixed in want), f"{case.id}: identical pair without left findings"


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_expected_output_is_a_fixed_point(case: Case) -> None:
    """Running the engine on the expected output changes nothing (idempotence)."""
    assert case.out_path.exists(), f"{case.id}: missing expected output {case.out_path.name}"
    data = case.out_path.read_bytes()
    text, encoding = read_source(case.out_path)
    ast.parse(text, filename=str(case.out_path))

    result = fix_source(text, _options(case))

    assert result.error is None, f"{case.id}: engine error on .out.py: {result.error}"
    actual = encode_source(result.new_source, encoding)
    assert actual == data, f"{case.id}: a second pass changes the output\n{_diff(data, actual)}"
