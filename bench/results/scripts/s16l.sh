#!/bin/bash
# Session 16, call L (nvidia-h200, one GPU): after the review (replay asks once per call whether its stream captures,
# and hands it to the arrival mark, the payload restore and peer_pacing): the GPU tests, then s16i.sh's graph/eager
# replays with this build.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env
LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH RANKLENS_DEVICE=cuda timeout 200 .carry/bin/test_cuda_device \
  > $OUT/gpu_tests-$C.txt 2>&1
echo "gpu tests rc=$?"; tail -1 $OUT/gpu_tests-$C.txt; grep -E "FAILED" $OUT/gpu_tests-$C.txt | head
bash bench/results/scripts/s16i.sh
