#!/bin/bash
# Session 27, call E (nvidia-h200, one GPU), about 3 minutes: the poll thread after this commit, which finds a
# stream's finished calls by bisection (a few event queries per stream and pass) and asks the elapsed time of
# finished calls only. 1) the GPU tests, plain and under compute-sanitizer's memcheck (one API error expected, the
# device's kPending contract test); 2) record_host_overhead --probe, payloads none and small, 50,000 1-float
# all-reduces per side, the library before the session's changes (.carry/old/d340cc5) and this one alternating,
# 6 rounds; 3) the 30-step GPT-2 small DDP job as a 1-rank job without RankLens and recorded with the defaults
# (payloads small): every call timed, steps 10-29.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
LOG=$OUT/s27e-$C.log
{
  (export LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH RANKLENS_DEVICE=cuda
   timeout 120 .carry/bin/test_cuda_device > "$OUT/gpu_tests-$C.txt" 2>&1
   echo "GPU tests plain rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/gpu_tests-$C.txt" | tr '\n' ' ')"
   timeout 120 $CS --error-exitcode 9 --tool memcheck .carry/bin/test_cuda_device > /tmp/s27e-memcheck.txt 2>&1
   echo "GPU tests memcheck rc=$? $(grep -E 'ERROR SUMMARY|Program hit' /tmp/s27e-memcheck.txt | sort | uniq -c | tr '\n' ' ')")
  host=$OUT/record_host_overhead_bisect-$C.jsonl; : > "$host"
  for round in 1 2 3 4 5 6; do
    order="after before"; [[ $((round % 2)) == 0 ]] && order="before after"
    for build in $order; do
      lib=.carry/lib/libnccl.so.2; [[ $build == before ]] && lib=.carry/old/d340cc5/libnccl.so.2
      for payloads in none small; do
        line=$(timeout 100 .carry/bin/record_host_overhead --real "$REAL" --ranklens $lib --calls 50000 --probe \
                 --payloads $payloads --trace-dir /tmp/s27e-$build-$payloads-$round --json) \
          && echo "{\"build\": \"$build\", \"round\": $round, ${line#\{}" >> "$host" || echo "$build $payloads failed"
        rm -rf /tmp/s27e-$build-$payloads-$round
      done
    done
  done
  $PY - "$host" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for payloads in ("none", "small"):
    for build in ("before", "after"):
        added = [r["added_median_ns"] for r in rows if r["build"] == build and r["payloads"] == payloads]
        print(payloads, build, "host added per call, median of rounds (ns):", statistics.median(added), sorted(added))
PY
  carry_stamp "$host" "nvidia-h200 (one H200)" bench/results/scripts/s27e.sh
  W=$(mktemp -d /dev/shm/s27e-XXXXXX)
  T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 30 --micro-batch 16
     --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
  timeout 120 $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/base.log 2>&1
  echo "job alone rc=$? steady_ms $(carry_steady_ms $W/base.log)"
  timeout 150 .carry/bin/ranklens record --trace $W/rec -- \
    $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/rec.log 2>&1
  echo "recorded (payloads small) rc=$? steady_ms $(carry_steady_ms $W/rec.log)"
  .carry/bin/ranklens trace summary $W/rec 2>&1 | grep -E "calls,|counters" | cut -c1-500
  rm -rf $W
} > "$LOG" 2>&1
cat "$LOG"
cp /tmp/meta.txt "$OUT/meta_s27e-$C.txt"
