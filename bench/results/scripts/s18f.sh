#!/bin/bash
# Session 18, call F (nvidia-h200, one GPU): small payloads copied by a kernel into mapped staging memory (.carry/lib,
# this commit) against a D2H cudaMemcpyAsync on the call's stream (.carry/lib_mid, 282190e) and on a side stream with
# cross-stream waits (.carry/lib_before, 19f65e6). Payloads small (the 4-byte result of each call stored): GPU time
# per call (record_host_overhead --gpu-bound 128 MiB, blocks of 200) and host time per call (--probe, 50,000 calls),
# 6 rounds, builds in a rotating order; the no-payload GPU cost once per round for reference. Then the GPU tests.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
gpu=$OUT/record_gpu_overhead_payload_kernel-$C.jsonl
host=$OUT/record_host_overhead_payload_kernel-$C.jsonl
builds=(kernel memcpy side)
libof() { case $1 in kernel) echo .carry/lib/libnccl.so.2 ;; memcpy) echo .carry/lib_mid/libnccl.so.2 ;;
                     side) echo .carry/lib_before/libnccl.so.2 ;; esac; }
for round in $(seq 1 6); do
  for k in 0 1 2; do
    build=${builds[$(((k + round) % 3))]}
    line=$(timeout 120 .carry/bin/record_host_overhead --real "$REAL" --ranklens "$(libof $build)" --calls 4000 \
             --batch 200 --gpu-bound 134217728 --payloads small --trace-dir /tmp/hof-g-$build-$round --json) \
      && echo "{\"build\": \"$build\", \"round\": $round, ${line#\{}" >> "$gpu" || echo "gpu run $build failed"
    line=$(timeout 120 .carry/bin/record_host_overhead --real "$REAL" --ranklens "$(libof $build)" --calls 50000 \
             --probe --payloads small --trace-dir /tmp/hof-h-$build-$round --json) \
      && echo "{\"build\": \"$build\", \"round\": $round, ${line#\{}" >> "$host" || echo "host run $build failed"
  done
  line=$(timeout 120 .carry/bin/record_host_overhead --real "$REAL" --ranklens .carry/lib/libnccl.so.2 --calls 4000 \
           --batch 200 --gpu-bound 134217728 --payloads none --trace-dir /tmp/hof-g-none-$round --json) \
    && echo "{\"build\": \"kernel\", \"round\": $round, ${line#\{}" >> "$gpu" || echo "gpu run none failed"
done
python3 - "$gpu" "$host" <<'PY'
import json, sys, statistics
gpu = [json.loads(l) for l in open(sys.argv[1])]
host = [json.loads(l) for l in open(sys.argv[2])]
for build in ("side", "memcpy", "kernel"):
    g = sorted(r["gpu_added_ns"] for r in gpu if r["build"] == build and r["payloads"] == "small")
    h = [r for r in host if r["build"] == build]
    print(build, "GPU added", statistics.median(g), g, "| host added", statistics.median(r["added_median_ns"] for r in h),
          "over driver floor", statistics.median(r["added_median_ns"] - r["added_median_ns_driver_events"] for r in h))
n = sorted(r["gpu_added_ns"] for r in gpu if r["payloads"] == "none")
print("no payloads: GPU added", statistics.median(n), n)
PY
for build in side memcpy kernel; do
  echo "== $build, payloads small, host-time run of round 6"
  .carry/bin/ranklens trace summary /tmp/hof-h-$build-6/rank0 2>&1 | grep -E "payloads_staged|GPU time" | head -3
done | tee "$OUT/payload_kernel_traces-$C.txt"
cp /tmp/meta.txt "$OUT/meta_s18f-$C.txt"
export LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH
RANKLENS_DEVICE=cuda timeout 200 .carry/bin/test_cuda_device > "$OUT/gpu_tests-$C.txt" 2>&1
echo "gpu tests rc=$?"; tail -1 "$OUT/gpu_tests-$C.txt"; grep -E "FAILED|Failure" -A4 "$OUT/gpu_tests-$C.txt" | head -20
