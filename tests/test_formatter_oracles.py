"""Formatters and linters as oracles of the rewrite's layout (issue 30): a hunk that black, ruff's formatter
or pycodestyle would reject or rewrite again is rejected in review. Over every fixture case that changes,
whose input the tool accepts, the tool must accept the expected output (which tests/test_fixtures.py holds
the engine's output to, byte for byte). The tools are pinned in the `test` extra; about 3 s in all."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import black
import pycodestyle
import pytest
from typer.testing import CliRunner

from fixture_cases import CASES, read_source

from ampfix.cli.app import app

# Decoded as the engine reads them; a file with CR line endings is left to the byte-for-byte tests.
PAIRS = [(case.id, read_source(case.in_path)[0], read_source(case.out_path)[0]) for case in CASES if case.changes]
PAIRS = [(case_id, old, new) for case_id, old, new in PAIRS if "\r" not in old]

# Outputs a formatter still changes, each with why: these shapes are not laid out as the formatter would.
# The list is checked both ways (a case that becomes clean must leave it).
FORMATTER_LEFT = {
    # a call on one line that the inserted device pushes past the line length: black would split it
    "autocast/explicit_defaults_option": "a one-line call pushed past 88 columns",
    "autocast/nested_same_function": "a one-line call pushed past 88 columns",
    "unsafe_fixes/autocast_reference_keyword_call": "a one-line call pushed past 88 columns",
    "apex/parallel_rewritten": "a one-line call pushed past 88 columns (the apex.parallel rewrite)",
    "apex/parallel_import_in_try_that_raises": "a one-line call pushed past 88 columns (the apex.parallel rewrite)",
    "unsafe_fixes/apex_switch_first": "a one-line call pushed past 88 columns (the apex.parallel rewrite)",
    # the old-defaults partial that replaces a followed reference (issue 29) is written on one line, never split
    "autocast/reference_followed_through_an_argument": "the partial written for a reference is past 88 columns",
    "autocast/reference_followed_through_self": "the partial written for a reference is past 88 columns",
    # the apex O1 rewrite's own text
    "apex/condition_else_with_comments": "comments of a removed `if` keep its body's indentation",
    "apex/o1_script_resumes": "the added GradScaler state helper is one line too long",
    "apex/initialize_for_inference_only": "the autocast added as a second item of a `no_grad` is past 88 columns",
    "apex/private_loss_scale_settings": "the GradScaler given apex's loss scaler settings is past 88 columns",
    "apex/private_state_import": "the GradScaler given apex's loss scaler settings is past 88 columns",
}
# (ruff's formatter, --isolated, lays out `with a, b(\n    c\n):` as parenthesized context managers: the input of
# format/black_hugged_argument is not ruff-clean, so it is not checked here.)
RUFF_LEFT = {**FORMATTER_LEFT,
             "unsafe_fixes/apex_parallel_import_where_functools_goes": "a one-line call pushed past 88 columns"}


def _e12(text: str) -> list[str]:
    """pycodestyle's continuation-line checks (E12x), as `code line:col`."""
    report: list[str] = []

    class Report(pycodestyle.BaseReport):
        def error(self, line_number, offset, text, check):  # noqa: ANN001 - pycodestyle's signature
            report.append(f"{text[:4]} {line_number}:{offset + 1}")

    checker = pycodestyle.Checker(lines=text.splitlines(keepends=True), select=["E12"],
                                  report=Report(pycodestyle.StyleGuide(select=["E12"]).options))
    checker.check_all()
    return report


def test_continuation_lines_stay_clean_for_pycodestyle():
    clean = [(case_id, new) for case_id, old, new in PAIRS if not _e12(old)]
    assert len(clean) > 150  # the check must have cases to check
    assert [(case_id, _e12(new)) for case_id, new in clean if _e12(new)] == []


def test_the_e12_check_sees_a_visual_indent_left_behind():
    assert _e12("x = f(a,\n      b)\n") == []
    assert _e12("x = f(a,\n           b)\n") == ["E127 2:12"]


def _black_clean(text: str) -> bool:
    try:
        return black.format_str(text, mode=black.Mode()) == text
    except black.InvalidInput:
        return False


def test_black_leaves_the_output_of_a_black_clean_input_as_it_is():
    clean = [(case_id, new) for case_id, old, new in PAIRS if _black_clean(old)]
    assert len(clean) > 100
    changed = {case_id for case_id, new in clean if not _black_clean(new)}
    assert changed == set(FORMATTER_LEFT)


