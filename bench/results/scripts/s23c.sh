#!/bin/bash
# Session 23, dev VM (2 cores, no GPU): the planes' own zstd match finder (trace::kPlanesHashLog 6, kPlanesMinMatch 7
# at the fast levels) against the library before it. As s22c: record_host_overhead --device host (the recorder's real
# pipeline, the payload copy a memcpy), 40 all-reduces of 25 MiB, payloads all, staging_full wait, trace in /dev/shm,
# normal fp32 gradients and the same rounded to bf16 values, payload_shuffle off / auto / on, the two libraries
# alternating, 3 rounds: the process's wall time, the flush after the calls, the trace's size.
#   bash bench/results/scripts/s23c.sh OLD_BUILD   (OLD_BUILD: build/release of the older commit, e.g. a worktree's:
#   git worktree add /tmp/oldwt dd7a6a9 && cmake --preset release && cmake --build build/release --target nccl
#   fake_real_nccl record_host_overhead)
set -eu
cd "$(dirname "$0")/../../.."
old=$1
C=$(git rev-parse --short HEAD); O=$(git -C "$old/../.." rev-parse --short HEAD)
out=bench/results/record/record_pipeline_planes_finder-$C.jsonl
: > "$out"
for round in 1 2 3; do
  for data in gradients bf16-gradients; do
    for shuffle in off auto on; do
      for lib in $O $C; do
        [[ $lib == "$O" ]] && b=$old || b=build/release
        T=$(mktemp -d /dev/shm/s23c-XXXXXX)
        start=$(date +%s%N)
        line=$(RANKLENS_PAYLOAD_SHUFFLE=$shuffle RANKLENS_STAGING_FULL=wait $b/bench/record_host_overhead \
          --real $b/tests/fake_real_nccl/libnccl.so.2 --ranklens $b/nccl_fake/libnccl.so.2 \
          --device host --payloads all --data $data --count 6553600 --calls 40 --batch 4 --trace-dir "$T/t" --json)
        wall=$(( ($(date +%s%N) - start) / 1000000 ))
        bytes=$(du -sb "$T/t" | cut -f1)
        echo "{\"round\": $round, \"library\": \"$lib\", \"data\": \"$data\", \"payload_shuffle\": \"$shuffle\", \"wall_ms\": $wall, \"trace_bytes\": $bytes, \"commit\": \"$C\", \"date\": \"$(date -u +%FT%TZ)\", \"machine\": \"dev VM, $(nproc) CPUs\", \"command\": \"bash bench/results/scripts/s23c.sh <build of $O>\", \"result\": $line}" >> "$out"
        rm -rf "$T"
      done
    done
  done
done
python3 - "$out" "$O" "$C" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
for data in ("gradients", "bf16-gradients"):
    for sh in ("off", "auto", "on"):
        for lib in sys.argv[2:]:
            r = [x for x in rows if x["payload_shuffle"] == sh and x["data"] == data and x["library"] == lib]
            print(data, sh, lib, "wall ms", [x["wall_ms"] for x in r], "median", statistics.median(x["wall_ms"] for x in r),
                  "flush ms", [round(x["result"]["flush_ms"]) for x in r], "trace GB", round(r[0]["trace_bytes"] / 1e9, 3))
PY
