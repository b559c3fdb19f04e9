#!/bin/bash
# Session 20, dev VM (2 cores, no GPU): the payload prefetcher's decoding throughput with 25 MiB gradient-like payloads
# at zstd level -1 (a value replay of DDP buckets), for the library at the session's start (b681d92), after ISA-L's
# CRC-32 (c3b4ceb) and this build (blobs over 1 MiB decoded piece by piece), each built in a worktree with this
# benchmark source; alternating, 1 and 2 workers, 3 rounds. Writes
# bench/results/replay/prefetcher_throughput-<commit>.jsonl.
set -eu
cd "$(dirname "$0")/../../.."
C=$(git rev-parse --short HEAD)
bins=()
for lib in b681d92 c3b4ceb; do
  wt=/tmp/s20d-$lib
  if [[ ! -x $wt/build/release/bench/prefetcher_contention ]]; then
    rm -rf "$wt"; git worktree prune; git worktree add -q "$wt" "$lib"
    cp bench/prefetcher_contention.cc "$wt/bench/"
    (cd "$wt" && cmake --preset release > /dev/null && cmake --build build/release -j2 --target prefetcher_contention > /dev/null)
  fi
  bins+=("$lib=$wt/build/release/bench/prefetcher_contention")
done
cmake --build build/release -j2 --target prefetcher_contention > /dev/null
bins+=("$C=build/release/bench/prefetcher_contention")
out=bench/results/replay/prefetcher_throughput-$C.jsonl
: > "$out"
for round in 1 2 3; do
  for threads in 1 2; do
    for entry in "${bins[@]}"; do
      lib=${entry%%=*}; bin=${entry#*=}
      line=$($bin --payload-mib 25 --payloads 60 --threads "$threads" --gap-us 0 --json)
      echo "{\"round\": $round, \"library\": \"$lib\", \"script_commit\": \"$C\", \"date\": \"$(date -u +%FT%TZ)\", \"machine\": \"dev VM, $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p')\", \"command\": \"bash bench/results/scripts/s20d.sh\", \"result\": $line}" >> "$out"
    done
  done
done
python3 - "$out" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
libs = list(dict.fromkeys(r["library"] for r in rows))
for threads in (1, 2):
    for lib in libs:
        v = [r["result"]["decoded_gb_per_s"] for r in rows if r["library"] == lib and r["result"]["threads"] == threads]
        print(f"threads {threads} library {lib}: decoded GB/s median {statistics.median(v):.2f} ({', '.join(f'{x:.2f}' for x in v)})")
PY
