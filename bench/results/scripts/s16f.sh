#!/bin/bash
# Session 16, call F (nvidia-h200, one GPU): the GPU tests of this commit's build, the shipped 2x H200 DDP trace
# (examples/traces/ddp-2xh200) replayed as rank 1 at timing fidelity (the eager path after the arrival-mark change),
# and graph_allreduce.py recorded and replayed (timing) with the mark's own slot inside the graph.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env
export LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH
RANKLENS_DEVICE=cuda timeout 200 .carry/bin/test_cuda_device > $OUT/gpu_tests-$C.txt 2>&1
echo "gpu tests rc=$?"; tail -1 $OUT/gpu_tests-$C.txt; grep -E "FAILED|ACapturedArrival|RecorderTimes" $OUT/gpu_tests-$C.txt | head
log=$OUT/replay_checks-$C.log; cat /tmp/meta.txt > $log
d=/tmp/g16f-$RANDOM
timeout 150 .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 --trace examples/traces/ddp-2xh200 --rank 1 \
  --trace-dir $d-ddp -- $PY examples/torch/train_gpt.py --steps 10 --mark-steps --log-all-ranks > /tmp/ddp.log 2>&1
echo "shipped ddp replay rc=$?"; grep -E "^Replay of|^Held|result:|median" /tmp/ddp.log | cut -c1-300
{ echo "== shipped DDP trace, rank 1, timing"; cat /tmp/ddp.log; } >> $log
prog=(examples/torch/graph_allreduce.py --launches 5)
timeout 120 .carry/bin/ranklens record --lib .carry/lib/libnccl.so.2 --trace $d -- \
  $PY -m torch.distributed.run --standalone --nproc-per-node 1 "${prog[@]}" > /tmp/rec.log 2>&1
echo "graph record rc=$?"
NCCL_DEBUG=WARN timeout 120 .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 --trace $d --rank 0 \
  --trace-dir $d-replay -- $PY "${prog[@]}" > /tmp/rep.log 2>&1
echo "graph replay rc=$?"; grep -E "^RESULT|^Replay of|WARN" /tmp/rep.log | cut -c1-300
{ echo "== graph record"; cat /tmp/rec.log; echo "== graph replay"; cat /tmp/rep.log; } >> $log
