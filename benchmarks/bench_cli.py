"""Wall time and peak memory of the ampfix CLI against its baselines, measured in one run.

    python benchmarks/bench_cli.py                       # a generated tree of 2,500 files
    python benchmarks/bench_cli.py --tree ~/src/NeMo     # a real tree (its .py files, copied)
    python benchmarks/bench_cli.py --scaling 1000,10000,100000   # peak memory as the tree grows

Every command runs in a fresh process, `--repeat` times (default 5), round-robin after one
untimed warm-up round (so the page cache is warm for all of them alike); the table shows the
median wall time, and the median of each run's peak RSS: that of the largest process of the run
(/usr/bin/time's %M, from wait4's ru_maxrss, which covers the waited-for children too: a pool
worker counts if it is the largest; the processes' sum is not measured). Ratios are against
baselines measured in the same rounds:

- `grep -rlE 'amp|autocast|GradScaler' TREE`: reading the tree, in C;
- the Python floor (benchmarks/floors.py ast): walk, read, filter on \\bamp\\b, ast.parse;
- the LibCST floor (benchmarks/floors.py libcst): the same, then LibCST parse and print;
- `python -c pass`: the interpreter's start-up, for the single-file (pre-commit) runs.

One file in a project (the pre-commit shape): the tree copied into a project (a `pyproject.toml` at its root,
no `[tool.ampfix]`), then `check` of one of its files: a module without AMP (no question is asked), and a module
whose top-level `from torch.cuda.amp import ...` makes the engine ask which other modules of the project import
those names (`ampfix/io/project_modules.py`: each run walks the project's files, stats each, and reads those whose
byte answers ampfix's cache does not hold: `ampfix/io/project_index.py`). Every ampfix command runs with
AMPFIX_CACHE_DIR pointed at a folder of the bench (WORKDIR/ampfix-cache, emptied when the bench starts), so
"warm" is the page cache and ampfix's cache, both filled by the untimed warm-up round: for `check` of one file that
is the walks' answers and the file's kept check (`ampfix/io/result_cache.py`), which a warm run replays once the
project has given the same answers, without the engine. `--cold` adds the same
rows, and `check TREE` of the project, with ampfix's cache emptied and the project's files evicted from the page
cache before each run (posix_fadvise DONTNEED on each file: the interpreter and ampfix's own files stay cached):
what a first run pays. A warm `check TREE` replays each candidate's kept check too; "no kept checks" runs with a cache folder of
its own, whose `results/` is emptied before each run (the walks' answers stay): the walk and the analysis of every candidate, and
the writing of its entry, the row to hold against the Python floor.

ampfix runs with its bytecode as an installed tool has it (pip compiles what it installs; the warm-up round
writes a development install's), also where the environment sets PYTHONDONTWRITEBYTECODE; one more row runs
`check TREE` with ampfix's bytecode moved aside: what a development install pays under that setting.

The figures are checked for sense: candidate counts against the floor's, and on a generated tree
the files with findings against the generator's manifest; `rewrite` is followed by a `check` of
the rewritten copy, which must find only what `rewrite` reported as left.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import generate_tree  # noqa: E402

GREP = ["grep", "-rlE", "amp|autocast|GradScaler"]


@dataclass
class Timing:
    label: str
    argv: list[str]
    setup: Callable[[], None] | None = None
    env: dict[str, str] | None = None
    teardown: Callable[[], None] | None = None
    walls: list[float] = field(default_factory=list)
    rss_kb: list[int] = field(default_factory=list)
    last_stdout: str = ""
    last_stderr: str = ""
    last_code: int = 0

    @property
    def wall(self) -> float:
        return statistics.median(self.walls)

    @property
    def best(self) -> float:
        return min(self.walls)

    @property
    def rss_mb(self) -> float:
        return statistics.median(self.rss_kb) / 1024


TIME = "/usr/bin/time"

# Every command runs as an installed tool does: pip compiles the bytecode of what it installs (its
# dependencies' too), so an environment that sets PYTHONDONTWRITEBYTECODE (this project's machines do) would
# time a development install compiling ampfix on each run, where the floors import only the standard library,
# compiled when Python was installed. The warm-up round writes ampfix's bytecode; one row measures a run
# without it (its __pycache__ folders moved aside, nothing written).
CACHED = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
NOT_WRITING = {**CACHED, "PYTHONDONTWRITEBYTECODE": "1"}


class BytecodeAside:
    """Moves the __pycache__ folders of the ampfix package `python` imports aside, and back."""

    def __init__(self, python: str) -> None:
        found = subprocess.run([python, "-c", "import ampfix, os; print(os.path.dirname(ampfix.__file__))"],
                               capture_output=True, text=True, check=True, env=NOT_WRITING)
        self.package = Path(found.stdout.strip())

    def hide(self) -> None:
        for folder in self.package.rglob("__pycache__"):
            folder.rename(folder.with_name("__pycache__.aside"))

    def restore(self) -> None:
        for folder in self.package.rglob("__pycache__.aside"):
            target = folder.with_name("__pycache__")
            if not target.exists():
                folder.rename(target)


def run_once(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, int, int, str, str]:
    """(wall seconds, peak RSS KiB of the largest process, exit code, stdout, stderr).

    Through /usr/bin/time when there is one: a child forked from this (larger) Python process
    would otherwise report this process's pages in its ru_maxrss.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile("r") as rss_file:
        timed = [TIME, "-f", "%M", "-o", rss_file.name, *argv] if os.access(TIME, os.X_OK) else argv
        start = time.perf_counter()
        process = subprocess.Popen(timed, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        rss = usage.ru_maxrss
        if timed is not argv:
            rss = int(rss_file.read().split()[-1])
        out.seek(0)
        err.seek(0)
        return wall, rss, process.returncode, out.read().decode(errors="replace"), \
            err.read().decode(errors="replace")


def measure(timings: list[Timing], repeat: int) -> None:
    for round_index in range(repeat + 1):  # round 0 warms the page cache and is not counted
        for timing in timings:
            if timing.setup is not None:
                timing.setup()
            wall, rss, code, stdout, stderr = run_once(timing.argv, timing.env if timing.env is not None else CACHED)
            if timing.teardown is not None:
                timing.teardown()
            if round_index:
                timing.walls.append(wall)
                timing.rss_kb.append(rss)
            timing.last_stdout, timing.last_stderr, timing.last_code = stdout, stderr, code


def generated_tree(workdir: Path, files: int, seed: int, tiny: bool = False) -> tuple[Path, dict]:
    tree = workdir / f"tree-{'tiny-' if tiny else ''}{files}-{seed}"
    manifest_path = tree / "manifest.json"
    if manifest_path.is_file():
        manifest = json.loads(manifest_path.read_text())
        if manifest.get("files") == files and manifest.get("seed") == seed and manifest.get("tiny") == tiny:
            return tree, manifest
    if tree.exists():
        shutil.rmtree(tree)
    print(f"generating {files} {'tiny ' if tiny else ''}files in {tree} ...", file=sys.stderr)
    return tree, generate_tree.generate(tree, files, seed, tiny)


def single_files(workdir: Path) -> tuple[Path, Path]:
    """A plain module and one with deprecated uses, both of about 300 lines."""
    import random

    folder = workdir / "single"
    folder.mkdir(parents=True, exist_ok=True)
    clean, used = folder / "clean_module.py", folder / "amp_module.py"
    rng = random.Random(1)
    text = ""
    while not 250 <= text.count("\n") <= 400:
        text = generate_tree.make_file(rng, "models", "plain")
    clean.write_text(text)
    text = ""
    while not 250 <= text.count("\n") <= 400:
        text = generate_tree.make_file(rng, "training", "amp:dotted")
    used.write_text(text)
    return clean, used


PROJECT_TOML = '[project]\nname = "bench-project"\n'


def project_copy(tree: Path, workdir: Path) -> tuple[Path, Path, Path]:
    """The tree copied into a project (a pyproject.toml at its root); (the project, a module without AMP, a module
    whose top-level `from torch.cuda.amp import` asks which other modules import its names)."""
    project = workdir / f"project-{tree.name}"
    if not (project / "pyproject.toml").is_file():
        if project.exists():
            shutil.rmtree(project)
        shutil.copytree(tree, project, symlinks=True)
        (project / "pyproject.toml").write_text(PROJECT_TOML)
    files = sorted(project.rglob("*.py"))
    texts = ((path, path.read_text(errors="replace")) for path in files)
    asking = next((path for path, text in texts if text.startswith("from torch.cuda.amp import", 0)
                   or "\nfrom torch.cuda.amp import " in text), None)
    plain = next((path for path in files if b"amp" not in path.read_bytes()), None)
    if asking is None or plain is None:
        raise SystemExit(f"{project}: no module with a top-level `from torch.cuda.amp import`, or none without amp")
    return project, plain, asking


def evict(tree: Path, cache: Path | None = None) -> Callable[[], None]:
    """A setup that drops the tree's files from the page cache (their pages only), and empties ampfix's `cache`."""
    def run() -> None:
        if cache is not None and cache.exists():
            shutil.rmtree(cache)
        for folder, _, names in os.walk(tree):
            for name in names:
                try:
                    fd = os.open(os.path.join(folder, name), os.O_RDONLY)
                except OSError:
                    continue
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)
    return run


