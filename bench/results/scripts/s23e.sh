#!/bin/bash
# Session 23, call E (nvidia-h200, one GPU), about 3 minutes: the session's last library with every default (byte
# planes on, with their own match finder; prefetch_bytes and payload_device_bytes auto): the GPU tests, a CUDA-graph
# recording (examples/torch/graph_allreduce.py) and its value replay, and GPT-2 small DDP on one GPU recorded with
# payloads all and value-replayed, with the trace summary (what the auto sizes come to).
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_replay_defaults-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 10 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s23e-XXXXXX)
{
  carry_gpu_tests_and_baseline "$out" $W "$T"
  G="examples/torch/graph_allreduce.py --launches 5"
  NCCL_DEBUG=WARN timeout 120 .carry/bin/ranklens record --lib .carry/lib/libnccl.so.2 --trace $W/graph -- \
    $PY -m torch.distributed.run --standalone --nproc-per-node 1 $G > $W/graph.log 2>&1
  echo "graph record rc=$? $(grep -cE '"all_finite": true' $W/graph.log) finite"; grep -E "WARN|rror" $W/graph.log | head -5
  NCCL_DEBUG=WARN timeout 120 .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 --trace $W/graph --rank 0 \
    --fidelity value --trace-dir $W/graph-value -- $PY $G > $W/graph-value.log 2>&1
  echo "graph value replay rc=$? $(grep -cE '"all_finite": true' $W/graph-value.log) finite"; grep -E "WARN|rror" $W/graph-value.log | head -5
  $PY bench/thread_cpu.py --match train_gpt.py --wait 120 > $W/rec.tc &
  RANKLENS_STAGING_FULL=wait timeout 150 .carry/bin/ranklens record --lib .carry/lib/libnccl.so.2 --trace $W/rec \
    --payloads all -- $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/rec.log 2>&1
  echo "record rc=$? median_step_ms $(carry_step_ms $W/rec.log) trace $(du -sh $W/rec | cut -f1)"; wait
  carry_result_row "$out" "record, defaults, payloads all" $W/rec.log $W/rec/rank0 $W/rec.tc
  .carry/bin/ranklens trace summary $W/rec | grep -E "payloads:"
  .carry/bin/rlpayload ls $W/rec/rank0 --json 2>/dev/null | $PY -c 'import json,sys,collections; d=json.load(sys.stdin); p=d["payloads"] if isinstance(d,dict) and "payloads" in d else d; print("stored as", dict(collections.Counter(x.get("shuffle") for x in p)))' 2>&1 | tail -1
  NCCL_DEBUG=INFO timeout 120 .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 --rank 0 --fidelity value \
    --trace $W/rec --trace-dir $W/out -- $PY $T > $W/rep.log 2>&1
  echo "value replay rc=$? median_step_ms $(carry_step_ms $W/rep.log) $(grep -E '^result' $W/rep.log)"
  grep -E "_bytes auto|waited" $W/rep.log | sed 's/^.*RANKLENS: //' | sort -u | head -3
  carry_result_row "$out" "value replay, defaults" $W/rep.log $W/out/rank0
} > "$OUT/s23e-$C.log" 2>&1
cat "$OUT/s23e-$C.log"
sed -i "s/}\$/, \"commit\": \"$C\", \"date\": \"$(date -u +%FT%TZ)\", \"machine\": \"nvidia-h200 (one H200)\", \"command\": \"bash bench\/results\/scripts\/s23e.sh\"}/" "$out"
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s23e-$C.txt"
