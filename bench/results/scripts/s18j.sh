#!/bin/bash
# Session 18, call J (nvidia-h200, one GPU): do the payload copies change the recorded durations when the GPU is the
# bound? record_host_overhead --gpu-bound 128 MiB, payloads small, the side-stream build (.carry/lib_before, 19f65e6)
# and the copy kernel with its flag (.carry/lib, f73e839) alternating, 4 rounds; each run's recorded GPU time per call
# from its trace summary.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/recorded_durations_gpu_bound-$C.txt
for round in 1 2 3 4; do
  order="flag side"; [[ $((round % 2)) == 0 ]] && order="side flag"
  for build in $order; do
    lib=.carry/lib/libnccl.so.2; [[ $build == side ]] && lib=.carry/lib_before/libnccl.so.2
    dir=/tmp/hoj-$build-$round
    line=$(timeout 120 .carry/bin/record_host_overhead --real "$REAL" --ranklens $lib --calls 4000 --batch 200 \
             --gpu-bound 134217728 --payloads small --trace-dir $dir --json) || { echo "$build failed"; continue; }
    summary=$(.carry/bin/ranklens trace summary $dir/rank0 2>&1 | grep -E "initAll .* calls" | head -1)
    echo "round $round $build: $summary | $line" | tee -a "$out"
  done
done
