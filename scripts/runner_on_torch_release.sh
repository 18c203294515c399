#!/usr/bin/env bash
# The runner's release adaptations checked on a second torch (default 2.14.1), beside the suite's 2.13.0:
#   bash scripts/runner_on_torch_release.sh [VENV]
# VENV (default ~/.cache/ampfix/torch-2.14.1) holds torch alone; it is made once (pip install torch==2.14.1:
# torch and the nvidia-* libraries come from this machine's disk, a few small dependencies such as cuda-bindings
# from the registry; ~5 GB, 5-10 minutes on 2 shared cores) and reused. Everything else (pytest, libcst, ampfix
# itself) is read from the repository's .venv, appended to the venv's path by a .pth file, so nothing of
# ampfix's is installed twice. Runs the test modules that need no `ampfix run` job (seconds, not the ~4 minutes
# of all the runner modules); benchmarks/torch_matrix.py runs them all.
set -euo pipefail
cd "$(dirname "$0")/.."
release=${AMPFIX_SECOND_TORCH:-2.14.1}
venv=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/ampfix/torch-$release}
if ! "$venv/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$release')" 2>/dev/null; then
  rm -rf "$venv" && python3 -m venv "$venv" && "$venv/bin/pip" install -q "torch==$release"
fi
main_site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
venv_site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "import site; site.addsitedir('$main_site')" > "$venv_site/zz_ampfix_main_venv.pth"
"$venv/bin/python" -c "import torch, ampfix; print('torch', torch.__version__, 'ampfix from', ampfix.__file__)"
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests/test_runner_releases.py \
  tests/test_runner_policy.py -k "releases or table or beside or header or registered"
