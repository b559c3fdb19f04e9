#!/bin/bash
# Session 26, call D (nvidia-h200, one GPU), about 6 minutes: which frame size for payloads compressed out of staging
# (trace format 1.10)? 256 KiB frames (this commit's library) compress faster, 1 MiB frames decode faster
# (bench/payload_blob_frames on the dev VM; s26b's value replay of a 256 KiB-frame trace waited 11 times for decoding
# against once before). This library against the same code built with kPayloadFrameBytes = 1 MiB
# (.carry/old/frame1m), alternating, two rounds: the 30-step GPT-2 small DDP job recorded with payloads all,
# staging_full wait (steady_ms: steps 10-29, the threads' CPU), and each trace value-replayed by this library
# (its replay_prefetch_waits). The job alone first.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_frame_sizes-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 30 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s26d-XXXXXX)
{
  timeout 120 $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/base.log 2>&1
  echo "baseline rc=$? median_step_ms $(carry_step_ms $W/base.log) steady_ms $(carry_steady_ms $W/base.log)"
  carry_result_row "$out" baseline $W/base.log
  for round in 1 2; do
    for frame in 256k 1m; do
      L=.carry/lib/libnccl.so.2; [[ $frame == 1m ]] && L=.carry/old/frame1m/libnccl.so.2
      name=f$frame-r$round
      carry_record "$out" $W $name $L "$T" "{\"frame\": \"$frame\", \"steady_ms\": null}" RANKLENS_STAGING_FULL=wait
      s=$(carry_steady_ms $W/$name.log); echo "$name steady_ms $s"
      sed -i "\$s/\"steady_ms\": null/\"steady_ms\": $s/" "$out"
      .carry/bin/ranklens trace summary $W/$name/rank0 | grep -E "compression threads"
      grep -E "waited" $W/$name.log
      carry_value_replay "$out" $W value-$name .carry/lib/libnccl.so.2 $W/$name "$T"
      grep -o '"replay_prefetch_waits": [0-9]*' <(tail -1 "$out")
      rm -rf $W/$name $W/value-$name
    done
  done
} > "$OUT/s26d-$C.log" 2>&1
cat "$OUT/s26d-$C.log"
carry_stamp "$out" "nvidia-h200 (one H200)" bench/results/scripts/s26d.sh
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s26d-$C.txt"