def test_ruff_format_leaves_the_output_of_a_ruff_clean_input_as_it_is(tmp_path: Path):
    for n, (_, old, new) in enumerate(PAIRS):
        (tmp_path / f"c{n}.in.py").write_text(old, encoding="utf-8")
        (tmp_path / f"c{n}.out.py").write_text(new, encoding="utf-8")
    formatted = tmp_path / "formatted"
    shutil.copytree(tmp_path, formatted, ignore=shutil.ignore_patterns("formatted"))
    ruff = Path(sys.executable).with_name("ruff")
    subprocess.run([str(ruff), "format", "--isolated", "--quiet", str(formatted)], check=False, timeout=120)

    def clean(name: str) -> bool:
        return (formatted / name).read_text(encoding="utf-8") == (tmp_path / name).read_text(encoding="utf-8")

    clean_inputs = [(n, case_id) for n, (case_id, _, _) in enumerate(PAIRS) if clean(f"c{n}.in.py")]
    assert len(clean_inputs) > 100
    assert {case_id for n, case_id in clean_inputs if not clean(f"c{n}.out.py")} == set(RUFF_LEFT)


# With the project declaring black or ruff's formatter, a one-line call pushed past the length is split as black
# splits it (`Options.formatted`, read by `ampfix.io.formatter`): what is left then.
LEFT_WHEN_FORMATTED = set(FORMATTER_LEFT) - {"autocast/explicit_defaults_option"}


def test_a_declared_formatter_has_the_pushed_lines_split_as_it_splits_them():
    from ampfix.engine import Options, fix_source

    by_id = {case.id: case for case in CASES}
    left = set()
    for case_id in FORMATTER_LEFT:
        source = read_source(by_id[case_id].in_path)[0]
        new = fix_source(source, Options(**{**by_id[case_id].options, "formatted": True})).new_source
        if not _black_clean(new):
            left.add(case_id)
    assert left == LEFT_WHEN_FORMATTED


ONE_LINE = "import torch\n\nwith torch.cuda.amp.autocast(enabled=the_automatic_mixed_precision_flag_of_the_run_1):\n    pass\n"


@pytest.mark.parametrize(("config", "split"), [
    ("", False),
    ("[tool.ruff]\nline-length = 88\n", False),  # the linter's table alone: the project may not format
    ("[tool.ruff.format]\nquote-style = \"double\"\n", True),
    ("[tool.black]\n", True),
    ("[tool.black]\nline-length = 100\n", False),  # fits in black's length
])
def test_a_one_line_call_is_split_only_where_the_project_declares_its_formatter(tmp_path: Path, monkeypatch,
                                                                                  config, split):
    (tmp_path / ".git").mkdir()
    if config:
        (tmp_path / "pyproject.toml").write_text(config)
    (tmp_path / "m.py").write_text(ONE_LINE)
    monkeypatch.chdir(tmp_path)
    assert CliRunner().invoke(app, ["rewrite", "m.py"]).exit_code == 1
    call = 'torch.amp.autocast(\n    "cuda", enabled=the_automatic_mixed_precision_flag_of_the_run_1\n)' if split else \
        'torch.amp.autocast("cuda", enabled=the_automatic_mixed_precision_flag_of_the_run_1)'
    assert (tmp_path / "m.py").read_text() == f"import torch\n\nwith {call}:\n    pass\n"


HUGGED = ("import torch\n\n\ndef f(flag):\n"
          "    with torch.cuda.amp.autocast(\n"
          "        enabled=flag.a_setting_whose_name_is_long_enough_to_need_the_line_near_ninety\n"
          "    ):\n        pass\n")


@pytest.mark.parametrize(("config", "joined"), [
    ("", False),  # 8 + 88 columns joined: past black's default
    ("[tool.black]\nline-length = 100\n", True),
    ("[tool.ruff]\nline-length = 100\n", True),
    ("[tool.black]\nline-length = 88\n[tool.ruff]\nline-length = 100\n", False),  # black's is the formatter's
])
def test_the_device_joins_the_hugged_line_within_the_projects_line_length(tmp_path: Path, monkeypatch, config,
                                                                          joined):
    (tmp_path / ".git").mkdir()
    if config:
        (tmp_path / "pyproject.toml").write_text(config)
    (tmp_path / "m.py").write_text(HUGGED)
    monkeypatch.chdir(tmp_path)
    assert CliRunner().invoke(app, ["rewrite", "m.py"]).exit_code == 1
    arguments = "enabled=flag.a_setting_whose_name_is_long_enough_to_need_the_line_near_ninety"
    if joined:
        body = f'        "cuda", {arguments}\n'
    else:  # black's layout of arguments too long for their line: one a line, a trailing comma
        body = f'        "cuda",\n        {arguments},\n'
    assert (tmp_path / "m.py").read_text() == (
        f"import torch\n\n\ndef f(flag):\n    with torch.amp.autocast(\n{body}    ):\n        pass\n")
