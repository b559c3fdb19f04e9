#!/bin/bash
# Session 25, call D (nvidia-h200, one GPU), about 4 minutes: what bounds full capture's steady state (s25b/s25c:
# neither threads nor the zstd level)? 1) The host's page-cache write rate: N writers (1, 2, 4, 8, 16) each writing
# 1 GiB with dd into /dev/shm and into /tmp at once; aggregate GB/s. 2) The 30-step GPT-2 small DDP recording (payloads
# all, staging_full wait) with 8 and 16 compression threads, with the new per-stage counters (ranklens trace summary:
# copy, compress, write), and, where perf runs, a system-wide profile of 1.5 s of its steady state (from step 10).
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_steady_stages-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 30 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s25d-XXXXXX)
steady() { grep -h "step .* time_ms" "$1" | $PY -c '
import re, statistics, sys
ms = [float(m.group(2)) for m in (re.search(r"step (\d+) loss \S+ time_ms (\S+)", l) for l in sys.stdin) if m and int(m.group(1)) >= 10]
print(round(statistics.median(ms), 3) if ms else None)'; }
{
  for where in /dev/shm /tmp; do
    for n in 1 2 4 8 16; do
      D=$(mktemp -d $where/s25d-dd-XXXXXX)
      start=$(date +%s%N)
      for i in $(seq $n); do dd if=/dev/zero of=$D/f$i bs=16M count=64 status=none & done; wait
      ms=$(( ($(date +%s%N) - start) / 1000000 ))
      gbs=$($PY -c "print(round($n * 1.073741824 / ($ms / 1000), 2))")
      echo "dd $where writers $n: $n GiB in $ms ms = $gbs GB/s"
      echo "{\"label\": \"dd\", \"where\": \"$where\", \"writers\": $n, \"ms\": $ms, \"gb_s\": $gbs}" >> "$out"
      rm -rf $D
    done
  done
  carry_gpu_tests_and_baseline "$out" $W "$T"
  for threads in 8 16; do
    name=wait-t$threads
    if [[ $threads == 8 ]] && command -v perf > /dev/null; then
      (for i in $(seq 600); do grep -q "step 10 loss" $W/$name.log 2>/dev/null && break; sleep 0.1; done
       timeout 20 perf record -a -g -o $W/perf.data -- sleep 1.5 > $W/perf.log 2>&1) &
    fi
    carry_record "$out" $W $name .carry/lib/libnccl.so.2 "$T" \
      "{\"payload_threads\": $threads, \"steady_ms\": null}" RANKLENS_STAGING_FULL=wait RANKLENS_PAYLOAD_THREADS=$threads
    wait
    s=$(steady $W/$name.log); echo "$name steady_ms $s"
    sed -i "\$s/\"steady_ms\": null/\"steady_ms\": $s/" "$out"
    .carry/bin/ranklens trace summary $W/$name/rank0 | grep -E "compression threads|payloads:"
    rm -rf $W/$name
  done
  if [[ -f $W/perf.data ]]; then
    perf report -i $W/perf.data --no-children --sort comm,sym 2>/dev/null | grep -v "^#" | grep "%" | grep -v "^ *-" | head -60
  else
    echo "perf: $(command -v perf || echo not installed); $(cat $W/perf.log 2>/dev/null | head -3)"
  fi
} > "$OUT/s25d-$C.log" 2>&1
cat "$OUT/s25d-$C.log"
carry_stamp "$out" "nvidia-h200 (one H200)" bench/results/scripts/s25d.sh
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s25d-$C.txt"
