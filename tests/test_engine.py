"""The engine's safety nets: what it does when something goes wrong inside it."""

from __future__ import annotations

import dataclasses

import pytest

import ampfix.engine.apply
from ampfix.engine import pipeline
from ampfix.engine import INTERNAL_ERROR_CODE, SYNTAX_ERROR_CODE, Options, check_source, fix_source

SOURCE = "import torch\nwith torch.cuda.amp.autocast():\n    pass\n"


def test_a_plan_the_cst_disagrees_with_leaves_the_source_untouched(monkeypatch: pytest.MonkeyPatch):
    real_analyze = pipeline.analyze

    def wrong_plan(tree, source, options, *suppressions):
        plan = real_analyze(tree, source, options, *suppressions)
        # The analysis "saw" another name than the one LibCST finds at that place.
        edits = [dataclasses.replace(e, text="torch.cuda.amp.GradScaler") for e in plan.edits]
        return dataclasses.replace(plan, edits=edits)

    monkeypatch.setattr(pipeline, "analyze", wrong_plan)
    result = fix_source(SOURCE)
    assert result.new_source == SOURCE
    assert result.error == (
        "internal error, file left unchanged: PlanMismatch: line 2: the analysis saw Attribute "
        "`torch.cuda.amp.GradScaler` where LibCST has Attribute"
    )
    assert [(f.line, f.code) for f in result.findings] == [(2, "AMP001"), (2, INTERNAL_ERROR_CODE)]
    assert not any(f.fixed for f in result.findings)


def test_new_text_that_would_not_parse_is_never_returned(monkeypatch: pytest.MonkeyPatch):
    broken = "with torch.amp.autocast('cuda'\n"
    monkeypatch.setattr(ampfix.engine.apply, "apply_plan", lambda source, plan, *layout: broken)
    result = fix_source(SOURCE)
    assert result.new_source == SOURCE
    assert result.error is not None and "SyntaxError" in result.error


def test_syntax_error_is_a_finding_with_its_position():
    result = check_source("import torch\nwith torch.cuda.amp.autocast(:\n    pass\n")
    assert result.error is not None
    assert [(f.line, f.code) for f in result.findings] == [(2, SYNTAX_ERROR_CODE)]


def test_a_file_that_cannot_hold_a_use_is_not_parsed():
    # No `amp` token: nothing to find, so not even a syntax error is looked for.
    broken_but_irrelevant = "def f(:\n    return torch.zeros(1)\n"
    result = check_source(broken_but_irrelevant)
    assert result.error is None and result.findings == ()


def test_check_reports_what_fix_fixes_without_changing_anything():
    checked = check_source(SOURCE)
    fixed = fix_source(SOURCE)
    assert checked.new_source == SOURCE
    assert [(f.line, f.col, f.code, f.fixable) for f in checked.findings] == [
        (f.line, f.col, f.code, f.fixable) for f in fixed.findings
    ]
    assert [f.fixed for f in checked.findings] == [False]
    assert [f.fixed for f in fixed.findings] == [True]


def test_columns_count_characters_not_bytes():
    source = "import torch\nnamé = 'é'; x = torch.cuda.amp.GradScaler()\n"
    (finding,) = check_source(source).findings
    assert (finding.line, finding.col) == (2, source.splitlines()[1].index("torch") + 1)


def test_a_custom_cuda_device_expression_is_used_for_cuda_rules_only():
    from ampfix.core.options import Options

    source = "import torch\na = torch.cuda.amp.autocast()\nb = torch.cpu.amp.autocast()\n"
    result = fix_source(source, Options(device_expr="device.type"))
    assert result.new_source == (
        'import torch\na = torch.amp.autocast(device.type)\nb = torch.amp.autocast("cpu")\n'
    )


