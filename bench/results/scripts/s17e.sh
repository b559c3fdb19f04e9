#!/bin/bash
# Session 17, call E (nvidia-h200-x2): the bucket what-if without a recording: DDP bucket 100 MiB, micro-batch 32 (the
# what-if target of s15a; the history has buckets 25 and 50 only), GPT-2 small, 25 steps, against real
# 2-GPU runs of it. History: s15a's fresh recording of the six configurations, twice each
# (bench/results/estimator/cluster-2xh200-mb4x-2runs-7ca33f0.hist). Real runs and replays alternate, twice.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env
export CUBLAS_WORKSPACE_CONFIG=:4096:8
D=$OUT/unrecorded_whatif-$C; mkdir -p $D
H=bench/results/estimator/cluster-2xh200-mb4x-2runs-7ca33f0.hist
TRAIN=(examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --d-model 768 --layers 12 --heads 12
       --vocab 50304 --seq-len 1024 --steps 25 --micro-batch 32 --bucket-mb 100)
med() { grep -o '"median_step_ms": [0-9.]*' "$1" | awk '{printf "%s ", $2}'; }
for round in 1 2; do
  timeout 120 $PY -m torch.distributed.run --standalone --nproc-per-node 2 "${TRAIN[@]}" > $D/real-$round.log 2>&1
  echo "real $round rc=$? median_step_ms $(med $D/real-$round.log)"
  for r in 0 1; do
    CUDA_VISIBLE_DEVICES=$r timeout 120 .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 -t /tmp/ev-$round-$r \
      --history $H --rank $r --world-size 2 -- $PY "${TRAIN[@]}" > $D/unrecorded-$round-rank$r.log 2>&1
    echo "unrecorded $round rank $r rc=$? median_step_ms $(med $D/unrecorded-$round-rank$r.log)"
  done
done
grep -h "Replay without a recording" $D/*.log
