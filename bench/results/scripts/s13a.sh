#!/bin/bash
# Session 13, call A (nvidia-h200-x2): GPU tests of the deferred marks, then ZeRO-3 timing A/B (before = 194370d).
set -u
cd "$(dirname "$0")/../.."
source bench/carry_setup.sh
PY=/opt/torch/.venv/bin/python; [[ -x $PY ]] || PY=$(command -v python3)
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.carry/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}  # yaml-cpp (Debian 12) for the carried build
nvidia-smi -L > $OUT/gpus.txt 2>&1; nproc >> $OUT/gpus.txt; lscpu | grep "Model name" >> $OUT/gpus.txt
date -u +%FT%TZ > $OUT/start.txt
RANKLENS_DEVICE=cuda LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH timeout 120 .carry/bin/test_cuda_device > $OUT/gpu_tests.txt 2>&1
echo "gpu tests rc=$?" | tee -a $OUT/gpu_tests.txt; grep -E "FAILED|PASSED|OK \]" $OUT/gpu_tests.txt | tail -30
$PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/frameworks/whl/*.whl > $OUT/pip.txt 2>&1 || { echo pip failed; cat $OUT/pip.txt; }
carry_adapter .carry
RANKLENS_COMMIT=$(head -1 .carry/COMMIT) PYTHONPATH=/tmp/site timeout 480 $PY bench/replay_fidelity_torch.py \
  --lib .carry/lib/libnccl.so.2 --ranklens .carry/bin/ranklens --python $PY --modes zero3 --micro-batch 32 \
  --checks timing --repeats 2 --steps 25 --warmup 8 --variant before:lib=.carry/old/libnccl.so.2 --budget 400 \
  --work /tmp/w --json $OUT/timing_zero3_launches_ab.json > $OUT/bench.log 2>&1
echo "bench rc=$?"; tail -40 $OUT/bench.log
mkdir -p $OUT/traces && for d in $(find /tmp/w -maxdepth 3 -type d -name "*replay*" | head -20); do
  rel=${d#/tmp/w/}; mkdir -p "$OUT/traces/$rel" && cp -r "$d"/. "$OUT/traces/$rel"/; done
find /tmp/w -maxdepth 3 | head -60 > $OUT/work_tree.txt; du -sh $OUT/traces
