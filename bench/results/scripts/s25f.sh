#!/bin/bash
# Session 25, call F (nvidia-h200, one GPU), about 5 minutes: lent payloads compressed straight out of staging (no
# copy, this commit) against 1b0e8b6 (copied out, then compressed), side by side: the 30-step GPT-2 small DDP job,
# payloads all, staging_full wait, the defaults otherwise (8 compression threads), alternating, three rounds; each row
# has steady_ms (the median of steps 10-29) and the stage counters (payload_*_ns). Then a value replay of the last
# new trace (every payload restored, the losses as recorded).
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_compress_from_staging-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 30 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s25f-XXXXXX)
old=.carry/old/1b0e8b6/libnccl.so.2 new=.carry/lib/libnccl.so.2
steady() { grep -h "step .* time_ms" "$1" | $PY -c '
import re, statistics, sys
ms = [float(m.group(2)) for m in (re.search(r"step (\d+) loss \S+ time_ms (\S+)", l) for l in sys.stdin) if m and int(m.group(1)) >= 10]
print(round(statistics.median(ms), 3) if ms else None)'; }
{
  carry_gpu_tests_and_baseline "$out" $W "$T"
  echo "baseline steady_ms $(steady $W/base.log)"
  for round in 1 2 3; do
    for lib in 1b0e8b6 $C; do
      L=$new; [[ $lib == 1b0e8b6 ]] && L=$old
      name=wait-$lib-$round
      carry_record "$out" $W $name $L "$T" "{\"library\": \"$lib\", \"round\": $round, \"steady_ms\": null}" \
        RANKLENS_STAGING_FULL=wait
      s=$(steady $W/$name.log); echo "$name steady_ms $s"
      sed -i "\$s/\"steady_ms\": null/\"steady_ms\": $s/" "$out"
      .carry/bin/ranklens trace summary $W/$name/rank0 | grep -E "compression threads"
      [[ $round == 3 && $lib == "$C" ]] && mv $W/$name $W/keep || rm -rf $W/$name
    done
  done
  carry_value_replay "$out" $W value-new $new $W/keep "$T"
  $PY - $W/wait-$C-3.log $W/value-new.log <<'PY'
import json, sys
losses = [json.loads([l for l in open(f) if l.startswith("RESULT ")][-1][7:])["losses"] for f in sys.argv[1:3]]
print("losses as recorded:", losses[0] == losses[1], "(%d steps)" % len(losses[0]))
PY
} > "$OUT/s25f-$C.log" 2>&1
cat "$OUT/s25f-$C.log"
carry_stamp "$out" "nvidia-h200 (one H200)" bench/results/scripts/s25f.sh
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s25f-$C.txt"
