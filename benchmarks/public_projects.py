"""Three public projects whose deprecated references flow across functions and modules, through the CLI.

    python benchmarks/public_projects.py                    # the cache; PyPI releases downloaded where missing
    python benchmarks/public_projects.py --offline          # the cache only
    python benchmarks/public_projects.py --details          # every finding, before and after, with its message
    python benchmarks/public_projects.py --mirror timm=../timm.git   # git clone --bare <timm's repository>

Each project is a tree at a fixed commit or release, kept in `<cache>/<name>-<rev>/` (default cache
benchmarks/.corpus/public/, gitignored). A PyPI release is fetched as benchmarks/corpus.py fetches one (`pip
download --no-deps`) and unpacked whole; a GitHub commit is not fetched by this script: give `--mirror
NAME=GITDIR` (a clone or bare mirror holding the commit; the tree is `git archive COMMIT`), or lay the tree there
by hand (`git -C GITDIR archive COMMIT | tar -x -C <cache>/<name>-<rev>`).

On a fresh copy of each tree, from its root, as a user runs it:

- `ampfix check .` with no flag (the target torch the project declares) and `--target-torch 2.13`;
- `ampfix rewrite --target-torch 2.13 .` and, on another copy, `rewrite --unsafe-fixes --target-torch 2.13 .`
  (JSON: each finding fixed or left), then `check` of each rewritten copy (it must find exactly what the rewrite
  left) and a second `rewrite` (it must change nothing); every changed file must parse;
- the findings decided by a fact from another function or module (benchmarks/corpus.py's `decided_elsewhere`:
  each file with findings measured again with the project's other modules withheld, and with every reference's
  flow cut at its first step), per mode.

The figures are in docs/performance.md ("Across functions and modules: public projects"). Not part of the test
suite: it reads trees nobody here wrote, and takes a minute.
"""

from __future__ import annotations

import argparse
import ast
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

DEFAULT_CACHE = HERE / ".corpus" / "public"
TARGET = "2.13"


@dataclass(frozen=True)
class Project:
    name: str
    source: str  # "github:OWNER/REPO" or "pypi"
    rev: str  # the commit (github) or NAME==VERSION (pypi)
    short: str  # the cache folder's suffix
    shape: str  # what flows where (for the report)
    files: tuple[str, ...]  # the files of the shape, listed first in --details


PROJECTS: tuple[Project, ...] = (
    Project("timm", "github:huggingface/pytorch-image-models", "ce4d3485b690837ba4e1cb4e0e6c4ed415e36cea",
            "ce4d3485",
            "v0.6.12's tree (the last tag whose train.py binds `amp_autocast = torch.cuda.amp.autocast` alone; v0.9 "
            "added `partial(torch.autocast, ...)` beside it): `amp_autocast` bound in `main()`, passed by keyword to "
            "`train_one_epoch` and `validate`, entered there as `with amp_autocast():`; the same in validate.py; "
            "benchmark.py's `self.amp_autocast = torch.cuda.amp.autocast if self.use_amp else suppress`",
            ("train.py", "validate.py", "benchmark.py")),
    Project("open_clip_torch", "pypi", "open_clip_torch==2.20.0", "2.20.0",
            "training/precision.py's `get_autocast(precision)` returns `torch.cuda.amp.autocast` (or a lambda calling "
            "it with dtype=torch.bfloat16); training/train.py and zero_shot.py call `autocast = "
            "get_autocast(args.precision)` and enter `with autocast():`",
            ("training/precision.py", "training/train.py", "training/zero_shot.py", "training/main.py")),
    Project("composer", "pypi", "composer==0.16.0", "0.16.0",
            "composer/trainer/_scaler.py's `class ClosureGradScaler(GradScaler)` (from torch.cuda.amp.grad_scaler), "
            "constructed in composer/trainer/trainer.py only as `ClosureGradScaler()`",
            ("composer/trainer/_scaler.py", "composer/trainer/trainer.py")),
)


def tree_of(project: Project, cache: Path, offline: bool, mirrors: dict[str, str]) -> Path:
    tree = cache / f"{project.name}-{project.short}"
    done = tree / ".complete"
    if done.exists():
        return tree
    if project.source == "pypi":
        downloads = cache / "downloads" / project.rev.replace("==", "-")
        archives = sorted(downloads.glob("*")) if downloads.is_dir() else []
        if not archives:
            if offline:
                raise SystemExit(f"{project.rev}: not in the cache ({downloads}) and --offline was given")
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-q",
                            "-d", str(downloads), project.rev], check=True)
            archives = sorted(downloads.glob("*"))
        if len(archives) != 1:
            raise SystemExit(f"{project.rev}: expected one archive in {downloads}, found {len(archives)}")
        tree.mkdir(parents=True, exist_ok=True)
        if archives[0].suffix in (".whl", ".zip"):
            with zipfile.ZipFile(archives[0]) as zf:
                zf.extractall(tree, [m for m in zf.namelist() if ".." not in m])
        else:
            with tarfile.open(archives[0]) as tf:
                tf.extractall(tree, filter="data")
    else:
        gitdir = mirrors.get(project.name)
        if gitdir is None:
            raise SystemExit(f"{project.name}: {tree} is missing; give --mirror {project.name}=GITDIR (a clone of "
                             f"{project.source.partition(':')[2]} holding {project.rev}), or lay it there with "
                             f"`git -C GITDIR archive {project.rev} | tar -x -C {tree}`")
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", gitdir, "archive", project.rev], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    done.touch()
    return tree


