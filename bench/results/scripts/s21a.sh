#!/bin/bash
# Session 21, call A (nvidia-h200, one GPU), about 4 minutes: what bounds full-payload recording and value replay on
# the GPU host (s20b: GPT-2 small DDP recorded with payloads all at 1.63-1.70 s per step into /tmp and /dev/shm
# alike, the job 53 ms; its value replay 237-429 ms). Which RankLens thread is busy (bench/thread_cpu.py samples the
# named threads: Poll, Zstd, Write, Fetch), with: the GPU tests with the carried library first on LD_LIBRARY_PATH
# (s20a's run loaded the system's NCCL); the prefetcher's decode rate by worker count (s20b's run missed ISA-L); the
# recorder's host pipeline (record_host_overhead --device host, 25 MiB gradient-like payloads, as s20e) into /dev/shm
# and /tmp; first-touch against reused memory bandwidth; then the GPT-2 recording (10 steps) and its value replay.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
log=$OUT/s21a-$C.log
TC="$PY bench/thread_cpu.py"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 10 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
step() { grep -h "^RESULT" "$1" | tail -1 | sed 's/^RESULT //' | $PY -c 'import json,sys; print(json.load(sys.stdin).get("median_step_ms"))'; }
{
  LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH RANKLENS_DEVICE=cuda timeout 90 .carry/bin/test_cuda_device \
    > "$OUT/gpu_tests-$C.txt" 2>&1
  echo "GPU tests rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/gpu_tests-$C.txt" | tr '\n' ' ')"
  for t in 1 2 4 8; do
    timeout 60 .carry/bin/prefetcher_contention --payload-mib 25 --payloads 60 --threads $t --gap-us 0 --json
  done | tee "$OUT/prefetcher_throughput_h200host-$C.jsonl"
  $PY - <<'PY'
import time, numpy as np
n = 38 << 20
for label in ("first touch", "reused"):
    best = None
    for _ in range(5):
        a = np.empty(n, np.uint8) if label == "first touch" or best is None else a
        t = time.perf_counter(); a.fill(1); dt = time.perf_counter() - t
        best = dt if best is None else min(best, dt)
    print(f"memory {label}: {n / best / 1e9:.2f} GB/s (fill of 38 MiB, best of 5)")
b = np.ones(n, np.uint8); c = np.empty_like(b); c[:] = b
t = time.perf_counter(); c[:] = b; print(f"memory copy reused: {n / (time.perf_counter() - t) / 1e9:.2f} GB/s")
PY
  for where in /dev/shm /tmp; do
    W=$(mktemp -d $where/s21a-XXXXXX)
    $TC --match record_host_overhead --label "host pipeline $where" --interval 0.25 > $W/tc.json &
    RANKLENS_STAGING_FULL=wait timeout 60 .carry/bin/record_host_overhead --real .carry/fake_real/libnccl.so.2 \
      --ranklens .carry/lib/libnccl.so.2 --device host --payloads all --data gradients --count 6553600 --calls 80 \
      --batch 4 --trace-dir $W/t --json > $W/r.json
    wait
    echo "host pipeline into $where: $(cut -c1-400 $W/r.json)"; cat $W/tc.json
    rm -rf $W
  done
  W=$(mktemp -d /dev/shm/s21a-XXXXXX)
  $TC --match train_gpt.py --label "record payloads all into /dev/shm" --wait 120 > $W/tc-rec.json &
  RANKLENS_STAGING_FULL=wait timeout 200 .carry/bin/ranklens record --lib .carry/lib/libnccl.so.2 --trace $W/rec \
    --payloads all -- $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/rec.log 2>&1
  echo "record rc=$? median_step_ms $(step $W/rec.log) trace $(du -sh $W/rec | cut -f1)"; wait; cat $W/tc-rec.json
  $TC --match train_gpt.py --label "value replay" --wait 120 > $W/tc-rep.json &
  timeout 150 .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 --rank 0 --fidelity value --trace $W/rec \
    --trace-dir $W/out -- $PY $T > $W/rep.log 2>&1
  echo "value replay rc=$? median_step_ms $(step $W/rep.log)"; wait; cat $W/tc-rep.json
  grep -E "^Replay of the recording|^Held on" $W/rep.log | sed 's/^/    /'
  tail -n 15 $W/rec.log > $OUT/s21a-rec-tail.log; tail -n 15 $W/rep.log > $OUT/s21a-rep-tail.log
  rm -rf $W
} 2>&1 | tee "$log"
cp /tmp/meta.txt "$OUT/meta_s21a-$C.txt"
