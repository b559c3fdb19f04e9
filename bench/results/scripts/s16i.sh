#!/bin/bash
# Session 16, call I (nvidia-h200, one GPU): a program that captures where its recording did not. graph_allreduce.py
# recorded with --eager (the same NCCL calls, none captured), then the graphed program replayed against it at value
# and timing fidelity: the small all-reduce's recorded payload must not be copied inside the graph (WARN,
# replay_payloads_skipped_captured); and the other way round, the graphed recording replayed by the eager program.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env
export LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH
log=$OUT/graph_vs_eager-$C.log; cat /tmp/meta.txt > $log
d=/tmp/g16i-$RANDOM
step() {  # step NAME COMMAND...
  local name=$1; shift
  timeout 150 "$@" > /tmp/$name.out 2>&1; local rc=$?
  { echo "== $name rc=$rc: $*"; cat /tmp/$name.out; } >> $log
  echo "$name rc=$rc"; grep -E "^RESULT|^Replay of|WARN|rror" /tmp/$name.out | cut -c1-400 | head -6
}
counters() { .carry/bin/ranklens trace summary $1 2>&1 | grep counters | tr ' ' '\n' | grep -A1 -E "^($2)$" | paste -sd' ' | tee -a $log; }
prog=(examples/torch/graph_allreduce.py --launches 5)
step record-eager .carry/bin/ranklens record --lib .carry/lib/libnccl.so.2 --trace $d-eager -- \
  $PY -m torch.distributed.run --standalone --nproc-per-node 1 "${prog[@]}" --eager
for f in value timing; do
  step replay-graphed-$f env NCCL_DEBUG=WARN .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 --trace $d-eager \
    --rank 0 --fidelity $f --trace-dir $d-rep-$f -- $PY "${prog[@]}"
  counters $d-rep-$f/rank0 "replay_payloads_skipped_captured|replay_payloads_restored|replay_calls_matched"
done
step record-graphed .carry/bin/ranklens record --lib .carry/lib/libnccl.so.2 --trace $d-graphed -- \
  $PY -m torch.distributed.run --standalone --nproc-per-node 1 "${prog[@]}"
step replay-eager env NCCL_DEBUG=WARN .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 --trace $d-graphed \
  --rank 0 --fidelity value --trace-dir $d-rep-eager -- $PY "${prog[@]}" --eager
counters $d-rep-eager/rank0 "replay_payloads_skipped_captured|replay_payloads_restored|replay_calls_matched|replay_estimated"
