#!/bin/bash
# Session 15, call A (nvidia-h200-x2): the estimator (#7) with the step-phase rule (6a31815) on a freshly recorded
# GPU-bound history of the six configurations recorded twice each (leave-one-job-out, and the first runs alone),
# the held-out configuration with every call estimated, and the bucket 25 -> 100 what-if; two real runs each.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh
carry_env
RANKLENS_COMMIT=$C timeout 570 $PY bench/estimator_torch.py --lib .carry/lib/libnccl.so.2 --ranklens .carry/bin/ranklens \
  --python $PY --micro-batch-scale 4 --steps 25 --real-repeats 2 --history-repeats 2 --targets transfer \
  --parts history,heldout,whatif --json $OUT/estimator_phase_mb4x-$C.json --work /tmp/est --timeout 60 \
  > /tmp/est.txt 2>&1
echo "estimator rc=$? $(date -u +%T)" | tee -a /tmp/meta.txt; grep -E "CHECK|leave-one-run-out" /tmp/est.txt
date -u +%FT%TZ >> /tmp/meta.txt
cp /tmp/meta.txt /tmp/est/meta-$C.txt; cp /tmp/est.txt $OUT/estimator_phase_mb4x-$C.log
tar czf $OUT/s15a_extra-$C.tgz -C /tmp/est meta-$C.txt cluster.hist cluster-first-runs.hist estimate_eval.json \
  estimate_eval-first-runs.json 2>/dev/null
tar czf $OUT/s15a_traces-$C.tgz -C /tmp/est traces 2>/dev/null; ls -la $OUT
