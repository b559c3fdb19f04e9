#!/bin/bash
# Session 18, call M (nvidia-h200, one GPU): in the host-bound loop of record_host_overhead (back-to-back 1-float
# all-reduces), what the recorder writes as each call's GPU duration, with and without a stored payload, for the
# library as the session began (.carry/lib_before, 19f65e6: side-stream copy) and as it ends (.carry/lib, 5a29bdd's
# library: copy kernel with a flag): 3 rounds, 50,000 calls each, the trace summary's GPU time per call.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/recorded_durations_host_bound-$C.txt
for round in 1 2 3; do
  for build in end begin; do
    lib=.carry/lib/libnccl.so.2; [[ $build == begin ]] && lib=.carry/lib_before/libnccl.so.2
    for payloads in none small; do
      dir=/tmp/hom-$build-$payloads-$round
      timeout 120 .carry/bin/record_host_overhead --real "$REAL" --ranklens $lib --calls 50000 --payloads $payloads \
        --trace-dir $dir --json > /dev/null || { echo "$build $payloads failed"; continue; }
      ms=$(.carry/bin/ranklens trace summary $dir/rank0 2>&1 | grep -E "initAll .* calls" | head -1 |
           sed -E 's/.*, ([0-9.]+) ms GPU time.*/\1/')
      calls=$(.carry/bin/ranklens trace summary $dir/rank0 2>&1 | grep -E "initAll .* calls" | head -1 |
              sed -E 's/.*initAll +([0-9]+) calls.*/\1/')
      echo "round $round $build payloads=$payloads: $ms ms GPU time over $calls calls = $(python3 -c "print(round($ms*1000/$calls, 3))") us per call" | tee -a "$out"
    done
  done
done
