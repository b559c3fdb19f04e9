#!/bin/bash
# Session 18, call E (nvidia-h200, one GPU): what the recorder adds on the GPU, with payload copies on the call's
# own stream (.carry/lib) and on a side stream with cross-stream waits (.carry/lib_before, 19f65e6's library):
# record_host_overhead --gpu-bound 128 MiB (a memset before every call keeps the GPU the bound), blocks of 200
# memset + 1-float all-reduce pairs alternating between the real NCCL and RankLens, payloads small and none,
# 6 rounds in a rotating order. Then each build's recorded durations (trace summary of round 6's small runs).
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
results=$OUT/record_gpu_overhead_payload_stream-$C.jsonl
variants=("after small" "before small" "after none" "before none")
for round in $(seq 1 6); do
  for k in 0 1 2 3; do
    read -r build payloads <<< "${variants[$(((k + round) % 4))]}"
    lib=.carry/lib/libnccl.so.2; [[ $build == before ]] && lib=.carry/lib_before/libnccl.so.2
    dir=/tmp/hoe-$build-$payloads-$round
    line=$(timeout 120 .carry/bin/record_host_overhead --real "$REAL" --ranklens $lib --calls 4000 --batch 200 \
             --gpu-bound 134217728 --payloads "$payloads" --trace-dir "$dir" --json) \
      || { echo "run $build $payloads failed"; continue; }
    echo "{\"build\": \"$build\", \"round\": $round, ${line#\{}" >> "$results"
  done
done
python3 - "$results" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
for build in ("before", "after"):
    for payloads in ("small", "none"):
        sel = [r for r in rows if r["build"] == build and r["payloads"] == payloads]
        if not sel: continue
        print(build, payloads, "runs", len(sel), "GPU ns per pair real", statistics.median(r["gpu_ns_per_call_real"] for r in sel),
              "added by RankLens", statistics.median(r["gpu_added_ns"] for r in sel), sorted(r["gpu_added_ns"] for r in sel))
PY
for build in before after; do
  echo "== $build, payloads small, round 6"
  .carry/bin/ranklens trace summary /tmp/hoe-$build-small-6/rank0 2>&1 | grep -E "payloads_staged|GPU time" | head -3
done | tee "$OUT/gpu_overhead_traces-$C.txt"
cp /tmp/meta.txt "$OUT/meta_s18e-$C.txt"