def test_real_version_guards_are_reported_with_the_guard_as_reason():
    from ampfix.syntax.guards import FALLBACK_REASON, IF_REASON
    from fixture_cases import FIXTURES

    source = (FIXTURES / "guards" / "real_guards.in.py").read_text(encoding="utf-8")
    result = fix_source(source)
    assert not result.changed
    fallbacks = {67, 72}  # the `try: <new API> except ...: <old API>` blocks
    # A parsed version compared with a literal is decided at the target (here the newest torch): these
    # branches are for an older torch than any the target is.
    dead = {14: "torch < 2.3 (line 13)", 25: "torch < 2.3 (line 24)", 34: "torch < 2.4 (line 33)",
            41: "torch < 2.3 (line 40)"}
    assert len(result.findings) == 15
    for finding in result.findings:
        if finding.line in dead:
            reason = f"in the branch for {dead[finding.line]}, which the target torch (the newest) never runs"
        else:
            reason = FALLBACK_REASON if finding.line in fallbacks else IF_REASON.format(package="torch")
        assert finding.message.endswith(reason), (finding.line, finding.message)
        assert not finding.fixed


def test_a_name_torch_never_had_is_reported_without_a_suggestion():
    source = "import torch\nwith torch.cuda.amp.scale_loss(loss, opt) as scaled:\n    pass\n"
    (finding,) = check_source(source).findings
    assert (finding.line, finding.code, finding.fixable, finding.suggestion) == (2, "AMP011", False, None)
    assert finding.message == "`torch.cuda.amp.scale_loss` is not a name torch defines; there is nothing to migrate it to"
    (imported,) = check_source("from torch.cuda.amp import scale_loss\n").findings
    assert (imported.code, imported.suggestion) == ("AMP011", None)
    assert "is not a name torch defines" in imported.message


def test_a_feature_check_follows_the_target_torch_of_the_name_it_asks_for():
    from ampfix.core.options import Options

    source = 'import torch\na = hasattr(torch.cuda.amp, "autocast")\nb = hasattr(torch.cuda.amp, "GradScaler")\n'
    result = fix_source(source, Options(target_torch=(2, 2)))
    # autocast is in torch.amp from 1.10, GradScaler from 2.3.
    assert result.new_source == (
        'import torch\na = hasattr(torch.amp, "autocast")\nb = hasattr(torch.cuda.amp, "GradScaler")\n'
    )
    assert [(f.line, f.code, f.fixed) for f in result.findings] == [(2, "AMP001", True), (3, "AMP002", False)]
    assert "needs torch >= 2.3; the target is torch 2.2" in result.findings[1].message


def test_a_feature_check_for_a_name_torch_amp_lacks_is_left():
    source = 'import torch\nok = hasattr(torch.cuda.amp, "amp_definitely_not_available")\n'
    result = fix_source(source)
    assert not result.changed
    [(code, fixed)] = [(f.code, f.fixed) for f in result.findings]
    assert (code, fixed) == ("AMP011", False)


LONG_SUM = "x = " + " + ".join(["1"] * 1000) + "\n"
LONG_ELIF = "if x == 0:\n    pass\n" + "".join(f"elif x == {i}:\n    pass\n" for i in range(1, 350)) + "else:\n    pass\n"


@pytest.mark.parametrize("deep", [LONG_SUM, LONG_ELIF], ids=["sum_of_1000_terms", "elif_chain_of_350"])
def test_deep_valid_code_does_not_depend_on_the_recursion_limit(deep):
    source = f"import torch\nx = 1\n{deep}with torch.cuda.amp.autocast():\n    pass\n"
    assert [f.code for f in check_source(source).findings] == ["AMP001"]
    result = fix_source(source)
    assert result.error is None
    assert result.new_source == source.replace("torch.cuda.amp.autocast()", 'torch.amp.autocast("cuda")')


def _elif_chain(branches: int) -> str:
    return ("import torch\nx = 1\nif x == 0:\n    pass\n"
            + "".join(f"elif x == {i}:\n    pass\n" for i in range(1, branches))
            + "else:\n    torch.cuda.amp.autocast()\n")


