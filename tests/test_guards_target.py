"""Version guards decided at the target torch (`--target-torch`; none given: the newest torch).

The fixtures under fixtures/guards/ are fixed with the default options; here the same shapes are run
under targets that flip the decision, and the messages are asserted word for word.
"""

from __future__ import annotations

import ast

import pytest

from ampfix.syntax import version_tests
from ampfix.engine import check_source, fix_source
from ampfix.core.options import Options
from ampfix.syntax.version_tests import LOOSE, PACKAGING, BoolOp, Comparison, Literal, Not
from fixture_cases import FIXTURES

ESPNET = (FIXTURES / "guards" / "espnet_fallback.in.py").read_text(encoding="utf-8")
ESPNET_OUT = (FIXTURES / "guards" / "espnet_fallback.out.py").read_text(encoding="utf-8")


def messages(source: str, options: Options = Options()) -> list[tuple[int, str, bool]]:
    return [(f.line, f.message, f.fixed) for f in fix_source(source, options).findings]


def test_espnet_fallback_is_migrated_and_the_dead_fallback_named():
    assert messages(ESPNET) == [
        (9, "`from torch.cuda.amp import autocast` -> `from torch.amp import autocast`; the `autocast` bound on "
            "line 13, in the branch for torch < 1.6.0 (line 8), which the target torch (the newest) never runs, "
            "is left as it is and no longer matches the rewritten uses", True),
        (18, '`torch.cuda.amp.autocast(...)` -> `torch.amp.autocast(...)` with device "cuda", positional '
             "arguments named enabled", True),
        (23, '`torch.cuda.amp.autocast(...)` -> `torch.amp.autocast(...)` with device "cuda"', True),
    ]
    assert fix_source(ESPNET_OUT).new_source == ESPNET_OUT  # a second run changes nothing


def test_espnet_fallback_at_a_target_that_never_runs_the_fallback():
    # A declared target also removes the fallback it never runs (AMP012): the import takes the `if`'s place.
    result = fix_source(ESPNET, Options(target_torch=(1, 10)))
    collapsed = ESPNET_OUT.replace(
        'if V(torch.__version__) >= V("1.6.0"):\n    from torch.amp import autocast\nelse:\n'
        "    # Nothing to do if torch<1.6.0\n    @contextmanager\n    def autocast(enabled=True):\n        yield\n",
        "from torch.amp import autocast\n")
    assert collapsed != ESPNET_OUT
    assert result.new_source == collapsed
    assert "which the target torch (1.10 or newer) never runs" in result.findings[0].message
    assert (result.findings[1].code, result.findings[1].line, result.findings[1].fixed) == ("AMP012", 10, True)
    assert fix_source(collapsed, Options(target_torch=(1, 10))).new_source == collapsed


def test_espnet_fallback_at_a_target_that_still_runs_the_fallback_is_left():
    # Torch 1.5 runs the `else`, so `autocast` is two things there; and the new name needs 1.10.
    result = fix_source(ESPNET, Options(target_torch=(1, 5)))
    assert result.new_source == ESPNET
    assert messages(ESPNET, Options(target_torch=(1, 5))) == [
        (9, "`torch.cuda.amp.autocast` import left: needs torch >= 1.10; the target is torch 1.5", False),
        (18, "`autocast` is bound to several things (lines 9, 13); rewriting one use would break the others", False),
        (23, "`autocast` is bound to several things (lines 9, 13); rewriting one use would break the others", False),
    ]


BELOW_2_0 = """\
import torch
from packaging import version

if version.parse(torch.__version__) < version.parse("2.0"):
    ctx = torch.cuda.amp.autocast(True)
"""
BELOW_2_0_FIXED = BELOW_2_0.replace('torch.cuda.amp.autocast(True)', 'torch.amp.autocast("cuda", enabled=True)')


