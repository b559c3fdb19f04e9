#!/bin/bash
# Session 15, call C (nvidia-h200, one GPU): the GPU tests of the final build, and the shipped 2x H200 DDP trace
# (examples/traces/ddp-2xh200) replayed as rank 1 with recorded and with fully estimated timing (history built from
# that trace: the step-phase rule on a real GPU, end to end). A smoke, not a fidelity measurement.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env
export LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH
RANKLENS_DEVICE=cuda timeout 200 .carry/bin/test_cuda_device > $OUT/gpu_tests-$C.txt 2>&1; echo "gpu tests rc=$?"; tail -1 $OUT/gpu_tests-$C.txt
.carry/bin/ranklens history build examples/traces/ddp-2xh200 -o /tmp/ddp.hist
for t in recorded estimated; do
  extra=(); [[ $t == estimated ]] && extra=(env RANKLENS_TIMING=estimated RANKLENS_HISTORY=/tmp/ddp.hist)
  timeout 150 "${extra[@]}" .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 --trace examples/traces/ddp-2xh200 --rank 1 --trace-dir /tmp/rep-$t -- $PY examples/torch/train_gpt.py --steps 10 --mark-steps --log-all-ranks > /tmp/rep-$t.log 2>&1
  echo "$t rc=$?"; grep -iE "step|estimated|replay:" /tmp/rep-$t.log | tail -6
done
cat /tmp/meta.txt /tmp/rep-*.log > $OUT/replay_shipped_ddp-$C.log
