#!/bin/bash
# Session 27, call G (nvidia-h200, one GPU), about 2 minutes: the readers' new rule (71129e8: each zstd frame must
# decompress to the size it declares) on real trace format 1.10 data: the 30-step GPT-2 small DDP job recorded with
# payloads all (staging_full wait: every gradient bucket a blob of a frame per MiB), then value-replayed as rank 0;
# `rlpayload verify` decodes every payload.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/value_replay_frame_sizes-$C.jsonl; : > "$out"
W=$(mktemp -d /dev/shm/s27g-XXXXXX)
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 30 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
L=.carry/lib/libnccl.so.2
{
  carry_record_steady "$out" $W rec $L "$T" '{"steady_ms": null}' RANKLENS_STAGING_FULL=wait
  timeout 120 .carry/bin/rlpayload verify $W/rec 2>&1 | tail -2
  carry_value_replay "$out" $W value $L $W/rec "$T"
  echo "value steady_ms $(carry_steady_ms $W/value.log)"
} > "$OUT/s27g-$C.log" 2>&1
cat "$OUT/s27g-$C.log"
carry_stamp "$out" "nvidia-h200 (one H200)" bench/results/scripts/s27g.sh
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s27g-$C.txt"
