#!/bin/bash
# Session 22, dev VM (2 cores, no GPU): the recorder's pipeline with each payload's CRC-32 computed inside the
# byte-plane pass (this commit) against the library before it (58467ca, built in a worktree: OLD=path/to/its
# libnccl.so.2), alternating, 3 rounds. As s22c: record_host_overhead --device host, 40 all-reduces of 25 MiB of
# bf16-valued fp32 (--data bf16-gradients), payload_shuffle on, payloads all, staging_full wait, trace in /dev/shm:
# the process's wall time and the flush after the calls.
#   OLD=/tmp/oldwt/build/release/nccl_fake/libnccl.so.2 bash bench/results/scripts/s22i.sh
set -eu
cd "$(dirname "$0")/../../.."
C=$(git rev-parse --short HEAD)
out=bench/results/record/record_pipeline_crc_fused-$C.jsonl
: > "$out"
for round in 1 2 3; do
  for lib in 58467ca $C; do
    L=build/release/nccl_fake/libnccl.so.2; [[ $lib == 58467ca ]] && L=$OLD
    T=$(mktemp -d /dev/shm/s22i-XXXXXX)
    start=$(date +%s%N)
    line=$(RANKLENS_PAYLOAD_SHUFFLE=on RANKLENS_STAGING_FULL=wait build/release/bench/record_host_overhead \
      --real build/release/tests/fake_real_nccl/libnccl.so.2 --ranklens "$L" --device host --payloads all \
      --data bf16-gradients --count 6553600 --calls 40 --batch 4 --trace-dir "$T/t" --json)
    wall=$(( ($(date +%s%N) - start) / 1000000 ))
    echo "{\"round\": $round, \"library\": \"$lib\", \"wall_ms\": $wall, \"commit\": \"$C\", \"date\": \"$(date -u +%FT%TZ)\", \"machine\": \"dev VM, $(nproc) CPUs\", \"command\": \"bash bench/results/scripts/s22i.sh\", \"result\": $line}" >> "$out"
    rm -rf "$T"
  done
done
python3 - "$out" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
for lib in dict.fromkeys(x["library"] for x in rows):
    r = [x for x in rows if x["library"] == lib]
    print(lib, "wall ms", [x["wall_ms"] for x in r], "median", statistics.median(x["wall_ms"] for x in r),
          "flush ms", [round(x["result"]["flush_ms"]) for x in r])
PY
