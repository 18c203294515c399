#!/usr/bin/env bash
# The runner's release adaptations checked on a second torch, 2.14.1, beside the suite's 2.13.0 (.ci/run's last
# step; needs the repository's .venv, which .ci/run makes first):  bash scripts/runner_on_torch_release.sh
#
# torch 2.14.1 is installed once into a cache folder this script creates (CACHE, default
# ~/.cache/ampfix/torch-2.14.1, with `pip install --target`) and reused; from nothing it takes 1-2.5 minutes (4 GB
# unpacked). Only torch's wheel and the CUDA libraries its libtorch_cuda.so links at import (readelf -d: NEEDED),
# at the exact versions torch's metadata pins, all from this machine's disk (--no-deps: nothing is resolved
# against the internet). Left out: triton (torch.compile's GPU code generator, ~900 MB, unused on a CPU),
# cuda-bindings/cuda-pathfinder (the registry's), cuSOLVER, CUPTI, NVTX (loaded only on a GPU). torch's pure-Python
# dependencies (sympy, numpy, ...), pytest and ampfix itself are the repository's .venv's.
#
# Each run makes a small venv in the repository (.venv-torch-2.14.1, no pip) whose path holds the cached torch
# first, then the .venv's packages (two .pth files, read in name order), so torch 2.14.1 is imported, not the
# .venv's 2.13.0; the `ampfix run` children the tests start are that venv's Python too.
set -euo pipefail
cd "$(dirname "$0")/.."
release=2.14.1
cache=${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ampfix/torch-$release}
# torch's wheel and the libraries libtorch_cuda.so needs to load (libcudart, libcublas(Lt), libcufft, libcufile,
# libcurand, libcusparse (which needs libnvJitLink), libnvrtc, libcudnn, libcusparseLt, libnccl, libnvshmem).
wheels=(torch==2.14.1 nvidia-cuda-runtime==13.0.96 nvidia-cublas==13.1.1.3 nvidia-cufft==12.0.0.61
  nvidia-cufile==1.15.1.6 nvidia-curand==10.4.0.35 nvidia-cusparse==12.6.3.3 nvidia-nvjitlink==13.4.92
  nvidia-cuda-nvrtc==13.0.88 nvidia-cudnn-cu13==9.24.0.43 nvidia-cusparselt-cu13==0.8.1 nvidia-nccl-cu13==2.30.7
  nvidia-nvshmem-cu13==3.4.5)
if [ ! -e "$cache/.complete" ]; then  # from nothing, or after an install that did not finish
  rm -rf "$cache" && mkdir -p "$cache"
  .venv/bin/pip install -qq --no-deps --only-binary :all: --target "$cache" "${wheels[@]}"
  touch "$cache/.complete"
fi
venv=.venv-torch-$release
rm -rf "$venv" && python3 -m venv --without-pip "$venv"
venv_site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
main_site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$cache" > "$venv_site/a_torch_$release.pth"
echo "import site; site.addsitedir('$main_site')" > "$venv_site/b_repository_venv.pth"
"$venv/bin/python" -c "
import sys, torch, ampfix
print('torch', torch.__version__, 'from', torch.__file__, '; ampfix from', ampfix.__file__)
sys.exit(torch.__version__.split('+')[0] != '$release')"
# The tests that cover what differs between releases, not the whole ~10 minutes of the runner's modules:
# - test_runner_releases.py: each adaptation with the feature faked away, and the installed torch's own;
# - the CUDA op policy table against 2.14.1's autocast header and registrations (it adds _cudnn_rnn and
#   linalg_matrix_sqrth), one real run of every probed op under it, and the CPU-gaps table against 2.14.1's
#   OpInfo database (its bfloat16 FFTs);
# - custom_fwd's regions (2.14's Function.apply has no Python frame) in a run and in `verify --device cpu`.
# Named one by one: a test renamed away fails here (pytest exit 4), and so does an empty selection (exit 5).
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests/test_runner_releases.py \
  tests/test_runner_policy.py::test_the_table_is_the_installed_torchs_header \
  tests/test_runner_policy.py::test_the_table_covers_every_op_cuda_autocast_registers \
  tests/test_runner_policy.py::test_the_ops_beside_the_header_run_the_policy_cuda_autocast_gives_them \
  tests/test_runner_policy.py::test_ops_left_to_the_cpu_kernel_are_registered_there \
  tests/test_runner_policy.py::test_each_op_gives_the_dtype_cuda_autocast_gives \
  tests/test_runner_policy.py::test_the_ops_the_cpu_lacks_in_low_precision_are_the_installed_torchs \
  tests/test_runner.py::test_custom_fwd_cast_inputs_keeps_working \
  tests/test_runner_cpu_target.py::test_verify_makes_the_cpu_rewrite_itself_and_custom_fwd_casts_in_the_runs_dtype
