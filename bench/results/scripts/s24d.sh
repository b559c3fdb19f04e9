#!/bin/bash
# Session 24, call D (nvidia-h200, one GPU), about 5 minutes: staging_bytes: auto (2 GiB here with payloads all) with
# every other default, against the library before this session (7d46286: 256 MiB, one writer thread). GPT-2 small DDP
# on one GPU recorded with payloads all: under staging_full: wait (every payload kept) with the automatic 4 compression
# threads, twice, the libraries alternating, and once with 8; under the default skip (how many are kept), once each;
# the last wait recording value-replayed. GPU tests first.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_staging_auto-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 10 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s24d-XXXXXX)
old=.carry/old/7d46286/libnccl.so.2 new=.carry/lib/libnccl.so.2
{
  carry_gpu_tests_and_baseline "$out" $W "$T"
  for round in 1 2; do
    carry_record "$out" $W rec-7d46286-wait-$round $old "$T" "{\"library\": \"7d46286\", \"staging_full\": \"wait\", \"round\": $round}" RANKLENS_STAGING_FULL=wait
    rm -rf $W/rec-7d46286-wait-$round
    carry_record "$out" $W rec-$C-wait-$round $new "$T" "{\"library\": \"$C\", \"staging_full\": \"wait\", \"round\": $round}" RANKLENS_STAGING_FULL=wait NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT
    grep -h "staging" $W/rec-$C-wait-$round.log | grep -v "^RESULT" | tail -3
    [[ $round == 2 ]] && mv $W/rec-$C-wait-$round $W/keep || rm -rf $W/rec-$C-wait-$round
  done
  carry_record "$out" $W rec-$C-wait-t8 $new "$T" "{\"library\": \"$C\", \"staging_full\": \"wait\", \"payload_threads\": 8}" RANKLENS_STAGING_FULL=wait RANKLENS_PAYLOAD_THREADS=8
  rm -rf $W/rec-$C-wait-t8
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
} > "$OUT/s24d-$C.log" 2>&1
cat "$OUT/s24d-$C.log"
carry_stamp "$out" "nvidia-h200 (one H200)" bench/results/scripts/s24d.sh
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s24d-$C.txt"
