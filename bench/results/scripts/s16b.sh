#!/bin/bash
# Session 16, call B (nvidia-h200, one GPU): NCCL calls captured in a CUDA graph (examples/torch/graph_allreduce.py)
# without RankLens, recorded, and replayed at timing and value fidelity (1 rank) and in structure as rank 1 of 2;
# each run's output, RankLens's warnings (NCCL_DEBUG=WARN) and trace summaries. Then the GPU tests.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env
export LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH
export NCCL_DEBUG=WARN
log=$OUT/graph_capture-$C.log
cat /tmp/meta.txt > $log
prog=(examples/torch/graph_allreduce.py --launches 5)
run() {  # run NAME COMMAND...: the command's output into the log, its status and RESULT line on stdout
  local name=$1; shift
  echo "== $name: $*" >> $log
  timeout 150 "$@" > /tmp/$name.out 2>&1; local rc=$?
  cat /tmp/$name.out >> $log; echo "== $name rc=$rc" >> $log
  echo "$name rc=$rc"; grep -E "^RESULT|Error|error:|WARN|invalid" /tmp/$name.out | head -8
}
rm -rf /tmp/g16 /tmp/g16-*
run plain env -u NCCL_DEBUG LD_LIBRARY_PATH=$PWD/.carry/deps $PY -m torch.distributed.run --standalone --nproc-per-node 1 "${prog[@]}"
run record .carry/bin/ranklens record --lib .carry/lib/libnccl.so.2 --trace /tmp/g16 -- \
  $PY -m torch.distributed.run --standalone --nproc-per-node 1 "${prog[@]}"
.carry/bin/ranklens trace summary /tmp/g16 >> $log 2>&1
for f in timing value; do
  run replay-$f .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 --trace /tmp/g16 --rank 0 --fidelity $f \
    --trace-dir /tmp/g16-$f -- $PY "${prog[@]}"
  .carry/bin/ranklens trace summary /tmp/g16-$f >> $log 2>&1
  .carry/bin/ranklens compare /tmp/g16/rank0 /tmp/g16-$f/rank0 >> $log 2>&1
done
run structure .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 --rank 1 --world-size 2 \
  --trace-dir /tmp/g16-structure -- $PY "${prog[@]}"
.carry/bin/ranklens trace summary /tmp/g16-structure >> $log 2>&1
grep -E "counters|captured" $log | head -20
RANKLENS_DEVICE=cuda timeout 200 .carry/bin/test_cuda_device > $OUT/gpu_tests-$C.txt 2>&1
echo "gpu tests rc=$?"; tail -1 $OUT/gpu_tests-$C.txt; grep -E "FAILED" $OUT/gpu_tests-$C.txt | head
