#!/bin/bash
# Session 23, call B (nvidia-h200-x2, when lent), about 8 minutes: issue #4's full-payload ratio on 2 GPUs with the
# carried recorder (written for session 22's; as of session 26: byte planes, trace format 1.10): DDP and FSDP2 GPT-2
# small (bf16, micro-batch 8), process-level runs alternating baseline / payloads: all with staging_full: wait (every
# payload stored), twice; the traces in /dev/shm, deleted once counted. Then the recorder's busiest threads in one
# DDP recording, and what `ranklens trace summary` says of each rank's compression threads.
# Never run yet (no 2-GPU machine since session 17); session 25 raised its 15 steps per run to 40, so that the median
# of steps 3-39 is past the ~10 steps staging and the writer's queue absorb (s25b): the steady state.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
RANKLENS_COMMIT=$C timeout 470 $PY bench/record_overhead_torch.py --lib .carry/lib/libnccl.so.2 --modes ddp,fsdp2 \
  --arms baseline,full --repeats 2 --steps 40 --recorder-env RANKLENS_STAGING_FULL=wait --work /tmp/s23b \
  --trace-root /dev/shm/s23b --budget 430 --timeout 110 \
  --json "$OUT/record_full_payload_2gpu-$C.json" > "$OUT/s23b-$C.log" 2>&1
echo "full-payload ratio rc=$? $(date -u +%T)"; grep -E "PASS|FAIL|ratio|^  " "$OUT/s23b-$C.log" | tail -12
rm -rf /dev/shm/s23b
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 10 --micro-batch 8
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s23b-XXXXXX)
$PY bench/thread_cpu.py --match train_gpt.py --wait 60 --label "2-GPU DDP, payloads all" \
  > "$OUT/record_full_payload_2gpu_threads-$C.json" &
RANKLENS_STAGING_FULL=wait timeout 100 .carry/bin/ranklens record --lib .carry/lib/libnccl.so.2 --trace $W/rec \
  --payloads all -- $PY -m torch.distributed.run --standalone --nproc-per-node 2 $T > $W/rec.log 2>&1
echo "threads rc=$? median_step_ms $(carry_step_ms $W/rec.log)"; wait; cat "$OUT/record_full_payload_2gpu_threads-$C.json"
tail -15 $W/rec.log
for rank in 0 1; do .carry/bin/ranklens trace summary $W/rec/rank$rank | grep -E "compression threads|payloads:"; done
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s23b-$C.txt"
