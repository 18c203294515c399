"""Mutations of real apex code: statements of the apex fixtures and of the apex corpus's training files replaced by
`pass`, duplicated or swapped with a sibling, each mutant that still parses rewritten in both modes.

    python benchmarks/apex_mutations.py --seed 3              # ~3,000 runs, about a minute
    python benchmarks/apex_mutations.py --seed 4 --per-file 30 --out /tmp/mutants

Checked: no internal error (AMP900), the output parses, a second pass changes nothing. Each failing mutant is
written to --out. The apex rewrite's preconditions are many small proofs over tree shapes; mutants reach the
shapes next to the ones the fixtures hold (its first run found two `if amp is None: raise` emptying their block,
and two rewrites that a second run extended).
"""

from __future__ import annotations

import argparse
import ast
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ampfix.core.options import Options  # noqa: E402
from ampfix.engine import INTERNAL_ERROR_CODE, fix_source  # noqa: E402

DEFAULT_CACHE = ROOT / "benchmarks" / ".corpus" / "apex"  # apex_corpus.py's cache (gitignored)


def sources(cache: Path) -> list[Path]:
    files = sorted((ROOT / "fixtures" / "apex").glob("*.in.py")) + sorted((ROOT / "fixtures" / "run").glob("apex*.py"))
    for tree in (cache / "sdist" / "src", cache / "wheel" / "src", cache / "extra"):
        for path in sorted(tree.rglob("*.py")) if tree.is_dir() else ():
            text = path.read_text(errors="replace")
            if "amp.initialize" in text or "scale_loss" in text:
                files.append(path)
    return files


def mutants(source: str, rng: random.Random, count: int):
    lines = source.splitlines(keepends=True)
    statements = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.stmt) and n.end_lineno - n.lineno < 6]
    for _ in range(count):
        one = rng.choice(statements)
        start, end = one.lineno - 1, one.end_lineno
        kind = rng.choice(("pass", "duplicate", "swap"))
        if kind == "pass":
            indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
            new = lines[:start] + [indent + "pass\n"] + lines[end:]
        elif kind == "duplicate":
            new = lines[:end] + lines[start:end] + lines[end:]
        else:
            other = rng.choice(statements)
            a, b = other.lineno - 1, other.end_lineno
            if other.col_offset != one.col_offset or not (b <= start or end <= a):
                continue
            (a, b), (start, end) = sorted([(a, b), (start, end)])
            new = lines[:a] + lines[start:end] + lines[b:start] + lines[a:b] + lines[end:]
        mutant = "".join(new)
        try:
            ast.parse(mutant)
        except SyntaxError:
            continue
        yield mutant


def failure(mutant: str, options: Options) -> str | None:
    result = fix_source(mutant, options)
    internal = [f.message for f in result.findings if f.code == INTERNAL_ERROR_CODE]
    if internal:
        return internal[0]
    try:
        ast.parse(result.new_source)
    except SyntaxError as error:
        return f"broken output: {error}"
    if fix_source(result.new_source, options).new_source != result.new_source:
        return "a second pass changes the output"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-file", type=int, default=12, help="mutation attempts per file")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--out", type=Path, default=Path("/tmp/apex-mutants"))
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    runs = failures = 0
    for path in sources(args.cache):
        source = path.read_text(errors="replace")
        try:
            ast.parse(source)
        except SyntaxError:
            continue
        for mutant in mutants(source, rng, args.per_file):
            for options in (Options(), Options(unsafe_fixes=True)):
                runs += 1
                why = failure(mutant, options)
                if why is not None:
                    failures += 1
                    args.out.mkdir(parents=True, exist_ok=True)
                    (args.out / f"seed{args.seed}_{failures}.py").write_text(mutant)
                    print(f"FAIL {path.name} unsafe={options.unsafe_fixes}: {why[:200]} -> seed{args.seed}_{failures}.py")
    print(f"runs {runs}, failures {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
