"""The hand-written fixture pairs are the spec: ``fix_source(<case>.in.py) == <case>.out.py``, byte for byte
(``== <case>.in.py`` for a case without ``.out.py``).

Cases live in ``fixtures/<area>/`` (see tests/fixture_cases.py); each runs with its area's options
(``fixture_cases.AREA_OPTIONS``: ``fixtures/unsafe_fixes/`` with ``unsafe_fixes=True``, ``fixtures/device_cpu/``
with ``device="cpu"``, ...), every other area with the default options; a case listed in
``fixture_cases.CASE_OPTIONS`` with those updated by its own (``guards/nemo_fallback_old_target``:
``--target-torch 2.2``).
"""

from __future__ import annotations

import ast
import difflib

import pytest

from fixture_cases import CASE_IDS, CASES, Case, encode_source, read_source

from ampfix.engine import Options, fix_source


def _options(case: Case) -> Options:
    return Options(**case.options)


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
    source, encoding = read_source(case.in_path)
    expected = case.expected_path.read_bytes()

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
    """Both sides of every pair are Python; an unchanged case has no ``.out.py`` (no byte-identical copies),
    and outside ``unchanged/`` says what it reports (no engine needed)."""
    for path in {case.in_path, case.expected_path}:
        text, _ = read_source(path)
        ast.parse(text, filename=str(path))
    if case.changes:
        assert case.area != "unchanged", f"{case.id}: an unchanged case has no .out.py"
        assert case.in_path.read_bytes() != case.out_path.read_bytes(), f"{case.id}: .out.py is a copy of .in.py"
    want = case.expected_findings()
    if want is not None:
        n_lines = len(read_source(case.in_path)[0].splitlines())
        assert all(1 <= line <= n_lines for line, _, _ in want)
    if case.area != "unchanged" and not case.changes:
        # a case that changes nothing must say what it reports (an empty .findings file: nothing at all)
        assert want is not None and not any(fixed for _, _, fixed in want), \
            f"{case.id}: unchanged case without a .findings file of left findings"


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_expected_output_is_a_fixed_point(case: Case) -> None:
    """Running the engine on the expected output changes nothing (idempotence)."""
    data = case.expected_path.read_bytes()
    text, encoding = read_source(case.expected_path)

    result = fix_source(text, _options(case))

    assert result.error is None, f"{case.id}: engine error on .out.py: {result.error}"
    actual = encode_source(result.new_source, encoding)
    assert actual == data, f"{case.id}: a second pass changes the output\n{_diff(data, actual)}"
