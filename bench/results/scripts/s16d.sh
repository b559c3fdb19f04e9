#!/bin/bash
# Session 16, call D (nvidia-h200, one GPU): examples/torch/graph_allreduce.py (all-reduces captured into a CUDA
# graph, launched 5 times) without RankLens, recorded, and replayed as rank 0 of 1 at timing fidelity (holds from
# arrival, from start, host-callback holds) and value fidelity, and in structure as rank 1 of 2, with this commit's
# build: record mode times the captured calls at a launch of their graph (captured_timing: events), and the replays
# hold them for those durations inside the graph; then once more recorded with captured_timing: off (estimates).
# RESULT lines, the launcher's summaries, the captured and estimated Timing slices and RankLens's warnings
# (NCCL_DEBUG=WARN) go to the log. Then the GPU tests.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env
export LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH
export NCCL_DEBUG=WARN
log=$OUT/graph_capture-$C.log
cat /tmp/meta.txt > $log
prog=(examples/torch/graph_allreduce.py --launches 5)
run() {  # run NAME COMMAND...: the command's output into the log; its status, RESULT and summary on stdout
  local name=$1; shift
  echo "== $name: $*" >> $log
  timeout 150 "$@" > /tmp/$name.out 2>&1; local rc=$?
  cat /tmp/$name.out >> $log; echo "== $name rc=$rc" >> $log
  echo "$name rc=$rc"; grep -E "^RESULT|^Replay of|^Held|Error|error:|WARN|invalid" /tmp/$name.out | cut -c1-400 | head -8
}
d=/tmp/g16c-$RANDOM; rm -rf $d*
run plain env -u NCCL_DEBUG LD_LIBRARY_PATH=$PWD/.carry/deps $PY -m torch.distributed.run --standalone --nproc-per-node 1 "${prog[@]}"
run record .carry/bin/ranklens record --lib .carry/lib/libnccl.so.2 --trace $d -- \
  $PY -m torch.distributed.run --standalone --nproc-per-node 1 "${prog[@]}"
.carry/bin/ranklens trace summary $d >> $log 2>&1
replay() {  # replay NAME FIDELITY [ENV...]
  local name=$1 fidelity=$2; shift 2
  run $name env "$@" .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 --trace $d --rank 0 --fidelity $fidelity \
    --trace-dir $d-$name -- $PY "${prog[@]}"
  .carry/bin/ranklens timeline $d/rank0 $d-$name/rank0 -o /tmp/$name.timeline.json >> $log 2>&1
  $PY - /tmp/$name.timeline.json <<'PY' | tee -a $log
import json, sys
events = json.load(open(sys.argv[1]))
events = events["traceEvents"] if isinstance(events, dict) else events
for kind in ("captured", "estimated"):
    held = [e for e in events if e.get("ph") == "X" and e.get("args", {}).get(kind)]
    print(kind, "slices (us), recording then replay:", [(e.get("pid"), round(e.get("dur", 0), 1)) for e in held])
PY
}
replay timing timing
replay timing-start timing RANKLENS_HOLD_FROM=start
replay timing-callback timing RANKLENS_COMPLETION=host_callback
replay value value
d0=$d; d=$d-off
run record-off env RANKLENS_CAPTURED_TIMING=off .carry/bin/ranklens record --lib .carry/lib/libnccl.so.2 --trace $d -- \
  $PY -m torch.distributed.run --standalone --nproc-per-node 1 "${prog[@]}"
.carry/bin/ranklens trace summary $d >> $log 2>&1
replay timing-off timing
d=$d0
run structure .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 --rank 1 --world-size 2 \
  --trace-dir $d-structure -- $PY "${prog[@]}"
grep -E "counters" $log | cut -c1-400 | head -12
RANKLENS_DEVICE=cuda timeout 200 .carry/bin/test_cuda_device > $OUT/gpu_tests-$C.txt 2>&1
echo "gpu tests rc=$?"; tail -1 $OUT/gpu_tests-$C.txt; grep -E "FAILED|Captured" $OUT/gpu_tests-$C.txt | head