def check_counts(ampfix: list[str], tree: Path) -> tuple[int, int]:
    """(files with findings, findings) from one untimed `check --output-format json`."""
    _, _, _, stdout, _ = run_once([*ampfix, "check", "--output-format", "json", str(tree)], CACHED)
    rows = json.loads(stdout)
    return len({row["path"] for row in rows}), len(rows)


def _commit() -> str:
    try:
        done = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True)
        dirty = subprocess.run(["git", "-C", str(HERE), "status", "--porcelain", "--", "../ampfix"],
                               capture_output=True, text=True).stdout.strip()
        return f"commit {done.stdout.strip()}{' + local changes' if dirty else ''}"
    except (OSError, subprocess.CalledProcessError):
        return "not a git checkout"


def default_ampfix() -> list[str]:
    script = Path(sys.executable).parent / "ampfix"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "ampfix"]


def fmt_mb(mb: float) -> str:
    return f"{mb:.0f}"


def print_table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for n, row in enumerate(rows):
        cells = [row[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(row[1:-1], widths[1:-1])), row[-1]]
        print("  ".join(cells).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))


def _not_python(folder: str, names: list[str]) -> list[str]:
    return [n for n in names if not n.endswith(".py") and not os.path.isdir(os.path.join(folder, n))]


def bench_tree(args: argparse.Namespace, workdir: Path, ampfix: list[str]) -> None:
    python = args.python
    if args.tree:
        source = args.tree.resolve()
        tree, manifest = workdir / f"mirror-{source.name}", None
        if tree.exists():
            shutil.rmtree(tree)
        shutil.copytree(source, tree, symlinks=True, ignore=_not_python)
        described = f"{source} (its .py files, mirrored to {tree}: grep reads what ampfix reads)"
    else:
        tree, manifest = generated_tree(workdir, args.files, args.seed)
        described = (f"generated: {manifest['files']} files, {manifest['lines']:,} lines, seed {manifest['seed']} "
                     f"(benchmarks/generate_tree.py)")
    copy = workdir / "rewrite-copy"

    def fresh_copy() -> None:
        if copy.exists():
            shutil.rmtree(copy)
        shutil.copytree(tree, copy, symlinks=True)

    clean, used = single_files(workdir)
    cache = workdir / "ampfix-cache"  # ampfix's cache of the project walks' answers, the bench's own
    if cache.exists():
        shutil.rmtree(cache)
    for env in (CACHED, NOT_WRITING):
        env["AMPFIX_CACHE_DIR"] = str(cache)
    module = [python, "-m", "ampfix"]
    grep = Timing("grep -rlE 'amp|autocast|GradScaler' TREE", [*GREP, str(tree)])
    floor = Timing("Python floor: walk, read, \\bamp\\b, ast.parse",
                   [python, str(HERE / "floors.py"), "ast", str(tree)])
    check = Timing("ampfix check TREE", [*ampfix, "check", str(tree)])
    # A warm `check TREE` replays each candidate's kept check: the analysis against the floor is this row (the
    # walks' answers still kept, as before there were kept checks; `--no-cache` would drop those too).
    # A cache folder of its own: the other rows' kept checks stay.
    unkept = workdir / "ampfix-cache-no-kept-checks"
    shutil.rmtree(unkept, ignore_errors=True)
    analysed = Timing("ampfix check TREE, no kept checks", [*ampfix, "check", str(tree)],
                      setup=lambda: shutil.rmtree(unkept / "results", ignore_errors=True),
                      env={**CACHED, "AMPFIX_CACHE_DIR": str(unkept)})
    aside = BytecodeAside(python)
    check_compiling = Timing("ampfix check TREE, its modules compiled", [*ampfix, "check", str(tree)],
                             setup=aside.hide, env=NOT_WRITING, teardown=aside.restore)
    cst_floor = Timing("LibCST floor: walk, read, \\bamp\\b, parse+print", [python, str(HERE / "floors.py"), "libcst",
                                                                          str(tree)])
    rewrite = Timing("ampfix rewrite COPY", [*ampfix, "rewrite", str(copy)], setup=fresh_copy)
    bare = Timing("python -c pass", [python, "-c", "pass"])
    one_clean = Timing("ampfix check clean_module.py", [*ampfix, "check", str(clean)])
    one_used = Timing("ampfix check amp_module.py", [*ampfix, "check", str(used)])
    m_clean = Timing("python -m ampfix check clean_module.py", [*module, "check", str(clean)])
    m_used = Timing("python -m ampfix check amp_module.py", [*module, "check", str(used)])
    project, in_plain, in_asking = project_copy(tree, workdir)
    p_plain = Timing("ampfix check PROJECT/plain_module.py", [*ampfix, "check", str(in_plain)])
    p_asking = Timing("ampfix check PROJECT/module_asking.py (walks the project)", [*ampfix, "check", str(in_asking)])
    timings = [grep, floor, check, analysed, check_compiling, cst_floor, rewrite, bare, one_clean, one_used, m_clean, m_used,
               p_plain, p_asking]
    if args.cold:  # a cache folder of their own, emptied before each run: the warm rows' cache stays warm
        cold = workdir / "ampfix-cache-cold"
        cold_env = {**CACHED, "AMPFIX_CACHE_DIR": str(cold)}
        timings += [Timing("cold: ampfix check PROJECT", [*ampfix, "check", str(project)], setup=evict(project, cold),
                           env=cold_env),
                    Timing("cold: ampfix check PROJECT/plain_module.py", [*ampfix, "check", str(in_plain)],
                           setup=evict(project, cold), env=cold_env),
                    Timing("cold: ampfix check PROJECT/module_asking.py", [*ampfix, "check", str(in_asking)],
                           setup=evict(project, cold), env=cold_env)]
    if args.skip_libcst:
        timings.remove(cst_floor)
    load_before = os.getloadavg()[0]
    try:
        measure(timings, args.repeat)
    finally:  # an interrupted run leaves no bytecode aside
        aside.restore()
    load_after = os.getloadavg()[0]

    # Sense checks ----------------------------------------------------------------------------
    files_seen, candidates = (int(x) for x in floor.last_stdout.split())
    with_findings, findings = check_counts(ampfix, tree)
    summary = check.last_stdout.strip().splitlines()[-1] if check.last_stdout.strip() else "(no output)"
    rewrote = rewrite.last_stdout.strip().splitlines()[-1] if rewrite.last_stdout.strip() else "(no output)"
    left_after = check_counts(ampfix, copy)
    problems = []
    if check.last_code not in (0, 1):
        problems.append(f"check exited {check.last_code}: {check.last_stderr[-500:]}")
    if rewrite.last_code not in (0, 1):
        problems.append(f"rewrite exited {rewrite.last_code}: {rewrite.last_stderr[-500:]}")
    if manifest is not None:
        if candidates != len(manifest["amp_token"]):
            problems.append(f"{candidates} candidates, the generator wrote {len(manifest['amp_token'])}")
        if with_findings != len(manifest["deprecated"]):
            problems.append(f"{with_findings} files with findings, the generator wrote {len(manifest['deprecated'])}")
    if p_plain.last_code != 0 or p_asking.last_code != 1:
        problems.append(f"one file in the project: exit {p_plain.last_code} without AMP (expected 0), "
                        f"{p_asking.last_code} with its import (expected 1)")
    match = re.search(r"(\d+) findings? left", rewrote)
    if match and int(match.group(1)) != left_after[1]:
        problems.append(f"rewrite reported {match.group(1)} left, a check of the copy finds {left_after[1]}")

    def ratio(a: Timing, b: Timing) -> str:
        return f"{a.wall / b.wall:.2f}x {'grep' if b is grep else b.label.split(':')[0]}"

    print(f"tree: {described}")
    print(f".py files: {files_seen}; candidates (\\bamp\\b): {candidates}; files with findings: {with_findings}; "
          f"findings: {findings}")
    print(f"check:   {summary}")
    print(f"rewrite: {rewrote}; then a check of the copy: {left_after[1]} findings in {left_after[0]} files")
    print(f"project: {project} (a pyproject.toml at its root); plain module {in_plain.relative_to(project)}, "
          f"module asking {in_asking.relative_to(project)}")
    print(f"ampfix: {shlex.join(ampfix)} ({_commit()}); CPUs: {len(os.sched_getaffinity(0))}; "
          f"Python {sys.version.split()[0]}; median of {args.repeat} runs; "
          f"load average {load_before:.2f} before, {load_after:.2f} after")
    print()
    def row(timing: Timing, note: str = "") -> tuple[str, ...]:
        return timing.label, f"{timing.wall:.3f}", f"{timing.best:.3f}", fmt_mb(timing.rss_mb), note

    rows = [("command", "median s", "min s", "peak RSS MB", "ratio (of medians)"), row(grep),
            row(floor, ratio(floor, grep)), row(check, f"{ratio(check, floor)}, {ratio(check, grep)}"),
            row(analysed, ratio(analysed, floor)), row(check_compiling, ratio(check_compiling, floor))]
    if not args.skip_libcst:
        rows += [row(cst_floor), row(rewrite, ratio(rewrite, cst_floor))]
    else:
        rows.append(row(rewrite))
    rows.append(row(bare))
    rows += [row(single, f"+{single.wall - bare.wall:.3f} s over python -c pass")
             for single in (one_clean, one_used, m_clean, m_used)]
    rows += [row(t, f"{t.wall / bare.wall:.2f}x python -c pass") for t in timings[timings.index(p_plain):]]
    print_table(rows)
    if problems:
        print("\nSENSE CHECKS FAILED:\n  " + "\n  ".join(problems))
        raise SystemExit(1)


