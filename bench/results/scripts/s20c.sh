#!/bin/bash
# Session 20, dev VM (2 cores, no GPU): the payload prefetcher's decoding throughput with 25 MiB gradient-like payloads
# at zstd level -1 (a value replay of DDP buckets), this build against the library of b681d92 (before 4714d21's
# scheduling fix and f6072d5's ISA-L CRC-32), the same benchmark source built in a worktree of b681d92 (OLD_BIN),
# alternating, 1 and 2 workers, 3 rounds. Writes bench/results/replay/prefetcher_throughput-<commit>.jsonl.
set -eu
cd "$(dirname "$0")/../../.."
NEW_BIN=build/release/bench/prefetcher_contention
OLD_BIN=${OLD_BIN:-/tmp/wt_old/build/release/bench/prefetcher_contention}
C=$(git rev-parse --short HEAD)
out=bench/results/replay/prefetcher_throughput-$C.jsonl
: > "$out"
for round in 1 2 3; do
  for threads in 1 2; do
    for side in old new; do
      bin=$NEW_BIN; lib=$C
      [[ $side == old ]] && { bin=$OLD_BIN; lib=b681d92; }
      line=$($bin --payload-mib 25 --payloads 60 --threads "$threads" --gap-us 0 --json)
      echo "{\"round\": $round, \"library\": \"$lib\", \"script_commit\": \"$C\", \"date\": \"$(date -u +%FT%TZ)\", \"machine\": \"dev VM, $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p')\", \"command\": \"bash bench/results/scripts/s20c.sh\", \"result\": $line}" >> "$out"
    done
  done
done
python3 - "$out" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
for threads in (1, 2):
    for lib in sorted({r["library"] for r in rows}):
        v = [r["result"]["decoded_gb_per_s"] for r in rows if r["library"] == lib and r["result"]["threads"] == threads]
        print(f"threads {threads} library {lib}: decoded GB/s median {statistics.median(v):.2f} ({', '.join(f'{x:.2f}' for x in v)})")
PY
