#!/bin/bash
# Session 25, call C (nvidia-h200, one GPU), about 4 minutes: is compression what bounds full capture's steady state
# (s25b: 97-122 ms per step against the job's 52, whatever the thread count)? The same 30-step job, payloads all,
# staging_full wait, 8 compression threads, at payload_zstd_level -1 (the default), -10 and -100 (zstd's fastest),
# twice in rotation; steady_ms is the median of steps 10-29.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_steady_levels-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 30 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s25c-XXXXXX)
steady() { grep -h "step .* time_ms" "$1" | $PY -c '
import re, statistics, sys
ms = [float(m.group(2)) for m in (re.search(r"step (\d+) loss \S+ time_ms (\S+)", l) for l in sys.stdin) if m and int(m.group(1)) >= 10]
print(round(statistics.median(ms), 3) if ms else None)'; }
{
  carry_gpu_tests_and_baseline "$out" $W "$T"
  echo "baseline steady_ms $(steady $W/base.log)"
  for round in 1 2; do
    for level in -1 -10 -100; do
      name=wait-l$level-$round
      carry_record "$out" $W $name .carry/lib/libnccl.so.2 "$T" \
        "{\"payload_zstd_level\": $level, \"round\": $round, \"steady_ms\": null}" \
        RANKLENS_STAGING_FULL=wait RANKLENS_PAYLOAD_ZSTD_LEVEL=$level
      s=$(steady $W/$name.log); echo "$name steady_ms $s"
      sed -i "\$s/\"steady_ms\": null/\"steady_ms\": $s/" "$out"
      rm -rf $W/$name
    done
  done
} > "$OUT/s25c-$C.log" 2>&1
cat "$OUT/s25c-$C.log"
carry_stamp "$out" "nvidia-h200 (one H200)" bench/results/scripts/s25c.sh
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s25c-$C.txt"