def test_a_use_inside_a_long_elif_chain_is_rewritten():
    source = _elif_chain(350)
    result = fix_source(source)
    assert result.error is None
    assert result.new_source == source.replace("torch.cuda.amp.autocast()", 'torch.amp.autocast("cuda")')


def test_a_use_inside_a_statement_too_deep_for_libcst_leaves_the_file_untouched():
    # LibCST recurses over the statement it re-prints; what it cannot print is reported, never half-done.
    source = _elif_chain(1000)
    result = fix_source(source)
    assert result.new_source == source
    assert [f.code for f in result.findings] == ["AMP001", INTERNAL_ERROR_CODE]
    assert "RecursionError" in (result.error or "")


def test_code_nested_past_what_ast_builds_is_a_syntax_finding():
    result = check_source(_elif_chain(3000))
    assert [f.code for f in result.findings] == [SYNTAX_ERROR_CODE]
    assert result.error is not None and "recursion" in result.error


def test_a_comment_inside_a_dotted_name_is_never_dropped():
    source = "import torch\nscaler = (torch.cuda.amp  # the old path\n          .GradScaler())\n"
    result = fix_source(source)
    assert result.new_source == source
    [finding] = result.findings
    assert (finding.code, finding.fixed) == ("AMP002", False)
    assert "a comment inside the dotted name" in finding.message


def test_a_string_annotation_is_not_confused_with_the_text_at_its_inner_position():
    # The names parsed from a string annotation have positions inside the string, not in the file.
    source = '# header comment\nimport torch\ndef f(s: "torch.cuda.amp.GradScaler") -> None: ...\n'
    result = fix_source(source)
    assert result.new_source == source.replace('"torch.cuda.amp.GradScaler"', '"torch.amp.GradScaler"')


# Where added head statements go is decided once, on the ast (`ampfix.engine.heads`); apply puts the text there.
@pytest.mark.parametrize("source, expected", [
    # After the opening docstring and imports; the comment above the first statement stays above it.
    ('"""Doc."""\nimport torch  # keep\n\n# about S\nS = torch.cuda.amp.GradScaler\n',
     '"""Doc."""\nimport torch  # keep\nimport functools\n\n# about S\nS = functools.partial(torch.amp.GradScaler, "cuda")\n'),
    # The file's own line breaks; a last line without one stays without one.
    ("import torch\r\nS = torch.cuda.amp.GradScaler\r\n",
     'import torch\r\nimport functools\r\nS = functools.partial(torch.amp.GradScaler, "cuda")\r\n'),
    ("import torch\nS = torch.cuda.amp.GradScaler",
     'import torch\nimport functools\nS = functools.partial(torch.amp.GradScaler, "cuda")'),
    # An opening import that moves (its statement re-printed by LibCST) and the line added after it.
    ("import torch\nfrom torch.cuda.amp import GradScaler as S\nT = S\nimport os\n",
     'import torch\nfrom torch.amp import GradScaler as S\nimport functools\nT = functools.partial(S, "cuda")\n'
     "import os\n"),
    # Nothing opens the module: before its first statement (its decorators), after the comments above it.
    ("# top\n\n# near\n@decorate\ndef f():\n    return torch.cuda.amp.GradScaler\nimport torch\n",
     '# top\n\n# near\nimport functools\n@decorate\ndef f():\n    return functools.partial(torch.amp.GradScaler, "cuda")\n'
     "import torch\n"),
    # A bytes docstring opens the module as a str one does (the imports after it are opening imports too).
    ('b"""Doc."""\nimport torch\nS = torch.cuda.amp.GradScaler\n',
     'b"""Doc."""\nimport torch\nimport functools\nS = functools.partial(torch.amp.GradScaler, "cuda")\n'),
])
def test_added_head_statements_go_after_the_opening_imports(source: str, expected: str):
    result = fix_source(source, Options(unsafe_fixes=True))
    assert result.error is None
    assert result.new_source == expected
    assert fix_source(expected, Options(unsafe_fixes=True)).new_source == expected


