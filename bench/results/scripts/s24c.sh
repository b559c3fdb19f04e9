#!/bin/bash
# Session 24, call C (nvidia-h200, one GPU), about 5 minutes: is staging (pinned memory, staging_bytes) what holds a
# full-payload recording back now that the writer thread is not (s24b)? GPT-2 small DDP on one GPU recorded with
# payloads all (0.48 GB of payloads per step), payload_threads 8, staging 256 MiB (the default), 1 GiB and 2 GiB
# under staging_full: wait, twice in rotation; then the default staging_full: skip at the three sizes with the default
# threads (how many payloads each keeps). The manifests' staging_wait_ns say how long the job waited.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_staging_bytes-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 10 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s24c-XXXXXX)
{
  timeout 120 $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/base.log 2>&1
  echo "baseline rc=$? median_step_ms $(carry_step_ms $W/base.log)"; carry_result_row "$out" baseline $W/base.log
  for round in 1 2; do
    for staging in 256MiB 1GiB 2GiB; do
      name=rec-wait-$staging-$round
      carry_record "$out" $W $name .carry/lib/libnccl.so.2 "$T" \
        "{\"staging_bytes\": \"$staging\", \"staging_full\": \"wait\", \"payload_threads\": 8, \"round\": $round}" \
        RANKLENS_STAGING_FULL=wait RANKLENS_PAYLOAD_THREADS=8 RANKLENS_STAGING_BYTES=$staging
      grep -h "waited\|staging" $W/$name.log | grep -v "^RESULT" | tail -3
      rm -rf $W/$name
    done
  done
  for staging in 256MiB 1GiB 2GiB; do
    name=rec-skip-$staging
    carry_record "$out" $W $name .carry/lib/libnccl.so.2 "$T" \
      "{\"staging_bytes\": \"$staging\", \"staging_full\": \"skip\"}" RANKLENS_STAGING_BYTES=$staging
    grep -h "skipped\|staging" $W/$name.log | grep -v "^RESULT" | tail -3
    rm -rf $W/$name
  done
} > "$OUT/s24c-$C.log" 2>&1
cat "$OUT/s24c-$C.log"
carry_stamp "$out" "nvidia-h200 (one H200)" bench/results/scripts/s24c.sh
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s24c-$C.txt"
