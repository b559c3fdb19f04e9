#!/bin/bash
# Session 15, call B (nvidia-h200, ONE GPU: no 2-GPU kind was lent): the step-phase rule (6a31815) checked on fresh
# recordings: the six configurations of the GPU-bound history recorded twice each as 1-rank jobs (--nproc 1: each
# collective is a copy on a 1-rank communicator, timed beside the same compute); history part only.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh
carry_env
RANKLENS_COMMIT=$C timeout 500 $PY bench/estimator_torch.py --lib .carry/lib/libnccl.so.2 --ranklens .carry/bin/ranklens \
  --python $PY --nproc 1 --micro-batch-scale 4 --steps 25 --history-repeats 2 --targets transfer \
  --parts history --json $OUT/estimator_phase_1gpu_mb4x-$C.json --work /tmp/est --timeout 60 > /tmp/est.txt 2>&1
echo "estimator rc=$? $(date -u +%T)" | tee -a /tmp/meta.txt; grep -E "CHECK|leave-one-run-out" /tmp/est.txt
date -u +%FT%TZ >> /tmp/meta.txt
cp /tmp/meta.txt /tmp/est/meta-$C.txt; cp /tmp/est.txt $OUT/estimator_phase_1gpu_mb4x-$C.log
tar czf $OUT/s15b_extra-$C.tgz -C /tmp/est meta-$C.txt cluster.hist cluster-first-runs.hist estimate_eval.json \
  estimate_eval-first-runs.json 2>/dev/null
tar czf $OUT/s15b_traces-$C.tgz -C /tmp/est traces 2>/dev/null; ls -la $OUT
