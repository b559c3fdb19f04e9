#!/bin/bash
# Session 13, call B (nvidia-h200-x2): GPU tests; ZeRO-3 timing A/B (before = 194370d); DDP+FSDP2 value check.
set -u
cd "$(dirname "$0")/../.."
source bench/carry_setup.sh
PY=/opt/torch/.venv/bin/python; [[ -x $PY ]] || PY=$(command -v python3)
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.carry/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}  # yaml-cpp (Debian 12) for the carried build
C=$(head -1 .carry/COMMIT)
nvidia-smi -L > $OUT/gpus.txt 2>&1; nproc >> $OUT/gpus.txt; lscpu | grep "Model name" >> $OUT/gpus.txt
date -u +%FT%TZ > $OUT/start.txt
RANKLENS_DEVICE=cuda LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH timeout 120 .carry/bin/test_cuda_device > $OUT/gpu_tests-$C.txt 2>&1
echo "gpu tests rc=$?" | tee -a $OUT/gpu_tests-$C.txt; grep -E "FAILED|PASSED|OK \]" $OUT/gpu_tests-$C.txt | tail -20
$PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/frameworks/whl/*.whl > $OUT/pip.txt 2>&1 || { echo pip failed; cat $OUT/pip.txt; }
carry_adapter .carry
RANKLENS_COMMIT=$C PYTHONPATH=/tmp/site timeout 330 $PY bench/replay_fidelity_torch.py \
  --lib .carry/lib/libnccl.so.2 --ranklens .carry/bin/ranklens --python $PY --modes zero3 --micro-batch 32 \
  --checks timing --repeats 2 --steps 25 --warmup 8 --variant before:lib=.carry/old/libnccl.so.2 --budget 300 \
  --work /tmp/w --json $OUT/timing_zero3_launches_ab-$C.json > $OUT/bench_zero3.log 2>&1
echo "zero3 rc=$?"; grep CHECK $OUT/bench_zero3.log
(cd /tmp/w && tar czf $OUT/zero3_replay_traces.tgz traces/*replay* 2>/dev/null); ls -la $OUT/zero3_replay_traces.tgz
RANKLENS_COMMIT=$C timeout 170 $PY bench/replay_fidelity_torch.py \
  --lib .carry/lib/libnccl.so.2 --ranklens .carry/bin/ranklens --python $PY --modes ddp,fsdp2 --checks value \
  --work /tmp/wv --json $OUT/value_ddp_fsdp2-$C.json > $OUT/bench_value.log 2>&1
echo "value rc=$?"; grep CHECK $OUT/bench_value.log
