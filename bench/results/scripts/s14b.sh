#!/bin/bash
# Session 14, call B (nvidia-h200-x2): the recorder's step-time overhead within one process again, with blocks of one
# step (recorded and unrecorded steps alternate; FSDP2's slow phases of several steps made blocks of 5 uneven),
# 120 steps, DDP and FSDP2, micro-batch 32 and 8.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh
PY=/opt/torch/.venv/bin/python; [[ -x $PY ]] || PY=$(command -v python3)
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.carry/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
C=$(head -1 .carry/COMMIT)
{ date -u +%FT%TZ; nvidia-smi -L; } > $OUT/meta_s14b-$C.txt 2>&1
for mb in 32 8; do
  RANKLENS_COMMIT=$C timeout 250 $PY bench/record_overhead_torch.py --lib .carry/lib/libnccl.so.2 --modes ddp,fsdp2 \
    --micro-batch $mb --arms alternate --alternate-steps 1 --steps 120 --repeats 2 --budget 230 --timeout 90 \
    --work /tmp/ro$mb --json $OUT/record_overhead_alternate1_mb$mb-$C.json > /tmp/ro$mb.txt 2>&1
  echo "alternate-1 mb$mb rc=$? $(date -u +%T)" | tee -a $OUT/meta_s14b-$C.txt; grep -E "PASS|FAIL|^  " /tmp/ro$mb.txt | tail -12
done
date -u +%FT%TZ >> $OUT/meta_s14b-$C.txt
