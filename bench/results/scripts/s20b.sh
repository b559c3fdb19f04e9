#!/bin/bash
# Session 20, call B (nvidia-h200, one GPU; not run in session 20: no device time), for the next session's first call,
# about 6-8 minutes. First, without the GPU, how fast the prefetcher decodes 25 MiB gradient payloads by worker count
# on that host (prefetcher_contention --payload-mib, as s20c/s20d on the dev VM); then s20a.sh (GPU tests of the
# carried build with ISA-L, the disk's write speed), s19k.sh (GPT-2 small DDP recorded with payloads all into /tmp
# and into /dev/shm: is full-payload recording bound by file writes), and s19g.sh's value replay pace with the
# prefetcher fixes (2cafafc, 4714d21), ISA-L's CRC-32 (f6072d5) and piece-by-piece decoding (1924e6b), with the
# automatic 4 decoding threads, 2 and 8 (timing replays were measured before). Build .carry first:
# bench/make_carry.sh.
set -u
here="$(dirname "$0")"
(cd "$here/../../.." && C=$(head -1 .carry/COMMIT) && for t in 1 2 4 8; do
  timeout 60 .carry/bin/prefetcher_contention --payload-mib 25 --payloads 60 --threads $t --gap-us 0 --json
done > "$OUT/prefetcher_throughput_h200host-$C.jsonl" 2>&1; cat "$OUT/prefetcher_throughput_h200host-$C.jsonl")
bash "$here/s20a.sh"
bash "$here/s19k.sh"
S19G_RUNS="value value-t2 value-t8" bash "$here/s19g.sh"
