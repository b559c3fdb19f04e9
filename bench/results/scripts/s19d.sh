#!/bin/bash
# Session 19, call D (nvidia-h200-x2, if lent): the payload copy kernel (high priority since 68e17d1) in real 2-GPU
# training, where every call launches NCCL's kernel first: the recorder's step-time cost within one process
# (record_alternate_steps: recorded and unrecorded steps alternate) with the default payloads: small, and with none
# for comparison, DDP and FSDP2 at micro-batch 32 (GPU-bound); then s18i (nccl-tests -g 2: one thread, two GPUs).
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
for payloads in small none; do
  RANKLENS_COMMIT=$C timeout 230 $PY bench/record_overhead_torch.py --lib .carry/lib/libnccl.so.2 --modes ddp,fsdp2 \
    --micro-batch 32 --arms alternate --alternate-steps 1 --steps 120 --repeats 1 --budget 210 --timeout 90 \
    --recorder-env RANKLENS_PAYLOADS=$payloads --work /tmp/s19d-$payloads \
    --json "$OUT/record_overhead_alternate1_mb32_payloads_$payloads-$C.json" > /tmp/s19d-$payloads.txt 2>&1
  echo "payloads $payloads rc=$? $(date -u +%T)"; grep -E "PASS|FAIL|^  " /tmp/s19d-$payloads.txt | tail -8
done
bash bench/results/scripts/s18i.sh
cp /tmp/meta.txt "$OUT/meta_s19d-$C.txt"
