#!/bin/bash
# Session 26, call E (nvidia-h200, one GPU), about 4 minutes: value replay's decoding threads (prefetch_threads; auto
# is a quarter of the cores, 4 on this host; last measured in session 19, before two fixes) on a trace format 1.10
# recording (a zstd frame per MiB): the 30-step GPT-2 small DDP job recorded once with payloads all (staging_full
# wait), then value-replayed with prefetch_threads 4, 8, 2 and 4 again; each replay's median step, steps 10-29 and
# its waits for decoding (replay_prefetch_waits). The job alone first.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/replay_prefetch_threads-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 30 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s26e-XXXXXX)
L=.carry/lib/libnccl.so.2
{
  timeout 120 $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/base.log 2>&1
  echo "baseline rc=$? median_step_ms $(carry_step_ms $W/base.log) steady_ms $(carry_steady_ms $W/base.log)"
  carry_result_row "$out" baseline $W/base.log
  carry_record_steady "$out" $W rec $L "$T" '{"steady_ms": null}' RANKLENS_STAGING_FULL=wait
  i=0
  for threads in 4 8 2 4; do
    i=$((i + 1)); name=value-t$threads-$i
    RANKLENS_PREFETCH_THREADS=$threads carry_value_replay "$out" $W $name $L $W/rec "$T"
    echo "$name steady_ms $(carry_steady_ms $W/$name.log) $(grep -o '"replay_prefetch_waits": [0-9]*' <(tail -1 "$out"))"
    rm -rf $W/$name
  done
} > "$OUT/s26e-$C.log" 2>&1
cat "$OUT/s26e-$C.log"
carry_stamp "$out" "nvidia-h200 (one H200)" bench/results/scripts/s26e.sh
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s26e-$C.txt"
