#!/bin/bash
# Session 22, dev VM (2 cores, no GPU): payload_shuffle auto chosen by CPU time on a sample spread over the payload
# (after s22a/s22b showed the head-only rule leaving GPT-2's largest bucket as it was), against off and on, on both
# kinds of values: gradients (normal fp32, dense noise: planes slower) and bf16-gradients (the same rounded to bf16
# values, as the H200's autocast gradients are: planes faster). As s21i: record_host_overhead --device host (the real
# pipeline, the payload copy a memcpy), 40 all-reduces of 25 MiB, payloads all, staging_full wait, trace in /dev/shm,
# alternating, 3 rounds: the process's wall time, the flush after the calls, the trace's size.
set -eu
cd "$(dirname "$0")/../../.."
C=$(git rev-parse --short HEAD)
out=bench/results/record/record_pipeline_shuffle_auto_cpu-$C.jsonl
: > "$out"
for round in 1 2 3; do
  for data in gradients bf16-gradients; do
    for shuffle in off auto on; do
      T=$(mktemp -d /dev/shm/s22c-XXXXXX)
      start=$(date +%s%N)
      line=$(RANKLENS_PAYLOAD_SHUFFLE=$shuffle RANKLENS_STAGING_FULL=wait build/release/bench/record_host_overhead \
        --real build/release/tests/fake_real_nccl/libnccl.so.2 --ranklens build/release/nccl_fake/libnccl.so.2 \
        --device host --payloads all --data $data --count 6553600 --calls 40 --batch 4 --trace-dir "$T/t" --json)
      wall=$(( ($(date +%s%N) - start) / 1000000 ))
      bytes=$(du -sb "$T/t" | cut -f1)
      echo "{\"round\": $round, \"data\": \"$data\", \"payload_shuffle\": \"$shuffle\", \"wall_ms\": $wall, \"trace_bytes\": $bytes, \"commit\": \"$C\", \"date\": \"$(date -u +%FT%TZ)\", \"machine\": \"dev VM, $(nproc) CPUs\", \"command\": \"bash bench/results/scripts/s22c.sh\", \"result\": $line}" >> "$out"
      rm -rf "$T"
    done
  done
done
python3 - "$out" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
for data in ("gradients", "bf16-gradients"):
    for sh in ("off", "auto", "on"):
        r = [x for x in rows if x["payload_shuffle"] == sh and x["data"] == data]
        print(data, sh, "wall ms", [x["wall_ms"] for x in r], "median", statistics.median(x["wall_ms"] for x in r),
              "flush ms", [round(x["result"]["flush_ms"]) for x in r], "trace GB", round(r[0]["trace_bytes"] / 1e9, 3))
PY
