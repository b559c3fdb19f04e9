#!/bin/bash
# Session 18, call D (nvidia-h200, one GPU): payload copies on the call's own stream (.carry/lib, 282190e) against the
# side stream with two cross-stream waits (.carry/lib_before: 19f65e6's library). record_host_overhead --probe,
# 1-rank communicator, 50,000 calls per run, 8 rounds, in a rotating order: both builds with the default payload
# policy (payloads small: the 4-byte result copied and stored) and without payloads, and the new build without
# payloads polling every 10 ms (timing_poll_us 10000). Then the GPU tests of 282190e, and a recorded trace's payloads
# checked with rlpayload-free means: the trace summary of one run of each build.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
results=$OUT/record_host_overhead_payload_stream-$C.jsonl
variants=("after small 100" "before small 100" "after none 100" "before none 100" "after none 10000")
for round in $(seq 1 8); do
  for k in 0 1 2 3 4; do
    read -r build payloads poll <<< "${variants[$(((k + round) % 5))]}"
    lib=.carry/lib/libnccl.so.2; [[ $build == before ]] && lib=.carry/lib_before/libnccl.so.2
    dir=/tmp/hod-$build-$payloads-$poll-$round
    line=$(RANKLENS_TIMING_POLL_US=$poll timeout 120 .carry/bin/record_host_overhead --real "$REAL" --ranklens $lib \
             --calls 50000 --probe --payloads "$payloads" --trace-dir "$dir" --json) \
      || { echo "run $build $payloads $poll failed"; continue; }
    echo "{\"build\": \"$build\", \"timing_poll_us\": $poll, \"round\": $round, ${line#\{}" >> "$results"
  done
done
python3 - "$results" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
for build, payloads, poll in [("before", "small", 100), ("after", "small", 100), ("before", "none", 100),
                              ("after", "none", 100), ("after", "none", 10000)]:
    sel = [r for r in rows if (r["build"], r["payloads"], r["timing_poll_us"]) == (build, payloads, poll)]
    if not sel: continue
    print(build, payloads, poll, "runs", len(sel), "added median", statistics.median(r["added_median_ns"] for r in sel),
          "p90", statistics.median(r["added_p90_ns"] for r in sel), "over driver floor",
          statistics.median(r["added_median_ns"] - r["added_median_ns_driver_events"] for r in sel))
PY
for build in before after; do
  echo "== trace summary, $build, payloads small, round 8"
  ls -R /tmp/hod-$build-small-100-8 | head -5
  for d in /tmp/hod-$build-small-100-8 /tmp/hod-$build-small-100-8/rank0; do
    .carry/bin/ranklens trace summary "$d" > /tmp/summary.txt 2>&1 && break
  done
  grep -i -E "payload|calls|timing" /tmp/summary.txt | head -12
done > "$OUT/payload_stream_traces-$C.txt"
cat "$OUT/payload_stream_traces-$C.txt"
cp /tmp/meta.txt "$OUT/meta_s18d-$C.txt"
export LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH
RANKLENS_DEVICE=cuda timeout 200 .carry/bin/test_cuda_device > "$OUT/gpu_tests-$C.txt" 2>&1
echo "gpu tests rc=$?"; tail -1 "$OUT/gpu_tests-$C.txt"; grep -E "FAILED|Failure" -A3 "$OUT/gpu_tests-$C.txt" | head -20