@pytest.mark.parametrize(("target", "expected", "message"), [
    (None, BELOW_2_0, "`torch.cuda.amp.autocast` left: in the branch for torch < 2.0 (line 4), which the target "
                      "torch (the newest) never runs"),
    # A declared target removes the branch it never runs (AMP012), and what was said of the code in it.
    ((2, 0), "import torch\nfrom packaging import version\n\n",
     "outdated version branch: the code in the branch for torch < 2.0 (line 4), which the target torch (2.0 or newer) "
     "never runs: removed"),
    # torch 1.12 and 1.13 run the branch, and have the new name (1.10): migrated as unguarded code is.
    ((1, 12), BELOW_2_0_FIXED, '`torch.cuda.amp.autocast(...)` -> `torch.amp.autocast(...)` with device "cuda", '
                               "positional arguments named enabled"),
    # Below the rule's minimum the rule holds it back, branch or not.
    ((1, 8), BELOW_2_0, "`torch.cuda.amp.autocast` left: needs torch >= 1.10; the target is torch 1.8"),
])
def test_the_target_decides_the_branch(target, expected, message):
    result = fix_source(BELOW_2_0, Options(target_torch=target))
    assert result.new_source == expected
    (finding,) = result.findings
    assert finding.message == message
    assert finding.fixed == (expected != BELOW_2_0)


def test_a_live_branch_does_not_lift_the_rules_minimum():
    source = ("import torch\nfrom packaging import version\n\n"
              "if version.parse(torch.__version__) >= version.parse('2.3'):\n    s = torch.cuda.amp.GradScaler()\n")
    (finding,) = fix_source(source, Options(target_torch=(2, 0))).findings
    assert finding.message == "`torch.cuda.amp.GradScaler` left: needs torch >= 2.3; the target is torch 2.0"
    # At 2.3 the test always holds: its body, migrated, takes its place (AMP012), in the file's quotes.
    assert fix_source(source, Options(target_torch=(2, 3))).new_source == (
        "import torch\nfrom packaging import version\n\ns = torch.amp.GradScaler('cuda')\n")


@pytest.mark.parametrize(("parser", "code"), [
    # LooseVersion("2.0") < LooseVersion("2.0.0"): every torch from 2.0.0 on passes, the `else` is dead (removed).
    ("from distutils.version import LooseVersion as V", "AMP012"),
    # packaging reads "2.0" as 2.0.0: torch 2.0.0 fails the test and runs the `else`, migrated.
    ("from packaging.version import Version as V", "AMP001"),
])
def test_each_parser_orders_versions_its_own_way(parser, code):
    source = (f"import torch\n{parser}\n\nif V(torch.__version__) > V('2.0'):\n    pass\n"
              "else:\n    ctx = torch.cuda.amp.autocast(True)\n")
    (finding,) = fix_source(source, Options(target_torch=(2, 0))).findings
    assert (finding.code, finding.fixed) == (code, True), finding.message


def test_a_use_in_a_dead_branch_is_reported_as_dead_even_where_its_name_is_bound_twice():
    source = """\
import torch
from packaging.version import parse as V

if V(torch.__version__) >= V("1.6.0"):
    from torch.cuda.amp import autocast
else:
    def autocast(enabled=True):
        return None
    with autocast(False):
        pass
"""
    assert messages(source)[-1] == (
        9, "`torch.cuda.amp.autocast` left: in the branch for torch < 1.6.0 (line 4), which the target torch "
           "(the newest) never runs", False)


def test_a_name_bound_only_in_a_dead_branch_still_reports_its_use():
    source = """\
import torch
from packaging.version import parse as V

if V(torch.__version__) < V("1.6.0"):
    from torch.cuda.amp import autocast
with autocast():
    pass
"""
    result = check_source(source)
    assert [(f.line, f.fixable) for f in result.findings] == [(5, False), (6, False)]
    assert "in the branch for torch < 1.6.0 (line 4)" in result.findings[0].message


def test_an_undecided_part_is_no_matter_where_the_decided_part_settles_the_test():
    source = """\
import torch
from packaging.version import parse as V

if use_amp and V(torch.__version__) < V("1.6.0"):
    a = torch.cuda.amp.autocast(True)
if use_amp or V(torch.__version__) >= V("1.6.0"):
    pass
else:
    b = torch.cuda.amp.autocast(True)
if use_amp and V(torch.__version__) >= V("1.6.0"):
    c = torch.cuda.amp.autocast(True)
"""
    assert [(line, message.partition(": ")[2], fixed) for line, message, fixed in messages(source)] == [
        (5, "in the branch where the test on line 4 is true, which the target torch (the newest) never runs", False),
        (9, "in the branch where the test on line 6 is false, which the target torch (the newest) never runs", False),
        (11, "inside a branch that tests the torch version; the new name may not exist there", False),
    ]


