"""A behaviour snapshot of the engine, to compare a refactor against: every output and every finding.

    python benchmarks/snapshot.py write OUT.json [--quick] [--jobs N] [--like EARLIER.json]
    python benchmarks/snapshot.py compare BEFORE.json AFTER.json

`write` runs `ampfix.engine.check_source` and `fix_source` on every .py file under fixtures/, every .py
file of the corpus (benchmarks/.corpus/src and /work/cache/corpus, where present; `--corpus DIR` adds
more) and, unless `--quick`, the installed torch package's own source, under each option set below, and
records per (option set, mode, file) the output's hash, the error, and every finding's fields. Entries
where nothing is found and nothing changes are left out (absent means empty). `compare` prints every
difference, one per line, and exits 1 when there is any.

Files are decoded as UTF-8 (undecodable bytes replaced), so every file gives the engine the same text in
every run. Each file's questions about the other modules of its project are answered as the CLI answers them
(`ampfix.io.project_modules`): a corpus file's project is its release's folder (the first folder below a corpus
root), any other file's the nearest folder with a project file; `--no-project` withholds them (`project=None`, as
this script ran before issue 29). To snapshot another checkout, run this script with PYTHONPATH pointing at it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# name -> keyword arguments of ampfix.engine.Options (see ampfix/core/options.py).
OPTION_SETS: dict[str, dict] = {
    "default": {},
    "unsafe_fixes": {"unsafe_fixes": True},
    "device_cpu": {"device": "cpu"},
    "device_auto": {"device": "auto"},
    "device_expr": {"device_expr": "self.device"},
    "target_1.10": {"target_torch": (1, 10)},
    "target_2.2": {"target_torch": (2, 2)},
}


def inputs(quick: bool, extra: list[str]) -> list[Path]:
    roots = [ROOT / "fixtures", ROOT / "benchmarks" / ".corpus" / "src", Path("/work/cache/corpus"),
             *map(Path, extra)]
    if not quick:
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec is not None and spec.origin is not None:
            roots.append(Path(spec.origin).parent)
    found: list[Path] = []
    for root in roots:
        if root.is_dir():
            found += sorted(p for p in root.rglob("*.py") if p.is_file())
    return found


def _record(result) -> dict | None:
    findings = [[f.code, f.line, f.col, f.message, f.fixable, f.unsafe, f.fixed, f.suggestion]
                for f in result.findings]
    changed = result.new_source != result.source
    if not findings and not changed and result.error is None:
        return None
    out = hashlib.sha256(result.new_source.encode("utf-8", "surrogatepass")).hexdigest()[:16] if changed else None
    return {"out": out, "error": result.error, "findings": findings}


def _project_root(path: Path, extra: list[str]) -> Path | None:
    """A corpus file's project: as the CLI finds it, bounded by its release's folder (the first folder below a
    corpus root; `corpus.project_root`); else None (the nearest folder with a project file, as the CLI finds it)."""
    from corpus import project_root  # benchmarks/, this script's folder

    for root in (ROOT / "benchmarks" / ".corpus" / "src", Path("/work/cache/corpus"), *map(Path, extra)):
        try:
            first = path.relative_to(root).parts[0]
        except (ValueError, IndexError):
            continue
        return project_root(path.resolve(), (root / first).resolve())
    return None


def snapshot_file(task: tuple[str, str | None, bool]) -> dict[str, dict]:
    from ampfix.engine import Options, check_source, fix_source

    path, root, with_project = task
    project = None
    if with_project:
        from ampfix.io.project_modules import FileModules

        project = FileModules(Path(path).absolute(), Path(root) if root is not None else None)
    source = Path(path).read_bytes().decode("utf-8", "replace")
    entries: dict[str, dict] = {}
    for name, kwargs in OPTION_SETS.items():
        options = Options(**kwargs)
        for mode, run in (("check", check_source), ("fix", fix_source)):
            record = _record(run(source, options, project))
            if record is not None:
                entries[f"{name}|{mode}|{path}"] = record
    return entries


def write(out: str, quick: bool, jobs: int, extra: list[str], like: str | None, with_project: bool = True) -> None:
    import ampfix

    if like is not None:  # the very files another snapshot read (a corpus may have grown since)
        files = json.loads(Path(like).read_text())["meta"]["paths"]
    else:
        files = [str(p) for p in inputs(quick, extra)]
    entries: dict[str, dict] = {}
    roots = {path: _project_root(Path(path), extra) for path in files}
    tasks = [(path, str(root) if root is not None else None, with_project) for path, root in roots.items()]
    with ProcessPoolExecutor(jobs) as pool:
        for found in pool.map(snapshot_file, tasks, chunksize=16):
            entries.update(found)
    meta = {"files": len(files), "paths": files, "option_sets": list(OPTION_SETS), "project": with_project,
            "ampfix": str(Path(ampfix.__file__).parent)}
    Path(out).write_text(json.dumps({"meta": meta, "entries": entries}, sort_keys=True, indent=0))
    print(f"{len(files)} files, {len(entries)} non-empty entries -> {out} (ampfix from {meta['ampfix']})")


def compare(before_path: str, after_path: str) -> int:
    before = json.loads(Path(before_path).read_text())
    after = json.loads(Path(after_path).read_text())
    if before["meta"].get("project") != after["meta"].get("project"):
        print(f"project facts: {before['meta'].get('project')} -> {after['meta'].get('project')}")
    if before["meta"]["files"] != after["meta"]["files"]:
        print(f"file count: {before['meta']['files']} -> {after['meta']['files']}")
    a, b = before["entries"], after["entries"]
    differences = 0
    empty = {"out": None, "error": None, "findings": []}
    for key in sorted(set(a) | set(b)):
        old, new = a.get(key, empty), b.get(key, empty)
        if old == new:
            continue
        differences += 1
        if old["out"] != new["out"]:
            print(f"{key}: output {old['out']} -> {new['out']}")
        if old["error"] != new["error"]:
            print(f"{key}: error {old['error']!r} -> {new['error']!r}")
        old_f = [tuple(f) for f in old["findings"]]
        new_f = [tuple(f) for f in new["findings"]]
        for finding in old_f:
            if finding not in new_f:
                print(f"{key}: - {finding}")
        for finding in new_f:
            if finding not in old_f:
                print(f"{key}: + {finding}")
        if sorted(old_f) == sorted(new_f) and old_f != new_f:
            print(f"{key}: findings reordered")
    print(f"{len(set(a) | set(b))} entries compared, {differences} differ")
    return 1 if differences else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write")
    w.add_argument("out")
    w.add_argument("--quick", action="store_true", help="skip torch's own source")
    w.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    w.add_argument("--corpus", action="append", default=[], help="another directory of .py files")
    w.add_argument("--like", help="read exactly the files this earlier snapshot read")
    w.add_argument("--no-project", action="store_true", help="withhold the project's other modules (project=None)")
    c = sub.add_parser("compare")
    c.add_argument("before")
    c.add_argument("after")
    args = parser.parse_args()
    if args.command == "write":
        write(args.out, args.quick, args.jobs, args.corpus, args.like, not args.no_project)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
