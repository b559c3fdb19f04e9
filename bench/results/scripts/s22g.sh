#!/bin/bash
# Session 22, call G (nvidia-h200, one GPU), about 3.5 minutes, after s22f (prefetch_bytes 2 GiB: 54.9 ms per step
# against 87-95 with the default 512 MiB; the job 52.6): how much pinned memory the value replay of GPT-2 small DDP
# on one GPU needs to keep pace (0.48 GB of payloads per step): prefetch_bytes 1, 1.5 and 3 GiB (1 GiB twice), device
# staging at its default, 4 decoding threads; each replay with per-thread CPU.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/replay_value_buffers-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 10 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s22g-XXXXXX)
{
  timeout 120 $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/base.log 2>&1
  echo "baseline rc=$? median_step_ms $(carry_step_ms $W/base.log)"; carry_result_row "$out" baseline $W/base.log
  RANKLENS_STAGING_FULL=wait timeout 150 .carry/bin/ranklens record --lib .carry/lib/libnccl.so.2 --trace $W/rec \
    --payloads all -- $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/rec.log 2>&1
  echo "record rc=$? median_step_ms $(carry_step_ms $W/rec.log)"
  for cfg in 1GiB:256MiB:0 1536MiB:256MiB:0 3GiB:256MiB:0 1GiB:256MiB:0; do
    IFS=: read -r pb db pt <<< "$cfg"; name=rep-$pb-$db-$pt-$RANDOM
    $PY bench/thread_cpu.py --match train_gpt.py --wait 120 > $W/$name.tc &
    RANKLENS_PREFETCH_BYTES=$pb RANKLENS_PAYLOAD_DEVICE_BYTES=$db RANKLENS_PREFETCH_THREADS=$pt timeout 120 \
      .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 --rank 0 --fidelity value --trace $W/rec \
      --trace-dir $W/out-$name -- $PY $T > $W/$name.log 2>&1
    echo "$name rc=$? median_step_ms $(carry_step_ms $W/$name.log) $(grep -E '^result' $W/$name.log)"; wait
    carry_result_row "$out" "value replay, prefetch_bytes $pb, payload_device_bytes $db, prefetch_threads $pt" \
      $W/$name.log $W/out-$name/rank0 $W/$name.tc \
      "{\"prefetch_bytes\": \"$pb\", \"payload_device_bytes\": \"$db\", \"prefetch_threads\": $pt}"
    grep -E "step [0-9]+ .*time_ms" $W/$name.log | tr '\n' ' ' | sed 's/\[rank 0\/1\] //g'; echo
  done
  which nsys nsys-ui 2>&1 | head -2
} > "$OUT/s22g-$C.log" 2>&1
cat "$OUT/s22g-$C.log"
sed -i "s/}\$/, \"commit\": \"$C\", \"date\": \"$(date -u +%FT%TZ)\", \"machine\": \"nvidia-h200 (one H200)\", \"command\": \"bash bench\/results\/scripts\/s22g.sh\"}/" "$out"
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s22g-$C.txt"
