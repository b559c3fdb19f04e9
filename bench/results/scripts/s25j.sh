#!/bin/bash
# Session 25, call J (nvidia-h200, one GPU), about 2 minutes: payloads compressed straight out of staging no longer
# counted against payload_queue_bytes (this commit) against e3c2394 (counted), side by side, every default: the
# 30-step GPT-2 small DDP job, payloads all, staging_full wait; steady_ms: steps 10-29.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_queue_uncounted-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 30 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s25j-XXXXXX)
{
  for lib in e3c2394 $C; do
    L=.carry/lib/libnccl.so.2; [[ $lib == e3c2394 ]] && L=.carry/old/e3c2394/libnccl.so.2
    name=wait-$lib
    carry_record "$out" $W $name $L "$T" "{\"library\": \"$lib\", \"steady_ms\": null}" RANKLENS_STAGING_FULL=wait
    s=$(carry_steady_ms $W/$name.log); echo "$name steady_ms $s"
    sed -i "\$s/\"steady_ms\": null/\"steady_ms\": $s/" "$out"
    .carry/bin/ranklens trace summary $W/$name/rank0 | grep -E "compression threads"
    sed -n '/^Recorded/,$p' $W/$name.log
    rm -rf $W/$name
  done
} > "$OUT/s25j-$C.log" 2>&1
cat "$OUT/s25j-$C.log"
carry_stamp "$out" "nvidia-h200 (one H200)" bench/results/scripts/s25j.sh
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s25j-$C.txt"
