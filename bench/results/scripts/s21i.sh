#!/bin/bash
# Session 21, dev VM (2 cores, no GPU), after s21h: payload_shuffle auto (planes only when a sample compresses as it is)
# against off and on, the recorder's whole host pipeline with payloads stored as byte planes and as
# they are (payload_shuffle on/off), as s20e: record_host_overhead --device host (the payload copy is a memcpy; staging,
# the background thread, compression threads and the writer are the real ones), 40 all-reduces of 25 MiB of fp32
# gradient-like values (normal, sd 1e-3), payloads all, staging_full wait, trace in /dev/shm, alternating, 3 rounds:
# the process's wall time, the flush after the calls, the trace's size.
set -eu
cd "$(dirname "$0")/../../.."
C=$(git rev-parse --short HEAD)
out=bench/results/record/record_pipeline_shuffle_auto-$C.jsonl
: > "$out"
for round in 1 2 3; do
  for shuffle in off auto on; do
    T=$(mktemp -d /dev/shm/s21i-XXXXXX)
    start=$(date +%s%N)
    line=$(RANKLENS_PAYLOAD_SHUFFLE=$shuffle RANKLENS_STAGING_FULL=wait build/release/bench/record_host_overhead \
      --real build/release/tests/fake_real_nccl/libnccl.so.2 --ranklens build/release/nccl_fake/libnccl.so.2 \
      --device host --payloads all --data gradients --count 6553600 --calls 40 --batch 4 --trace-dir "$T/t" --json)
    wall=$(( ($(date +%s%N) - start) / 1000000 ))
    bytes=$(du -sb "$T/t" | cut -f1)
    echo "{\"round\": $round, \"payload_shuffle\": \"$shuffle\", \"wall_ms\": $wall, \"trace_bytes\": $bytes, \"commit\": \"$C\", \"date\": \"$(date -u +%FT%TZ)\", \"machine\": \"dev VM, $(nproc) CPUs\", \"command\": \"bash bench/results/scripts/s21i.sh\", \"result\": $line}" >> "$out"
    rm -rf "$T"
  done
done
python3 - "$out" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
for sh in ("off", "auto", "on"):
    r = [x for x in rows if x["payload_shuffle"] == sh]
    print(sh, "wall ms", [x["wall_ms"] for x in r], "median", statistics.median(x["wall_ms"] for x in r),
          "flush ms", [round(x["result"]["flush_ms"]) for x in r], "trace GB", round(r[0]["trace_bytes"] / 1e9, 3))
PY
