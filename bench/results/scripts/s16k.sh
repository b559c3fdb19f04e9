#!/bin/bash
# Session 16, call K (nvidia-h200, one GPU): what captured_timing: events costs a larger CUDA graph.
# graph_allreduce.py --matmul 4096 --buckets 16 (16 pairs of a 4096^3 matrix product and a 4 MiB all-reduce, then a
# small all-reduce: 17 captured calls, 1 rank) launched 300 times per run: without RankLens, and
# recorded with captured_timing events and off (the graph then holds none of RankLens's nodes); the three kinds of
# run interleaved, 3 rounds. Per run: median and p90 of the launches' GPU time (CUDA events around each launch),
# launches 10-299.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env
export LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH
log=$OUT/graph_capture_cost_large-$C.log
cat /tmp/meta.txt > $log
prog=(examples/torch/graph_allreduce.py --launches 300 --matmul 4096 --buckets 16)
for round in 1 2 3; do
  for kind in plain events off; do
    d=/tmp/g16k-$kind-$round-$RANDOM
    case $kind in
      plain) cmd=(env LD_LIBRARY_PATH=$PWD/.carry/deps $PY -m torch.distributed.run --standalone --nproc-per-node 1 "${prog[@]}") ;;
      *) cmd=(env RANKLENS_CAPTURED_TIMING=$kind .carry/bin/ranklens record --lib .carry/lib/libnccl.so.2 --trace $d -- \
              $PY -m torch.distributed.run --standalone --nproc-per-node 1 "${prog[@]}") ;;
    esac
    timeout 120 "${cmd[@]}" > /tmp/run.out 2>&1; rc=$?
    { echo "== round $round $kind rc=$rc: ${cmd[*]}"; grep -v "^launch" /tmp/run.out; } >> $log
    grep "^RESULT" /tmp/run.out | $PY -c '
import json, statistics, sys
r = json.loads(sys.stdin.read()[len("RESULT "):])
ms = sorted(l["ms"] for l in r["launches"][10:])
print(f"round '$round' '$kind' rc='$rc' launches {len(ms)} median_us {1000*statistics.median(ms):.1f} p90_us {1000*ms[int(0.9*(len(ms)-1))]:.1f} max_us {1000*ms[-1]:.1f}")
' | tee -a $log
    [[ $kind != plain ]] && .carry/bin/ranklens trace summary $d 2>&1 | grep counters | cut -c1-300 >> $log
  done
done
