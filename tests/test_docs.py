"""The documentation's links hold: every relative link in README.md and docs/*.md names a file that exists,
and every `#anchor` into one of our Markdown pages names one of its headings, slugged as GitHub does.
README.md stays short (the depth lives in docs/)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 400

FENCE = re.compile(r"^ {0,3}(```|~~~)")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (a `# comment` in a code block is no heading, `[x](y)` no link)."""
    lines, fence = [], None
    for line in text.splitlines():
        opened = FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(1)
        elif fence is not None and line.strip().startswith(fence):
            fence = None
        elif fence is None:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's heading anchor (github-slugger): the rendered text, lower-cased, punctuation dropped
    (letters, digits, `_` and `-` kept), each space a hyphen."""
    text = CODE_SPAN.sub(lambda m: m.group(2).strip(), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link renders as its text
    text = text.replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(page.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> list[str]:
    targets = []
    for line in prose_lines(page.read_text(encoding="utf-8")):
        targets += LINK.findall(CODE_SPAN.sub("", line))
    return targets


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in links(page):
        if SCHEME.match(target):
            continue  # http(s), mailto: not ours to check
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.name}")
    return broken


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page: Path):
    assert broken_links(page) == []


def test_the_checker_sees_the_readmes_links_to_every_docs_page():
    docs = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert {f"docs/{name}" for name in docs} <= set(links(ROOT / "README.md"))


def test_the_readme_is_at_most_400_lines():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, lines


def test_slugs_follow_githubs_rules():
    assert slug("Device targets: `--device cuda|cpu|auto`, `--device-expr EXPR`") == (
        "device-targets---device-cudacpuauto---device-expr-expr")
    assert slug("The runner's overhead") == "the-runners-overhead"
    assert slug("Configuration: `[tool.ampfix]`") == "configuration-toolampfix"
    assert slug("`custom_fwd` and **AMP003**") == "custom_fwd-and-amp003"


def test_the_checker_finds_a_broken_link_and_a_broken_anchor(tmp_path: Path):
    (tmp_path / "other.md").write_text("# Other page\n\n## A section\n\n## A section\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n"
        "[fine](other.md#a-section) [second](other.md#a-section-1) [self](#page) [web](https://example.com/x)\n"
        "[gone](missing.md) [no heading](other.md#nowhere) [no self](#nowhere)\n"
        "`[in code](missing-too.md)`\n\n"
        "```\n[in a block](missing-three.md)\n# not a heading\n```\n",
        encoding="utf-8")
    assert broken_links(page) == ["missing.md: no such file", "other.md#nowhere: no heading #nowhere in other.md",
                                  "#nowhere: no heading #nowhere in page.md"]


def test_the_api_pages_example_prints_what_the_page_says(capsys):
    """docs/api.md's Python example, run; its stdout is the page's text block that follows it."""
    blocks = re.findall(r"```(python|text)\n(.*?)```", (ROOT / "docs" / "api.md").read_text(encoding="utf-8"), re.S)
    assert [kind for kind, _ in blocks[:2]] == ["python", "text"]
    exec(compile(blocks[0][1], "docs/api.md", "exec"), {})
    assert capsys.readouterr().out == blocks[1][1]


def test_the_readmes_use_links_the_api_page():
    use = (ROOT / "README.md").read_text(encoding="utf-8").split("## Use", 1)[1].split("\n## ", 1)[0]
    assert "(docs/api.md)" in use


def test_ci_runs_exactly_the_readmes_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = next(line for line in readme.splitlines() if line.startswith("python3 -m venv .venv && ") and "pytest" in line)
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").rstrip("\n").splitlines()[-1]
    assert ci == command
