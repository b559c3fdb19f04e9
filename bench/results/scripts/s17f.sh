#!/bin/bash
# Session 17, call F (nvidia-h200-x2): on one machine, the held-out configuration and the bucket what-if both ways:
# from their recordings with calls estimated (bench/estimator_torch.py's heldout and whatif parts, history given),
# and without any recording (ranklens replay --history, s17d/s17e), against the real runs estimator_torch makes.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env
export CUBLAS_WORKSPACE_CONFIG=:4096:8
H=bench/results/estimator/cluster-2xh200-mb4x-2runs-7ca33f0.hist
RANKLENS_COMMIT=$C timeout 300 $PY bench/estimator_torch.py --lib .carry/lib/libnccl.so.2 --ranklens .carry/bin/ranklens \
  --python $PY --micro-batch-scale 4 --steps 25 --real-repeats 2 --targets transfer --history $H \
  --parts heldout,whatif --json $OUT/estimator_both_ways-$C.json --work /tmp/est --timeout 60 > $OUT/estimator_both_ways-$C.log 2>&1
echo "estimator rc=$?"; grep CHECK $OUT/estimator_both_ways-$C.log
D=$OUT/unrecorded_both-$C; mkdir -p $D
COMMON=(examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --d-model 768 --layers 12 --heads 12
        --vocab 50304 --seq-len 1024 --steps 25)
for cfg in "24 40" "32 100"; do
  set -- $cfg
  for r in 0 1; do
    CUDA_VISIBLE_DEVICES=$r timeout 120 .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 -t /tmp/ev-$1-$r \
      --history $H --rank $r --world-size 2 -- $PY "${COMMON[@]}" --micro-batch $1 --bucket-mb $2 \
      > $D/mb$1-b$2-rank$r.log 2>&1
    echo "unrecorded mb $1 bucket $2 rank $r rc=$? $(grep -o '"median_step_ms": [0-9.]*' $D/mb$1-b$2-rank$r.log)"
  done
done
