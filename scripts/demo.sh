#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# RankLens's main job on a shipped default: set up and build, then replay rank 1 of a job recorded on 2 H200 GPUs
# alone on this machine and print how faithful the replay was (signature match, step times).
#   scripts/demo.sh                 nccl_minitrain (plain NCCL C++, examples/traces/minitrain-2xh200); works without a
#                                   GPU (RankLens's host device: GPU time is accounted, not waited)
#   scripts/demo.sh --torch         the DDP example (examples/traces/ddp-2xh200); needs a GPU and PyTorch (PYTHON,
#                                   default python3)
#   scripts/demo.sh --structure     no recording: rank 3 of a virtual 8-rank TP x DP job (structure replay)
#   extra arguments go to `ranklens replay` (e.g. --fidelity value, --rank 0)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh release >&2
ranklens=build/release/tools/ranklens
case "${1:-}" in
  --torch)
    shift
    exec "$ranklens" replay --trace examples/traces/ddp-2xh200 --rank 1 "$@" \
      -- "${PYTHON:-python3}" examples/torch/train_gpt.py --steps 10 --mark-steps --log-all-ranks ;;
  --structure)
    shift
    exec "$ranklens" replay --rank 3 --world-size 8 --config examples/minitrain-world8.yaml "$@" \
      -- build/release/examples/nccl_minitrain --steps 3 --tp 2 ;;
  *)
    exec "$ranklens" replay --trace examples/traces/minitrain-2xh200 --rank 1 "$@" \
      -- build/release/examples/nccl_minitrain --steps 10 ;;
esac
