#!/bin/bash
# Session 23, call A (nvidia-h200, one GPU), about 4 minutes: payload_device_bytes: auto. The recorder now samples the
# job's free GPU memory (manifest counters device_memory_*; a cudaMemGetInfo on its background thread every 100 ms),
# so first a CUDA-graph recording (examples/torch/graph_allreduce.py: the background thread's sampling must not break
# a capture) and its timing replay; then GPT-2 small DDP recorded with payloads all and value-replayed with the
# defaults (auto, twice; NCCL_DEBUG=INFO for the size chosen) and with the old fixed 256 MiB between them.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/replay_value_device_auto-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 10 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s23a-XXXXXX)
{
  carry_gpu_tests_and_baseline "$out" $W "$T"
  G="examples/torch/graph_allreduce.py --launches 5"
  NCCL_DEBUG=WARN timeout 120 .carry/bin/ranklens record --lib .carry/lib/libnccl.so.2 --trace $W/graph -- \
    $PY -m torch.distributed.run --standalone --nproc-per-node 1 $G > $W/graph.log 2>&1
  echo "graph record rc=$? $(grep -E '^RESULT' $W/graph.log | head -1)"; grep -E "WARN|rror" $W/graph.log | head -5
  .carry/bin/ranklens trace summary $W/graph | grep -oE "(timings_captured_measured|device_memory_[a-z_]+) [0-9]+" | tr '\n' ' '; echo
  NCCL_DEBUG=WARN timeout 120 .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 --trace $W/graph --rank 0 \
    --fidelity timing --trace-dir $W/graph-timing -- $PY $G > $W/graph-timing.log 2>&1
  echo "graph timing replay rc=$? $(grep -E '^RESULT' $W/graph-timing.log | head -1)"
  RANKLENS_STAGING_FULL=wait timeout 150 .carry/bin/ranklens record --lib .carry/lib/libnccl.so.2 --trace $W/rec \
    --payloads all -- $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/rec.log 2>&1
  echo "record rc=$? median_step_ms $(carry_step_ms $W/rec.log)"
  .carry/bin/ranklens trace summary $W/rec | grep -E "payloads:|device_memory" | sed 's/ counters:.*device_memory/ ... device_memory/'
  for db in auto 256MiB auto; do
    name=rep-$db-$RANDOM
    NCCL_DEBUG=INFO RANKLENS_PAYLOAD_DEVICE_BYTES=$db timeout 120 \
      .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 --rank 0 --fidelity value --trace $W/rec \
      --trace-dir $W/out-$name -- $PY $T > $W/$name.log 2>&1
    echo "$name rc=$? median_step_ms $(carry_step_ms $W/$name.log) $(grep -E '^result' $W/$name.log)"
    grep -E "_bytes auto|waited|cannot allocate" $W/$name.log | sed 's/^.*RANKLENS: //' | sort -u | head -3
    carry_result_row "$out" "value replay, payload_device_bytes $db" $W/$name.log $W/out-$name/rank0 "" \
      "{\"payload_device_bytes\": \"$db\"}"
  done
} > "$OUT/s23a-$C.log" 2>&1
cat "$OUT/s23a-$C.log"
sed -i "s/}\$/, \"commit\": \"$C\", \"date\": \"$(date -u +%FT%TZ)\", \"machine\": \"nvidia-h200 (one H200)\", \"command\": \"bash bench\/results\/scripts\/s23a.sh\"}/" "$out"
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s23a-$C.txt"
