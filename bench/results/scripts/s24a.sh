#!/bin/bash
# Session 24, call A (nvidia-h200, one GPU), about 5 minutes. (1) s23h: payloads skipped under the default
# staging_full: skip with and without the lent staging (a8847df in .carry/old/a8847df against this library). (2) What
# bounds a full-payload recording now: GPT-2 small DDP on one GPU recorded with payloads all, staging_full wait,
# payload_threads 4 (the automatic count on this 16-core host), 8 and 12, twice each in rotation, the recorder's
# threads sampled (is the writer thread the next bound once compression has more threads?).
set -u
cd "$(dirname "$0")/../../.."
bash bench/results/scripts/s23h.sh
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_payload_threads-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 10 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s24a-XXXXXX)
{
  timeout 120 $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/base.log 2>&1
  echo "baseline rc=$? median_step_ms $(carry_step_ms $W/base.log)"; carry_result_row "$out" baseline $W/base.log
  for round in 1 2; do
    for threads in 4 8 12; do
      name=rec-t$threads-$round
      $PY bench/thread_cpu.py --match train_gpt.py --wait 120 > $W/$name.tc &
      RANKLENS_STAGING_FULL=wait RANKLENS_PAYLOAD_THREADS=$threads timeout 150 .carry/bin/ranklens record \
        --lib .carry/lib/libnccl.so.2 --trace $W/$name --payloads all -- \
        $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/$name.log 2>&1
      echo "$name rc=$? median_step_ms $(carry_step_ms $W/$name.log) trace $(du -sh $W/$name | cut -f1)"; wait
      carry_result_row "$out" "record, payload_threads $threads, round $round" $W/$name.log $W/$name/rank0 \
        $W/$name.tc "{\"payload_threads\": $threads, \"round\": $round}"
      rm -rf $W/$name
    done
  done
} > "$OUT/s24a-$C.log" 2>&1
cat "$OUT/s24a-$C.log"
sed -i "s/}\$/, \"commit\": \"$C\", \"date\": \"$(date -u +%FT%TZ)\", \"machine\": \"nvidia-h200 (one H200)\", \"command\": \"bash bench\/results\/scripts\/s24a.sh\"}/" "$out"
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s24a-$C.txt"
