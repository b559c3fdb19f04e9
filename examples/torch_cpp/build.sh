#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build c10d_train against the torch installed for PYTHON (a pip wheel): examples/torch_cpp/build.sh BUILD_DIR [PYTHON]
# Prints the binary's path last. Needs cmake, a C++ compiler and the CUDA toolkit that matches the wheel's CUDA major
# version (nvcc on PATH, or CUDA_HOME, or /usr/local/cuda).
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 || $1 == -h || $1 == --help ]]; then
  echo "usage: $0 BUILD_DIR [PYTHON]   (PYTHON: the interpreter whose torch to build against; default python3)" >&2
  exit 64
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build_dir=$1
python=${2:-python3}

# One query: the CMake prefix, the C++ ABI the wheel was built with, versions, and the wheel's own NCCL.
err=$(mktemp)
trap 'rm -f "$err"' EXIT
if ! info=$("$python" - 2>"$err" <<'EOF'
import os, torch
lib = os.path.join(os.path.dirname(torch.__file__), os.pardir, "nvidia", "nccl", "lib", "libnccl.so.2")
print(torch.utils.cmake_prefix_path)
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(torch.__version__, torch.version.cuda)
print(os.path.realpath(lib) if os.path.exists(lib) else "")
EOF
); then
  echo "error: cannot import torch with '$python':" >&2
  tail -n 3 "$err" >&2
  echo "       give the interpreter of a torch install, e.g. $0 $build_dir /opt/torch/.venv/bin/python" >&2
  exit 1
fi
{ read -r prefix; read -r abi; read -r versions; read -r nccl; } <<<"$info"
if [[ -z $prefix || ! -d $prefix/Torch ]]; then
  echo "error: '$python' has torch but no CMake config under '$prefix' (a wheel without libtorch headers?)" >&2
  exit 1
fi
echo "c10d_train: torch $versions (CUDA), _GLIBCXX_USE_CXX11_ABI=$abi, prefix $prefix"

# Torch's config does not set the ABI macro itself (TORCH_CXX_FLAGS is empty for the wheels): match the wheel's.
cmake -S "$here" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_FLAGS="-D_GLIBCXX_USE_CXX11_ABI=$abi"
cmake --build "$build_dir" --parallel "$(nproc)"

[[ -n $nccl ]] && echo "the wheel's real NCCL (ranklens record --real-nccl): $nccl"
realpath "$build_dir/c10d_train"
