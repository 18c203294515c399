"""``verify``'s own rewrite of a project, and what a rewrite side still runs of the deprecated API.

Parent side. ampfix's rewrite engine (libcst) is imported only here, and only when ``verify`` is asked
to rewrite or check. Without ``--rewritten``, verify rewrites what the script runs: the script and the
local modules it imports (:mod:`project`), each written into the rewrite side's own copy of the
script's folder (the caller's files are never written). Files are read and written as bytes, so
line endings stay as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ampfix.runner.host.model import RunReport
from ampfix.runner.host.project import local_imports
from ampfix.runner.host.workdir import writable_path

# How many findings of one module a note names before "..."
FINDINGS_SHOWN = 3


@dataclass
class ProjectRewrite:
    script: Path | None  # the rewritten script in the copy; None when the script could not be rewritten
    notes: list[str] = field(default_factory=list)
    error: str | None = None


def rewrite_project(original: Path, copy_root: Path, device: str, keep_dtype: bool) -> ProjectRewrite:
    """ampfix's rewrite (for ``device``, ``keep_dtype``) of ``original`` and its local modules, written
    under ``copy_root``, a copy of the script's folder."""
    from ampfix.engine import Options, fix_source  # libcst: only now, and only for this

    options = Options(device=device, keep_dtype=keep_dtype)
    script = original.resolve()
    root = script.parent
    changed: list[str] = []
    failed: list[str] = []
    modules = local_imports(script)
    for path in (script, *modules):
        new_source, problem = _rewritten(path, lambda source: fix_source(source, options))
        if problem is not None and path == script:
            return ProjectRewrite(None, error=problem)
        relative = path.relative_to(root)
        if problem is not None:
            failed.append(f"{relative} ({problem})")
        if new_source is None and path != script:
            continue
        # The script is always written: it then runs from a real folder of the copy, whose modules it imports.
        writable_path(copy_root, relative).write_bytes((new_source or _text(path)).encode("utf-8"))
        if new_source is not None:
            changed.append(str(relative))
    flags = ("" if device == "cuda" else f" --device {device}") + (" --keep-dtype" if keep_dtype else "")
    notes = [
        f"rewrite: ampfix's own{flags} of the script and the {len(modules)} local module(s) it imports, "
        f"run from the rewrite side's copy of {root}"
    ]
    if changed:
        notes.append(f"files rewritten: {', '.join(changed)}")
    else:
        notes.append(
            "ampfix's rewrite left the script and its local modules unchanged: both runs are of the same source"
        )
    if failed:
        notes.append(f"left as they are (could not be rewritten): {'; '.join(failed)}")
    return ProjectRewrite(copy_root / script.name, notes)


def _text(path: Path) -> str:
    return path.read_bytes().decode("utf-8")


def _rewritten(path: Path, fix: Any) -> tuple[str | None, str | None]:
    """(the new source, or None when unchanged; why it could not be rewritten, or None)."""
    try:
        source = _text(path)
    except (OSError, UnicodeDecodeError) as error:
        return None, f"cannot read {path}: {error}"
    try:
        result = fix(source)
    except Exception as error:  # the engine must not take verify down with it; say what happened
        return None, f"ampfix's rewrite failed on {path}: {type(error).__name__}: {error}"
    if result.error is not None:
        return None, f"ampfix could not rewrite {path}: {result.error}"
    return (result.new_source if result.changed else None), None


def still_deprecated_modules(report: RunReport | None, device: str, keep_dtype: bool) -> list[str]:
    """A note per local module the rewrite side ran that still uses the deprecated API (ampfix's check),
    its file as seen from the script's folder. Read while the side's files still exist."""
    if report is None or not report.local_modules:
        return []
    from ampfix.engine import Options, check_source

    options = Options(device=device, keep_dtype=keep_dtype)
    root = Path(report.script).parent
    notes = []
    for file in report.local_modules:
        path = Path(file)
        try:
            findings = check_source(_text(path), options).findings
        except (OSError, UnicodeDecodeError):
            continue
        if findings:
            shown = ", ".join(f"line {item.line} {item.code}" for item in findings[:FINDINGS_SHOWN])
            more = ", ..." if len(findings) > FINDINGS_SHOWN else ""
            name = path.relative_to(root) if root in path.parents else path
            notes.append(f"the rewrite side still uses the deprecated API in {name}: {shown}{more}")
    return notes
