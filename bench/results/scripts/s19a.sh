#!/bin/bash
# Session 19, call A (nvidia-h200, one GPU): how the recorder's payload copy behaves when the job's compute fills
# every SM. record_host_overhead --contended (GPU time per call on a gated stream, another stream full of spinning
# blocks: "threads" takes every thread slot, "shared" one block per SM by its shared memory) for the copy kernel at
# high priority (the new default), at its stream's priority, through the copy engine (payload_copy_kernel_bytes 0),
# and without payloads; then --gpu-bound (no contention) and host time (--probe) for the three ways. GPU tests first.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
(export LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH
 RANKLENS_DEVICE=cuda timeout 200 .carry/bin/test_cuda_device > "$OUT/gpu_tests-$C.txt" 2>&1)
tail -3 "$OUT/gpu_tests-$C.txt"
lib=.carry/lib/libnccl.so.2
out=$OUT/record_copy_contended-$C.jsonl
way_env() {  # the recorder's settings for one way of copying
  case $1 in
    high) echo "RANKLENS_PAYLOAD_COPY_PRIORITY=high RANKLENS_PAYLOAD_COPY_KERNEL_BYTES=64KiB" ;;
    stream) echo "RANKLENS_PAYLOAD_COPY_PRIORITY=stream RANKLENS_PAYLOAD_COPY_KERNEL_BYTES=64KiB" ;;
    engine) echo "RANKLENS_PAYLOAD_COPY_PRIORITY=high RANKLENS_PAYLOAD_COPY_KERNEL_BYTES=0" ;;
  esac
}
n=0
run() {  # run KIND WAY ROUND ARGS...: one JSON line into $out, tagged
  local kind=$1 way=$2 round=$3; shift 3
  local payloads=small; [[ $way == none ]] && payloads=none
  n=$((n + 1))
  line=$(env $(way_env $way) timeout 150 .carry/bin/record_host_overhead --real "$REAL" --ranklens $lib \
           --payloads $payloads --trace-dir /tmp/s19a-$n --json "$@") \
    && echo "{\"kind\": \"$kind\", \"way\": \"$way\", \"round\": $round, ${line#\{}" >> "$out" \
    || echo "$kind $way round $round failed: $*"
}
for round in 1 2 3; do
  ways="high stream engine none"; [[ $((round % 2)) == 0 ]] && ways="none engine stream high"
  for way in $ways; do
    for shape in none shared threads; do
      run contended $way $round --calls 2000 --batch 100 --contended $shape --busy-ns 20000
    done
    run contended_long $way $round --calls 1000 --batch 50 --contended shared --busy-ns 200000
    run contended_long $way $round --calls 1000 --batch 50 --contended threads --busy-ns 200000
    run gpu_bound $way $round --calls 4000 --batch 200 --gpu-bound 134217728
    run host $way $round --calls 20000 --probe
  done
done
python3 - "$out" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(kind, way, key, **match):
    v = [r[key] for r in rows if r["kind"] == kind and r["way"] == way and all(r.get(k) == x for k, x in match.items())]
    return (statistics.median(v), len(v)) if v else (float("nan"), 0)
for kind, shapes, key in (("contended", ("none", "shared", "threads"), "gpu_added_ns"),
                          ("contended_long", ("shared", "threads"), "gpu_added_ns"),
                          ("gpu_bound", (None,), "gpu_added_ns"), ("host", (None,), "added_median_ns")):
    for shape in shapes:
        match = {"contended": shape} if shape else {}
        cells = ["%s %.0f ns (n=%d)" % ((way,) + med(kind, way, key, **match)) for way in ("high", "stream", "engine", "none")]
        print(kind, shape or "", "|", "; ".join(cells))
PY
cp /tmp/meta.txt "$OUT/meta_s19a-$C.txt"
