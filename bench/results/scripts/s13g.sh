#!/bin/bash
# Session 13, call G (nvidia-h200-x2): the estimator's noise floor (#7): the same configuration recorded three times,
# DDP (bucket 25 MiB, micro-batch 16) and FSDP2 (micro-batch 16), GPT-2 small, 25 steps, timing only; traces come back.
set -u
cd "$(dirname "$0")/../.."
PY=/opt/torch/.venv/bin/python; [[ -x $PY ]] || PY=$(command -v python3)
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.carry/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
C=$(head -1 .carry/COMMIT)
mkdir -p /tmp/noise; { date -u +%FT%TZ; nvidia-smi -L; } > /tmp/meta.txt 2>&1
for run in 1 2 3; do
  for mode in ddp fsdp2; do
    timeout 80 .carry/bin/ranklens record --lib $PWD/.carry/lib/libnccl.so.2 --trace /tmp/noise/$mode-b25-mb16-run$run --payloads small -- \
      $PY -m torch.distributed.run --standalone --nproc-per-node 2 examples/torch/train_gpt.py --parallel $mode --log-all-ranks \
      --mark-steps --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024 --steps 25 --micro-batch 16 --bucket-mb 25 \
      > /tmp/noise/$mode-b25-mb16-run$run.log 2>&1
    echo "$mode run $run rc=$? $(date -u +%T) $(grep -o '"median_step_ms": [0-9.]*' /tmp/noise/$mode-b25-mb16-run$run.log | tr '\n' ' ')" | tee -a /tmp/meta.txt
  done
done
date -u +%FT%TZ >> /tmp/meta.txt; cp /tmp/meta.txt /tmp/noise/meta-$C.txt
tar czf $OUT/noise_floor_traces-$C.tgz -C /tmp noise; ls -la $OUT
