"""ampfix as a flake8 plugin (`flake8 --select AMP`): the findings `ampfix check` reports, at the same lines and
columns, with the same codes, from the same `[tool.ampfix]` (the nearest one above each file).

flake8 hands over one file at a time; the plugin runs it through the path `ampfix check` takes
(`ampfix.io.files.process_data`: the codec, the file's configuration and declared torch, the engine). It never
imports torch, and LibCST only as `ampfix check` does (never: checking needs no rewrite).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from pathlib import Path

from ampfix import __version__

# flake8's names for standard input: the text then comes from `lines`, not from a file.
_STDIN = frozenset({"stdin", "-"})


class Plugin:
    name = "ampfix"
    version = __version__

    def __init__(self, tree: ast.AST, filename: str, lines: Sequence[str]) -> None:
        # `tree` is how flake8 knows this for an AST plugin (run once per file, after it parsed); the engine
        # parses the file itself, as `ampfix check` does.
        self.filename = filename
        self.lines = lines

    def run(self) -> Iterator[tuple[int, int, str, type]]:
        from ampfix.io.config import folder_exclusions, folder_settings
        from ampfix.io.files import process_data, shown_message

        path = Path(self.filename)
        if self.filename not in _STDIN and path.is_file():
            data = path.read_bytes()  # the file's own bytes, as `ampfix check` reads them (flake8 decoded them)
        else:
            data, path = "".join(self.lines).encode("utf-8"), Path.cwd() / "-"
        if folder_exclusions(path.parent).forced_out(path):  # flake8 names every file: as `--force-exclude`
            return
        result = process_data(path, data, folder_settings(path.parent).options, "check")[0]
        for finding in result.findings:
            # flake8 takes a 0-based column offset and prints it plus one; ampfix's columns are 1-based.
            yield finding.line, finding.col - 1, f"{finding.code} {shown_message(finding)}", type(self)

