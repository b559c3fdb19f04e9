#!/bin/bash
# Session 18, call A (nvidia-h200, one GPU): the recorder's host time per call against how often its background
# thread polls pending calls (timing_poll_us 100, the default, against 1000 and 10000): record_host_overhead --probe,
# 1-rank communicator, 3 rounds, the three settings in a rotating order; then the GPU tests at this commit.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
results=$OUT/record_host_overhead_poll-$C.jsonl
variants=(100 1000 10000)
for round in 1 2 3; do
  for k in 0 1 2; do
    poll=${variants[$(((k + round) % 3))]}
    line=$(RANKLENS_TIMING_POLL_US=$poll timeout 120 .carry/bin/record_host_overhead --real "$REAL" \
             --ranklens .carry/lib/libnccl.so.2 --calls 20000 --probe --trace-dir /tmp/ho-$poll-$round-$RANDOM \
             --json) || { echo "run poll=$poll failed"; continue; }
    echo "{\"timing_poll_us\": $poll, \"round\": $round, ${line#\{}" | tee -a "$results"
  done
done
cp /tmp/meta.txt "$OUT/meta_s18a-$C.txt"
export LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH
RANKLENS_DEVICE=cuda timeout 200 .carry/bin/test_cuda_device > "$OUT/gpu_tests-$C.txt" 2>&1
echo "gpu tests rc=$?"; tail -1 "$OUT/gpu_tests-$C.txt"; grep -E "FAILED" "$OUT/gpu_tests-$C.txt" | head
RANKLENS_DEVICE=cuda RANKLENS_REAL_NCCL="$REAL" timeout 200 .carry/bin/test_reduction_parity > "$OUT/reduction_parity-$C.txt" 2>&1
echo "reduction parity rc=$?"; tail -1 "$OUT/reduction_parity-$C.txt"
