#!/bin/bash
# Session 16, call H (nvidia-h200, one GPU): s16g.sh again with the build after the hold-of-nothing fix: the GPU tests; graph_allreduce.py recorded (captured calls
# timed at a launch, looked at one capture at a time) and replayed at timing fidelity; a 1-rank DDP job recorded and
# replayed (the eager path; settle() now skips the mark of a call that held and copied nothing); and
# record_host_overhead --probe twice (the eager recorder after these changes).
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env
SITE=$($PY -c 'import site; print(site.getsitepackages()[0])')
REAL=$(find "$SITE" -path '*nvidia/nccl/lib/libnccl.so.2' | head -1)
export LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH
RANKLENS_DEVICE=cuda timeout 200 .carry/bin/test_cuda_device > $OUT/gpu_tests-$C.txt 2>&1
echo "gpu tests rc=$?"; tail -1 $OUT/gpu_tests-$C.txt; grep -E "FAILED" $OUT/gpu_tests-$C.txt | head
log=$OUT/final_checks-$C.log; cat /tmp/meta.txt > $log
d=/tmp/g16g-$RANDOM
step() {  # step NAME COMMAND...
  local name=$1; shift
  timeout 150 "$@" > /tmp/$name.out 2>&1; local rc=$?
  { echo "== $name rc=$rc: $*"; cat /tmp/$name.out; } >> $log
  echo "$name rc=$rc"; grep -E "^RESULT|^Replay of|^Held|median step|WARN|rror" /tmp/$name.out | cut -c1-300 | head -6
}
prog=(examples/torch/graph_allreduce.py --launches 5)
step graph-record .carry/bin/ranklens record --lib .carry/lib/libnccl.so.2 --trace $d-graph -- \
  $PY -m torch.distributed.run --standalone --nproc-per-node 1 "${prog[@]}"
.carry/bin/ranklens trace summary $d-graph 2>&1 | grep counters | cut -c1-400 | tee -a $log
step graph-replay env NCCL_DEBUG=WARN .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 --trace $d-graph --rank 0 \
  --trace-dir $d-graph-replay -- $PY "${prog[@]}"
train=(examples/torch/train_gpt.py --steps 12 --mark-steps)
step ddp-record .carry/bin/ranklens record --lib .carry/lib/libnccl.so.2 --trace $d-ddp -- \
  $PY -m torch.distributed.run --standalone --nproc-per-node 1 "${train[@]}"
.carry/bin/ranklens trace summary $d-ddp 2>&1 | grep counters | cut -c1-400 | tee -a $log
step ddp-replay .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 --trace $d-ddp --rank 0 \
  --trace-dir $d-ddp-replay -- $PY "${train[@]}"
for run in 1 2; do
  .carry/bin/record_host_overhead --real "$REAL" --ranklens .carry/lib/libnccl.so.2 --calls 20000 --probe \
    --trace-dir $d-ho-$run --json | tee -a $OUT/record_host_overhead_probe-$C.jsonl
done
