"""Each rule's own examples, and the rule table's promises about torch."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys

import pytest

from ampfix.families import TORCH_AMP
from ampfix.engine import fix_source
from ampfix.core.options import Options
from ampfix.families import ALL_RULES

EXAMPLES = [
    pytest.param(rule, example, id=f"{rule.code}-{i}")
    for rule in ALL_RULES
    for i, example in enumerate(rule.examples)
]


@pytest.mark.parametrize(("rule", "example"), EXAMPLES)
def test_rule_example(rule, example):
    result = fix_source(example.before, Options(unsafe_fixes=example.unsafe_fixes, device=example.device))
    expected = example.before if example.after is None else example.after
    assert result.error is None
    assert result.new_source == expected
    ast.parse(result.new_source)
    if example.after is not None:
        assert any(f.code == rule.code and f.fixed for f in result.findings)
    elif example.reported is not None:
        assert example.reported == rule.code, "an example is reported under its own rule's code"
        # an apex import left is reported at its own line too (it fails on current apex), under its name's rule
        imports = {node.lineno for node in ast.walk(ast.parse(example.before))
                   if isinstance(node, (ast.Import, ast.ImportFrom))}
        outside = [f.code for f in result.findings if not f.fixed and f.line not in imports]
        at_imports = [f.code for f in result.findings if not f.fixed and f.line in imports]
        assert outside == [example.reported] or (not outside and at_imports.count(example.reported) == 1)
        assert all(code == example.reported or code.startswith("AMP1") for code in at_imports)
    else:
        assert result.findings == (), "an example with nothing to change has nothing to report"


def test_every_rule_has_examples_and_a_unique_code():
    codes = [rule.code for rule in ALL_RULES]
    assert len(codes) == len(set(codes))
    assert all(rule.examples for rule in ALL_RULES)


def _resolve(qualified_name: str):
    module_name, _, attribute = qualified_name.rpartition(".")
    try:
        return importlib.import_module(qualified_name)
    except ImportError:
        return getattr(importlib.import_module(module_name), attribute)


SYMBOLS = [(old, target) for rule in TORCH_AMP.rules for old, target in rule.symbols.items()]


@pytest.mark.parametrize(("old", "target"), SYMBOLS, ids=[old for old, _ in SYMBOLS])
def test_every_symbol_and_its_twin_exist_in_torch(old, target):
    import torch  # noqa: F401

    if target is not None and target.old_removed_in is not None:
        assert tuple(map(int, torch.__version__.split(".")[:2])) >= target.old_removed_in
        with pytest.raises(AttributeError):
            _resolve(old)  # gone, as the rule says; its twin must exist
    else:
        _resolve(old)
    if target is not None:
        _resolve(target.new)
        # A migrated import keeps the user's names: `from torch.cuda.amp.X import Y` becomes
        # `from torch.amp.X import Y`, so the root-replaced path must exist too.
        _resolve(TORCH_AMP.renamed(old))


def test_check_and_fix_never_import_torch():
    code = (
        "import sys\n"
        "from ampfix.engine import fix_source, check_source\n"
        "check_source('import torch\\nwith torch.cuda.amp.autocast():\\n    pass\\n')\n"
        "fix_source('import torch\\nwith torch.cuda.amp.autocast():\\n    pass\\n')\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
