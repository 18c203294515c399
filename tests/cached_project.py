"""A copy of the `reexported_names` fixture project for the tests of ampfix's caches between runs: its files dated
far from the racy window (so their answers are kept), a `.git` marking its root, the working directory there, and
ampfix's cache in a folder of the test's own."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "projects" / "reexported_names"
PAST = time.time() - 1000  # far from the racy window


def copied_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "project"
    shutil.copytree(FIXTURE, root)
    (root / ".git").mkdir()
    for path in root.rglob("*.py"):
        os.utime(path, (PAST, PAST))
    monkeypatch.chdir(root)
    monkeypatch.setenv("AMPFIX_CACHE_DIR", str(tmp_path / "cache"))
    return root
