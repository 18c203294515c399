"""Inline suppressions: what a comment covers, and what it costs. The rewrites themselves are the
fixture pairs under fixtures/suppress/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from typer.testing import CliRunner

from ampfix.cli.app import app
from ampfix.engine import Options, fix_source
from ampfix.syntax.suppressions import NONE, scan


def test_codes_prefixes_and_bare_directives():
    found = scan(
        "a = 1  # noqa: AMP001, AMP01\n"
        "b = 2  # NOQA:amp002\n"
        "c = 3  # noqa\n"
        "d = 4  # ampfix: ignore[AMP003,AMP004]\n"
        "e = 5  # ampfix: ignore\n"
        "f = 6  # a plain comment\n"
    )
    assert found.lines == {1: ("AMP001", "AMP01"), 2: ("AMP002",), 3: (), 4: ("AMP003", "AMP004"), 5: ()}
    assert found.covers(1, "AMP001") and found.covers(1, "AMP010") and not found.covers(1, "AMP002")
    assert found.covers(3, "AMP011") and found.covers(5, "AMP900")
    assert not found.covers(6, "AMP001") and not found.skip_file


def test_a_directive_inside_a_string_is_no_comment():
    assert scan('x = "# noqa"\ny = """\n# ampfix: skip-file\n"""\n') is NONE


def test_a_comment_covers_every_line_of_its_statement_and_no_other():
    source = "x = f(\n    1,  # noqa: AMP002\n    2,\n)\ny = 1 + \\\n    2  # noqa\nz = 3\n"
    found = scan(source)
    assert found.lines == {1: ("AMP002",), 2: ("AMP002",), 3: ("AMP002",), 4: ("AMP002",), 5: (), 6: ()}


def test_lines_are_numbered_as_ast_numbers_them_whatever_the_line_endings():
    for newline in ("\n", "\r\n", "\r"):
        found = scan(newline.join(["x = 1", "# noqa: AMP100", "y = 2  # noqa: AMP101", ""]))
        assert found.lines == {2: ("AMP100",), 3: ("AMP101",)}, repr(newline)


def test_the_one_tokenizer_numbers_lines_as_ast_does_in_mixed_line_endings():
    """`locations.tokens` is what the suppression scanner and the apex rewrite's comment finder both read."""
    import ast
    import tokenize

    from ampfix.core.locations import tokens

    source = "a = 1\rb = 2  # two\r\nc = 3  # three\nd = 4\r# five\n"
    comments = {t.start[0]: t.string for t in tokens(source) if t.type == tokenize.COMMENT}
    assert comments == {2: "# two", 3: "# three", 5: "# five"}
    assert [statement.lineno for statement in ast.parse(source).body] == [1, 2, 3, 4]


def test_a_directive_in_a_cr_only_file_keeps_its_line_unchanged():
    source = "import torch\rx = torch.cuda.amp.GradScaler()  # noqa: AMP002\ry = torch.cuda.amp.GradScaler()\r"
    result = fix_source(source, Options())
    assert result.new_source == (
        "import torch\rx = torch.cuda.amp.GradScaler()  # noqa: AMP002\ry = torch.amp.GradScaler(\"cuda\")\r"
    )


def test_skip_file_only_on_a_line_of_its_own():
    assert scan("import torch\n  # ampfix: skip-file\n").skip_file
    assert not scan("import torch  # ampfix: skip-file\n").skip_file


def test_text_without_a_directive_is_not_tokenized(monkeypatch):
    import tokenize

    def fail(*args, **kwargs):
        raise AssertionError("tokenized")

    monkeypatch.setattr(tokenize, "generate_tokens", fail)
    assert scan("import torch\nwith torch.cuda.amp.autocast():  # why\n    pass\n") is NONE


def test_text_that_does_not_tokenize_has_no_directives():
    assert scan("x = (  # noqa\n") is NONE


OLD = "import torch\nscaler = torch.cuda.amp.GradScaler(enabled=False)\n"


