#!/bin/bash
# Session 18, call K (nvidia-h200, one GPU): the payload copy kernel launched through the driver (.carry/lib, this
# commit) against the runtime's launch (.carry/lib_before, f73e839): record_host_overhead --probe --payloads small,
# 50,000 calls, 8 rounds alternating; --gpu-bound for both once per round; then the GPU tests.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
host=$OUT/record_host_overhead_driver_launch-$C.jsonl
gpu=$OUT/record_gpu_overhead_driver_launch-$C.jsonl
for round in $(seq 1 8); do
  order="driver runtime"; [[ $((round % 2)) == 0 ]] && order="runtime driver"
  for build in $order; do
    lib=.carry/lib/libnccl.so.2; [[ $build == runtime ]] && lib=.carry/lib_before/libnccl.so.2
    line=$(timeout 120 .carry/bin/record_host_overhead --real "$REAL" --ranklens $lib --calls 50000 --probe \
             --payloads small --trace-dir /tmp/hok-h-$build-$round --json) \
      && echo "{\"build\": \"$build\", \"round\": $round, ${line#\{}" >> "$host" || echo "host $build failed"
    line=$(timeout 120 .carry/bin/record_host_overhead --real "$REAL" --ranklens $lib --calls 4000 --batch 200 \
             --gpu-bound 134217728 --payloads small --trace-dir /tmp/hok-g-$build-$round --json) \
      && echo "{\"build\": \"$build\", \"round\": $round, ${line#\{}" >> "$gpu" || echo "gpu $build failed"
  done
done
python3 - "$host" "$gpu" <<'PY'
import json, sys, statistics
host = [json.loads(l) for l in open(sys.argv[1])]
gpu = [json.loads(l) for l in open(sys.argv[2])]
by = {}
for r in host: by.setdefault(r["round"], {})[r["build"]] = r["added_median_ns"]
for build in ("runtime", "driver"):
    print(build, "host added median", statistics.median(r["added_median_ns"] for r in host if r["build"] == build),
          "GPU added median", statistics.median(r["gpu_added_ns"] for r in gpu if r["build"] == build))
print("paired host (driver - runtime):", sorted(v["driver"] - v["runtime"] for v in by.values() if len(v) == 2))
PY
.carry/bin/ranklens trace summary /tmp/hok-h-driver-8/rank0 2>&1 | grep -o "payload_copy_failures [0-9]*\|payloads_staged [0-9]*"
export LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH
RANKLENS_DEVICE=cuda timeout 200 .carry/bin/test_cuda_device > "$OUT/gpu_tests-$C.txt" 2>&1
echo "gpu tests rc=$?"; tail -1 "$OUT/gpu_tests-$C.txt"; grep -E "FAILED|Failure" -A4 "$OUT/gpu_tests-$C.txt" | head -20
