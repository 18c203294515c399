"""benchmarks/corpus.py measures the engine against an oracle of its own: the shapes of issue 17 that the oracle
must see (torch through a star import, `__import__` / `importlib.import_module` bindings) and the notebook
measurement (a notebook's code cells as `ampfix check` reads them)."""

from __future__ import annotations

import json
from pathlib import Path

from fuzz_cases import _CORPUS as corpus

from ampfix.engine import Options


def _lines(source: str) -> list[int]:
    uses = corpus.deprecated_lines(source)
    assert uses is not None
    return sorted(uses.lines)


def test_the_oracle_reads_torch_through_a_star_import_and_dynamic_imports():
    assert _lines("from models.common import *\nwith torch.cuda.amp.autocast():\n    pass\n") == [2]
    assert _lines("torch = __import__('torch')\ns = torch.cuda.amp.GradScaler()\n") == [2]
    assert _lines("import importlib\nth = importlib.import_module('torch')\ns = th.cuda.amp.GradScaler()\n") == [3]
    # a re-export (thinc 8.1.10's thinc/compat.py), relative or not; a module torch itself defines is its own
    assert _lines("from ..compat import torch\nwith torch.cuda.amp.autocast(True):\n    pass\n") == [2]
    assert _lines("from thinc.compat import torch as th\ns = th.cuda.amp.GradScaler()\n") == [2]
    assert _lines("from torch.utils import torch\ns = torch.cuda.amp.GradScaler()\n") == []
    # a lazy import (neural-compressor 2.2.1's neural_compressor/adaptor/pytorch.py)
    assert _lines("torch = LazyImport('torch')\nwith torch.cpu.amp.autocast():\n    pass\n") == [2]


def test_the_oracle_reads_no_torch_where_nothing_may_provide_it():
    assert _lines("with torch.cuda.amp.autocast():\n    pass\n") == []  # no import, no star import
    # a parameter binds the name: not the module
    assert _lines("from models.common import *\ndef f(torch):\n    return torch.cuda.amp.autocast()\n") == []
    assert _lines("m = __import__('numpy')\nx = m.cuda.amp.autocast()\n") == []


def test_a_notebook_is_measured_through_its_codec(tmp_path: Path):
    cells = [["import torch\n", "!pip install -q x \\\n", "    y\n", "scaler = torch.cuda.amp.GradScaler()\n"],
             ["%%time\n", "with torch.cuda.amp.autocast():\n", "    pass"]]
    notebook = {"cells": [{"cell_type": "code", "metadata": {}, "source": source, "outputs": [],
                           "execution_count": None} for source in cells],
                "metadata": {"kernelspec": {"language": "python", "name": "python3"}}, "nbformat": 4,
                "nbformat_minor": 5}
    (tmp_path / "train.ipynb").write_text(json.dumps(notebook, indent=1))
    result = corpus.measure_package("nb", tmp_path, Options())
    assert (result.files, result.notebooks, result.found, result.fixed, result.nb_found, result.nb_fixed) == (
        1, 1, 2, 2, 2, 2)
    assert (result.unreported, result.broken, result.second_run_changed, result.amp900_files) == (0, 0, 0, 0)
