#!/bin/bash
# Session 27, call A (nvidia-h200, one GPU), about 6 minutes: RankLens's device code under NVIDIA's compute-sanitizer,
# never run on it before. Every run exits non-zero on a sanitizer finding (--error-exitcode 9); its report is kept.
#   1. the GPU tests (test_cuda_device: fills, stream-ordered copies, hold kernels on two streams, the record-mode
#      copy kernel with its completion flag, a captured call) under memcheck, racecheck, synccheck and initcheck;
#      test_reduction_parity (against the real NCCL) under memcheck;
#   2. memcheck of replays (PyTorch's caching allocator off, so that a write past a buffer meets unallocated memory):
#      nccl_minitrain's shipped trace as rank 1 at value fidelity (groups, send/recv, payloads restored, the rest
#      filled); the DDP example's shipped trace as rank 1 at value fidelity (4 control payloads restored, 24
#      all-reduces held and filled). Recording under memcheck: s27b.sh.
# .carry/bin/nccl_minitrain is copied in by hand beside make_carry's output; its libcudart.so.13 is the torch
# wheel's.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer \
       /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)
W=$(mktemp -d /dev/shm/s27a-XXXXXX)
LOG=$OUT/s27a-$C.log
CUDART=$(dirname "$(find "$SITE" -name 'libcudart.so.13*' | head -1)")
S="$CS --error-exitcode 9 --print-limit 30"
# sanitized NAME TIMEOUT COMMAND...: runs COMMAND, its output in $OUT/sanitizer/NAME.txt; one line in the log.
mkdir -p "$OUT/sanitizer"
sanitized() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/sanitizer/$name.txt" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0)) s: $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED) |^result|calls matched|replayed' \
    "$OUT/sanitizer/$name.txt" | tr '\n' ' ' | cut -c1-600)"
}
{
  echo "compute-sanitizer: $CS ($($CS --version 2>&1 | tail -1)); cudart for nccl_minitrain: $CUDART"
  export RANKLENS_DEVICE=cuda
  GT="env LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH"
  for tool in memcheck racecheck synccheck initcheck; do
    sanitized "gpu_tests-$tool" 150 $GT $S --tool $tool .carry/bin/test_cuda_device
  done
  sanitized reduction_parity-memcheck 150 $GT RANKLENS_REAL_NCCL="$REAL" $S --tool memcheck .carry/bin/test_reduction_parity
  unset RANKLENS_DEVICE
  export PYTORCH_NO_CUDA_MEMORY_CACHING=1
  sanitized minitrain-value-replay 120 env LD_LIBRARY_PATH="$CUDART:$LD_LIBRARY_PATH" .carry/bin/ranklens replay \
    --trace examples/traces/minitrain-2xh200 --rank 1 --fidelity value --trace-dir $W/mt -- \
    $S --tool memcheck .carry/bin/nccl_minitrain --steps 10
  T="examples/torch/train_gpt.py --steps 4 --mark-steps --log-all-ranks"
  sanitized ddp-shipped-value-replay 240 .carry/bin/ranklens replay --trace examples/traces/ddp-2xh200 --rank 1 \
    --fidelity value --trace-dir $W/ddp -- $S --tool memcheck $PY $T
} > "$LOG" 2>&1
cat "$LOG"
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s27a-$C.txt"
