#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what RankLens needs (Debian 12 / Ubuntu 24.04 packages) and builds it with a CMake preset.
# Idempotent: packages already present are not reinstalled, and the build is incremental.
#   scripts/setup.sh [preset...]     (default: release)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake g++ make python3 python3-pip libzstd-dev zlib1g-dev libisal-dev libmsgpack-cxx-dev libyaml-cpp-dev libcli11-dev
          libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev clang clang-format libclang-rt-14-dev gdb)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The independent Python trace reader (tools/python) and its tests: msgpack + zstandard + pytest, nothing else.
if ! python3 -c "import msgpack, zstandard, pytest" 2>/dev/null; then
  echo "setup: installing Python packages msgpack zstandard pytest" >&2
  python3 -m pip install -q msgpack zstandard pytest 2>/dev/null ||
    python3 -m pip install -q --break-system-packages msgpack zstandard pytest
fi

if [[ ! -x /usr/local/cuda/bin/nvcc || ! -f /usr/local/cuda/include/nccl.h ]]; then
  echo "setup: error: the CUDA 13 toolkit with NCCL's nccl.h is expected at /usr/local/cuda (nvcc, include/nccl.h);" \
       "install it (NVIDIA's cuda-toolkit and libnccl-dev packages) or use docker/Dockerfile" >&2
  exit 1
fi

presets=("$@")
((${#presets[@]})) || presets=(release)
jobs=$(nproc)
for preset in "${presets[@]}"; do
  echo "setup: building preset '$preset' in build/$preset" >&2
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
done