def ampfix(*args: str, cwd: Path) -> tuple[int, list[dict]]:
    script = Path(sys.executable).parent / "ampfix"
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "ampfix"]
    done = subprocess.run([*command, *args, "--output-format", "json", "."], cwd=cwd, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"ampfix {' '.join(args)} in {cwd}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return done.returncode, json.loads(done.stdout or "[]")


def _key(row: dict) -> tuple:
    return row["path"], row["line"], row["col"], row["code"]


def _broken(tree: Path, changed: set[str]) -> list[str]:
    broken = []
    for path in sorted(changed):
        try:
            ast.parse((tree / path).read_bytes())
        except (SyntaxError, ValueError) as error:
            broken.append(f"{path}: {error}")
    return broken


def _snapshot(tree: Path) -> dict[str, bytes]:
    return {str(p.relative_to(tree)): p.read_bytes() for p in tree.rglob("*.py") if p.is_file()}


def rewritten(tree: Path, work: Path, label: str, *flags: str) -> dict:
    """A copy of `tree` rewritten with `flags`; what was fixed and left, and the checks of the output."""
    copy = work / label
    shutil.copytree(tree, copy, symlinks=True)
    before = _snapshot(copy)
    _, rows = ampfix("rewrite", "--target-torch", TARGET, *flags, cwd=copy)
    after = _snapshot(copy)
    changed = {path for path in after if after[path] != before.get(path)}
    _, left = ampfix("check", "--target-torch", TARGET, *flags, cwd=copy)
    _, again = ampfix("rewrite", "--target-torch", TARGET, *flags, cwd=copy)
    second = {path for path, data in _snapshot(copy).items() if data != after.get(path)}
    open_rows = [r for r in rows if not r["fixed"]]
    problems = _broken(copy, changed)
    # By file and code: the output's lines may have moved (an inserted `import functools`).
    if Counter((r["path"], r["code"]) for r in left) != Counter((r["path"], r["code"]) for r in open_rows):
        problems.append(f"a check of the output finds {len(left)} findings, the rewrite left {len(open_rows)}")
    if second:
        problems.append(f"a second rewrite changes {sorted(second)}")
    return {"rows": rows, "changed": sorted(changed), "problems": problems, "again": again}


def elsewhere(tree: Path, unsafe: bool, paths: set[str]) -> tuple[list[tuple[str, object]], int, int]:
    """The findings decided by a fact from another function or module, in the files `paths`."""
    from corpus import decided_elsewhere

    from ampfix.core.options import Options
    from ampfix.engine import fix_source
    from ampfix.io.project_modules import FileModules, forget
    from ampfix.syntax.encoding import decode_source

    options = Options(target_torch=tuple(map(int, TARGET.split("."))), unsafe_fixes=unsafe)
    root = tree.resolve()
    decided: list[tuple[str, object]] = []
    flow = modules = 0
    forget()
    for rel in sorted(paths):
        path = root / rel
        source, _ = decode_source(path.read_bytes())
        project = FileModules(path, root)
        found, by_flow, by_modules = decided_elsewhere(source, options, project, fix_source(source, options, project))
        decided += [(rel, f) for f in found]
        flow += len(by_flow)
        modules += len(by_modules)
    return decided, flow, modules


def _short(message: str, width: int = 240) -> str:
    return message if len(message) <= width else message[:width - 3] + "..."


def measure(project: Project, tree: Path, details: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"ampfix-public-{project.name}-") as workdir:
        work = Path(workdir)
        plain = work / "plain"
        shutil.copytree(tree, plain, symlinks=True)
        _, declared = ampfix("check", cwd=plain)
        _, newest = ampfix("check", "--target-torch", TARGET, cwd=plain)
        default = rewritten(tree, work, "default")
        unsafe = rewritten(tree, work, "unsafe", "--unsafe-fixes")
        paths = {row["path"] for row in newest}
        flows = {"default": elsewhere(plain, False, paths), "unsafe": elsewhere(plain, True, paths)}

    def apex(row: dict) -> bool:  # AMP1xx are apex's; the rest torch's namespace
        return row["code"].startswith("AMP1")

    def counts(rows: list[dict]) -> tuple[int, int, int, int]:
        """(findings, fixed, of the namespace: findings, fixed): a mode's own findings (under --unsafe-fixes an
        import that moves whole is one finding, where the default mode reports the name it keeps apart)."""
        space = [r for r in rows if not apex(r)]
        return len(rows), sum(r["fixed"] for r in rows), len(space), sum(r["fixed"] for r in space)

    namespace = [r for r in newest if not apex(r)]
    in_default, in_unsafe = counts(default["rows"]), counts(unsafe["rows"])
    targets = Counter(f"{r.get('target_source') or 'the newest torch'} {r.get('target_torch') or ''}".strip()
                      for r in declared)
    summary = {
        "project": project.name, "rev": project.rev,
        "findings": len(newest), "namespace": len(namespace), "default": in_default, "unsafe": in_unsafe,
        "declared": dict(targets), "declared_fixable": sum(r["fixable"] and not r["unsafe"] for r in declared),
        "changed_default": len(default["changed"]), "changed_unsafe": len(unsafe["changed"]),
        "problems": default["problems"] + unsafe["problems"],
        "elsewhere": {mode: [len(d), f, m, sum(1 for _, x in d if x.fixed)] for mode, (d, f, m) in flows.items()},
    }
    print(f"\n## {project.name} ({project.source} {project.rev})\n{project.shape}")
    print(f"findings at --target-torch {TARGET}: {len(newest)} ({len(namespace)} of torch's namespace, "
          f"{len(newest) - len(namespace)} apex); `rewrite`: {in_default[1]} of {in_default[0]} fixed "
          f"({in_default[3]} of the namespace's {in_default[2]}); `rewrite --unsafe-fixes`: {in_unsafe[1]} of "
          f"{in_unsafe[0]} ({in_unsafe[3]} of {in_unsafe[2]}); files changed: {len(default['changed'])} / "
          f"{len(unsafe['changed'])}")
    print(f"with no flag (the target the project declares: {', '.join(f'{n} findings at {t}' for t, n in targets.items()) or '-'}): "
          f"{summary['declared_fixable']} fixable")
    for mode, (decided, flow, modules) in flows.items():
        print(f"decided by a fact from another function or module ({mode}): {len(decided)} (by flow {flow}, by the "
              f"project's modules {modules}; {summary['elsewhere'][mode][3]} fixed)")
        for rel, f in decided:
            print(f"    {rel}:{f.line} {f.code} fixed={f.fixed} {_short(f.message, 200)}")
    print("outputs: " + ("; ".join(summary["problems"]) or "every changed file parses, a check of each output finds "
                         "what its rewrite left, a second rewrite changes nothing"))
    order = {name: i for i, name in enumerate(project.files)}
    shown = sorted(namespace if not details else newest,
                   key=lambda r: (order.get(r["path"], len(order)), r["path"], r["line"], r["col"]))
    print("the namespace's findings (torch.cuda.amp / torch.cpu.amp / state functions), by outcome:"
          if not details else "every finding, by outcome:")
    for row in shown:
        where = (row["path"], row["line"], row["code"])
        same = [r for r in unsafe["rows"] if (r["path"], r["line"], r["code"]) == where]
        done = next((r for r in default["rows"] if _key(r) == _key(row) and r["message"] == row["message"]), row)
        outcome = ("fixed" if done["fixed"] else "fixed (--unsafe-fixes)" if same and all(r["fixed"] for r in same)
                   else "left")
        shown_row = same[0] if outcome == "fixed (--unsafe-fixes)" else done
        print(f"  {row['path']}:{row['line']} {row['code']} {outcome}: {_short(shown_row['message'])}")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--offline", action="store_true", help="use the cache only")
    parser.add_argument("--mirror", action="append", default=[], help="NAME=GITDIR for a project from GitHub")
    parser.add_argument("--only", action="append", default=[], help="a project's name (repeatable)")
    parser.add_argument("--details", action="store_true", help="every finding (apex's too), not the namespace's only")
    parser.add_argument("--json", type=Path, help="write the summaries here")
    args = parser.parse_args(argv)
    mirrors = dict(item.split("=", 1) for item in args.mirror)
    chosen = [p for p in PROJECTS if not args.only or p.name in args.only]
    summaries = [measure(p, tree_of(p, args.cache, args.offline, mirrors), args.details) for p in chosen]
    print("\n| project | findings (namespace) | fixed, default (namespace) | fixed, --unsafe-fixes (namespace) "
          "| decided elsewhere, default / unsafe (fixed) | outputs |")
    print("|---|--:|--:|--:|--:|---|")
    for s in summaries:
        d, u = s["elsewhere"]["default"], s["elsewhere"]["unsafe"]
        (d_all, d_fixed, d_space, d_space_fixed), (u_all, u_fixed, u_space, u_space_fixed) = s["default"], s["unsafe"]
        print(f"| {s['project']} {s['rev']} | {s['findings']} ({s['namespace']}) | {d_fixed} of {d_all} "
              f"({d_space_fixed} of {d_space}) "
              f"| {u_fixed} of {u_all} ({u_space_fixed} of {u_space}) "
              f"| {d[0]} ({d[3]}) / {u[0]} ({u[3]}) | {'ok' if not s['problems'] else 'PROBLEMS'} |")
    if args.json:
        args.json.write_text(json.dumps(summaries, indent=1))
    return 1 if any(s["problems"] for s in summaries) else 0


if __name__ == "__main__":
    sys.exit(main())
