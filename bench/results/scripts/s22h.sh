#!/bin/bash
# Session 22, call H (nvidia-h200, one GPU), about 3 minutes: prefetch_bytes auto (dd3642e: 4x the recording's
# largest step of payloads) on the value replay of s22f/s22g: one recording (payloads all, defaults), then replays
# with the defaults (auto; NCCL_DEBUG=INFO, its size from the log) twice, auto with payload_device_bytes 1 GiB, and
# 512 MiB (the old default; NCCL_DEBUG=WARN: the replay's hint that it waited for decoding).
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/replay_value_prefetch_auto-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 10 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s22h-XXXXXX)
{
  carry_gpu_tests_and_baseline "$out" $W "$T"
  RANKLENS_STAGING_FULL=wait timeout 150 .carry/bin/ranklens record --lib .carry/lib/libnccl.so.2 --trace $W/rec \
    --payloads all -- $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/rec.log 2>&1
  echo "record rc=$? median_step_ms $(carry_step_ms $W/rec.log)"
  for cfg in auto:256MiB:INFO auto:256MiB:INFO auto:1GiB:INFO 512MiB:256MiB:WARN; do
    IFS=: read -r pb db dbg <<< "$cfg"; name=rep-$pb-$db-$RANDOM
    NCCL_DEBUG=$dbg RANKLENS_PREFETCH_BYTES=$pb RANKLENS_PAYLOAD_DEVICE_BYTES=$db timeout 120 \
      .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 --rank 0 --fidelity value --trace $W/rec \
      --trace-dir $W/out-$name -- $PY $T > $W/$name.log 2>&1
    echo "$name rc=$? median_step_ms $(carry_step_ms $W/$name.log) $(grep -E '^result' $W/$name.log)"
    grep -E "prefetch_bytes|waited" $W/$name.log | sed 's/^.*RANKLENS: //' | sort -u | head -3
    carry_result_row "$out" "value replay, prefetch_bytes $pb, payload_device_bytes $db" $W/$name.log \
      $W/out-$name/rank0 "" "{\"prefetch_bytes\": \"$pb\", \"payload_device_bytes\": \"$db\"}"
  done
} > "$OUT/s22h-$C.log" 2>&1
cat "$OUT/s22h-$C.log"
sed -i "s/}\$/, \"commit\": \"$C\", \"date\": \"$(date -u +%FT%TZ)\", \"machine\": \"nvidia-h200 (one H200)\", \"command\": \"bash bench\/results\/scripts\/s22h.sh\"}/" "$out"
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s22h-$C.txt"
