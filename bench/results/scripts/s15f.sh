#!/bin/bash
# Session 15, call F (nvidia-h200, one GPU): s15d/s15e left it open whether this commit's replay of the shipped DDP
# trace (host-bound) is slower than 1f663c6's (7 replays each: means 19.2 vs 17.5 ms, spread 14-23 ms). Eight more
# of each, alternating, each into a fresh event directory.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env
for i in 1 2 3 4 5 6 7 8; do
  for v in old new; do
    d=.carry; [[ $v == old ]] && d=.carry/old
    rm -rf /tmp/rep-$v-$i
    LD_LIBRARY_PATH=$PWD/$d/lib:$LD_LIBRARY_PATH timeout 90 $d/bin/ranklens replay --lib $d/lib/libnccl.so.2 \
      --trace examples/traces/ddp-2xh200 --rank 1 --trace-dir /tmp/rep-$v-$i -- $PY examples/torch/train_gpt.py \
      --steps 10 --mark-steps --log-all-ranks > /tmp/rep-$v-$i.log 2>&1
    echo "$v $i rc=$? $(grep -E 'median step' /tmp/rep-$v-$i.log | head -1)"
  done
done | tee /tmp/summary.txt
{ cat /tmp/meta.txt /tmp/summary.txt; for f in /tmp/rep-*.log; do echo "== $f"; cat $f; done; } > $OUT/replay_shipped_ddp_ab8-$C.log
