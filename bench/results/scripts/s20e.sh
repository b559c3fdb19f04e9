#!/bin/bash
# Session 20, dev VM (2 cores, no GPU): is full-payload recording bound by writing the trace files? The recorder on
# its host device (RANKLENS_DEVICE=host: the payload copy is a memcpy, the rest of the pipeline is the real one:
# staging, the background thread, compression threads, the writer) recording 40 all-reduces of 25 MiB of
# gradient-like values (payloads all, staging_full wait) beside the fake real NCCL, with the trace in /tmp (ext4 here)
# and in /dev/shm (tmpfs), alternating, 3 rounds: the process's wall time and the flush after the calls.
set -eu
cd "$(dirname "$0")/../../.."
C=$(git rev-parse --short HEAD)
out=bench/results/record/record_pipeline_tmpfs-$C.jsonl
: > "$out"
for round in 1 2 3; do
  for where in /tmp /dev/shm; do
    T=$(mktemp -d "$where/s20e-XXXXXX")
    start=$(date +%s%N)
    line=$(RANKLENS_STAGING_FULL=wait build/release/bench/record_host_overhead --real build/release/tests/fake_real_nccl/libnccl.so.2 \
      --ranklens build/release/nccl_fake/libnccl.so.2 --device host --payloads all --data gradients --count 6553600 \
      --calls 40 --batch 4 --trace-dir "$T/t" --json)
    wall=$(( ($(date +%s%N) - start) / 1000000 ))
    bytes=$(du -sb "$T/t" | cut -f1)
    echo "{\"round\": $round, \"trace_in\": \"$where\", \"wall_ms\": $wall, \"trace_bytes\": $bytes, \"commit\": \"$C\", \"date\": \"$(date -u +%FT%TZ)\", \"machine\": \"dev VM, $(nproc) CPUs\", \"command\": \"bash bench/results/scripts/s20e.sh\", \"result\": $line}" >> "$out"
    rm -rf "$T"
  done
done
python3 - "$out" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
for where in ("/tmp", "/dev/shm"):
    r = [x for x in rows if x["trace_in"] == where]
    print(where, "wall ms median", statistics.median(x["wall_ms"] for x in r), [x["wall_ms"] for x in r],
          "flush ms", [round(x["result"]["flush_ms"]) for x in r],
          "RankLens call median ms", [round(x["result"]["median_ns_ranklens"] / 1e6, 1) for x in r],
          "trace GB", round(r[0]["trace_bytes"] / 1e9, 2))
PY
