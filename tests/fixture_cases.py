"""Discovery of the hand-written fixture pairs under ``fixtures/`` (shared by several tests).

A case is ``fixtures/<area>/<name>.in.py`` with its expected output ``<name>.out.py`` and optionally
``<name>.findings`` (one expected finding per line: ``LINE CODE fixed|left``, LINE 1-based in the input).
A case without ``.out.py`` must come out unchanged, byte for byte.
``fixtures/run/`` and ``fixtures/demo/`` belong to other tests and are not cases here.

The options a case is fixed with are its area's (``AREA_OPTIONS``; an area not listed there: the defaults),
updated by its own (``CASE_OPTIONS``, for a case that shows what one option changes next to its area's cases).

A case whose first line is exactly ``# fixture: not-runnable (<reason>)`` is not executed by the torch oracle
(tests/test_equivalence.py).
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
EXCLUDED_AREAS = frozenset({"run", "demo"})
# The areas fixed with other than the default options: area -> keyword arguments of ampfix's Options.
# The expression areas define the names their expression uses, so that the torch oracle can run them.
AREA_OPTIONS: dict[str, dict[str, object]] = {
    "unsafe_fixes": {"unsafe_fixes": True},
    "device_cpu": {"device": "cpu"},
    "device_auto": {"device": "auto"},
    "device_expr": {"device_expr": "cfg.device_type"},
}
# The cases fixed with other options than their area's: case id -> keyword arguments of ampfix's Options.
CASE_OPTIONS: dict[str, dict[str, object]] = {
    "guards/nemo_fallback_old_target": {"target_torch": (2, 2)},
    "guards/outdated_branches": {"target_torch": (2, 4)},
    "guards/outdated_espnet_trainer": {"target_torch": (2, 0)},
    "guards/outdated_speechbrain": {"target_torch": (2, 0)},
    "autocast/explicit_defaults_option": {"explicit_autocast_defaults": True},
    # the apex opt level a project declares it runs (`--apex-opt-level`), where its code does not say
    "apex/declared_opt_level_o1": {"apex_opt_level": "O1"},
    "unsafe_fixes/apex_declared_opt_level_o2": {"apex_opt_level": "O2"},
    # a project that declares black or ruff's formatter (`ampfix.io.formatter`)
    "format/formatter_split": {"formatted": True},
}
# The areas whose CUDA code moves to the CPU when run on this machine (the oracle's expectation differs).
CPU_TARGET_AREAS = {"device_cpu": "cpu", "device_auto": "auto"}

_NOT_RUNNABLE = re.compile(r"# fixture: not-runnable \((?P<reason>.+)\)")
_FINDING = re.compile(r"(?P<line>[1-9][0-9]*) (?P<code>AMP[0-9]{3}) (?P<status>fixed|left)")


@dataclass(frozen=True)
class Case:
    in_path: Path

    @property
    def area(self) -> str:
        return self.in_path.relative_to(FIXTURES).parts[0]

    @property
    def name(self) -> str:
        return self.in_path.name[: -len(".in.py")]

    @property
    def id(self) -> str:
        rel = self.in_path.relative_to(FIXTURES).as_posix()
        return rel[: -len(".in.py")]

    @property
    def out_path(self) -> Path:
        return self.in_path.with_name(self.name + ".out.py")

    @property
    def changes(self) -> bool:
        """Does the case expect a rewrite (it has an ``.out.py``)?"""
        return self.out_path.exists()

    @property
    def expected_path(self) -> Path:
        """What the engine must produce: ``.out.py``, or the input itself when the case is unchanged."""
        return self.out_path if self.changes else self.in_path

    @property
    def findings_path(self) -> Path:
        return self.in_path.with_name(self.name + ".findings")

    @property
    def options(self) -> dict[str, object]:
        """The keyword arguments of ampfix's Options this case is fixed with."""
        return {**AREA_OPTIONS.get(self.area, {}), **CASE_OPTIONS.get(self.id, {})}

    def expected_findings(self) -> list[tuple[int, str, bool]] | None:
        """The ``.findings`` file as sorted ``(line, code, fixed)``; None when the case has none."""
        if not self.findings_path.exists():
            return None
        return parse_findings(self.findings_path.read_text(encoding="utf-8"))

    def not_runnable_reason(self) -> str | None:
        text, _ = read_source(self.in_path)
        first = text.split("\n", 1)[0].rstrip("\r")
        m = _NOT_RUNNABLE.fullmatch(first)
        return m.group("reason") if m else None


def parse_findings(text: str) -> list[tuple[int, str, bool]]:
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        m = _FINDING.fullmatch(line)
        if m is None:
            raise ValueError(f"bad .findings line {n}: {raw!r} (want 'LINE CODE fixed|left')")
        out.append((int(m.group("line")), m.group("code"), m.group("status") == "fixed"))
    return sorted(out)


def discover() -> list[Case]:
    cases = []
    for path in sorted(FIXTURES.rglob("*.in.py")):
        if path.relative_to(FIXTURES).parts[0] in EXCLUDED_AREAS:
            continue
        cases.append(Case(path))
    return cases


def detect_encoding(data: bytes) -> str:
    """The encoding Python itself would use for these bytes (BOM, coding cookie, else UTF-8)."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return encoding


def read_source(path: Path) -> tuple[str, str]:
    """(text, encoding). Bytes are decoded as-is: ``\\r\\n`` is kept, a UTF-8 BOM is dropped (utf-8-sig)."""
    data = path.read_bytes()
    encoding = detect_encoding(data)
    return data.decode(encoding), encoding


def encode_source(text: str, encoding: str) -> bytes:
    return text.encode(encoding)


CASES = discover()
CASE_IDS = [c.id for c in CASES]
