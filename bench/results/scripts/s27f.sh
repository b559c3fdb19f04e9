#!/bin/bash
# Session 27, call F (nvidia-h200, one GPU), about 1 minute: the session's final library (the priming stream created
# first in prepareDevice): the GPU tests, plain and under memcheck; examples/torch/graph_allreduce.py recorded
# (payloads small, 5 launches), its captured calls' timings; the 30-step GPT-2 small DDP job recorded, every call
# timed.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
W=$(mktemp -d /dev/shm/s27f-XXXXXX)
{
  (export LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH RANKLENS_DEVICE=cuda
   timeout 120 .carry/bin/test_cuda_device > "$OUT/gpu_tests-$C.txt" 2>&1
   echo "GPU tests plain rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/gpu_tests-$C.txt" | tr '\n' ' ')"
   timeout 120 $CS --error-exitcode 9 --tool memcheck .carry/bin/test_cuda_device > $W/memcheck.txt 2>&1
   echo "GPU tests memcheck rc=$? $(grep -E 'ERROR SUMMARY|Program hit' $W/memcheck.txt | sort | uniq -c | tr '\n' ' ')")
  env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29516 timeout 120 \
    .carry/bin/ranklens record --trace $W/graph -- $PY examples/torch/graph_allreduce.py --launches 5 > $W/graph.log 2>&1
  echo "graph_allreduce recorded rc=$? $(grep -o '"all_finite": [a-z]*' $W/graph.log)" \
    "$(.carry/bin/ranklens trace summary $W/graph 2>&1 | grep -oE 'timing_errors [0-9]+|timings_captured_[a-z]+ [0-9]+|timings_measured [0-9]+' | tr '\n' ' ')"
  T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 30 --micro-batch 16
     --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
  timeout 150 .carry/bin/ranklens record --trace $W/rec -- \
    $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/rec.log 2>&1
  echo "GPT-2 small DDP recorded rc=$? steady_ms $(carry_steady_ms $W/rec.log)" \
    "$(.carry/bin/ranklens trace summary $W/rec 2>&1 | grep -oE ' [0-9]+ calls, 1 comm|timing_errors [0-9]+|timings_measured [0-9]+|calls_unrecorded [0-9]+' | tr '\n' ' ')"
} > "$OUT/s27f-$C.log" 2>&1
cat "$OUT/s27f-$C.log"
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s27f-$C.txt"
