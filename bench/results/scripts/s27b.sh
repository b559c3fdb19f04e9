#!/bin/bash
# Session 27, call B (nvidia-h200, one GPU), about 7 minutes: compute-sanitizer after 94090ac (s27a found the record
# poll thread's CUDA API errors: cudaEventElapsedTime asked of running calls, and of captured calls' never-recorded
# events): the GPU tests plain, then under memcheck (one API error expected: RecordDeviceTimesAHoldAndSeesCapture
# asks the elapsed time of a running hold on purpose, the device's kPending contract), initcheck (the test now
# initialises what it copies) and racecheck (the copy and recorder tests only: the hold tests spin too long under
# it); test_reduction_parity under memcheck (8 errors in s27a, report not fetched); then memcheck of record mode,
# PyTorch's caching allocator off: examples/torch/graph_allreduce.py (calls captured into a CUDA graph, launched 3
# times), the DDP example (train_gpt.py, 23M parameters, 4 steps) as a 1-rank job with payloads all and the copy
# kernel forced on the 1-rank communicator (payload_copy_kernel_bytes{,_one_rank} 1 MiB), and that recording
# value-replayed as rank 0. Every report in sanitizer-$C.tgz (the device tool returns 8 files at most).
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
W=$(mktemp -d /dev/shm/s27b-XXXXXX)
R=$W/sanitizer; mkdir -p $R
LOG=$OUT/s27b-$C.log
S="$CS --error-exitcode 9 --print-limit 30"
sanitized() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$R/$name.txt" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0)) s: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED) |^result|calls matched|Program hit|payloads:|timings_captured' \
    "$R/$name.txt" | sort | uniq -c | tr '\n' ' ' | cut -c1-900)"
}
{
  echo "compute-sanitizer: $CS ($($CS --version 2>&1 | tail -1))"
  (export LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH RANKLENS_DEVICE=cuda
   timeout 120 .carry/bin/test_cuda_device > "$OUT/gpu_tests-$C.txt" 2>&1
   echo "GPU tests plain rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/gpu_tests-$C.txt" | tr '\n' ' ')"
   sanitized gpu_tests-memcheck 150 $S --tool memcheck .carry/bin/test_cuda_device
   sanitized gpu_tests-initcheck 150 $S --tool initcheck .carry/bin/test_cuda_device
   sanitized gpu_tests-racecheck 150 $S --tool racecheck .carry/bin/test_cuda_device \
     --gtest_filter='*Recorder*:*Copies*:*Clone*:*Fill*:*Upload*'
   sanitized reduction_parity-memcheck 150 env RANKLENS_REAL_NCCL="$REAL" $S --tool memcheck \
     .carry/bin/test_reduction_parity)
  export PYTORCH_NO_CUDA_MEMORY_CACHING=1
  sanitized graph-record-memcheck 150 env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29516 \
    .carry/bin/ranklens record --trace $W/graph --payloads small -- $S --tool memcheck $PY \
    examples/torch/graph_allreduce.py --launches 3
  .carry/bin/ranklens trace summary $W/graph 2>&1 | grep -E "counters" | cut -c1-600
  T="examples/torch/train_gpt.py --steps 4 --mark-steps --log-all-ranks"
  sanitized ddp-record-memcheck 200 env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29518 \
    RANKLENS_PAYLOAD_COPY_KERNEL_BYTES_ONE_RANK=1048576 RANKLENS_PAYLOAD_COPY_KERNEL_BYTES=1048576 \
    .carry/bin/ranklens record --trace $W/rec --payloads all -- $S --tool memcheck $PY $T
  .carry/bin/ranklens trace summary $W/rec 2>&1 | grep -E "counters|payloads:" | cut -c1-600
  sanitized ddp-value-replay-memcheck 200 .carry/bin/ranklens replay --trace $W/rec --rank 0 --fidelity value \
    --trace-dir $W/rep -- $S --tool memcheck $PY $T
} > "$LOG" 2>&1
cat "$LOG"
tar czf "$OUT/sanitizer-$C.tgz" -C $W sanitizer
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s27b-$C.txt"