def test_rewrite_of_a_folder_leaves_suppressed_lines_and_skipped_files_byte_for_byte(tmp_path: Path):
    skipped = tmp_path / "skipped.py"
    skipped.write_bytes(b"# ampfix: skip-file\r\n" + OLD.replace("\n", "\r\n").encode())
    noqa = tmp_path / "noqa.py"
    noqa.write_text(OLD.replace("False)", "False)  # noqa: AMP002") + OLD.splitlines()[1].replace("scaler", "other") + "\n")
    before = skipped.read_bytes()

    checked = CliRunner().invoke(app, ["check", str(tmp_path)])
    assert checked.exit_code == 1
    assert checked.stdout.splitlines()[:-1] == [
        f"{noqa}:3:9: AMP002 [*] `torch.cuda.amp.GradScaler(...)` -> `torch.amp.GradScaler(...)` with device \"cuda\"",
        "target torch: the newest (none declared); the fixes need torch >= 2.3 (AMP002)",
    ]

    rewritten = CliRunner().invoke(app, ["rewrite", str(tmp_path)])
    assert rewritten.exit_code == 1  # a file changed: the pre-commit contract
    assert skipped.read_bytes() == before
    assert noqa.read_text() == (
        "import torch\n"
        "scaler = torch.cuda.amp.GradScaler(enabled=False)  # noqa: AMP002\n"
        'other = torch.amp.GradScaler("cuda", enabled=False)\n'
    )
    again = CliRunner().invoke(app, ["rewrite", str(tmp_path)])
    assert (again.exit_code, again.stdout) == (0, "rewrote 0 files (0 fixes); 0 findings left.\n")


PROBE = """
import sys
sys.argv = ["ampfix", "check", {path!r}]
from ampfix.__main__ import main
try:
    main()
except SystemExit:
    pass
print("LOADED", "ampfix.syntax.suppressions" in sys.modules)
"""


def test_the_hook_path_on_a_file_without_amp_never_loads_the_suppression_scanner(tmp_path: Path):
    clean = tmp_path / "clean.py"
    clean.write_text("import os  # noqa: F401\n")
    done = subprocess.run([sys.executable, "-c", PROBE.format(path=str(clean))], capture_output=True, text=True,
                          check=True)
    assert done.stdout.splitlines()[-1] == "LOADED False"
    clean.write_text("import torch  # noqa: F401\nx = torch.cuda.amp\n")  # a candidate: scanned
    done = subprocess.run([sys.executable, "-c", PROBE.format(path=str(clean))], capture_output=True, text=True,
                          check=True)
    assert done.stdout.splitlines()[-1] == "LOADED True"


def test_a_file_whose_noqa_name_only_other_tools_codes_is_not_tokenized():
    assert scan("import os  # noqa: F401\nx = 1  # NOQA:E501,W291\n") is NONE
    # `A` and `AM` are prefixes of ampfix's codes; a bare noqa covers every code; a `#` in a string before the
    # comment does not hide it
    assert scan("x = 1  # noqa: F401, A\n").covers(1, "AMP001")
    assert scan("x = 1  # noqa: AM\n").covers(1, "AMP100")
    assert scan("x = 1  # noqa\n").covers(1, "AMP001")
    assert scan("x = '# noqa: F401'  # noqa: AMP001\n").covers(1, "AMP001")
    assert scan("x = 1  # noqa:\ny = 2\n").covers(1, "AMP001")  # no codes after the colon: every code


def test_every_code_starts_with_the_prefix_the_suppression_gate_assumes():
    from ampfix.cli.report import ERROR_TITLES
    from ampfix.families import ALL_RULES
    from ampfix.syntax.suppressions import OWN_PREFIX

    codes = {rule.code for rule in ALL_RULES} | set(ERROR_TITLES)
    assert len(codes) > 20 and all(code.startswith(OWN_PREFIX) for code in codes)


