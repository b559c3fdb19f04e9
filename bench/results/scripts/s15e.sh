#!/bin/bash
# Session 15, call E (nvidia-h200, one GPU): s15d found this commit's replay of the shipped DDP trace (host-bound,
# 23M parameters) 2-3 ms a step slower than 1f663c6's on one machine. Which half: the library and launcher, or the
# Python adapter? Four variants alternating, four replays each, 10 steps (the recording's): old = 1f663c6's
# (.carry/old), new = this commit's (.carry), and the two crossed (.carry/oldlib_newpy, .carry/newlib_oldpy).
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env
declare -A dir=([old]=.carry/old [new]=.carry [oldlib_newpy]=.carry/oldlib_newpy [newlib_oldpy]=.carry/newlib_oldpy)
for i in 1 2 3 4; do
  for v in old new oldlib_newpy newlib_oldpy; do
    d=${dir[$v]}
    LD_LIBRARY_PATH=$PWD/$d/lib:$LD_LIBRARY_PATH timeout 90 $d/bin/ranklens replay --lib $d/lib/libnccl.so.2 \
      --trace examples/traces/ddp-2xh200 --rank 1 --trace-dir /tmp/rep-$v-$i -- $PY examples/torch/train_gpt.py \
      --steps 10 --mark-steps --log-all-ranks > /tmp/rep-$v-$i.log 2>&1
    echo "$v $i rc=$? $(grep -E 'median step' /tmp/rep-$v-$i.log | head -1)"
  done
done | tee /tmp/summary.txt
{ cat /tmp/meta.txt /tmp/summary.txt; for f in /tmp/rep-*.log; do echo "== $f"; cat $f; done; } > $OUT/replay_shipped_ddp_ab4-$C.log
