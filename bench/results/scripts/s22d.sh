#!/bin/bash
# Session 22, call D (nvidia-h200, one GPU), about 3 minutes: payload_shuffle auto chosen by CPU time on a sample
# spread over each payload (s22c) on the GPT-2 job of s22a: recorded with auto, on and off (payloads all, staging_full
# wait, /dev/shm, 10 steps, the automatic 4 compression threads), then value replays of the auto recording with the
# automatic 4 decoding threads (twice) and 8, and of the off recording with 4 (s22a/s22b: planes replayed at 57-111
# ms per step, the bytes as they are at 184).
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_full_payload_shuffle_auto_cpu-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 10 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s22d-XXXXXX)
{
  LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH RANKLENS_DEVICE=cuda timeout 90 .carry/bin/test_cuda_device \
    > "$OUT/gpu_tests-$C.txt" 2>&1
  echo "GPU tests rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/gpu_tests-$C.txt" | tr '\n' ' ')"
  timeout 120 $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/base.log 2>&1
  echo "baseline rc=$? median_step_ms $(carry_step_ms $W/base.log)"; carry_result_row "$out" baseline $W/base.log
  for sh in auto on off; do
    name=rec-$sh
    $PY bench/thread_cpu.py --match train_gpt.py --wait 120 > $W/$name.tc &
    RANKLENS_PAYLOAD_SHUFFLE=$sh RANKLENS_STAGING_FULL=wait timeout 150 \
      .carry/bin/ranklens record --lib .carry/lib/libnccl.so.2 --trace $W/$name --payloads all -- \
      $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/$name.log 2>&1
    echo "$name rc=$? median_step_ms $(carry_step_ms $W/$name.log) trace $(du -sh $W/$name | cut -f1)"; wait
    carry_result_row "$out" "record payload_shuffle $sh, 4 compression threads" $W/$name.log $W/$name/rank0 \
      $W/$name.tc "{\"payload_shuffle\": \"$sh\"}"
  done
  for run in rec-auto:0 rec-auto:8 rec-off:0 rec-auto:0; do
    rec=${run%%:*}; pt=${run##*:}; name=rep-$rec-p$pt-$RANDOM
    RANKLENS_PREFETCH_THREADS=$pt timeout 120 .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 --rank 0 \
      --fidelity value --trace $W/$rec --trace-dir $W/out-$name -- $PY $T > $W/$name.log 2>&1
    echo "$name rc=$? median_step_ms $(carry_step_ms $W/$name.log) $(grep -E '^result' $W/$name.log)"
    carry_result_row "$out" "value replay of $rec, prefetch_threads $pt (0: automatic, 4 here)" $W/$name.log \
      $W/out-$name/rank0 "" "{\"recording\": \"$rec\", \"prefetch_threads\": $pt}"
  done
  .carry/bin/rlpayload ls $W/rec-auto --json > $W/ls.json
  $PY - $W/ls.json <<'PY'
import json, sys, collections
n = collections.Counter((p["shuffle"], p["bytes"]) for p in json.load(open(sys.argv[1]))["payloads"])
for (shuffle, size), count in sorted(n.items()):
    print(f"auto recording: {count} payloads of {size} bytes stored {'planes%d' % shuffle if shuffle else 'as-is'}")
PY
} > "$OUT/s22d-$C.log" 2>&1
head -12 "$OUT/s22d-$C.log"
sed -i "s/}\$/, \"commit\": \"$C\", \"date\": \"$(date -u +%FT%TZ)\", \"machine\": \"nvidia-h200 (one H200)\", \"command\": \"bash bench\/results\/scripts\/s22d.sh\"}/" "$out"
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s22d-$C.txt"
