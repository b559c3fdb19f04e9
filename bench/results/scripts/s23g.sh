#!/bin/bash
# Session 23, call G (nvidia-h200, one GPU), about 5 minutes: payloads of 1 MiB and more lent out of staging to the
# compression workers, which copy them out fused with the byte-plane pass (the library of this commit), against the
# library with the kept blob buffers alone (a8847df, carried in .carry/old/a8847df), every default otherwise. GPT-2
# small DDP on one GPU recorded with payloads all (staging_full wait, /dev/shm, 10 steps, the recorder's threads
# sampled), 3 rounds, the libraries alternating; the trace deleted after each but the last, which is value-replayed.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_lent_staging-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 10 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s23g-XXXXXX)
{
  timeout 120 $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/base.log 2>&1
  echo "baseline rc=$? median_step_ms $(carry_step_ms $W/base.log)"; carry_result_row "$out" baseline $W/base.log
  for round in 1 2 3; do
    for lib in a8847df $C; do
      L=.carry/lib/libnccl.so.2; [[ $lib == a8847df ]] && L=.carry/old/a8847df/libnccl.so.2
      name=rec-$lib-$round
      $PY bench/thread_cpu.py --match train_gpt.py --wait 120 > $W/$name.tc &
      RANKLENS_STAGING_FULL=wait timeout 150 .carry/bin/ranklens record --lib $L --trace $W/$name --payloads all -- \
        $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/$name.log 2>&1
      echo "$name rc=$? median_step_ms $(carry_step_ms $W/$name.log) trace $(du -sh $W/$name | cut -f1)"; wait
      carry_result_row "$out" "record, library $lib, round $round" $W/$name.log $W/$name/rank0 $W/$name.tc \
        "{\"library\": \"$lib\", \"round\": $round}"
      [[ $round == 3 && $lib == "$C" ]] && mv $W/$name $W/keep || rm -rf $W/$name
    done
  done
  # The lent copies' bytes checked end to end: the last recording value-replayed (every payload's CRC-32 verified).
  timeout 120 .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 --rank 0 --fidelity value --trace $W/keep \
    --trace-dir $W/out -- $PY $T > $W/rep.log 2>&1
  echo "value replay rc=$? median_step_ms $(carry_step_ms $W/rep.log) $(grep -E '^result' $W/rep.log)"
  carry_result_row "$out" "value replay of the last recording, library $C" $W/rep.log $W/out/rank0
} > "$OUT/s23g-$C.log" 2>&1
cat "$OUT/s23g-$C.log"
sed -i "s/}\$/, \"commit\": \"$C\", \"date\": \"$(date -u +%FT%TZ)\", \"machine\": \"nvidia-h200 (one H200)\", \"command\": \"bash bench\/results\/scripts\/s23g.sh\"}/" "$out"
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s23g-$C.txt"