def _compiled(test: str) -> version_tests.Test:
    """A test built as `ampfix.syntax.guards` builds it, from `V(torch.__version__)` and `V("x.y")`."""
    from ampfix.syntax.bindings import Walker
    from ampfix.syntax.guards import GuardJudge
    from ampfix.families import TORCH_AMP

    tree = ast.parse(f"import torch\nfrom packaging.version import parse as V\nTEST = {test}\n")
    walker = Walker()
    walker.statements(tree.body, walker.module_scope)
    return GuardJudge(TORCH_AMP).version_test(tree.body[-1].value, walker.module_scope, frozenset())


TV = "V(torch.__version__)"


@pytest.mark.parametrize(("test", "target", "values"), [
    (f'{TV} >= V("1.6")', None, {True}),
    (f'{TV} < V("1.6")', None, {False}),
    (f'V("1.6") > {TV}', None, {False}),
    (f'{TV} == V("2.1")', None, {False}),
    (f'{TV} != V("2.1")', None, {True}),
    (f'{TV} >= V("2.1")', (2, 0), {True, False}),
    (f'{TV} >= V("2.1")', (2, 1), {True}),
    (f'{TV} == V("2.1.0")', (2, 1), {True, False}),
    (f'{TV} == V("2.1")', (2, 2), {False}),
    (f'V("1.10") <= {TV} < V("2.0")', (1, 12), {True, False}),
    (f'V("1.10") <= {TV} < V("2.0")', (2, 0), {False}),
    (f'not {TV} < V("2.0")', (2, 0), {True}),
    (f'{TV} >= V("1.6") and {TV} < V("1.10")', (1, 10), {False}),
    (f'{TV} >= V("1.6") and flag', None, {None}),
    (f'{TV} < V("1.6") and flag', None, {False}),
    (f'{TV} >= V("1.6") or flag', None, {True}),
    (f'{TV} >= "1.6"', None, {None}),  # a string comparison: not decided
    (f'{TV} >= V("1.6.0rc1")', None, {None}),  # a pre-release literal: not modelled
    (f'{TV} >= V("1.6.0.1")', None, {None}),  # four parts: not a torch release
])
def test_outcomes(test, target, values):
    assert version_tests.outcomes(_compiled(test), target) == values


def test_comparison_at_a_version_follows_the_parser():
    loose = Comparison(LOOSE, (None, Literal("1.6", (1, 6))), (">",))
    padded = Comparison(PACKAGING, (None, Literal("1.6", (1, 6))), (">",))
    assert loose.at((1, 6, 0)) and not padded.at((1, 6, 0))
    assert version_tests.describe(Not(padded), True) == "torch <= 1.6"
    assert version_tests.describe(BoolOp(True, (padded, padded)), True) is None


# `try: <old import> / except ImportError: <fallback>` (nemo) --------------------------------------------

NEMO = (FIXTURES / "guards" / "nemo_fallback.in.py").read_text(encoding="utf-8")
NEMO_OUT = (FIXTURES / "guards" / "nemo_fallback.out.py").read_text(encoding="utf-8")
NEMO_USES = [
    (17, '`torch.cuda.amp.autocast(...)` -> `torch.amp.autocast(...)` with device "cuda"', True),
    (22, '`torch.cuda.amp.autocast(...)` -> `torch.amp.autocast(...)` with device "cuda"', True),
]


def test_nemo_fallback_is_migrated_and_the_dead_handler_named():
    assert messages(NEMO) == [
        (7, "`from torch.cuda.amp import autocast` -> `from torch.amp import autocast`; the `autocast` bound on "
            "line 12, in the handler `except ImportError` (line 8), which the target torch (the newest) never runs "
            "once the `try` imports the new names, is left as it is and no longer matches the rewritten uses", True),
        *NEMO_USES,
    ]
    assert fix_source(NEMO).new_source == NEMO_OUT
    # The rewritten `try` imports the new API: its handler is the fallback for an older torch, as before.
    assert fix_source(NEMO_OUT).new_source == NEMO_OUT
    assert fix_source(NEMO_OUT).findings == ()