def test_comments_are_tokenized_only_when_a_finding_asks(monkeypatch):
    import ampfix.syntax.suppressions as suppressions
    from ampfix.engine import check_source

    calls = []
    real_tokens = suppressions.tokens
    monkeypatch.setattr(suppressions, "tokens", lambda source: calls.append(source) or real_tokens(source))
    # kept by the pre-filter (it names apex), a bare noqa, nothing to report: never tokenized
    assert check_source("import apex_helpers  # noqa\nx = 1\n").findings == ()
    assert calls == []
    # a use on the noqa's line: tokenized once, and the use is suppressed as before
    source = "import os  # noqa: F401\nimport torch\nx = torch.cuda.amp.autocast()  # noqa: AMP001\n"
    assert check_source(source).findings == ()
    assert calls == ["x = torch.cuda.amp.autocast()  # noqa: AMP001\n"]  # the statement of the line asked about
    # a bare noqa elsewhere: the statement asked about has none, nothing is tokenized
    calls.clear()
    far = "import os  # noqa\nimport torch\n\nx = torch.cuda.amp.autocast()\n"
    assert [f.code for f in check_source(far).findings] == ["AMP001"]
    assert calls == []
    assert suppressions.scan_when_asked(source).lines == {3: ("AMP001",), 1: ("F401",)}


TRICKY = [
    "import torch\nx = f(\n    # noqa: AMP001\n    torch.cuda.amp.autocast())\ny = torch.cuda.amp.autocast()\n",
    "import torch\n@torch.cuda.amp.autocast()  # noqa\ndef f():\n    return torch.cuda.amp.autocast()\n",
    "import torch\nif x: y = torch.cuda.amp.autocast()  # noqa: AMP001\nz = 1\n",
    "import torch\na = 1; b = torch.cuda.amp.autocast()  # noqa: AMP0\nc = 2\n",
    "import torch\ntry:\n    pass\nexcept (ValueError,  # noqa: AMP001\n        KeyError):\n    s = torch.cuda.amp.autocast()\n"
    "else:  # noqa\n    t = 1\nfinally:\n    u = 2  # noqa: E501\n",
    "import torch\nmatch x:\n    case 1:  # noqa: AMP001\n        y = torch.cuda.amp.autocast()\n    case _:\n"
    "        z = torch.cuda.amp.autocast()  # noqa: AMP001\n",
    "import torch\nx = torch.cuda.amp \\\n    .autocast()  # noqa: AMP001\ny = 2\n",
    "import torch\ns = '''\n# noqa: AMP001\n'''\nx = torch.cuda.amp.autocast()  # noqa\n",
    "import torch\nwith torch.cuda.amp.autocast(\n        enabled=True):  # noqa: AMP001\n    pass\n",
    "import torch\nclass A:\n    # noqa: AMP001\n    x = torch.cuda.amp.autocast()\n    def f(self):  # noqa\n"
    "        return 1\n",
    "import torch\r\nx = (1,  # noqa: AMP001\r\n     2)\r\ny = torch.cuda.amp.autocast()\r\n",
    "import torch\rx = (1,  # noqa: AMP001\r     2)\ry = torch.cuda.amp.autocast()  # noqa\r",
    "import torch\nasync def f():\n    async with g() as h:  # noqa\n        for i in j:\n            x = 1  # noqa: AMP\n"
    "        else:\n            y = 2\n",
]


@pytest.mark.parametrize("source", TRICKY)
def test_a_statement_read_alone_finds_what_the_whole_file_finds(source: str):
    """Read statement by statement (`Suppressions.within`), every line is covered exactly as tokenizing the whole
    file covers it: comments inside brackets, decorators, one-line suites, `;`, handlers, cases, continuations,
    a `# noqa` inside a string, multi-line headers, class bodies, CRLF and CR line ends."""
    import ast

    from ampfix.syntax.suppressions import scan, scan_when_asked

    whole = scan(source)
    assert whole.lines  # each source has a directive that counts
    count = len(source.splitlines()) + 1
    by_statement = scan_when_asked(source).within(ast.parse(source))
    codes = ("AMP001", "AMP002", "AMP100", "AMP901")  # what a finding asks of (other tools' codes are not asked)
    assert [[by_statement.covers(n, code) for code in codes] for n in range(1, count)] == \
        [[whole.covers(n, code) for code in codes] for n in range(1, count)]
