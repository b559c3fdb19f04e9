#!/bin/bash
# Session 13, call C (nvidia-h200-x2): ZeRO-3 timing A/B again with the per-op host time; DDP+FSDP2 timing A/B.
set -u
cd "$(dirname "$0")/../.."
source bench/carry_setup.sh
PY=/opt/torch/.venv/bin/python; [[ -x $PY ]] || PY=$(command -v python3)
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.carry/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}  # yaml-cpp (Debian 12) for the carried build
C=$(head -1 .carry/COMMIT)
{ date -u +%FT%TZ; nvidia-smi -L; nproc; lscpu | grep "Model name"; } > $OUT/meta-$C.txt 2>&1
$PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/frameworks/whl/*.whl > /tmp/pip.txt 2>&1 || cat /tmp/pip.txt
$PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/pysite .carry/pywhl/*.whl > /tmp/pip2.txt 2>&1 || cat /tmp/pip2.txt
carry_adapter .carry
RANKLENS_COMMIT=$C PYTHONPATH=/tmp/site timeout 330 $PY bench/replay_fidelity_torch.py \
  --lib .carry/lib/libnccl.so.2 --ranklens .carry/bin/ranklens --python $PY --modes zero3 --micro-batch 32 \
  --checks timing --repeats 2 --steps 25 --warmup 8 --variant before:lib=.carry/old/libnccl.so.2 --budget 300 \
  --work /tmp/w --json $OUT/timing_zero3_launches_ab2-$C.json > /tmp/bench_zero3.log 2>&1
echo "zero3 rc=$?"; grep CHECK /tmp/bench_zero3.log
for d in /tmp/w/traces/*replay*; do PYTHONPATH=/tmp/pysite $PY bench/replay_call_host_time.py $d; done \
  > $OUT/zero3_call_host_time-$C.txt 2>&1; cat $OUT/zero3_call_host_time-$C.txt
date -u +%FT%TZ >> $OUT/meta-$C.txt
RANKLENS_COMMIT=$C timeout 200 $PY bench/replay_fidelity_torch.py \
  --lib .carry/lib/libnccl.so.2 --ranklens .carry/bin/ranklens --python $PY --modes ddp,fsdp2 --micro-batch 32 \
  --checks timing --repeats 1 --steps 25 --warmup 8 --variant before:lib=.carry/old/libnccl.so.2 --budget 180 \
  --work /tmp/wd --json $OUT/timing_ddp_fsdp2_launches_ab-$C.json > /tmp/bench_ddp.log 2>&1
echo "ddp/fsdp2 rc=$?"; grep CHECK /tmp/bench_ddp.log
date -u +%FT%TZ >> $OUT/meta-$C.txt
