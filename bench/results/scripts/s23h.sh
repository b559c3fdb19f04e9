#!/bin/bash
# Session 23, call H (nvidia-h200, one GPU), about 2 minutes: does lending staging to the compression workers (0ec5898)
# skip more payloads under the default staging_full: skip? GPT-2 small DDP on one GPU recorded with payloads all and
# otherwise every default (staging 256 MiB, skip when full), the library before it (a8847df, .carry/old/a8847df) and
# this one, once each: step time and the manifest's payloads_skipped_staging_full.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_lent_staging_skip-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 10 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s23h-XXXXXX)
{
  for lib in a8847df $C; do
    L=.carry/lib/libnccl.so.2; [[ $lib == a8847df ]] && L=.carry/old/a8847df/libnccl.so.2
    name=rec-$lib
    timeout 100 .carry/bin/ranklens record --lib $L --trace $W/$name --payloads all -- \
      $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/$name.log 2>&1
    echo "$name rc=$? median_step_ms $(carry_step_ms $W/$name.log) trace $(du -sh $W/$name | cut -f1)"
    carry_result_row "$out" "record, staging_full skip, library $lib" $W/$name.log $W/$name/rank0 "" \
      "{\"library\": \"$lib\"}"
    rm -rf $W/$name
  done
} > "$OUT/s23h-$C.log" 2>&1
cat "$OUT/s23h-$C.log"; grep -o '"payloads_skipped_staging_full": [0-9]*\|"payloads_staged": [0-9]*' "$out"
sed -i "s/}\$/, \"commit\": \"$C\", \"date\": \"$(date -u +%FT%TZ)\", \"machine\": \"nvidia-h200 (one H200)\", \"command\": \"bash bench\/results\/scripts\/s23h.sh\"}/" "$out"
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s23h-$C.txt"
