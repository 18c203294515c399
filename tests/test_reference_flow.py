"""A name referenced without a call, followed in its module to every place it is called (ampfix/syntax/flow.py):
the message of a reference left names the call or the escape that keeps it (fixtures/autocast/reference_followed_*
hold the cases that are fixed)."""

from __future__ import annotations

from ampfix.engine import check_source
from fixture_cases import FIXTURES


def _reasons(source: str) -> dict[int, str]:
    """line -> what the finding says after the reference's own words, up to the partial it would write."""
    said = "its calls cannot be given the device here; "
    return {f.line: f.message.split(said, 1)[1].split("; functools.partial(", 1)[0]
            for f in check_source(source).findings}


def test_a_reference_left_names_the_call_or_the_escape_that_keeps_it():
    source = (FIXTURES / "autocast" / "reference_followed_left.in.py").read_text()
    assert _reasons(source) == {
        5: "the call on line 6 passes an argument by position",
        11: "it is returned on line 12",
        16: "it is passed to `print` on line 16, which is not a function of this module",
        20: "it is stored in `registry['amp']` on line 20, which is not followed",
        23: "`module_level` is bound at the top of a module or class on line 23, where another module may read it",
        28: "`holder.cm` on line 32 reads `self.cm` on line 28 from outside its class",
    }


def test_a_read_the_walk_cannot_follow_keeps_the_report():
    head = "import torch\n\n\ndef f(cfg):\n    cm = torch.cuda.amp.autocast\n"
    assert _reasons(head + "    with cm.__call__():\n        pass\n") == {
        5: "`cm.__call__` on line 6 reads an attribute of it"}
    assert _reasons(head + "    def g():\n        nonlocal cm\n        cm = None\n    with cm():\n        pass\n") == {
        5: "`cm` is named by a `nonlocal`, which is not followed"}
    assert _reasons(head + "    run(cm, *cfg.args)\n\n\ndef run(fn, *rest):\n    with fn():\n        pass\n") == {
        5: "it is passed to `run` on line 6 where no parameter of it is known to take it"}
    held = ("\n\nclass T:\n    def __init__(self):\n        self.amp_cm = torch.cuda.amp.autocast\n\n"
            "    def step(self):\n        with getattr(self, 'amp_cm')():\n            pass\n")
    assert _reasons("import torch" + held) == {
        5: "a string on line 8 names the attribute of `self.amp_cm` on line 5 (`getattr`), which is not followed"}
    # Passed by position to a function of the module and only called there: fixed, by default.
    fixed = check_source(head + "    run(cm)\n\n\ndef run(fn):\n    with fn(enabled=False):\n        pass\n")
    assert [(f.line, f.fixable, f.unsafe) for f in fixed.findings] == [(5, True, False)]


def test_a_value_a_nested_function_returns_is_followed_to_the_calls_of_what_it_returns():
    head = "import torch\n\n\ndef main(p):\n    def get():\n        return torch.cuda.amp.autocast\n\n"
    fixed = check_source(head + "    with get()(enabled=p):\n        pass\n").findings
    assert [(f.line, f.fixable, f.unsafe) for f in fixed] == [(6, True, False)]
    assert "only called without positional arguments (line 8)" in fixed[0].message
    assert _reasons(head + "    with get()(p):\n        pass\n") == {6: "the call on line 8 passes an argument by position"}
    assert _reasons(head + "    return get\n") == {
        6: "it is returned on line 6, by `get`, which is read, not called, on line 8"}
    # At the top of a module, without a project to read: another module may call it.
    assert _reasons("import torch\n\n\ndef get():\n    return torch.cuda.amp.autocast\n") == {
        5: "it is returned on line 5"}
