#!/bin/bash
# Session 22, call E (nvidia-h200, one GPU), about 5 minutes: trace format 1.9 (payload blobs without zstd's XXH64
# checksum, compressed blobs no longer zero-filled first) against the library before it (3bb282f, carried in
# .carry/old/3bb282f), both with the defaults (payload_shuffle auto, 4 compression and 4 decoding threads). GPT-2
# small DDP on one GPU recorded with payloads all (staging_full wait, /dev/shm, 10 steps), then value-replayed by the
# same library; the two libraries alternate, 2 rounds. Build .carry first (bench/make_carry.sh, then the old library).
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_format19-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 10 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s22e-XXXXXX)
{
  LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH RANKLENS_DEVICE=cuda timeout 90 .carry/bin/test_cuda_device \
    > "$OUT/gpu_tests-$C.txt" 2>&1
  echo "GPU tests rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/gpu_tests-$C.txt" | tr '\n' ' ')"
  timeout 120 $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/base.log 2>&1
  echo "baseline rc=$? median_step_ms $(carry_step_ms $W/base.log)"; carry_result_row "$out" baseline $W/base.log
  for round in 1 2; do
    for lib in 3bb282f $C; do
      L=.carry/lib/libnccl.so.2; [[ $lib == 3bb282f ]] && L=.carry/old/3bb282f/libnccl.so.2
      name=rec-$lib-$round
      $PY bench/thread_cpu.py --match train_gpt.py --wait 120 > $W/$name.tc &
      RANKLENS_STAGING_FULL=wait timeout 150 .carry/bin/ranklens record --lib $L --trace $W/$name --payloads all -- \
        $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/$name.log 2>&1
      echo "$name rc=$? median_step_ms $(carry_step_ms $W/$name.log) trace $(du -sh $W/$name | cut -f1)"; wait
      carry_result_row "$out" "record with library $lib, round $round" $W/$name.log $W/$name/rank0 $W/$name.tc \
        "{\"library\": \"$lib\", \"round\": $round}"
      rep=rep-$lib-$round
      $PY bench/thread_cpu.py --match train_gpt.py --wait 120 > $W/$rep.tc &
      timeout 120 .carry/bin/ranklens replay --lib $L --rank 0 --fidelity value --trace $W/$name \
        --trace-dir $W/out-$rep -- $PY $T > $W/$rep.log 2>&1
      echo "$rep rc=$? median_step_ms $(carry_step_ms $W/$rep.log) $(grep -E '^result' $W/$rep.log)"; wait
      carry_result_row "$out" "value replay with library $lib, round $round" $W/$rep.log $W/out-$rep/rank0 $W/$rep.tc \
        "{\"library\": \"$lib\", \"round\": $round}"
      rm -rf $W/$name $W/out-$rep
    done
  done
} > "$OUT/s22e-$C.log" 2>&1
cat "$OUT/s22e-$C.log"
sed -i "s/}\$/, \"commit\": \"$C\", \"date\": \"$(date -u +%FT%TZ)\", \"machine\": \"nvidia-h200 (one H200)\", \"command\": \"bash bench\/results\/scripts\/s22e.sh\"}/" "$out"
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s22e-$C.txt"
