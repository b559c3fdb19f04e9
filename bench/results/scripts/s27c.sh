#!/bin/bash
# Session 27, call C (nvidia-h200, one GPU), about 5 minutes. 1) compute-sanitizer once more: the GPU tests under
# initcheck (the hold's traffic scratch and the other per-device buffers now zeroed at allocation; the traffic test
# left out, 64 MiB moves take minutes under it) and memcheck; examples/torch/graph_allreduce.py recorded under memcheck
# with PyTorch's caching allocator on (s27b turned it off, and PyTorch's own cudaMalloc inside the capture then
# invalidated it). 2) What 94090ac costs on the job's thread: a running call is now found by a query of its end event
# before its elapsed time is asked (one CUDA call more on the poll thread per call without payloads).
# record_host_overhead --probe, payloads none and small, 50,000 1-float all-reduces per side, the library before
# (.carry/old/d340cc5) and after (.carry/lib) alternating, 4 rounds.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
S="$CS --error-exitcode 9 --print-limit 30"
W=$(mktemp -d /dev/shm/s27c-XXXXXX); mkdir -p $W/sanitizer
sanitized() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$W/sanitizer/$name.txt" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0)) s: $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED) |Program hit|Uninitialized|RESULT' \
    "$W/sanitizer/$name.txt" | sort | uniq -c | tr '\n' ' ' | cut -c1-900)"
}
{
  (export LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH RANKLENS_DEVICE=cuda
   timeout 120 .carry/bin/test_cuda_device > "$OUT/gpu_tests-$C.txt" 2>&1
   echo "GPU tests plain rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/gpu_tests-$C.txt" | tr '\n' ' ')"
   sanitized gpu_tests-initcheck 200 $S --tool initcheck .carry/bin/test_cuda_device --gtest_filter='-*Traffic*'
   sanitized gpu_tests-memcheck 120 $S --tool memcheck .carry/bin/test_cuda_device)
  sanitized graph-record-memcheck 150 env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29516 \
    .carry/bin/ranklens record --trace $W/graph --payloads small -- $S --tool memcheck $PY \
    examples/torch/graph_allreduce.py --launches 3
  .carry/bin/ranklens trace summary $W/graph 2>&1 | grep -oE "timing_errors [0-9]+|timings_captured_[a-z]+ [0-9]+" | tr '\n' ' '
  echo
} > "$OUT/s27c-$C.log" 2>&1
cat "$OUT/s27c-$C.log"
tar czf "$OUT/sanitizer-$C.tgz" -C $W sanitizer
rm -rf $W
host=$OUT/record_host_overhead_query_first-$C.jsonl; : > "$host"
for round in 1 2 3 4; do
  order="after before"; [[ $((round % 2)) == 0 ]] && order="before after"
  for build in $order; do
    lib=.carry/lib/libnccl.so.2; [[ $build == before ]] && lib=.carry/old/d340cc5/libnccl.so.2
    for payloads in none small; do
      line=$(timeout 100 .carry/bin/record_host_overhead --real "$REAL" --ranklens $lib --calls 50000 --probe \
               --payloads $payloads --trace-dir /tmp/s27c-$build-$payloads-$round --json) \
        && echo "{\"build\": \"$build\", \"round\": $round, ${line#\{}" >> "$host" || echo "$build $payloads failed"
      rm -rf /tmp/s27c-$build-$payloads-$round
    done
  done
done
$PY - "$host" <<'PY' | tee -a "$OUT/s27c-$C.log"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for payloads in ("none", "small"):
    for build in ("before", "after"):
        added = [r["added_median_ns"] for r in rows if r["build"] == build and r["payloads"] == payloads]
        print(payloads, build, "host added per call, median of rounds (ns):", statistics.median(added), sorted(added))
PY
carry_stamp "$host" "nvidia-h200 (one H200)" bench/results/scripts/s27c.sh
cp /tmp/meta.txt "$OUT/meta_s27c-$C.txt"
