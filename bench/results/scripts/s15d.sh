#!/bin/bash
# Session 15, call D (nvidia-h200, one GPU): is the host-bound replay of the shipped DDP trace slower than at
# 1f663c6 (14.61 ms replayed vs 14.44 recorded then; 17.6 ms in s15c)? The launcher and library of 1f663c6
# (.carry/old, built from that commit) and of this commit (.carry), alternating, three replays each, same machine.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env
for i in 1 2 3; do
  for v in old new; do
    d=.carry; [[ $v == old ]] && d=.carry/old
    LD_LIBRARY_PATH=$PWD/$d/lib:$LD_LIBRARY_PATH timeout 120 $d/bin/ranklens replay --lib $d/lib/libnccl.so.2 \
      --trace examples/traces/ddp-2xh200 --rank 1 --trace-dir /tmp/rep-$v-$i -- $PY examples/torch/train_gpt.py \
      --steps 20 --mark-steps --log-all-ranks > /tmp/rep-$v-$i.log 2>&1
    echo "$v $i rc=$? $(grep -E 'median step' /tmp/rep-$v-$i.log | head -1)"
  done
done | tee /tmp/summary.txt
{ cat /tmp/meta.txt /tmp/summary.txt; for f in /tmp/rep-*.log; do echo "== $f"; cat $f; done; } > $OUT/replay_shipped_ddp_ab-$C.log