def bench_scaling(args: argparse.Namespace, workdir: Path, ampfix: list[str]) -> None:
    rows = [("tiny files (90% plain, 9% naming amp, 1% deprecated)", "median s", "min s", "peak RSS MB",
             "candidates / findings")]
    for count in (int(n) for n in args.scaling.split(",")):
        tree, manifest = generated_tree(workdir, count, args.seed, tiny=True)
        timing = Timing(f"ampfix check: {count:,} files", [*ampfix, "check", str(tree)])
        measure([timing], min(args.repeat, 3))
        with_findings, findings = check_counts(ampfix, tree)
        if with_findings != len(manifest["deprecated"]):
            raise SystemExit(f"{with_findings} files with findings, the generator wrote {len(manifest['deprecated'])}")
        rows.append((timing.label, f"{timing.wall:.3f}", f"{timing.best:.3f}", fmt_mb(timing.rss_mb),
                     f"{len(manifest['amp_token'])} / {findings}"))
    print(f"ampfix: {shlex.join(ampfix)} ({_commit()}); median of {min(args.repeat, 3)} runs")
    print_table(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, help="a real tree to measure (default: a generated one)")
    parser.add_argument("--files", type=int, default=2500, help="files in the generated tree")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=5, help="timed runs of each command")
    parser.add_argument("--ampfix", type=shlex.split, default=None,
                        help="the ampfix command (default: the ampfix script next to this Python)")
    parser.add_argument("--python", default=sys.executable, help="the Python for the floors and `-c pass`")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "ampfix-bench",
                        help="generated trees (kept and reused) and the rewrite copy")
    parser.add_argument("--skip-libcst", action="store_true", help="skip the (slow) LibCST floor")
    parser.add_argument("--cold", action="store_true",
                        help="also time the project rows with its files evicted from the page cache")
    parser.add_argument("--scaling", help="comma-separated file counts: peak memory of check on tiny-file trees")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    ampfix = args.ampfix or default_ampfix()
    if args.scaling:
        bench_scaling(args, args.workdir, ampfix)
    else:
        bench_tree(args, args.workdir, ampfix)
    return 0


if __name__ == "__main__":
    sys.exit(main())
