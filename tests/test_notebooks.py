"""Notebooks: the fixture notebooks under fixtures/notebooks/ (`<case>.in.ipynb`, its expected
`<case>.out.ipynb` when it changes, `<case>.findings` with one `CELL LINE CODE fixed|left` per line),
and the command line on real notebooks in temporary folders."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from ampfix.cli.app import app
from ampfix.io.files import FileResult, process_data, process_file
from ampfix.io.ipython_syntax import masked_cell
from ampfix.core.options import Options

NOTEBOOKS = Path(__file__).resolve().parent.parent / "fixtures" / "notebooks"
CASES = sorted(NOTEBOOKS.glob("*.in.ipynb"))
IDS = [path.name[: -len(".in.ipynb")] for path in CASES]
SCHEMA = json.loads((Path(__file__).parent / "data" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))


def process_notebook(text: str, options: Options) -> tuple[str, FileResult]:
    """A notebook's text through the files' processing path, written nowhere: its new text, and the result."""
    result, new_data = process_data(Path("notebook.ipynb"), text.encode("utf-8"), options, "diff")
    return new_data.decode("utf-8"), result


def _expected(case: Path) -> Path:
    out = case.with_name(case.name.replace(".in.", ".out."))
    return out if out.exists() else case


def _findings(result) -> list[tuple[int, int, str, bool]]:
    return sorted((f.cell, f.line, f.code, f.fixed) for f in result.findings)


def _expected_findings(case: Path) -> list[tuple[int, int, str, bool]]:
    text = case.with_name(case.name.replace(".in.ipynb", ".findings")).read_text(encoding="utf-8")
    rows = [re.fullmatch(r"(\d+) (\d+) (AMP\d{3}) (fixed|left)", line) for line in text.splitlines()]
    return sorted((int(m[1]), int(m[2]), m[3], m[4] == "fixed") for m in rows if m)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_notebook_fixture(case: Path):
    text = case.read_bytes().decode("utf-8")
    expected = _expected(case).read_bytes().decode("utf-8")
    new_text, result = process_notebook(text, Options())
    assert new_text == expected
    assert _findings(result) == _expected_findings(case)
    again, _ = process_notebook(expected, Options())
    assert again == expected  # a second run changes nothing


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_only_code_cell_sources_differ(case: Path):
    """Outside the sources of code cells, the expected notebook is the input (a check on the
    expected files themselves, written by hand)."""
    def without_code(notebook: dict) -> dict:
        for cell in notebook["cells"]:
            if cell["cell_type"] == "code":
                cell["source"] = None
        return notebook

    before, after = json.loads(case.read_text("utf-8")), json.loads(_expected(case).read_text("utf-8"))
    assert without_code(before) == without_code(after)
    assert (_expected(case) == case) == (not _expected_findings(case) or not any(
        fixed for *_, fixed in _expected_findings(case)))


@pytest.mark.parametrize("line", ["%time x = 1", "!pip install torch", "files = !ls", "?torch.cuda", "torch.cuda?",
                                  "a, b = %sx ls", "obj??"])
def test_ipython_lines_are_masked_to_the_same_length_and_indentation(line: str):
    masked, indices = masked_cell(f"for i in range(2):\n    {line}\n")
    assert indices == [1]
    assert masked == f"for i in range(2):\n    {'_' * len(line)}\n"


def test_a_cell_that_parses_is_not_masked_and_a_cell_magic_masks_every_line():
    assert masked_cell("x = a % b\n") == ("x = a % b\n", [])
    # A cell magic that is not Python: every line, its indentation too (no mask may start a block).
    assert masked_cell("%%bash\n  echo hi\n") == ("______\n_______\n", [0, 1])


def test_a_cell_that_does_not_parse_even_masked_is_reported():
    error = masked_cell("%time x\ndef f(:\n")
    assert isinstance(error, SyntaxError) and error.lineno == 2


def _notebook(*sources: str, language: str = "python") -> str:
    cells = [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
              "source": source.splitlines(keepends=True)} for source in sources]
    notebook = {"cells": cells, "metadata": {"kernelspec": {"language": language, "name": "k"}},
                "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def test_a_notebook_in_another_language_is_not_read_as_python():
    text = _notebook("library(torch.cuda.amp)")
    assert process_notebook(text, Options())[1].findings == ()


def test_a_file_that_is_no_notebook_is_reported_and_left():
    new_text, result = process_notebook('{"cells": [1, ', Options())
    assert new_text == '{"cells": [1, ' and result.error and result.error.startswith("not a readable notebook")


def test_skip_file_in_any_cell_skips_the_notebook():
    text = _notebook("import torch\n", "# ampfix: skip-file\nx = torch.cuda.amp.GradScaler()")
    new_text, result = process_notebook(text, Options())
    assert (new_text, result.findings) == (text, ())


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


OLD_CELLS = ("import torch\nfrom torch.cuda.amp import GradScaler", "# scale\nscaler = GradScaler(enabled=False)")


def test_folders_find_notebooks_and_locate_findings_by_cell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nb.ipynb").write_text(_notebook(*OLD_CELLS), encoding="utf-8")
    (tmp_path / "mod.py").write_text("import torch\nx = torch.cuda.amp.GradScaler()\n")

    text = invoke("check", ".")
    assert text.exit_code == 1
    assert text.stdout.splitlines()[:-2] == [
        'mod.py:2:5: AMP002 [*] `torch.cuda.amp.GradScaler(...)` -> `torch.amp.GradScaler(...)` with device "cuda"',
        "nb.ipynb:cell 1:2:1: AMP010 [*] `from torch.cuda.amp import GradScaler` -> `from torch.amp import GradScaler`",
        'nb.ipynb:cell 2:2:10: AMP002 [*] `torch.cuda.amp.GradScaler(...)` -> `torch.amp.GradScaler(...)` with '
        'device "cuda"',
    ]
    assert text.stdout.splitlines()[-2] == "target torch: the newest (none declared); the fixes need torch >= 2.3 (AMP002)"
    rows = json.loads(invoke("check", "--output-format", "json", "nb.ipynb").stdout)
    assert [(row["cell"], row["line"], row["col"]) for row in rows] == [(1, 2, 1), (2, 2, 10)]
    # CI annotations point at the notebook file's line holding the cell's line.
    lines = (tmp_path / "nb.ipynb").read_text().splitlines()
    held = [n for n, line in enumerate(lines, 1) if "GradScaler" in line]
    github = invoke("check", "--output-format", "github", "nb.ipynb").stdout.splitlines()
    assert [re.search(r",line=(\d+),", row)[1] for row in github] == [str(n) for n in held]
    assert github[1].endswith("::cell 2:2:10: `torch.cuda.amp.GradScaler(...)` -> `torch.amp.GradScaler(...)` "
                              'with device "cuda"')
    log = json.loads(invoke("check", "--output-format", "sarif", "nb.ipynb").stdout)
    jsonschema.validate(log, SCHEMA, cls=jsonschema.Draft7Validator)
    result = log["runs"][0]["results"][1]
    assert result["locations"][0]["physicalLocation"]["region"] == {"startLine": held[1]}
    assert (result["properties"]["cell"], result["properties"]["cellLine"], result["properties"]["cellColumn"]) == (2, 2, 10)


def test_rewrite_writes_only_the_notebook_that_changes(tmp_path: Path):
    old, clean = tmp_path / "old.ipynb", tmp_path / "clean.ipynb"
    old.write_text(_notebook(*OLD_CELLS), encoding="utf-8")
    clean.write_text(_notebook("import torch\nuse_amp = True\n%time torch.amp"), encoding="utf-8")
    os.utime(clean, ns=(1, 1))

    diff = invoke("rewrite", "--diff", str(tmp_path))
    assert diff.exit_code == 1 and "+    \"from torch.amp import GradScaler\"\n" in diff.stdout
    rewritten = invoke("rewrite", str(tmp_path))
    assert rewritten.exit_code == 1
    assert json.loads(old.read_text())["cells"][1]["source"] == ["# scale\n", 'scaler = GradScaler("cuda", enabled=False)']
    assert old.read_text() == _notebook("import torch\nfrom torch.amp import GradScaler",
                                        '# scale\nscaler = GradScaler("cuda", enabled=False)')
    assert clean.stat().st_mtime_ns == 1  # never written
    assert invoke("rewrite", str(tmp_path)).exit_code == 0


def test_a_bad_cell_that_cannot_hold_a_use_is_passed_over(tmp_path: Path):
    path = tmp_path / "nb.ipynb"
    path.write_text(_notebook("def f(:\n    pass", *OLD_CELLS), encoding="utf-8")
    result = invoke("rewrite", str(path))
    assert result.exit_code == 1  # rewritten, nothing left, no error
    assert "AMP901" not in result.stdout
    assert path.read_text() == _notebook("def f(:\n    pass", "import torch\nfrom torch.amp import GradScaler",
                                         '# scale\nscaler = GradScaler("cuda", enabled=False)')
    assert invoke("check", str(path)).exit_code == 0


def test_a_bad_cell_that_may_hold_a_use_is_a_finding_and_the_other_cells_are_rewritten(tmp_path: Path):
    path = tmp_path / "nb.ipynb"
    pseudo = "for batch in loader:\n    with torch.cuda.amp.autocast(): forward pass here"
    path.write_text(_notebook(pseudo, *OLD_CELLS), encoding="utf-8")
    result = invoke("rewrite", str(path))
    assert result.exit_code == 1
    assert result.stdout.splitlines()[0] == (
        f"{path}:cell 1:2:45: AMP901 left: cannot parse the cell: invalid syntax; its deprecated uses are left "
        "as they are")
    assert "could not be processed" not in result.stdout
    assert path.read_text() == _notebook(pseudo, "import torch\nfrom torch.amp import GradScaler",
                                         '# scale\nscaler = GradScaler("cuda", enabled=False)')
    assert invoke("check", str(path)).exit_code == 1  # the finding stays: it is not an error (2)
    accepted = pseudo.replace("here", "here  # noqa: AMP901")
    path.write_text(_notebook(accepted, "import torch"), encoding="utf-8")
    assert invoke("check", str(path)).exit_code == 0


def test_stdin_named_as_a_notebook(tmp_path: Path):
    result = CliRunner().invoke(app, ["rewrite", "-", "--stdin-filename", "nb.ipynb"], input=_notebook(*OLD_CELLS))
    assert result.stdout.startswith(_notebook("import torch\nfrom torch.amp import GradScaler",
                                              '# scale\nscaler = GradScaler("cuda", enabled=False)'))


def test_the_diff_of_a_notebook_applies_with_git_apply(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """With --unsafe-fixes `import functools` joins the first cell, and the import it adds is a new
    element of that cell's source."""
    import subprocess

    monkeypatch.chdir(tmp_path)
    cells = ("import torch\nimport os", "Scaler = torch.cuda.amp.GradScaler\ns = Scaler()", "%%time\nx = 1")
    Path("n.ipynb").write_text(_notebook(*cells), encoding="utf-8")
    subprocess.run(["git", "init", "-q"], check=True)
    diff = invoke("rewrite", "--unsafe-fixes", "--diff", "n.ipynb")
    assert diff.exit_code == 1
    Path("d.patch").write_text(diff.stdout)
    subprocess.run(["git", "apply", "d.patch"], check=True)
    assert Path("n.ipynb").read_text() == _notebook(
        "import torch\nimport os\nimport functools",
        'Scaler = functools.partial(torch.amp.GradScaler, "cuda")\ns = Scaler()', "%%time\nx = 1")


