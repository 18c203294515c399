"""The old autocast defaults written where the code shows nesting (docs/autocast-defaults.md): what the fixtures
in fixtures/autocast/nested_* do not show on their own: the option as a flag, a config key and on the fast
path; the cases left; the device targets; what is not followed."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from ampfix.cli.app import app
from ampfix.cli.console import fast_path
from ampfix.core.options import Options
from ampfix.engine import fix_source

TOP_LEVEL = "import torch\nwith torch.cuda.amp.autocast():\n    pass\n"
EXPLICIT = 'import torch\nwith torch.amp.autocast("cuda", dtype=torch.float16, cache_enabled=True):\n    pass\n'
IDIOMATIC = 'import torch\nwith torch.amp.autocast("cuda"):\n    pass\n'


def _nested(inner: str, head: str = "import torch\n") -> str:
    return f'{head}with torch.autocast("cuda", dtype=torch.bfloat16):\n    with {inner}:\n        pass\n'


def test_the_option_as_a_flag_and_as_a_config_key_with_the_flag_winning(tmp_path: Path):
    path = tmp_path / "train.py"
    path.write_text(TOP_LEVEL)
    assert CliRunner().invoke(app, ["rewrite", "--explicit-autocast-defaults", str(path)]).exit_code == 1
    assert path.read_text() == EXPLICIT
    (tmp_path / "pyproject.toml").write_text("[tool.ampfix]\nexplicit-autocast-defaults = true\n")
    path.write_text(TOP_LEVEL)
    assert CliRunner().invoke(app, ["rewrite", "--no-explicit-autocast-defaults", str(path)]).exit_code == 1
    assert path.read_text() == IDIOMATIC
    path.write_text(TOP_LEVEL)
    assert CliRunner().invoke(app, ["rewrite", str(path)]).exit_code == 1
    assert path.read_text() == EXPLICIT


def test_the_fast_path_reads_the_config_key(tmp_path: Path, capsys):
    (tmp_path / "pyproject.toml").write_text("[tool.ampfix]\nexplicit-autocast-defaults = true\n")
    path = tmp_path / "train.py"
    path.write_text(TOP_LEVEL)
    assert fast_path(["check", str(path)]) == 1
    assert "dtype=torch.float16, cache_enabled=True written" in capsys.readouterr().out


def test_a_nested_call_says_why_and_a_second_run_changes_nothing():
    result = fix_source(_nested("torch.cuda.amp.autocast(enabled=False)"))
    assert result.new_source == _nested(
        'torch.amp.autocast("cuda", enabled=False, dtype=torch.float16, cache_enabled=True)')
    [finding] = result.findings
    assert "written, the old class's defaults (inside the autocast region of line 2" in finding.message
    assert fix_source(result.new_source).new_source == result.new_source


def test_kwargs_that_may_pass_the_defaults_leave_the_call():
    source = _nested("torch.cuda.amp.autocast(**amp_args)")
    result = fix_source(source)
    assert result.new_source == source
    [finding] = result.findings
    assert not finding.fixed and "`**` may already pass them" in finding.message


def test_no_name_to_spell_the_dtype_with_leaves_the_call():
    source = ("import torch as th\nfrom torch.cuda.amp import autocast\nimport other as torch\n"
              'with th.autocast("cuda"):\n    with autocast():\n        pass\n')
    result = fix_source(source)
    assert result.new_source == source
    assert any("no name bound to `torch` here to spell `torch.float16`" in f.message for f in result.findings)


def test_device_targets():
    source = _nested("torch.cuda.amp.autocast()")
    cpu = fix_source(source, Options(device="cpu")).new_source
    assert 'torch.amp.autocast("cpu", dtype=torch.bfloat16, cache_enabled=True)' in cpu
    kept = fix_source(source, Options(device="cpu", keep_dtype=True)).new_source
    assert 'torch.amp.autocast("cpu", dtype=torch.float16, cache_enabled=True)' in kept
    auto = fix_source(source, Options(device="auto"))
    assert "torch.amp.autocast(AMP_DEVICE, dtype=torch.float16, cache_enabled=True)" in auto.new_source
    assert any("CUDA's torch.float16 default kept on whatever device runs it" in f.message for f in auto.findings)


def test_calls_through_attributes_are_not_followed_and_recursion_ends():
    source = (
        "import torch\n\n\nclass M:\n    def step(self):\n        with torch.cuda.amp.autocast():\n            pass\n\n"
        '    def train(self):\n        with torch.autocast("cuda", dtype=torch.bfloat16):\n            self.step()\n\n\n'
        "def a():\n    b()\n    with torch.cuda.amp.autocast():\n        pass\n\n\ndef b():\n    a()\n"
    )
    new = fix_source(source).new_source
    assert new.count('torch.amp.autocast("cuda"):') == 2  # documented: `ampfix verify` sees such regions


def test_parents_mapped_where_asked_are_the_trees_own_in_any_order():
    """`ampfix.syntax.parents.Parents` (nesting's and the apex rewrite's one parent map) maps only the statements that
    hold the node it is asked about: asked about every node, with a position or without (`with` items, `arguments`),
    in an order that goes back and forth between methods, decorators, `with` items and one-line statements, it gives
    the parent a whole walk gives."""
    import ast
    import random

    from ampfix.syntax.parents import Parents

    source = (
        "import torch\n"
        "@decorate(torch.cuda.amp.autocast())\n"
        "class Trainer:\n"
        "    @torch.cuda.amp.autocast()\n"
        "    def step(self, x):\n"
        "        with torch.autocast('cuda'), open(x) as f:\n"
        "            y = [torch.cuda.amp.autocast() for _ in f]; z = lambda: torch.cuda.amp.autocast()\n"
        "        return (y,\n"
        "                z)\n"
        "    def other(self):\n"
        "        try:\n"
        "            pass\n"
        "        except (ValueError) as e:\n"
        "            torch.cuda.amp.autocast()\n"
        "x = 1; y = torch.cuda.amp.autocast()\n"
    )
    tree = ast.parse(source)
    expected = {id(child): parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    shared = (ast.expr_context, ast.operator, ast.boolop, ast.unaryop, ast.cmpop)  # one instance for every use
    nodes = [node for node in ast.walk(tree) if node is not tree and not isinstance(node, shared)]
    for seed in range(8):
        random.Random(seed).shuffle(nodes)
        parents = Parents(tree)
        assert [parents.of(node) for node in nodes] == [expected[id(node)] for node in nodes]
    assert Parents(tree).of(tree) is None