def test_nemo_fallback_at_the_rules_minimum_is_migrated():
    result = fix_source(NEMO, Options(target_torch=(1, 10)))
    assert result.new_source == NEMO_OUT
    assert "which the target torch (1.10 or newer) never runs once the `try` imports" in result.findings[0].message


def test_nemo_fallback_below_the_rules_minimum_is_left():
    # torch.amp.autocast is 1.10: at 1.5 the import stays, so the handler can run and `autocast` is two things.
    result = fix_source(NEMO, Options(target_torch=(1, 5)))
    assert result.new_source == NEMO
    assert messages(NEMO, Options(target_torch=(1, 5))) == [
        (7, "`torch.cuda.amp.autocast` import left: needs torch >= 1.10; the target is torch 1.5", False),
        (17, "`autocast` is bound to several things (lines 7, 12); rewriting one use would break the others", False),
        (22, "`autocast` is bound to several things (lines 7, 12); rewriting one use would break the others", False),
    ]


def _try(body: str, caught: str = "ImportError") -> str:
    return (f"import torch\n\ntry:\n{body}except {caught}:\n    def autocast(enabled=None):\n        return None\n\n"
            "with autocast():\n    pass\n")


BOUND_TWICE = "`autocast` is bound to several things (lines {}, {}); rewriting one use would break the others"


@pytest.mark.parametrize(("body", "caught"), [
    # anything but deprecated imports in the body: it can fail on any torch
    ("    from torch.cuda.amp import autocast\n    import megatron\n", "ImportError"),
    ("    from torch.cuda.amp import autocast\n    torch.ones(1)\n", "ImportError"),
    ("    from torch.amp import GradScaler\n    from torch.cuda.amp import autocast\n", "ImportError"),
    # a name with no twin stays imported from the old module
    ("    from torch.cuda.amp import autocast, common\n", "ImportError"),
    # a handler that more than a failed import runs
    ("    from torch.cuda.amp import autocast\n", "Exception"),
    ("    from torch.cuda.amp import autocast\n", "(ImportError, AttributeError)"),
])
def test_a_try_that_can_fail_on_the_target_keeps_its_handler_live(body, caught):
    source = _try(body, caught)
    lines = source.splitlines()
    import_line = next(n for n, line in enumerate(lines, 1) if "import autocast" in line)
    result = fix_source(source)
    assert result.new_source == source
    (use,) = [f for f in result.findings if f.line == lines.index("with autocast():") + 1]
    assert use.message == BOUND_TWICE.format(import_line, lines.index("    def autocast(enabled=None):") + 1)
    assert not use.fixed


@pytest.mark.parametrize(("body", "caught", "out"), [
    ("    from torch.cuda.amp import autocast\n", "ModuleNotFoundError", "    from torch.amp import autocast\n"),
    ("    from torch.cuda.amp import autocast\n", "(ImportError, ModuleNotFoundError)",
     "    from torch.amp import autocast\n"),
    ("    import torch.cuda.amp\n    from torch.cuda.amp import autocast\n", "ImportError",
     "    import torch.amp\n    from torch.amp import autocast\n"),
    ("    from torch.cuda.amp import autocast\n    from torch.cuda.amp import GradScaler as Scaler\n", "ImportError",
     "    from torch.amp import autocast\n    from torch.amp import GradScaler as Scaler\n"),
])
def test_a_try_of_deprecated_imports_that_all_move_has_a_dead_handler(body, caught, out):
    source = _try(body, caught)
    result = fix_source(source)
    assert result.new_source == _try(out, caught).replace("with autocast():", 'with autocast("cuda"):')
    handler_line = 3 + body.count("\n") + 1
    (note,) = [f.message for f in result.findings if "import autocast` ->" in f.message]
    assert note.endswith(f"; the `autocast` bound on line {handler_line + 1}, in the handler `except {caught}` "
                         f"(line {handler_line}), which the target torch (the newest) never runs once the `try` "
                         "imports the new names, is left as it is and no longer matches the rewritten uses")


