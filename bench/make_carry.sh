#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Prepares .carry/ (ignored by git) for a GPU machine that cannot build (no Debian build dependencies): builds the
# release preset, copies the library, the test suite's fake real NCCL (.carry/fake_real), the tools and benchmark
# binaries the bench drivers run (debug info stripped, to keep .carry/ small), the Debian shared libraries they need
# and such a machine lacks (yaml-cpp, ISA-L) into .carry/deps and beside libnccl.so.2, and the commit into
# .carry/COMMIT. Leaves .carry/nccl-tests and .carry/frameworks alone.
#   bench/make_carry.sh
# Then copy .carry/ beside the repository on the GPU machine and run the drivers from the repository root with
# LD_LIBRARY_PATH=$PWD/.carry/deps (bench/README.md). scripts/gpu-bundle.sh makes the GPU acceptance run's bundle.
set -euo pipefail
cd "$(dirname "$0")/.."

cmake --preset release > /dev/null
cmake --build --preset release -j"$(nproc)"
mkdir -p .carry/bin .carry/lib .carry/deps
for name in ranklens rlpayload record_host_overhead replay_host_overhead hold_completion prefetcher_contention \
            test_cuda_device test_reduction_parity payload_codec_choices; do
  built=$(find build/release -name "$name" -type f -perm -u+x | head -1)
  [[ -n $built ]] || { echo "make_carry: $name was not built" >&2; exit 1; }
  cp "$built" .carry/bin/ && strip --strip-debug ".carry/bin/$name"
done
cp -L build/release/nccl_fake/libnccl.so.2 .carry/lib/ && strip --strip-debug .carry/lib/libnccl.so.2
# The test suite's fake real NCCL: record_host_overhead --device host runs the recorder's pipeline without a GPU.
mkdir -p .carry/fake_real && cp -L build/release/tests/fake_real_nccl/libnccl.so.2 .carry/fake_real/
# (from the build tree's library: the carried one finds its neighbours in .carry/lib once they are there)
mapfile -t debian < <(ldd build/release/nccl_fake/libnccl.so.2 | awk '/libyaml-cpp|libisal/ {print $3}' | sort -u)
((${#debian[@]} >= 2)) || { echo "make_carry: expected yaml-cpp and ISA-L among the libraries, found: ${debian[*]}" >&2; exit 1; }
cp -L "${debian[@]}" .carry/deps/
cp -L "${debian[@]}" .carry/lib/
git rev-parse --short HEAD > .carry/COMMIT
if [[ -n $(git status --porcelain --untracked-files=no) ]]; then
  echo "make_carry: warning: uncommitted changes are in this build; .carry/COMMIT says $(cat .carry/COMMIT)" >&2
fi
du -sh .carry/* | sed 's/^/make_carry: /'
