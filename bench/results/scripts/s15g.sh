#!/bin/bash
# Session 15, call G (nvidia-h200, one GPU): record mode now opens its trace before the real NCCL creates the first
# communicator. Check on a GPU that the manifest still names it (a 1-rank DDP job under `ranklens record`), and that
# a second recording into the same directory, without the launcher, is refused with the reason PyTorch shows.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env
export LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH
rm -rf /tmp/rec1
train=(examples/torch/train_gpt.py --steps 3 --mark-steps --log-all-ranks)
timeout 120 .carry/bin/ranklens record --lib .carry/lib/libnccl.so.2 --trace /tmp/rec1 -- \
  $PY -m torch.distributed.run --standalone --nproc-per-node 1 "${train[@]}" > /tmp/rec1.log 2>&1
echo "record rc=$?"; .carry/bin/ranklens trace summary /tmp/rec1 2>&1 | head -4
RANKLENS_MODE=record RANKLENS_TRACE_DIR=/tmp/rec1 LD_PRELOAD=$PWD/.carry/lib/libnccl.so.2 timeout 120 \
  $PY -m torch.distributed.run --standalone --nproc-per-node 1 "${train[@]}" > /tmp/rec2.log 2>&1
echo "second recording into the same directory rc=$?"; grep -m3 -E "Last error|already holds|no communicator" /tmp/rec2.log
{ cat /tmp/meta.txt; echo "== rec1"; cat /tmp/rec1.log; echo "== rec2"; cat /tmp/rec2.log; } > $OUT/record_trace_dir_refusal-$C.log
