#!/bin/bash
# Session 25, call H (nvidia-h200, one GPU), about 2 minutes: what `ranklens record` and `ranklens trace summary` now
# say of a full-payload recording bound by its compression threads: the 30-step GPT-2 small DDP job, payloads all,
# under staging_full wait and under skip (the default), the defaults otherwise.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_threads_bound-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 30 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s25h-XXXXXX)
{
  for full in wait skip; do
    name=$full
    carry_record "$out" $W $name .carry/lib/libnccl.so.2 "$T" "{\"staging_full\": \"$full\"}" RANKLENS_STAGING_FULL=$full
    sed -n '/^Recorded/,$p' $W/$name.log
    .carry/bin/ranklens trace summary $W/$name/rank0 | grep -E "compression threads|not stored"
    rm -rf $W/$name
  done
} > "$OUT/s25h-$C.log" 2>&1
cat "$OUT/s25h-$C.log"
carry_stamp "$out" "nvidia-h200 (one H200)" bench/results/scripts/s25h.sh
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s25h-$C.txt"
