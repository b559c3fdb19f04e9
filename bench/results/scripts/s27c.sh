#!/bin/bash
# Session 27, call C (nvidia-h200, one GPU), about 4 minutes: what 94090ac costs on the job's thread. A running call
# is now found by a query of its end event before its elapsed time is asked (one CUDA call more on the poll thread
# per call without payloads). record_host_overhead --probe, payloads none and small, 50,000 1-float all-reduces per
# side, the library before (.carry/old/d340cc5) and after (.carry/lib) alternating, 4 rounds.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
host=$OUT/record_host_overhead_query_first-$C.jsonl; : > "$host"
for round in 1 2 3 4; do
  order="after before"; [[ $((round % 2)) == 0 ]] && order="before after"
  for build in $order; do
    lib=.carry/lib/libnccl.so.2; [[ $build == before ]] && lib=.carry/old/d340cc5/libnccl.so.2
    for payloads in none small; do
      line=$(timeout 100 .carry/bin/record_host_overhead --real "$REAL" --ranklens $lib --calls 50000 --probe \
               --payloads $payloads --trace-dir /tmp/s27c-$build-$payloads-$round --json) \
        && echo "{\"build\": \"$build\", \"round\": $round, ${line#\{}" >> "$host" || echo "$build $payloads failed"
      rm -rf /tmp/s27c-$build-$payloads-$round
    done
  done
done
$PY - "$host" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for payloads in ("none", "small"):
    for build in ("before", "after"):
        added = [r["added_median_ns"] for r in rows if r["build"] == build and r["payloads"] == payloads]
        print(payloads, build, "host added per call, median of rounds (ns):", statistics.median(added), sorted(added))
PY
carry_stamp "$host" "nvidia-h200 (one H200)" bench/results/scripts/s27c.sh
cp /tmp/meta.txt "$OUT/meta_s27c-$C.txt"
