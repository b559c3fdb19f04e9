#!/bin/bash
# Session 18, call C (nvidia-h200, one GPU, after s18b): the shape of s18b's difference (timing_poll_us 100, 2000 and
# 10000, rotating order, 8 rounds of 50,000 calls, no payloads), and the same 100 against 10000 with the default
# payload policy (payloads small: every 4-byte result copied off the GPU and stored), alternating, 8 rounds.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
results=$OUT/record_host_overhead_poll_curve-$C.jsonl
run_one() {  # poll payloads round
  line=$(RANKLENS_TIMING_POLL_US=$1 timeout 120 .carry/bin/record_host_overhead --real "$REAL" \
           --ranklens .carry/lib/libnccl.so.2 --calls 50000 --probe --payloads "$2" \
           --trace-dir /tmp/hoc-$1-$2-$3-$RANDOM --json) || { echo "run poll=$1 payloads=$2 failed"; return; }
  echo "{\"timing_poll_us\": $1, \"round\": $3, ${line#\{}" >> "$results"
}
variants=(100 2000 10000)
for round in $(seq 1 8); do
  for k in 0 1 2; do run_one "${variants[$(((k + round) % 3))]}" none "$round"; done
  order="100 10000"; [[ $((round % 2)) == 0 ]] && order="10000 100"
  for poll in $order; do run_one "$poll" small "$round"; done
done
python3 - "$results" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
for payloads in ("none", "small"):
    for poll in (100, 2000, 10000):
        sel = [r for r in rows if r["timing_poll_us"] == poll and r["payloads"] == payloads]
        if not sel: continue
        share = [r["added_median_ns"] - r["added_median_ns_driver_events"] for r in sel]
        print(payloads, poll, "runs", len(sel), "added median", statistics.median(r["added_median_ns"] for r in sel),
              "share over driver floor", statistics.median(share))
PY
