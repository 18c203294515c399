"""The pre-filter never drops a file that holds a deprecated use (the argument: ampfix/prefilter.py).

Each source is analysed directly (`ampfix.analysis.analyze`, bypassing the pre-filter); whenever
the analysis finds something, the pre-filter must keep the source, as text and as bytes.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ampfix.engine.pipeline import analyze
from ampfix.engine import check_source
from ampfix.io.files import process_file
from ampfix.core.options import Options
from ampfix.syntax import prefilter
from ampfix.families import ALL_RULES, SPELLED_NAMES, TORCH_AMP
from ampfix.families import SPELLINGS as RULE_SPELLINGS
from ampfix.families.apex import rules as apex_rules

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def could_hold_deprecated_use(source: str | bytes) -> bool:
    """The pre-filter with the words the engine hands it (the rules' own)."""
    return prefilter.could_hold_deprecated_use(source, RULE_SPELLINGS)

SPELLINGS = [
    "import torch\nwith torch.cuda.amp.autocast():\n    pass\n",
    "import torch\nx = torch.cpu.amp.autocast(dtype=torch.bfloat16)\n",
    "import torch as th\nscaler = th.cuda.amp.GradScaler()\n",
    "import torch as th\nwith th.cpu.amp.autocast():\n    pass\n",
    "from torch.cuda.amp import autocast, GradScaler\nwith autocast():\n    s = GradScaler()\n",
    "from torch.cuda.amp import autocast as ac\nwith ac():\n    pass\n",
    "from torch.cuda import amp\nscaler = amp.GradScaler()\n",
    "from torch.cuda import amp as a\nwith a.autocast():\n    pass\n",
    "from torch.cpu import amp\nwith amp.autocast():\n    pass\n",
    "import torch.cuda.amp\nwith torch.cuda.amp.autocast():\n    pass\n",
    "import torch.cuda.amp as cuda_amp\nwith cuda_amp.autocast():\n    pass\n",
    "from torch import cuda\nwith cuda.amp.autocast():\n    pass\n",
    "from torch import cuda as c\nscaler = c.amp.GradScaler()\n",
    "from torch.cuda.amp import custom_fwd, custom_bwd\n@custom_fwd(cast_inputs=None)\ndef f(ctx, x): ...\n"
    "@custom_bwd\ndef b(ctx, g): ...\n",
    "import torch\n@torch.cuda.amp.custom_fwd\ndef f(ctx, x): ...\n",
    "from torch.cuda.amp.autocast_mode import autocast\nwith autocast():\n    pass\n",
    "from torch.cuda.amp.grad_scaler import GradScaler\ns = GradScaler()\n",
    "import torch\nctx = torch.cuda.amp.autocast\n",
    "import torch\nclass S(torch.cuda.amp.GradScaler):\n    pass\n",
    "import torch\ndef f(s: 'torch.cuda.amp.GradScaler') -> None: ...\n",
    "import torch\ndef f(s: torch.cuda.amp.GradScaler) -> None: ...\n",
    "import torch\nx = torch.cuda.amp.common.amp_definitely_not_available()\n",
    "from torch.cuda.amp import *\nwith autocast():\n    pass\n",
    "path = 'torch.cuda.amp.autocast'\n",
    "import torch\nwith torch.cuda.\\\n        amp.autocast():\n    pass\n",
    "import torch\nwith (torch.cuda\n      .amp.autocast()):\n    pass\n",
    "import torch\nwith torch.cuda.amp.autocast():pass\n",
    # Identifiers are NFKC-normalised by Python: this is torch.cuda.amp.
    "import torch\nwith torch.cuda.\uff41\uff4d\uff50.autocast():\n    pass\n",
    "from torch.cuda import \U0001d41a\U0001d426\U0001d429\nx = \U0001d41a\U0001d426\U0001d429.GradScaler()\n",
    # Deprecated names outside torch.cuda.amp / torch.cpu.amp (AMP007): spelled by their own name.
    "import torch\nx = x.to(torch.get_autocast_gpu_dtype())\n",
    "import torch as th\nth.set_autocast_cpu_enabled(False)\n",
    "from torch import is_autocast_xla_enabled as on\nx = on()\n",
    "import torch\nf = torch.set_autocast_ipu_dtype\n",
    "import torch\nx = torch.\\\n    get_autocast_cpu_dtype()\n",
    # NFKC: the fullwidth `ｇ` is `g`.
    "import torch\nx = torch.\uff47et_autocast_gpu_dtype()\n",
]

NOT_CANDIDATES = [
    "use_amp = True\namp_dtype = 'float16'\n",
    "import torch\nx = torch.clamp(torch.randn(3), 0, 1)  # sample, example\n",
    "import torch\nwith torch.autocast('cuda'):\n    pass\n",
    "from torch import autocast\nwith autocast('cuda'):\n    pass\n",
    "import torch as th\nscaler = th.GradScaler('cuda')\n",
    "from mypackage import autocast, GradScaler, custom_fwd\n",
    "def example(ampere): return ampere.amps\n",
    "x = 'caf\u00e9'  # non-ASCII, no AMP\n",
    # Not deprecated, and no device target: the names a device target looks at are not searched.
    "import torch\non = torch.is_autocast_enabled()\nd = torch.get_autocast_dtype('cuda')\n",
    # The words only as parts of other identifiers.
    "my_get_autocast_gpu_dtype = 1\nx = get_autocast_gpu_dtype_cache\n",
]


def test_the_words_are_the_rules():
    # One source of truth: each deprecated name outside the roots, by its last part, and the part they share.
    names = {name.rpartition(".")[2] for name in TORCH_AMP.deprecated_names}
    assert set(SPELLED_NAMES.names) == names and len(names) == 14
    assert SPELLED_NAMES.anchor == "_autocast_"


def _rule_examples() -> list[str]:
    return [example.before for rule in ALL_RULES for example in rule.examples]


def _fixture_inputs() -> list[Path]:
    return sorted(FIXTURES.rglob("*.py")) if FIXTURES.is_dir() else []


def _analysed_findings(source: str, options: Options = Options()) -> list:
    return analyze(ast.parse(source), source, options).findings


def _assert_kept_if_found(source: str) -> None:
    for options in (Options(), Options(unsafe_fixes=True)):
        if _analysed_findings(source, options):
            assert could_hold_deprecated_use(source), source
            assert could_hold_deprecated_use(source.encode("utf-8")), source
            return


@pytest.mark.parametrize("source", SPELLINGS)
def test_every_spelling_is_found_and_kept(source: str):
    assert _analysed_findings(source), f"the analysis finds no use in:\n{source}"
    assert could_hold_deprecated_use(source)
    assert could_hold_deprecated_use(source.encode("utf-8"))
    assert check_source(source).findings == check_source(source).findings  # deterministic
    assert check_source(source).findings, "the engine (with its pre-filter) finds it too"


@pytest.mark.parametrize("source", _rule_examples())
def test_rule_examples_with_a_finding_are_kept(source: str):
    _assert_kept_if_found(source)


def test_fixture_inputs_with_a_finding_are_kept():
    checked = 0
    for path in _fixture_inputs():
        try:
            source = path.read_text(encoding="utf-8")
            ast.parse(source)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        _assert_kept_if_found(source)
        checked += 1
    assert checked > 0 or not FIXTURES.is_dir()


@pytest.mark.parametrize("source", NOT_CANDIDATES)
def test_files_without_the_name_amp_are_dropped(source: str):
    assert not _analysed_findings(source)
    assert not could_hold_deprecated_use(source)
    assert not could_hold_deprecated_use(source.encode("utf-8"))


def test_a_declared_encoding_that_spells_amp_otherwise_is_decoded(tmp_path: Path):
    data = b"# -*- coding: utf-7 -*-\nimport torch\nx = torch.cuda.+AGE-mp.GradScaler()\n"
    assert b"amp" not in data
    assert could_hold_deprecated_use(data)
    path = tmp_path / "utf7.py"
    path.write_bytes(data)
    assert [f.code for f in process_file(path, Options()).findings] == ["AMP002"]


def test_a_latin1_file_with_the_name_is_kept():
    data = "# -*- coding: latin-1 -*-\n# caf\u00e9\nfrom torch.cuda import amp\n".encode("latin-1")
    assert could_hold_deprecated_use(data)


def test_undecodable_bytes_without_the_name_are_dropped():
    assert not could_hold_deprecated_use(b"x = '\xff\xfe'\n")


def test_the_documented_limit_escaped_strings():
    # Not a spelling anyone writes; documented in ampfix/prefilter.py.
    source = "path = 'torch.cuda.\\x61mp.autocast'\n"
    assert _analysed_findings(source)
    assert not could_hold_deprecated_use(source)


@pytest.mark.parametrize("source, kept", [
    ("trainer = Trainer(amp_backend='apex')\n", True),  # no name `amp` in it
    ("wrapper = ApexOptimWrapper(optimizer)\n", True),
    ("ok = find_spec('apex.parallel')\n", True),  # a probe of a removed module by name (AMP108)
    ("import apex\nmodel = apex.parallel.DistributedDataParallel(model)\n", True),
    ("import apex\nmodel = apex . parallel.DistributedDataParallel(model)\n", True),
    ("import apex\nmodel = (apex\n         .parallel.DistributedDataParallel(model))\n", True),
    ("import apex as a\nmodel = a.parallel.DistributedDataParallel(model)\n", True),
    ("import os, apex as a\nmodel = a.parallel.DistributedDataParallel(model)\n", True),
    ("from apex import *\nmodel = parallel.DistributedDataParallel(model)\n", True),
    ("from apex import (\n    parallel,\n)\n", True),
    ("from  apex  import fp16_utils\n", True),
    ("a = __import__('apex.optimizers')\nmodel = a.parallel.DistributedDataParallel(model)\n", True),
    ("import importlib\na = importlib.import_module('apex')\nm = a.parallel.DistributedDataParallel(model)\n", True),
    ("import apex\nstate = optimizer._amp_stash\n", True),
    # apex's packages that still exist, and apex only mentioned, do not hold a removed name
    ("import apex\n", False),
    ("from apex.optimizers import FusedAdam\nfrom torch.nn.parallel import DistributedDataParallel\n", False),
    ("from transformers.utils import is_apex_available\nif is_apex_available():\n    pass\n", False),
    ("import apex.normalization as norm\nx = norm.parallel\n", False),
    ("x = 'pex' + spex\n", False),
    ("APEX_HOME = 1\n", False),
])
def test_files_that_spell_apex_are_kept(source: str, kept: bool):
    assert could_hold_deprecated_use(source) is kept
    assert could_hold_deprecated_use(source.encode("utf-8")) is kept
    assert bool(_analysed_findings(source, Options(unsafe_fixes=True))) <= kept


def test_the_apex_spellings_cover_every_apex_rule():
    """Each name an apex rule lists lies below a removed module the pre-filter searches for, or is one of its names
    (derived from the rules in `ampfix.families.apex.rules`; this holds the derivation to what the pre-filter says)."""
    spellings = apex_rules.SPELLINGS
    assert spellings.modules == ("amp", "fp16_utils", "parallel")
    assert spellings.names == ("ApexOptimWrapper", "_amp_stash")
    assert spellings.quoted == ('"ApexOptimWrapper"', "'ApexOptimWrapper'", '"apex"', "'apex'")
    for rule in apex_rules.APEX_RULES:
        for symbol in rule.symbols:
            parts = symbol.split(".")
            assert parts[1] in spellings.modules if parts[0] == "apex" else parts[-1] in spellings.names, symbol


def test_every_name_the_prefilter_searches_holds_the_part_the_codec_tests_first():
    """`ampfix.io.codec` passes over a file without `autocast` before importing the rule data."""
    from ampfix.families import RETARGET_NAMES
    from ampfix.io.codec import NAMES_PART, PYTHON

    from ampfix.syntax.bindings import STRING_PARTS

    part = NAMES_PART.decode("ascii")
    assert part in STRING_PARTS  # the walk keeps the strings that may name them (the strings planner)
    assert SPELLED_NAMES.names and RETARGET_NAMES.names
    assert all(part in name for name in (*SPELLED_NAMES.names, *RETARGET_NAMES.names))
    assert PYTHON.could_hold(b"import torch\nt = torch.get_autocast_gpu_dtype()\n", False)
    assert PYTHON.could_hold(b"import torch\nok = torch.is_autocast_enabled()\n", True)
    assert not PYTHON.could_hold(b"import torch\nok = torch.is_autocast_enabled()\n", False)
    assert not PYTHON.could_hold(b"import torch\nx = torch.ones(1)\n", True)


APEX_CODES = {rule.code for rule in apex_rules.APEX_RULES}


def _apex_findings_ungated(source: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from ampfix.engine import pipeline

    with monkeypatch.context() as patched:
        patched.setattr(pipeline, "may_hold_apex_use", lambda text: True)
        return [f.code for options in (Options(), Options(unsafe_fixes=True))
                for f in _analysed_findings(source, options) if f.code in APEX_CODES]


def test_the_apex_planner_is_skipped_only_where_it_finds_nothing(monkeypatch: pytest.MonkeyPatch):
    """Every fixture and rule example: where the apex planner, run on every module, reports something, the gate
    (`apex.rules.may_hold_use`) lets it run."""
    with_apex = 0
    for source in [*_rule_examples(), *(p.read_bytes() for p in _fixture_inputs())]:
        try:
            source = source.decode("utf-8") if isinstance(source, bytes) else source
            ast.parse(source)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        if _apex_findings_ungated(source, monkeypatch):
            with_apex += 1
            assert apex_rules.may_hold_use(source), source
    assert with_apex > 100


@pytest.mark.parametrize("source, held", [
    ("ds_config = {'amp': {'enabled': True}, 'train_batch_size': 8}\n", True),  # DeepSpeed's key, no `apex`
    ("trainer = Trainer(amp_backend='apex')\n", True),
    ("# ａｐｅｘ\nimport torch\n", True),  # not ASCII: read whatever it spells
    ("import torch\nwith torch.cuda.amp.autocast():\n    pass\n", False),
])
def test_what_lets_the_apex_planner_run(source: str, held: bool, monkeypatch: pytest.MonkeyPatch):
    assert apex_rules.may_hold_use(source) is held
    if source.startswith("ds_config"):
        assert _apex_findings_ungated(source, monkeypatch) == ["AMP109", "AMP109"]  # FRAMEWORK_CONFIG, under both options


def test_a_check_of_a_module_without_apex_does_not_import_the_apex_planner(tmp_path: Path):
    import subprocess
    import sys

    module = tmp_path / "train.py"
    module.write_text("import torch\nwith torch.cuda.amp.autocast():\n    pass\n")
    code = ("import sys\nfrom ampfix.cli.console import fast_path\ncode = fast_path(['check', sys.argv[1]])\n"
            "print(code, sorted(m for m in sys.modules if m.startswith('ampfix.families.apex.')))")
    completed = subprocess.run([sys.executable, "-c", code, str(module)], capture_output=True, text=True, check=True)
    assert completed.stdout.splitlines()[-1] == "1 ['ampfix.families.apex.rules']"
