#!/bin/bash
# Session 27, call D (nvidia-h200, one GPU), about 2 minutes: s27c measured 94090ac's query of a call's end at +1.4 us
# of host time per call with small payloads (7.95 against 6.55 us): the query came before the copy kernel's flags,
# which answer a running call with no CUDA call at all. This commit reads the flags first. record_host_overhead
# --probe, payloads none and small, 50,000 1-float all-reduces per side; three libraries alternating, 4 rounds:
# before (.carry/old/d340cc5, elapsed time asked of running calls), first (.carry/old/5ff10e2, s27c's) and after
# (.carry/lib).
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
host=$OUT/record_host_overhead_flags_first-$C.jsonl; : > "$host"
for round in 1 2 3 4; do
  order="after first before"; [[ $((round % 2)) == 0 ]] && order="before first after"
  for build in $order; do
    lib=.carry/lib/libnccl.so.2
    [[ $build == before ]] && lib=.carry/old/d340cc5/libnccl.so.2
    [[ $build == first ]] && lib=.carry/old/5ff10e2/libnccl.so.2
    for payloads in none small; do
      line=$(timeout 100 .carry/bin/record_host_overhead --real "$REAL" --ranklens $lib --calls 50000 --probe \
               --payloads $payloads --trace-dir /tmp/s27d-$build-$payloads-$round --json) \
        && echo "{\"build\": \"$build\", \"round\": $round, ${line#\{}" >> "$host" || echo "$build $payloads failed"
      rm -rf /tmp/s27d-$build-$payloads-$round
    done
  done
done
$PY - "$host" <<'PY' | tee "$OUT/s27d-$C.log"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for payloads in ("none", "small"):
    for build in ("before", "first", "after"):
        added = [r["added_median_ns"] for r in rows if r["build"] == build and r["payloads"] == payloads]
        print(payloads, build, "host added per call, median of rounds (ns):", statistics.median(added), sorted(added))
PY
carry_stamp "$host" "nvidia-h200 (one H200)" bench/results/scripts/s27d.sh
cp /tmp/meta.txt "$OUT/meta_s27d-$C.txt"
