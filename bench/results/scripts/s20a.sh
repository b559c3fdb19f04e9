#!/bin/bash
# Session 20, call A (nvidia-h200; not run in session 20: too little device time was left to start a machine), about
# one minute of device time: does the carried build with ISA-L
# (f6072d5 and later) load and pass the GPU tests there, and how fast does the machine's disk take writes (the
# suspected bound of full-payload recording; s19k.sh has the full comparison).
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env
{
  echo "libnccl.so.2 needs: $(ldd .carry/lib/libnccl.so.2 | grep -E 'isal|yaml|not found' | tr -s ' \t' ' ')"
  RANKLENS_DEVICE=cuda timeout 90 .carry/bin/test_cuda_device > "$OUT/gpu_tests-$C.txt" 2>&1
  echo "GPU tests rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/gpu_tests-$C.txt" | tr '\n' ' ')"
  for where in /tmp /dev/shm; do
    echo "dd 2 GiB to $where: $(timeout 12 dd if=/dev/zero of=$where/s20a-dd bs=1M count=2048 conv=fdatasync 2>&1 | tail -1)"
    rm -f $where/s20a-dd
  done
  df -h /tmp /dev/shm | sed 's/^/df: /'
} 2>&1 | tee "$OUT/s20a-$C.log"
cp /tmp/meta.txt "$OUT/meta_s20a-$C.txt"
