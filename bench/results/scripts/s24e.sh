#!/bin/bash
# Session 24, call E (nvidia-h200, one GPU), about 4 minutes: this session's record defaults together (payload files
# per compression thread, staging_bytes: auto, payload_threads: half the rank's cores) against 7d46286 (the library
# before the session). GPT-2 small DDP on one GPU recorded with payloads all under staging_full: wait, the libraries
# alternating, twice; then under the default skip, once each; the last wait recording value-replayed.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_session24_defaults-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 10 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s24e-XXXXXX)
old=.carry/old/7d46286/libnccl.so.2 new=.carry/lib/libnccl.so.2
{
  timeout 120 $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/base.log 2>&1
  echo "baseline rc=$? median_step_ms $(carry_step_ms $W/base.log)"; carry_result_row "$out" baseline $W/base.log
  for round in 1 2; do
    for lib in 7d46286 $C; do
      L=$new; [[ $lib == 7d46286 ]] && L=$old
      carry_record "$out" $W rec-$lib-wait-$round $L "$T" "{\"library\": \"$lib\", \"staging_full\": \"wait\", \"round\": $round}" RANKLENS_STAGING_FULL=wait
      [[ $round == 2 && $lib == "$C" ]] && mv $W/rec-$lib-wait-$round $W/keep || rm -rf $W/rec-$lib-wait-$round
    done
  done
  for lib in 7d46286 $C; do
    L=$new; [[ $lib == 7d46286 ]] && L=$old
    carry_record "$out" $W rec-$lib-skip $L "$T" "{\"library\": \"$lib\", \"staging_full\": \"skip\"}"
    grep -h "skipped\|staging" $W/rec-$lib-skip.log | grep -v "^RESULT" | tail -2
    rm -rf $W/rec-$lib-skip
  done
  timeout 120 .carry/bin/ranklens replay --lib $new --rank 0 --fidelity value --trace $W/keep \
    --trace-dir $W/out -- $PY $T > $W/rep.log 2>&1
  echo "value replay rc=$? median_step_ms $(carry_step_ms $W/rep.log) $(grep -E '^result' $W/rep.log)"
  carry_result_row "$out" "value replay of the last wait recording, library $C" $W/rep.log $W/out/rank0
} > "$OUT/s24e-$C.log" 2>&1
cat "$OUT/s24e-$C.log"
carry_stamp "$out" "nvidia-h200 (one H200)" bench/results/scripts/s24e.sh
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s24e-$C.txt"