def test_a_cell_magic_with_a_python_body_masks_its_first_line_only():
    assert masked_cell("%%time\nwith f():\n    %time g()\n") == ("______\nwith f():\n    _________\n", [0, 2])


def test_a_notebook_that_cannot_be_written_is_left_and_reported_as_not_fixed(tmp_path: Path):
    path = tmp_path / "nb.ipynb"
    path.write_text(_notebook(*OLD_CELLS), encoding="utf-8")
    os.link(path, tmp_path / "other.ipynb")  # a hard link: the rewrite would cut the names apart
    before = path.read_bytes()
    rows = json.loads(invoke("rewrite", "--output-format", "json", str(path)).stdout)
    assert path.read_bytes() == before
    assert [(row.get("cell"), row["code"], row["fixed"]) for row in rows] == [
        (1, "AMP010", False), (2, "AMP002", False), (None, "AMP903", False)]


def test_a_notebook_whose_only_apex_use_spells_no_amp_is_read(tmp_path: Path):
    # `apex.parallel` holds no `amp`: the notebook's bytes are kept for apex itself, as a .py file's are
    path = tmp_path / "nb.ipynb"
    path.write_text(_notebook("import apex\nmodel = apex.parallel.DistributedDataParallel(model)"), encoding="utf-8")
    assert _findings(process_file(path, Options())) == [(1, 2, "AMP110", False)]


