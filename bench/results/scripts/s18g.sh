#!/bin/bash
# Session 18, call G (nvidia-h200, one GPU): the payload copy, four ways. side: D2H cudaMemcpyAsync on a side stream
# with two cross-stream waits and an event (.carry/lib_before, 19f65e6); memcpy: the same copy on the call's stream
# and an event (.carry/lib_mid, 282190e); kernel+event: a one-block kernel into mapped staging and an event
# (.carry/lib_k1, 6e8c298); kernel+flag: the kernel sets a completion flag, no event (.carry/lib, this commit).
# Payloads small (4-byte results): GPU time per call (record_host_overhead --gpu-bound 128 MiB) and host time per call
# (--probe, 50,000 calls), 6 rounds in a rotating order. Then 1 MiB payloads (payloads all, --count 262144: the copy
# engine in every build) side against kernel+flag, 4 rounds; then the GPU tests of this commit.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
gpu=$OUT/record_gpu_overhead_payload_ways-$C.jsonl
host=$OUT/record_host_overhead_payload_ways-$C.jsonl
builds=(flag kernel memcpy side)
libof() { case $1 in flag) echo .carry/lib/libnccl.so.2 ;; kernel) echo .carry/lib_k1/libnccl.so.2 ;;
                     memcpy) echo .carry/lib_mid/libnccl.so.2 ;; side) echo .carry/lib_before/libnccl.so.2 ;; esac; }
run() {  # build payloads count mode(gpu|host) round
  local args=(--calls 50000 --probe) out=$host
  [[ $4 == gpu ]] && { args=(--calls 4000 --batch 200 --gpu-bound 134217728); out=$gpu; }
  line=$(timeout 150 .carry/bin/record_host_overhead --real "$REAL" --ranklens "$(libof $1)" "${args[@]}" \
           --payloads "$2" --count "$3" --trace-dir /tmp/hog-$4-$1-$2-$3-$5 --json) \
    && echo "{\"build\": \"$1\", \"round\": $5, ${line#\{}" >> "$out" || echo "$4 run $1 $2 $3 failed"
}
for round in $(seq 1 6); do
  for k in 0 1 2 3; do
    build=${builds[$(((k + round) % 4))]}
    run "$build" small 1 gpu "$round"
    run "$build" small 1 host "$round"
  done
done
for round in $(seq 1 4); do
  order="flag side"; [[ $((round % 2)) == 0 ]] && order="side flag"
  for build in $order; do run "$build" all 262144 gpu "$round"; run "$build" all 262144 host "$round"; done
done
python3 - "$gpu" "$host" <<'PY'
import json, sys, statistics
gpu = [json.loads(l) for l in open(sys.argv[1])]
host = [json.loads(l) for l in open(sys.argv[2])]
for payloads, count in (("small", 1), ("all", 262144)):
    for build in ("side", "memcpy", "kernel", "flag"):
        g = sorted(r["gpu_added_ns"] for r in gpu if r["build"] == build and r["payloads"] == payloads)
        h = [r for r in host if r["build"] == build and r["payloads"] == payloads]
        if not g: continue
        print(payloads, build, "GPU added median", statistics.median(g), g, "| host added median",
              statistics.median(r["added_median_ns"] for r in h), "p90", statistics.median(r["added_p90_ns"] for r in h))
PY
for build in side flag; do
  echo "== $build, payloads small, host-time run of round 6"
  .carry/bin/ranklens trace summary /tmp/hog-host-$build-small-1-6/rank0 2>&1 | grep -E "payloads_staged|GPU time" | head -3
done | tee "$OUT/payload_ways_traces-$C.txt"
cp /tmp/meta.txt "$OUT/meta_s18g-$C.txt"
export LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH
RANKLENS_DEVICE=cuda timeout 200 .carry/bin/test_cuda_device > "$OUT/gpu_tests-$C.txt" 2>&1
echo "gpu tests rc=$?"; tail -1 "$OUT/gpu_tests-$C.txt"; grep -E "FAILED|Failure" -A4 "$OUT/gpu_tests-$C.txt" | head -20
