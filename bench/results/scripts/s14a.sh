#!/bin/bash
# Session 14, call A (nvidia-h200-x2):
#  1. the recorder's step-time overhead as an A/B within one process (record_alternate_steps: blocks of 5 steps
#     alternately recorded and forwarded unrecorded), DDP and FSDP2, GPT-2 small, micro-batch 32 (GPU-bound, 2 runs
#     each) and 8 (host-bound, 1 run each), 60 steps;
#  2. the estimator (#7) on a GPU-bound history of six configurations recorded twice each, the held-out
#     configuration with every call estimated, and the bucket 25 -> 100 what-if.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh
PY=/opt/torch/.venv/bin/python; [[ -x $PY ]] || PY=$(command -v python3)
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.carry/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}  # yaml-cpp (Debian 12) for the carried build
C=$(head -1 .carry/COMMIT)
T0=$SECONDS
{ date -u +%FT%TZ; nvidia-smi -L; nproc; lscpu | grep "Model name"; } > /tmp/meta.txt 2>&1
carry_adapter .carry
for mb in 32 8; do
  reps=$([[ $mb == 32 ]] && echo 2 || echo 1)
  RANKLENS_COMMIT=$C timeout 200 $PY bench/record_overhead_torch.py --lib .carry/lib/libnccl.so.2 --modes ddp,fsdp2 \
    --micro-batch $mb --arms alternate --alternate-steps 5 --steps 60 --repeats $reps --budget 180 --timeout 80 \
    --work /tmp/ro$mb --json $OUT/record_overhead_alternate_mb$mb-$C.json > /tmp/ro$mb.txt 2>&1
  echo "alternate mb$mb rc=$? $(date -u +%T)" | tee -a /tmp/meta.txt; grep -E "PASS|FAIL|^  " /tmp/ro$mb.txt | tail -12
done
left=$((575 - (SECONDS - T0)))
echo "estimator: $left s left" | tee -a /tmp/meta.txt
RANKLENS_COMMIT=$C timeout $left $PY bench/estimator_torch.py --lib .carry/lib/libnccl.so.2 --ranklens .carry/bin/ranklens \
  --python $PY --micro-batch-scale 4 --steps 25 --real-repeats 2 --history-repeats 2 --targets transfer \
  --parts history,heldout,whatif --json $OUT/estimator_history_repeats_mb4x-$C.json --work /tmp/est --timeout 60 \
  > /tmp/est.txt 2>&1
echo "estimator rc=$? $(date -u +%T)" | tee -a /tmp/meta.txt; grep -E "CHECK|leave-one-run-out" /tmp/est.txt
date -u +%FT%TZ >> /tmp/meta.txt
cp /tmp/meta.txt /tmp/est/meta-$C.txt; cp /tmp/ro*.txt /tmp/est/ 2>/dev/null
tar czf $OUT/s14a_extra-$C.tgz -C /tmp/est meta-$C.txt ro32.txt ro8.txt cluster.hist cluster-first-runs.hist \
  estimate_eval.json estimate_eval-first-runs.json 2>/dev/null
ls -la $OUT
