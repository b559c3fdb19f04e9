#!/bin/bash
# Session 18, call H (nvidia-h200, one GPU): recording changes no result, with the payload copy kernel: nccl-tests
# (NVIDIA/nccl-tests a0b82b2, 2.19.6, built on the dev VM for sm_90, static cudart) with data checking on a 1-rank
# communicator (-g 1: the only layout one GPU allows), real NCCL against the recorder, payloads small (the copy
# kernel up to 64 KiB, the copy engine above) and payloads all; then the GPU tests.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
for payloads in small all; do
  mkdir -p "$OUT/nccl_tests_1gpu_$payloads"
  RANKLENS_COMMIT=$C bench/record_nccl_tests.sh --real-nccl "$REAL" --python "$PY" --payloads $payloads \
    --args "-b 8 -e 64M -f 4 -g 1 -c 1 -n 5 -w 2" --timeout 60 --budget 250 \
    --out "$OUT/nccl_tests_1gpu_$payloads" --work /tmp/rnt-$payloads > /dev/null 2>&1
  echo "payloads $payloads: rc=$?"
  grep -E "^\[.*\] [a-z_]+ \[(real|record)\]: rc" "$OUT/nccl_tests_1gpu_$payloads/record_nccl_tests.log" | sed 's/^/  /'
done
export LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH
RANKLENS_DEVICE=cuda timeout 200 .carry/bin/test_cuda_device > "$OUT/gpu_tests-$C.txt" 2>&1
echo "gpu tests rc=$?"; tail -1 "$OUT/gpu_tests-$C.txt"; grep -E "FAILED|Failure" -A4 "$OUT/gpu_tests-$C.txt" | head -20
