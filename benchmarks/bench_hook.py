"""What a commit pays: the pre-commit hooks' commands on one file, with a [tool.ampfix] table.

    python benchmarks/bench_hook.py                 # medians of 21 runs
    python benchmarks/bench_hook.py --ampfix '/tmp/v/bin/python -m ampfix'   # another install
    python benchmarks/bench_hook.py --ampfix /tmp/v/bin/ampfix --baseline /tmp/old/bin/ampfix

The hooks run `ampfix check --force-exclude FILES` / `ampfix rewrite --force-exclude FILES`
(.pre-commit-hooks.yaml). The files sit in a project whose pyproject.toml has a [tool.ampfix]
table with an exclude pattern, so the run reads configuration and matches the pattern
(--force-exclude), as a configured project's commit does. Baseline: `python -c pass`, measured
in the same rounds. The budget is 0.15 s for a file without an AMP use.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_cli import Timing, _commit, default_ampfix, measure, print_table, single_files  # noqa: E402

TABLE = '[project]\nname = "bench"\n\n[tool.ampfix]\ntarget-torch = "2.4"\nextend-exclude = ["legacy/", "*_pb2.py"]\n'
BUDGET_S = 0.15


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--ampfix", help="the command to run (default: the ampfix script next to this Python)")
    parser.add_argument("--python", default=sys.executable, help="the Python for `-c pass`")
    parser.add_argument("--baseline", help="another ampfix (an older install) to time `check FILE` with, "
                        "in the same rounds")
    args = parser.parse_args(argv)
    ampfix = shlex.split(args.ampfix) if args.ampfix else default_ampfix()

    with tempfile.TemporaryDirectory(prefix="ampfix-hook-") as workdir:
        project = Path(workdir)
        (project / "pyproject.toml").write_text(TABLE)
        clean, used = single_files(project)
        bare = Timing("python -c pass", [args.python, "-c", "pass"])
        plain = Timing("ampfix check FILE (no flag)", [*ampfix, "check", str(clean)])
        hook_clean = Timing("ampfix check --force-exclude FILE", [*ampfix, "check", "--force-exclude", str(clean)])
        hook_rewrite = Timing("ampfix rewrite --force-exclude FILE",
                              [*ampfix, "rewrite", "--force-exclude", str(clean)])
        hook_used = Timing("ampfix check --force-exclude AMP_FILE",
                           [*ampfix, "check", "--force-exclude", str(used)])
        with_flag = Timing("ampfix check --target-torch 2.4 FILE (typer parses)",
                           [*ampfix, "check", "--target-torch", "2.4", str(clean)])
        timings = [bare, plain, hook_clean, hook_rewrite, hook_used, with_flag]
        if args.baseline:
            timings.insert(1, Timing("baseline: check FILE (no flag)", [*shlex.split(args.baseline), "check", str(clean)]))
        measure(timings, args.repeat)

        lines = (clean.read_text().count("\n"), used.read_text().count("\n"))
        for timing in timings[1:]:
            expected = 1 if timing is hook_used else 0
            if timing.last_code != expected:
                raise SystemExit(f"{timing.label}: exit {timing.last_code}, expected {expected}:\n"
                                 f"{timing.last_stdout}{timing.last_stderr}")

    with open("/proc/loadavg") as handle:
        load = handle.read().split()[0]
    print(f"# {_commit()}; {args.repeat} runs each, medians; load average {load} at the end;"
          f" [tool.ampfix] with target-torch and extend-exclude; files of {lines[0]} and {lines[1]} lines")
    rows = [("command", "median s", "min s", "over python -c pass", "ratio to python -c pass")]
    for timing in timings:
        over = "" if timing is bare else f"+{timing.wall - bare.wall:.3f}"
        ratio = "" if timing is bare else f"{timing.wall / bare.wall:.1f}x"
        rows.append((timing.label, f"{timing.wall:.3f}", f"{timing.best:.3f}", over, ratio))
    print_table(rows)
    verdict = "within" if hook_clean.wall < BUDGET_S else "OVER"
    print(f"\nthe hook on a file without AMP: {hook_clean.wall:.3f} s, {verdict} the {BUDGET_S} s budget")
    return 0 if hook_clean.wall < BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
