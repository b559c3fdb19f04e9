#!/bin/bash
# Session 22, call A (nvidia-h200, one GPU; written in session 21, not run yet: no device time left), about 4-5
# minutes. What session 21 could not measure on a GPU: payload_shuffle auto (the default since da1e627) against off
# and on, and value replay of payloads stored as byte planes with the SSE2 restore (c8e5a8b; s21g measured the
# replay before it). GPT-2 small DDP recorded with payloads all (staging_full wait, /dev/shm, 10 steps, 4 compression
# threads) with payload_shuffle auto, off and on; per-thread CPU; value replays of the auto and off recordings with
# the automatic 4 decoding threads, and of the auto one with 8. Build .carry first: bench/make_carry.sh.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_full_payload_shuffle_auto-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 10 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s22a-XXXXXX)
{
  LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH RANKLENS_DEVICE=cuda timeout 90 .carry/bin/test_cuda_device \
    > "$OUT/gpu_tests-$C.txt" 2>&1
  echo "GPU tests rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/gpu_tests-$C.txt" | tr '\n' ' ')"
  timeout 120 $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/base.log 2>&1
  echo "baseline rc=$? median_step_ms $(carry_step_ms $W/base.log)"; carry_result_row "$out" baseline $W/base.log
  for cfg in auto:0 off:0 on:0; do
    IFS=: read -r sh t <<< "$cfg"; name=rec-shuffle-$sh-t$t
    $PY bench/thread_cpu.py --match train_gpt.py --wait 120 > $W/$name.tc &
    RANKLENS_PAYLOAD_SHUFFLE=$sh RANKLENS_PAYLOAD_THREADS=$t RANKLENS_STAGING_FULL=wait timeout 150 \
      .carry/bin/ranklens record --lib .carry/lib/libnccl.so.2 --trace $W/$name --payloads all -- \
      $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/$name.log 2>&1
    echo "$name rc=$? median_step_ms $(carry_step_ms $W/$name.log) trace $(du -sh $W/$name | cut -f1)"; wait
    carry_result_row "$out" "record payload_shuffle $sh, payload_threads $t (0: automatic, 4 here)" $W/$name.log \
      $W/$name/rank0 $W/$name.tc \
      "{\"payload_shuffle\": \"$sh\", \"payload_threads\": $t}"
  done
  for run in rec-shuffle-auto-t0:0 rec-shuffle-off-t0:0 rec-shuffle-auto-t0:8; do
    rec=${run%%:*}; pt=${run##*:}; name=rep-$rec-p$pt
    $PY bench/thread_cpu.py --match train_gpt.py --wait 120 > $W/$name.tc &
    RANKLENS_PREFETCH_THREADS=$pt timeout 120 .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 --rank 0 \
      --fidelity value --trace $W/$rec --trace-dir $W/out-$name -- $PY $T > $W/$name.log 2>&1
    echo "$name rc=$? median_step_ms $(carry_step_ms $W/$name.log) $(grep -E '^result' $W/$name.log)"; wait
    grep -E '^Replay of the recording' $W/$name.log
    carry_result_row "$out" "value replay of $rec, prefetch_threads $pt (0: automatic, 4 here)" $W/$name.log \
      $W/out-$name/rank0 $W/$name.tc \
      "{\"recording\": \"$rec\", \"prefetch_threads\": $pt}"
  done
  for f in rec-shuffle-auto-t0 rep-rec-shuffle-auto-t0-p0; do echo "===== $f"; tail -n 12 $W/$f.log; done
} > "$OUT/s22a-$C.log" 2>&1
head -14 "$OUT/s22a-$C.log"
sed -i "s/}\$/, \"commit\": \"$C\", \"date\": \"$(date -u +%FT%TZ)\", \"machine\": \"nvidia-h200 (one H200)\", \"command\": \"bash bench\/results\/scripts\/s22a.sh\"}/" "$out"
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s22a-$C.txt"
