#!/bin/bash
# Session 18, call B (nvidia-h200, one GPU, right after s18a): s18a's comparison with more runs, the default against
# the longest interval only: timing_poll_us 100 and 10000 alternating (order swapped each round), 10 rounds of
# 50,000 calls each.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
results=$OUT/record_host_overhead_poll_ab-$C.jsonl
for round in $(seq 1 10); do
  order="100 10000"; [[ $((round % 2)) == 0 ]] && order="10000 100"
  for poll in $order; do
    line=$(RANKLENS_TIMING_POLL_US=$poll timeout 120 .carry/bin/record_host_overhead --real "$REAL" \
             --ranklens .carry/lib/libnccl.so.2 --calls 50000 --probe --trace-dir /tmp/hob-$poll-$round-$RANDOM \
             --json) || { echo "run poll=$poll failed"; continue; }
    echo "{\"timing_poll_us\": $poll, \"round\": $round, ${line#\{}" >> "$results"
  done
done
python3 - "$results" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
for poll in (100, 10000):
    share = [r["added_median_ns"] - r["added_median_ns_driver_events"] for r in rows if r["timing_poll_us"] == poll]
    added = [r["added_median_ns"] for r in rows if r["timing_poll_us"] == poll]
    print(poll, "added", statistics.median(added), "share over driver floor", statistics.median(share), sorted(share))
PY
