#!/bin/bash
# Session 27, call B (nvidia-h200, one GPU), about 5 minutes: record mode and a value replay of its recording under
# compute-sanitizer's memcheck (s27a.sh did the GPU tests and the replays of the shipped traces): the DDP example
# (train_gpt.py, 23M parameters, 4 steps) as a 1-rank job with payloads all, recorded twice: with the defaults (a
# 1-rank call's payload through a copy engine) and with the copy kernel forced on the 1-rank communicator
# (payload_copy_kernel_bytes_one_rank 1 MiB: the kernel that writes into mapped staging and sets a completion flag,
# which 2-rank calls take); then the second recording value-replayed as rank 0. PyTorch's caching allocator off.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer \
       /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)
W=$(mktemp -d /dev/shm/s27b-XXXXXX)
LOG=$OUT/s27b-$C.log
S="$CS --error-exitcode 9 --print-limit 30 --tool memcheck"
mkdir -p "$OUT/sanitizer"
sanitized() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/sanitizer/$name.txt" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0)) s: $(grep -E 'ERROR SUMMARY|^result|calls matched|payloads|^step' \
    "$OUT/sanitizer/$name.txt" | tr '\n' ' ' | cut -c1-900)"
}
{
  export PYTORCH_NO_CUDA_MEMORY_CACHING=1
  T="examples/torch/train_gpt.py --steps 4 --mark-steps --log-all-ranks"
  sanitized record-defaults-memcheck 150 env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 \
    .carry/bin/ranklens record --trace $W/rec-defaults --payloads all -- $S $PY $T
  sanitized record-copy-kernel-memcheck 150 env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=29518 RANKLENS_PAYLOAD_COPY_KERNEL_BYTES_ONE_RANK=1048576 RANKLENS_PAYLOAD_COPY_KERNEL_BYTES=1048576 \
    .carry/bin/ranklens record --trace $W/rec-kernel --payloads all -- $S $PY $T
  .carry/bin/ranklens trace summary $W/rec-kernel 2>&1 | head -4 | cut -c1-400
  sanitized value-replay-memcheck 180 .carry/bin/ranklens replay --trace $W/rec-kernel --rank 0 --fidelity value \
    --trace-dir $W/rep -- $S $PY $T
} > "$LOG" 2>&1
cat "$LOG"
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s27b-$C.txt"
