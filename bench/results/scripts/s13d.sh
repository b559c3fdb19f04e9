#!/bin/bash
# Session 13, call D (nvidia-h200-x2): FSDP2 timing A/B with the order swapped (194370d's library replays first).
set -u
cd "$(dirname "$0")/../.."
source bench/carry_setup.sh
PY=/opt/torch/.venv/bin/python; [[ -x $PY ]] || PY=$(command -v python3)
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.carry/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}  # yaml-cpp (Debian 12) for the carried build
C=$(head -1 .carry/COMMIT)
{ date -u +%FT%TZ; nvidia-smi -L; nproc; lscpu | grep "Model name"; } > $OUT/meta-$C.txt 2>&1
carry_adapter .carry
RANKLENS_COMMIT=$C timeout 330 $PY bench/replay_fidelity_torch.py \
  --lib .carry/old/libnccl.so.2 --ranklens .carry/bin/ranklens --python $PY --modes fsdp2 --micro-batch 32 \
  --checks timing --repeats 3 --steps 25 --warmup 8 --variant after:lib=.carry/lib/libnccl.so.2 --budget 300 \
  --work /tmp/wf --json $OUT/timing_fsdp2_launches_ba-$C.json > /tmp/bench.log 2>&1
echo "fsdp2 rc=$?"; grep -E "CHECK|replay .*rank" /tmp/bench.log
date -u +%FT%TZ >> $OUT/meta-$C.txt
