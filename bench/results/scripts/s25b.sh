#!/bin/bash
# Session 25, call B (nvidia-h200, one GPU), about 6 minutes: every payload of GPT-2 small DDP on one GPU over 30
# steps (s24e's job ran 10, which staging and the writer's queue absorb): the steady state. payload_threads 8 (the
# automatic count on this host), 12 and 16 under staging_full: wait, in rotation, twice; each row also has the median
# of steps 10-29 (steady_ms) beside the run's median.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_steady_state-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 30 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s25b-XXXXXX)
steady() { grep -h "step .* time_ms" "$1" | $PY -c '
import re, statistics, sys
ms = [float(m.group(2)) for m in (re.search(r"step (\d+) loss \S+ time_ms (\S+)", l) for l in sys.stdin) if m and int(m.group(1)) >= 10]
print(round(statistics.median(ms), 3) if ms else None)'; }
{
  carry_gpu_tests_and_baseline "$out" $W "$T"
  echo "baseline steady_ms $(steady $W/base.log)"
  for round in 1 2; do
    for threads in 8 12 16; do
      name=wait-t$threads-$round
      carry_record "$out" $W $name .carry/lib/libnccl.so.2 "$T" \
        "{\"payload_threads\": $threads, \"round\": $round, \"steady_ms\": null}" \
        RANKLENS_STAGING_FULL=wait RANKLENS_PAYLOAD_THREADS=$threads
      s=$(steady $W/$name.log); echo "$name steady_ms $s"
      sed -i "\$s/\"steady_ms\": null/\"steady_ms\": $s/" "$out"
      rm -rf $W/$name
    done
  done
} > "$OUT/s25b-$C.log" 2>&1
cat "$OUT/s25b-$C.log"
carry_stamp "$out" "nvidia-h200 (one H200)" bench/results/scripts/s25b.sh
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s25b-$C.txt"