def test_a_deprecated_use_in_a_dead_handler_is_left_and_said_so():
    source = ("import torch\n\ntry:\n    from torch.cuda.amp import autocast\nexcept ImportError:\n"
              "    autocast = torch.cpu.amp.autocast\n\nwith autocast():\n    pass\n")
    result = fix_source(source)
    assert result.new_source == source.replace("from torch.cuda.amp", "from torch.amp").replace(
        "with autocast():", 'with autocast("cuda"):')
    assert [(f.line, f.message, f.fixed) for f in result.findings][1] == (
        6, "`torch.cpu.amp.autocast` left: in the handler `except ImportError` (line 5), which the target torch "
           "(the newest) never runs once the `try` imports the new names", False)


def test_a_try_under_an_undecided_guard_keeps_its_handler_live():
    # The import is held back by the `hasattr` guard, so it is not rewritten and the handler can run.
    source = ("import torch\n\nif hasattr(torch, 'npu'):\n    try:\n        from torch.cuda.amp import autocast\n"
              "    except ImportError:\n        def autocast(enabled=None):\n            return None\n"
              "    with autocast():\n        pass\n")
    assert messages(source) == [
        (5, "`torch.cuda.amp.autocast` import left: inside a branch that tests the torch version; the new name "
            "may not exist there", False),
        (9, BOUND_TWICE.format(5, 7), False),
    ]


def test_a_suppressed_import_keeps_its_handler_live():
    source = _try("    from torch.cuda.amp import autocast  # noqa: AMP010\n")
    assert fix_source(source).new_source == source
    assert messages(source) == [(9, BOUND_TWICE.format(4, 6), False)]


def test_the_new_api_fallback_keeps_its_reason():
    from ampfix.syntax.guards import FALLBACK_REASON

    source = ("import torch\n\ntry:\n    from torch.amp import GradScaler\nexcept ImportError:\n"
              "    from torch.cuda.amp import GradScaler\n\nscaler = GradScaler()\n")
    assert fix_source(source).new_source == source
    assert messages(source)[0] == (6, f"`torch.cuda.amp.GradScaler` import left: {FALLBACK_REASON}", False)


EXPORTED = """\
import torch
from packaging.version import Version

TORCH_2 = Version(torch.__version__) >= Version("2.0")
__all__ = ["TORCH_2"]


def f():
    if not TORCH_2:
        return torch.cuda.amp.autocast(True)


class C:
    if Version(torch.__version__) < Version("2.0"): x = 1
"""


def test_outdated_branches_only_at_a_declared_target():
    # Declared: the `if` alone in its block leaves `pass`; the name stays (exported by `__all__`); a one-line
    # suite is left as written.
    result = fix_source(EXPORTED, Options(target_torch=(2, 1)))
    assert result.new_source == EXPORTED.replace(
        "    if not TORCH_2:\n        return torch.cuda.amp.autocast(True)\n", "    pass\n")
    assert [(f.line, f.code, f.fixed) for f in result.findings] == [(9, "AMP012", True)]
    # The implicit newest, and a target said not to be declared (what a project's metadata does not give): left.
    for options in (Options(), Options(target_torch=(2, 1), target_declared=False)):
        result = fix_source(EXPORTED, options)
        assert result.new_source == EXPORTED
        assert [(f.line, f.code, f.fixed) for f in result.findings] == [(10, "AMP001", False)]


def test_options_declare_the_target_when_it_is_given():
    assert not Options().declares_target
    assert Options(target_torch=(2, 0)).declares_target
    assert not Options(target_torch=(2, 0), target_declared=False).declares_target
    assert not Options(target_declared=True).declares_target  # declared, but nothing to decide at


def test_a_name_bound_to_the_version_string_is_read_as_the_version():
    # unsloth 2024.8 (unsloth/models/_utils.py): `torch_version = torch.__version__`, parsed in the test.
    source = (FIXTURES / "guards" / "name_bound_to_version_string.in.py").read_text(encoding="utf-8")
    assert messages(source)[0] == (8, "`torch.cuda.amp.custom_fwd` left: in the branch for torch < 2.4.0 (line 7), "
                                      "which the target torch (the newest) never runs", False)
    # Bound twice, the name is no version: held back as before.
    twice = source.replace("torch_version = torch.__version__\n",
                           "torch_version = torch.__version__\ntorch_version = '2.0'\n")
    assert fix_source(twice).new_source == twice
