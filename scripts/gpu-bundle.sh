#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Makes .carry/ (ignored by git): everything the GPU acceptance run (scripts/gpu-test.sh) needs on a GPU machine that
# can neither build RankLens (no yaml-cpp, ISA-L, CLI11 packages) nor download anything (an air-gapped cluster node,
# a lent test machine). Run it here, on a machine with the build dependencies and network; then copy the repository
# with .carry/ there and run `scripts/gpu-test.sh --prefix .carry/ranklens`.
#   .carry/ranklens/        RankLens installed (bin/ranklens, bin/nccl_minitrain, lib/libnccl.so.2 and the
#                           placement library, share/ranklens/python), debug info stripped; lib/ and deps/ hold the
#                           yaml-cpp and ISA-L it links (deps/ goes on the tools' LD_LIBRARY_PATH: it has no NCCL);
#                           cudart/ the CUDA runtime nccl_minitrain links (apart, so that torch never picks it up)
#   .carry/frameworks/      DeepSpeed's wheels and Megatron-LM's sources (scripts/prepare_frameworks.sh)
#   .carry/nccl-tests.tgz   NVIDIA/nccl-tests' sources at NCCL_TESTS_REF (default v2.18.3, the last release that builds
#                           against NCCL 2.28's header: later ones use the 2.29 device API), built there with MPI
#                           (NCCL_TESTS_GIT: a clone or mirror; default: github), and .carry/nccl-home/include, the
#                           NCCL headers to build them with (nccl.h, nccl_device.h, nccl_device/)
#   .carry/COMMIT           the commit the bundle was made from
#   scripts/gpu-bundle.sh
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.carry/' .git/info/exclude 2>/dev/null || echo '/.carry/' >> .git/info/exclude

cmake --preset release > /dev/null
cmake --build --preset release -j "$(nproc)"
rm -rf .carry/ranklens
cmake --install build/release --prefix .carry/ranklens > /dev/null
for f in .carry/ranklens/bin/* .carry/ranklens/lib/*.so*; do strip --strip-debug "$f"; done
mkdir -p .carry/ranklens/deps .carry/ranklens/cudart
mapfile -t deps < <(ldd build/release/nccl_fake/libnccl.so.2 build/release/tools/ranklens |
                    awk '/libyaml-cpp|libisal/ {print $3}' | sort -u)
((${#deps[@]} >= 2)) || { echo "gpu-bundle: expected yaml-cpp and ISA-L among the libraries, found: ${deps[*]}" >&2; exit 1; }
cp -L "${deps[@]}" .carry/ranklens/deps/
cp -L "${deps[@]}" .carry/ranklens/lib/
cudart=$(ldd build/release/examples/nccl_minitrain | awk '/libcudart/ {print $3}')
[[ -z $cudart ]] || cp -L "$cudart" .carry/ranklens/cudart/

if [[ ! -f .carry/frameworks/megatron-lm.tgz ]]; then
  scripts/prepare_frameworks.sh
fi

src=${NCCL_TESTS_GIT:-https://github.com/NVIDIA/nccl-tests}
ref=${NCCL_TESTS_REF:-v2.18.3}
if [[ -d $src ]]; then
  git -C "$src" archive --format=tar.gz --prefix=nccl-tests/ -o "$PWD/.carry/nccl-tests.tgz" "$ref"
else
  tmp=$(mktemp -d)
  git clone -q --depth 1 --branch "$ref" "$src" "$tmp/nccl-tests"
  tar czf .carry/nccl-tests.tgz -C "$tmp" --exclude=.git nccl-tests
  rm -rf "$tmp"
fi
mkdir -p .carry/nccl-home/include
cp -r /usr/local/cuda/include/nccl.h /usr/local/cuda/include/nccl_device.h /usr/local/cuda/include/nccl_device \
  .carry/nccl-home/include/
git rev-parse --short HEAD > .carry/COMMIT
[[ -z $(git status --porcelain --untracked-files=no) ]] ||
  echo "gpu-bundle: warning: uncommitted changes are in this build; .carry/COMMIT says $(cat .carry/COMMIT)" >&2
du -sh .carry/* | sed 's/^/gpu-bundle: /'
