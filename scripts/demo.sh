#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# RankLens's main job on a shipped default: set up and build, then replay rank 3 of an 8-rank TP x DP job
# (examples/nccl_minitrain, a plain NCCL C++ program linked against the real libnccl.so.2) alone on this machine, in
# structure mode, and print its signature summary. Works without a GPU (host device).
#   scripts/demo.sh [--rank R] [extra ranklens replay options...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh release >&2
rank=3
if [[ ${1:-} == --rank ]]; then rank=$2; shift 2; fi
exec build/release/tools/ranklens replay --rank "$rank" --world-size 8 --config examples/minitrain-world8.yaml "$@" \
  -- build/release/examples/nccl_minitrain --steps 3 --tp 2
