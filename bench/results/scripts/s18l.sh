#!/bin/bash
# Session 18, call L (nvidia-h200, one GPU): the payload copy as the session began (.carry/lib_before: 19f65e6's
# library, a D2H cudaMemcpyAsync on a side stream with two cross-stream waits) against as it ends (.carry/lib, this
# commit: a one-block kernel into mapped staging, launched through the driver, setting a completion flag), on one
# machine: record_host_overhead --probe and --gpu-bound, payloads small and none, 6 rounds alternating.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
host=$OUT/record_host_overhead_session18-$C.jsonl
gpu=$OUT/record_gpu_overhead_session18-$C.jsonl
for round in $(seq 1 6); do
  order="end begin"; [[ $((round % 2)) == 0 ]] && order="begin end"
  for build in $order; do
    lib=.carry/lib/libnccl.so.2; [[ $build == begin ]] && lib=.carry/lib_before/libnccl.so.2
    for payloads in small none; do
      line=$(timeout 120 .carry/bin/record_host_overhead --real "$REAL" --ranklens $lib --calls 50000 --probe \
               --payloads $payloads --trace-dir /tmp/hol-h-$build-$payloads-$round --json) \
        && echo "{\"build\": \"$build\", \"round\": $round, ${line#\{}" >> "$host" || echo "host $build failed"
      line=$(timeout 120 .carry/bin/record_host_overhead --real "$REAL" --ranklens $lib --calls 4000 --batch 200 \
               --gpu-bound 134217728 --payloads $payloads --trace-dir /tmp/hol-g-$build-$payloads-$round --json) \
        && echo "{\"build\": \"$build\", \"round\": $round, ${line#\{}" >> "$gpu" || echo "gpu $build failed"
    done
  done
done
python3 - "$host" "$gpu" <<'PY'
import json, sys, statistics
host = [json.loads(l) for l in open(sys.argv[1])]
gpu = [json.loads(l) for l in open(sys.argv[2])]
for payloads in ("small", "none"):
    for build in ("begin", "end"):
        h = [r["added_median_ns"] for r in host if r["build"] == build and r["payloads"] == payloads]
        g = [r["gpu_added_ns"] for r in gpu if r["build"] == build and r["payloads"] == payloads]
        print(payloads, build, "host added", statistics.median(h), "GPU added", statistics.median(g))
PY
cp /tmp/meta.txt "$OUT/meta_s18l-$C.txt"