def test_a_cell_the_rewrite_empties_is_written_as_nbformat_writes_an_empty_one():
    """The optional apex import in a cell of its own goes whole: its source becomes `[]`, not a list holding the
    indentation of the lines that were there."""
    setup = "import torch\n"
    optional = "try:\n    from apex import amp\nexcept ImportError:\n    amp = None\n"
    train = ("def fit(model, optimizer, batches, loss_fn):\n"
             "    model, optimizer = amp.initialize(model, optimizer)\n"
             "    for inputs, targets in batches:\n"
             "        loss = loss_fn(model(inputs), targets)\n"
             "        with amp.scale_loss(loss, optimizer) as scaled:\n"
             "            scaled.backward()\n"
             "        optimizer.step()\n")
    rewritten = ("def fit(model, optimizer, batches, loss_fn):\n"
                 "    scaler = torch.amp.GradScaler(\"cuda\")\n"
                 "    for inputs, targets in batches:\n"
                 "        with torch.autocast(\"cuda\", dtype=torch.float16):\n"
                 "            loss = loss_fn(model(inputs), targets)\n"
                 "        scaler.scale(loss).backward()\n"
                 "        scaler.step(optimizer)\n"
                 "        scaler.update()\n")
    new_text, _ = process_notebook(_notebook(setup, optional, train), Options())
    assert '"source": []' in new_text
    assert new_text == _notebook(setup, "", rewritten)
