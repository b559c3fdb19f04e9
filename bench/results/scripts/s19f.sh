#!/bin/bash
# Session 19, call F (nvidia-h200, one GPU): what a payload copy costs the call's stream by size, copy kernel (high
# priority) against copy engine (payload_copy_kernel_bytes 0): record_host_overhead --gpu-bound (a 128 MiB memset
# before each call: a kernel precedes every copy, as NCCL's does) and --contended none (a gated stream of calls only),
# 1-rank in-place all-reduces of 4 B, 4 KiB, 16 KiB and 64 KiB (the largest the kernel copies by default), 2 rounds.
# s19e's nccl-tests showed a 32 KiB out-of-place call at 24.7 us through the recorder against 11.9 us at 8 KiB.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
lib=.carry/lib/libnccl.so.2
out=$OUT/record_copy_sizes-$C.jsonl
traces=$(mktemp -d /tmp/s19f-XXXXXX)
n=0
for round in 1 2; do
  for count in 1 1024 4096 16384; do
    ways="kernel engine"; [[ $round == 2 ]] && ways="engine kernel"
    for way in $ways; do
      bytes=64KiB; [[ $way == engine ]] && bytes=0
      for kind in gpu_bound gated; do
        args="--gpu-bound 134217728"; [[ $kind == gated ]] && args="--contended none"
        n=$((n + 1))
        line=$(RANKLENS_PAYLOAD_COPY_KERNEL_BYTES=$bytes timeout 40 .carry/bin/record_host_overhead --real "$REAL" \
                 --ranklens $lib --payloads small --count $count --calls 2000 --batch 100 $args \
                 --trace-dir $traces/$n --json) \
          && echo "{\"kind\": \"$kind\", \"way\": \"$way\", \"round\": $round, ${line#\{}" >> "$out" \
          || echo "$kind $way $count round $round failed"
      done
    done
  done
done
python3 - "$out" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
for kind in ("gpu_bound", "gated"):
    for count in (1, 1024, 4096, 16384):
        cells = []
        for way in ("kernel", "engine"):
            v = [r["gpu_added_ns"] for r in rows if r["kind"] == kind and r["way"] == way and r["count"] == count]
            cells.append("%s %s ns" % (way, "/".join("%.0f" % x for x in v)))
        print(kind, "%6d B" % (4 * count), "|", "; ".join(cells))
PY
cp /tmp/meta.txt "$OUT/meta_s19f-$C.txt"
