#!/bin/bash
# Session 26, call B (nvidia-h200, one GPU), about 5 minutes: trace format 1.10 (payloads compressed out of staging
# as one zstd frame per 256 KiB block, each in one call from cache) against 68932c2 (one streamed frame per payload),
# alternating, two rounds: the 30-step GPT-2 small DDP job, payloads all, staging_full wait; steady_ms: steps 10-29;
# the compression threads' CPU per GB from `ranklens trace summary`. Then a value replay of the last new trace and
# `rlpayload verify` of it; GPU tests and the job alone first.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_frame_per_block-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 30 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s26b-XXXXXX)
arm() {  # NAME LIBRARY_COMMIT
  local name=$1 lib=$2 L=.carry/lib/libnccl.so.2
  [[ $lib == 68932c2 ]] && L=.carry/old/68932c2/libnccl.so.2
  carry_record "$out" $W $name $L "$T" "{\"library\": \"$lib\", \"steady_ms\": null}" RANKLENS_STAGING_FULL=wait
  local s; s=$(carry_steady_ms $W/$name.log); echo "$name steady_ms $s"
  sed -i "\$s/\"steady_ms\": null/\"steady_ms\": $s/" "$out"
  .carry/bin/ranklens trace summary $W/$name/rank0 | grep -E "compression threads"
  sed -n '/^Recorded/,$p' $W/$name.log
}
{
  carry_gpu_tests_and_baseline "$out" $W "$T"
  echo "baseline steady_ms $(carry_steady_ms $W/base.log)"
  for round in 1 2; do
    arm old-r$round 68932c2; rm -rf $W/old-r$round
    arm new-r$round $C; [[ $round == 1 ]] && rm -rf $W/new-r$round
  done
  carry_value_replay "$out" $W value-replay-$C .carry/lib/libnccl.so.2 $W/new-r2 "$T"
  timeout 120 .carry/bin/rlpayload verify $W/new-r2/rank0 2>&1 | tail -3
} > "$OUT/s26b-$C.log" 2>&1
cat "$OUT/s26b-$C.log"
carry_stamp "$out" "nvidia-h200 (one H200)" bench/results/scripts/s26b.sh
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s26b-$C.txt"