def test_a_suppression_deep_in_an_elif_chain_is_read_from_its_statement():
    # `elif` nests an `If` in the `orelse` of the one before: the statement of the last line is 1000 deep
    source = _elif_chain(1000).replace("autocast()", "autocast()  # noqa: AMP001", 1)
    assert "# noqa: AMP001" in source
    assert check_source(source).findings == ()


def test_a_state_function_named_by_its_attribute_on_torch_is_reported_never_rewritten():
    source = 'import torch as th\nfn = getattr(th, "get_autocast_gpu_dtype", None)\nother = getattr(cfg, "get_autocast_gpu_dtype")\n'
    result = fix_source(source)
    assert result.new_source == source
    assert [(f.line, f.col, f.code, f.fixable) for f in result.findings] == [(2, 18, "AMP007", False)]
    assert result.findings[0].message == (
        '`getattr(...)` names the deprecated `torch.get_autocast_gpu_dtype` by its attribute name: once the code '
        'calls `torch.get_autocast_dtype` with the device ("cuda"), a patch or lookup of this path no longer reaches '
        "it; `torch.get_autocast_dtype` serves every device, so the string is not rewritten")


@pytest.mark.parametrize(("source", "first", "last", "kept"), [
    # blank lines on both sides: the shorter run goes with the lines, the longer one stays
    ("a\n\nB\nB\n\n\nc\n", 3, 4, "a\n\n\nc\n"),
    ("a\n\n\nB\n\nc\n", 4, 4, "a\n\n\nc\n"),
    # blank lines on one side only, or none: only the lines go
    ("a\nB\n\nc\n", 2, 2, "a\n\nc\n"),
    ("a\n\nB\nc\n", 3, 3, "a\n\nc\n"),
    ("B\n\nc\n", 1, 1, "\nc\n"),
    # a comment ends a run; whitespace-only lines are blank
    ("a\n# x\nB\n\nc\n", 3, 3, "a\n# x\n\nc\n"),
    ("a\n  \nB\n\t\nc\n", 3, 3, "a\n  \nc\n"),
    # a form feed is a page break, not a blank line: it stays, and ends the run
    ("a\n\nB\n\x0c\nc\n", 3, 3, "a\n\n\x0c\nc\n"),
    # at the end of the file
    ("a\n\nB\n\n", 3, 3, "a\n\n"),
])
def test_removing_lines_leaves_one_run_of_blank_lines_as_long_as_the_longer(source, first, last, kept):
    from ampfix.core.locations import SourceIndex

    start, end = SourceIndex(source).removal(first, last)
    assert source[:start] + source[end:] == kept


def test_a_splice_over_the_blank_lines_after_its_statement_keeps_the_added_head_statements():
    """A statement removed with the blank line after it, where the head statements were to go after it (the last
    opening import): they take its place, once, and the blank line it took stays after them (`x = 1` keeps the blank
    line above it)."""
    import ast

    from ampfix.core.locations import SourceIndex, statement_groups
    from ampfix.core.plan import Edit, Plan, Splice
    from ampfix.engine.apply import apply_plan

    source = "import a\n\nimport b\n\nx = 1\n"
    index = SourceIndex(source)
    groups = statement_groups(ast.parse(source), index)
    start, end = index.removal(3, 3)
    plan = Plan([], [Edit(start, end, 3, "Splice", "", Splice(""))], groups, groups[1][1], "import functools\n")
    assert apply_plan(source, plan) == "import a\n\nimport functools\n\nx = 1\n"


def test_a_splice_may_not_reach_the_next_statement():
    import ast

    from ampfix.core.locations import SourceIndex, statement_groups
    from ampfix.core.plan import Edit, Plan, Splice
    from ampfix.engine.apply import PlanMismatch, apply_plan

    source = "import a\n\nx = 1\n"
    groups = statement_groups(ast.parse(source), SourceIndex(source))
    with pytest.raises(PlanMismatch, match="outside every top-level statement"):
        apply_plan(source, Plan([], [Edit(0, len("import a\n\nx"), 1, "Splice", "", Splice(""))], groups, None, ""))
