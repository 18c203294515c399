#!/usr/bin/env bash
# The release a person installs, checked (the last step of .ci/run; ~20 s): `python -m build` makes the sdist and,
# from it, the wheel; the wheel holds the package only (no tests, no fixtures); installed into a fresh venv,
# `ampfix check` and `ampfix run` work from there, not from this checkout.
#
# --no-isolation: the build uses the setuptools and build of the test venv (the test extra pins them) instead of
# downloading its own. The fresh venv gets the wheel and its dependencies from pip; only torch, for `ampfix run`,
# is borrowed from the test venv (a .pth line after the venv's own packages) instead of a multi-GB install.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$PY" -m build --no-isolation --outdir "$work/dist" . > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
wheel=$(ls "$work"/dist/ampfix-*.whl)
ls "$work"/dist/ampfix-*.tar.gz > /dev/null
"$PY" - "$wheel" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
outside = [n for n in names if not n.startswith("ampfix/") and ".dist-info/" not in n]
assert not outside, f"the wheel holds more than the package: {outside}"
assert "ampfix/runner/child/bootstrap/sitecustomize.py" in names, "the runner's bootstrap is missing"
assert "ampfix/codemod.py" in names and "ampfix/flake8_plugin.py" in names
entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
text = zipfile.ZipFile(sys.argv[1]).read(entry_points).decode()
assert "[flake8.extension]\nAMP = ampfix.flake8_plugin:Plugin" in text and "ampfix = ampfix.__main__:main" in text, text
print(f"wheel: {len(names)} files, the package only")
PY

python3 -m venv --without-pip "$work/venv"
"$PY" -m pip --python "$work/venv/bin/python" install -q --disable-pip-version-check "$wheel" 2> "$work/pip.log" \
    || { cat "$work/pip.log"; exit 1; }
borrowed=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
own=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$borrowed" > "$own/zz_torch_from_the_test_venv.pth"

cp -r fixtures/demo "$work/demo"
cd "$work"
"$work/venv/bin/python" -c "import ampfix, sys; assert ampfix.__file__.startswith(sys.prefix), ampfix.__file__"
set +e
"$work/venv/bin/ampfix" check -q demo > check.out
code=$?
set -e
[ "$code" = 1 ] || { cat check.out; echo "ampfix check: exit $code, expected 1 (findings)"; exit 1; }
grep -qx 'demo/train.py:21:14: AMP002 \[\*\] `torch.cuda.amp.GradScaler(...)` -> `torch.amp.GradScaler(...)` with device "cuda"' check.out \
    || { cat check.out; echo "ampfix check: the demo's GradScaler finding is missing"; exit 1; }
"$work/venv/bin/ampfix" run --max-steps 1 demo/train.py > run.out 2>&1 || { cat run.out; exit 1; }
grep -q "optimizer steps      1" run.out || { cat run.out; echo "ampfix run: no optimizer step reported"; exit 1; }
echo "installed wheel: ampfix check and ampfix run work from a fresh venv"
