#!/bin/bash
# Session 16, call J (nvidia-h200, one GPU): the recorder's host time per call before and after its background thread
# stopped querying each span's end event before asking for its elapsed time (.carry/lib_before: the library of
# 6c74f37's parent, .carry/lib: 6c74f37's). record_host_overhead --probe, 1-rank communicator, 3 rounds, the two
# builds alternating (order swapped each round); then the GPU tests.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env
SITE=$($PY -c 'import site; print(site.getsitepackages()[0])')
REAL=$(find "$SITE" -path '*nvidia/nccl/lib/libnccl.so.2' | head -1)
results=$OUT/record_host_overhead_elapsed_ab-$C.jsonl
for round in 1 2 3; do
  order="before after"; [[ $((round % 2)) == 0 ]] && order="after before"
  for build in $order; do
    lib=.carry/lib/libnccl.so.2; [[ $build == before ]] && lib=.carry/lib_before/libnccl.so.2
    line=$(timeout 120 .carry/bin/record_host_overhead --real "$REAL" --ranklens $lib --calls 20000 --probe \
             --trace-dir /tmp/ho-$build-$round-$RANDOM --json) || { echo "run $build failed"; continue; }
    echo "{\"build\": \"$build\", \"round\": $round, ${line#\{}" | tee -a $results
  done
done
export LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH
RANKLENS_DEVICE=cuda timeout 200 .carry/bin/test_cuda_device > $OUT/gpu_tests-$C.txt 2>&1
echo "gpu tests rc=$?"; tail -1 $OUT/gpu_tests-$C.txt; grep -E "FAILED" $OUT/gpu_tests-$C.txt | head
