#!/bin/bash
# Session 24, call F (nvidia-h200, one GPU), about 3 minutes: the default record settings (payloads small: messages up
# to 64 KiB, 256 MiB of staging, the compression threads now writing payload files of their own) against 7d46286, the
# library before the session. GPT-2 small DDP on one GPU, the libraries alternating, twice; `ranklens record`'s
# summary and the payload files of the last trace; that trace value-replayed. GPU tests first.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_small_defaults-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 20 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s24f-XXXXXX)
old=.carry/old/7d46286/libnccl.so.2 new=.carry/lib/libnccl.so.2
{
  carry_gpu_tests_and_baseline "$out" $W "$T"
  for round in 1 2; do
    for lib in 7d46286 $C; do
      L=$new; [[ $lib == 7d46286 ]] && L=$old
      name=rec-$lib-$round
      timeout 150 .carry/bin/ranklens record --lib $L --trace $W/$name -- \
        $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/$name.log 2>&1
      echo "$name rc=$? median_step_ms $(carry_step_ms $W/$name.log)"; grep -A3 "^Recorded" $W/$name.log
      carry_result_row "$out" "$name" $W/$name.log $W/$name/rank0 "" "{\"library\": \"$lib\", \"round\": $round, \"payload_files\": $(ls $W/$name/rank0 | grep -c '^pay-')}"
      [[ $round == 2 && $lib == "$C" ]] && mv $W/$name $W/keep || rm -rf $W/$name
    done
  done
  timeout 120 .carry/bin/ranklens replay --lib $new --rank 0 --fidelity value --trace $W/keep \
    --trace-dir $W/out -- $PY $T > $W/rep.log 2>&1
  echo "value replay rc=$? median_step_ms $(carry_step_ms $W/rep.log) $(grep -E '^result' $W/rep.log)"
  carry_result_row "$out" "value replay of the last recording, library $C" $W/rep.log $W/out/rank0
} > "$OUT/s24f-$C.log" 2>&1
cat "$OUT/s24f-$C.log"
carry_stamp "$out" "nvidia-h200 (one H200)" bench/results/scripts/s24f.sh
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s24f-$C.txt"
