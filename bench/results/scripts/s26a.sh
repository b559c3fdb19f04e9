#!/bin/bash
# Session 26, call A (nvidia-h200, one GPU), about 6 minutes: s25j (never run) widened. Payloads compressed straight
# out of staging no longer counted against payload_queue_bytes (d0727a0/0253f8d, in this commit's library) against
# e3c2394 (counted), alternating, two rounds; then this library with 12 compression threads, at zstd level -10, and
# under staging_full skip (how much a steady state keeps); a value replay of the last wait trace; GPU tests and the
# job alone first. The 30-step GPT-2 small DDP job, payloads all; steady_ms: steps 10-29.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_queue_uncounted-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 30 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s26a-XXXXXX)
arm() {  # NAME LIBRARY_COMMIT VAR=VALUE...
  local name=$1 lib=$2 L=.carry/lib/libnccl.so.2; shift 2
  [[ $lib == e3c2394 ]] && L=.carry/old/e3c2394/libnccl.so.2
  carry_record "$out" $W $name $L "$T" "{\"library\": \"$lib\", \"steady_ms\": null}" "$@"
  local s; s=$(carry_steady_ms $W/$name.log); echo "$name steady_ms $s"
  sed -i "\$s/\"steady_ms\": null/\"steady_ms\": $s/" "$out"
  .carry/bin/ranklens trace summary $W/$name/rank0 | grep -E "compression threads|payloads skipped|skipped"
  sed -n '/^Recorded/,$p' $W/$name.log
}
{
  carry_gpu_tests_and_baseline "$out" $W "$T"
  echo "baseline steady_ms $(carry_steady_ms $W/base.log)"
  for round in 1 2; do
    arm wait-e3c2394-r$round e3c2394 RANKLENS_STAGING_FULL=wait; rm -rf $W/wait-e3c2394-r$round
    arm wait-$C-r$round $C RANKLENS_STAGING_FULL=wait; [[ $round == 1 ]] && rm -rf $W/wait-$C-r$round
  done
  arm threads12-$C $C RANKLENS_STAGING_FULL=wait RANKLENS_PAYLOAD_THREADS=12; rm -rf $W/threads12-$C
  arm level-10-$C $C RANKLENS_STAGING_FULL=wait RANKLENS_PAYLOAD_ZSTD_LEVEL=-10; rm -rf $W/level-10-$C
  arm skip-$C $C RANKLENS_STAGING_FULL=skip; rm -rf $W/skip-$C
  carry_value_replay "$out" $W value-replay-$C .carry/lib/libnccl.so.2 $W/wait-$C-r2 "$T"
} > "$OUT/s26a-$C.log" 2>&1
cat "$OUT/s26a-$C.log"
carry_stamp "$out" "nvidia-h200 (one H200)" bench/results/scripts/s26a.sh
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s26a-$C.txt"
