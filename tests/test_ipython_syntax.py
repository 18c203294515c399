"""Notebook cells read as IPython reads them (`ampfix.io.ipython_syntax`), with IPython's own
transformer as the oracle: the lines ampfix masks are exactly the lines IPython turns into calls,
and a masked cell parses exactly when IPython's Python does. IPython is a test dependency only."""

from __future__ import annotations

import ast

import pytest
from ipython_oracle import SHELL, ipython_changed

from ampfix.core.locations import source_lines
from ampfix.io.ipython_syntax import LINE_MAGICS, masked_cell

CELLS = [
    # Colab's install cell (diffusers' sd3_dreambooth_lora_16gb.ipynb): a shell escape continued by backslashes.
    "!pip install -q -U \\\n    transformers \\\n    accelerate\nimport torch\n",
    "!!ls\nx = 1\n",
    "%matplotlib inline\nimport torch\n",
    "%time y = torch.cuda.amp.autocast()\nz = 2\n",
    "x = !ls\nprint(x)\n",
    "a, b = %sx ls\n",
    "files = !ls *.py \\\n    | head\nprint(files)\n",
    "obj?\n",
    "??obj\n",
    "torch.cuda.amp.autocast?\nx = 1\n",
    "x = torch.cuda.amp?\n",
    "np.*load*?\ny = 1\n",
    "%timeit?\nq = 1\n",
    "f(x)?\n",
    "if True:\n    !ls\n    x = %pwd\n    y = x\n",
    "for i in range(3):\n    %time f(i)\n",
    "/f 1 2\nimport torch\n",
    ",f a b\n",
    ";f a b\n",
    "%%bash\nls\n  echo indented\n",
    "%%writefile train.py\nimport torch\nwith torch.cuda.amp.autocast():\n    pass\n",
    "%%time\nimport torch\nwith torch.cuda.amp.autocast():\n    pass\n",
    "%%capture out\n!pip install x\nimport torch\n",
    "%%timeit -n 1\nx = !ls\n",
    "\n\n%%bash\nls\n",
    "pip install x\n",
    "cd dir\n",
    "conda install -y pytorch\n",
    "import torch\npip install x\n",  # automagic is for one-line cells: IPython rejects this cell too
    "x = (1,\n  !2)\n",
    "d = {'a': 1}\nd['a'] == 1?\n",
    "if x:\n    pass\n!echo it's\nimport torch\n",
    "with torch.cuda.amp.autocast():\n    y = f(x)\n%whos\n",
    "def f():\n    !echo in a function\n    return torch.cuda.amp.GradScaler()\n",
    "rb = 1\nbr = rb\n!echo ok\n",
]


@pytest.mark.parametrize("cell", CELLS)
def test_ampfix_masks_exactly_what_ipython_transforms(cell: str):
    try:
        ast.parse(cell)
        pytest.fail("every shape here is IPython syntax, not Python")
    except SyntaxError:
        pass
    oracle = ipython_changed(cell)
    assert oracle is not None
    changed, parses = oracle
    result = masked_cell(cell)
    if isinstance(result, SyntaxError):
        assert not parses, f"IPython reads it as Python: {SHELL.transform_cell(cell)!r}"
        return
    text, masked = result
    assert parses, f"IPython cannot run it: {SHELL.transform_cell(cell)!r}"
    assert {i for i in masked if source_lines(cell)[i].strip()} == changed
    assert len(source_lines(text)) == len(source_lines(cell))
    for i, (old, new) in enumerate(zip(source_lines(cell), source_lines(text))):
        assert (old == new) == (i not in masked)


# Near misses: Python that looks like IPython's syntax.
PYTHON = [
    "import torch\nwith torch.cuda.amp.autocast():\n    y = model(x)\n",
    "pip = 3\n",
    "s = '!not a command'\nt = \"\"\"\n!inside a string\n\"\"\"\n",
    "print('a')  # what?\n",
    "x != 3 and y\n",
    "x = 1 ;ls\n",
    "cd\n",
]


@pytest.mark.parametrize("cell", PYTHON)
def test_a_cell_that_parses_is_left_as_it_is(cell: str):
    assert masked_cell(cell) == (cell, [])


def test_the_colab_install_cell_masked_line_by_line():
    cell = "!pip install -q -U \\\n    transformers \\\n    accelerate\nimport torch\n"
    assert masked_cell(cell) == ("_" * 20 + "\n" + "_" * 14 + "\n" + "_" * 10 + "\nimport torch\n", [0, 1, 2])


def test_an_escape_in_a_block_is_masked_at_the_block_s_indentation():
    cell = "if True:\n    !ls \\\n  -la\n    x = 1\n"
    assert masked_cell(cell) == ("if True:\n    _____\n    ___\n    x = 1\n", [1, 2])


def test_a_python_cell_magic_keeps_its_body_as_python():
    cell = "%%time\nimport torch\nx = !ls\n"
    assert masked_cell(cell) == ("______\nimport torch\n_______\n", [0, 2])


def test_a_cell_that_is_not_python_even_for_ipython_gives_its_syntax_error():
    result = masked_cell("import torch\nthis line is prose\n")
    assert isinstance(result, SyntaxError) and result.lineno == 2


def test_the_line_magics_are_ipython_s():
    assert LINE_MAGICS == set(SHELL.magics_manager.lsmagic()["line"])
