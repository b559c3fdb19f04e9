#!/bin/bash
# Session 19, call I (nvidia-h200, one GPU): the session's final library: the GPU tests, and record_host_overhead
# (--probe, payloads small and none; --gpu-bound, payloads small) once each as a check against s19a.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
(export LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH
 RANKLENS_DEVICE=cuda timeout 200 .carry/bin/test_cuda_device > "$OUT/gpu_tests-$C.txt" 2>&1)
echo "gpu tests: $(tail -1 "$OUT/gpu_tests-$C.txt")"
traces=$(mktemp -d /tmp/s19i-XXXXXX)
for payloads in small none; do
  timeout 100 .carry/bin/record_host_overhead --real "$REAL" --ranklens .carry/lib/libnccl.so.2 --calls 20000 --probe \
    --payloads $payloads --trace-dir $traces/h-$payloads --json >> "$OUT/record_overhead_final-$C.jsonl"
done
timeout 100 .carry/bin/record_host_overhead --real "$REAL" --ranklens .carry/lib/libnccl.so.2 --calls 2000 \
  --batch 100 --gpu-bound 134217728 --payloads small --trace-dir $traces/g --json >> "$OUT/record_overhead_final-$C.jsonl"
cat "$OUT/record_overhead_final-$C.jsonl"
cp /tmp/meta.txt "$OUT/meta_s19i-$C.txt"
