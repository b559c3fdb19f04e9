#!/bin/bash
# Session 16, call A (nvidia-h200, one GPU): where the recorder's added host time per call goes, and whether the
# driver's entry points lower it. record_host_overhead --probe, a 1-rank communicator, calls alternating in one
# process between the real NCCL, RankLens and the real call wrapped in the recorder's CUDA work alone (through the
# runtime and through the driver), without and with a polling thread; for RankLens's library built with the
# runtime's calls (.carry/lib_runtime: 3abb707's C++ tree) and with the driver's (.carry/lib: 3306c3b), in both
# orders. Then the GPU tests and a 1-rank DDP recording through the driver build (its trace summarised).
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env
SITE=$($PY -c 'import site; print(site.getsitepackages()[0])')
REAL=$(find "$SITE" -path '*nvidia/nccl/lib/libnccl.so.2' | head -1)
echo "real NCCL: $REAL" | tee -a /tmp/meta.txt
results=$OUT/record_host_overhead_probe-$C.jsonl
for order in "runtime driver" "driver runtime"; do
  for build in $order; do
    lib=.carry/lib/libnccl.so.2; [[ $build == runtime ]] && lib=.carry/lib_runtime/libnccl.so.2
    for poller in "" --poller; do
      dir=/tmp/ho-$build-${poller:-none}-$RANDOM; rm -rf $dir
      line=$(timeout 120 .carry/bin/record_host_overhead --real "$REAL" --ranklens $lib --calls 20000 --probe $poller \
               --trace-dir $dir --json) || { echo "run $build $poller failed rc=$?"; continue; }
      echo "{\"build\": \"$build\", ${line#\{}" | tee -a $results
    done
  done
done
RANKLENS_DEVICE=cuda timeout 200 .carry/bin/test_cuda_device > $OUT/gpu_tests-$C.txt 2>&1
echo "gpu tests rc=$?"; tail -1 $OUT/gpu_tests-$C.txt; grep -E "RecordDevice|FAILED" $OUT/gpu_tests-$C.txt | head
export LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH
rm -rf /tmp/rec16a
timeout 150 .carry/bin/ranklens record --lib .carry/lib/libnccl.so.2 --trace /tmp/rec16a -- \
  $PY -m torch.distributed.run --standalone --nproc-per-node 1 examples/torch/train_gpt.py --steps 5 --mark-steps \
  > /tmp/rec16a.log 2>&1
echo "record rc=$?"; .carry/bin/ranklens trace summary /tmp/rec16a > /tmp/rec16a.summary 2>&1; head -30 /tmp/rec16a.summary
{ cat /tmp/meta.txt; echo "== record"; cat /tmp/rec16a.log; echo "== trace summary"; cat /tmp/rec16a.summary; } \
  > $OUT/record_driver_events_ddp1-$C.log
