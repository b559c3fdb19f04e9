#!/bin/bash
# Session 26, call C (nvidia-h200, one GPU), about 5 minutes: trace format 1.10's library with every default and a
# few thread counts. The 30-step GPT-2 small DDP job alone; recorded with the default policy (payloads small: since
# 04b6c20 two compression threads, so two payload files at most); payloads all under the default staging_full skip
# (how many are kept now); payloads all, wait, with payload_threads 4 and 12 beside the default 8 (s26b). steady_ms:
# steps 10-29. GPU tests first.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_defaults_1_10-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 30 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s26c-XXXXXX)
L=.carry/lib/libnccl.so.2
steady_row() {  # NAME: steps 10-29 into the last row, then what the trace and the launcher say
  local s; s=$(carry_steady_ms $W/$1.log); echo "$1 steady_ms $s"
  sed -i "\$s/\"steady_ms\": null/\"steady_ms\": $s/" "$out"
  .carry/bin/ranklens trace summary $W/$1/rank0 | grep -E "compression threads"
  echo "payload files: $(ls $W/$1/rank0 | grep -c '^pay-')"
  sed -n '/^Recorded/,$p' $W/$1.log
  rm -rf $W/$1
}
{
  carry_gpu_tests_and_baseline "$out" $W "$T"
  echo "baseline steady_ms $(carry_steady_ms $W/base.log)"
  timeout 150 .carry/bin/ranklens record --lib $L --trace $W/small -- \
    $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/small.log 2>&1
  echo "small rc=$? median_step_ms $(carry_step_ms $W/small.log)"
  carry_result_row "$out" small $W/small.log $W/small/rank0 "" '{"payloads": "small", "steady_ms": null}'
  steady_row small
  carry_record "$out" $W skip $L "$T" '{"staging_full": "skip", "steady_ms": null}'
  steady_row skip
  for n in 4 12; do
    carry_record "$out" $W threads$n $L "$T" "{\"payload_threads\": $n, \"steady_ms\": null}" RANKLENS_STAGING_FULL=wait \
      RANKLENS_PAYLOAD_THREADS=$n
    steady_row threads$n
  done
} > "$OUT/s26c-$C.log" 2>&1
cat "$OUT/s26c-$C.log"
carry_stamp "$out" "nvidia-h200 (one H200)" bench/results/scripts/s26c.sh
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s26c-$C.txt"
