#!/bin/bash
# Session 24, call B (nvidia-h200, one GPU), about 6 minutes: the compression threads append the payloads they
# compress to payload files of their own (this library) against one writer thread appending them all (7d46286, in
# .carry/old/7d46286), which s24a found the bound of a full-payload recording. GPT-2 small DDP on one GPU recorded
# with payloads all (staging_full wait, /dev/shm, 10 steps, the recorder's threads sampled) at payload_threads 4 (the
# automatic count here) and 8, the libraries alternating, twice; the last recording value-replayed (every payload's
# CRC-32 checked, read from several payload files). GPU tests first.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_payload_files-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 10 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s24b-XXXXXX)
{
  carry_gpu_tests_and_baseline "$out" $W "$T"
  for round in 1 2; do
    for threads in 4 8; do
      for lib in 7d46286 $C; do
        L=.carry/lib/libnccl.so.2; [[ $lib == 7d46286 ]] && L=.carry/old/7d46286/libnccl.so.2
        name=rec-$lib-t$threads-$round
        carry_record "$out" $W $name $L "$T" "{\"library\": \"$lib\", \"payload_threads\": $threads, \"round\": $round}" \
          RANKLENS_STAGING_FULL=wait RANKLENS_PAYLOAD_THREADS=$threads
        [[ $round == 2 && $threads == 8 && $lib == "$C" ]] && mv $W/$name $W/keep || rm -rf $W/$name
      done
    done
  done
  ls $W/keep/rank0 | grep -c '^pay-' | sed 's/^/payload files in the kept trace: /'
  timeout 120 .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 --rank 0 --fidelity value --trace $W/keep \
    --trace-dir $W/out -- $PY $T > $W/rep.log 2>&1
  echo "value replay rc=$? median_step_ms $(carry_step_ms $W/rep.log) $(grep -E '^result' $W/rep.log)"
  carry_result_row "$out" "value replay of the last recording, library $C" $W/rep.log $W/out/rank0
  .carry/bin/rlpayload verify $W/keep > $W/verify.txt 2>&1; echo "rlpayload verify rc=$? $(tail -1 $W/verify.txt)"
} > "$OUT/s24b-$C.log" 2>&1
cat "$OUT/s24b-$C.log"
carry_stamp "$out" "nvidia-h200 (one H200)" bench/results/scripts/s24b.sh
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s24b-$C.txt"
