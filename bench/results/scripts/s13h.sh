#!/bin/bash
# Session 13, call H (nvidia-h200-x2): a fully estimated FSDP2 replay (timing: estimated) from a history of three
# other runs of the same configuration, with the same-place rule (dc61296) and without it (194370d), against a new
# real run that is not in the history.
set -u
cd "$(dirname "$0")/../.."
PY=/opt/torch/.venv/bin/python; [[ -x $PY ]] || PY=$(command -v python3)
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.carry/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
C=$(head -1 .carry/COMMIT)
source bench/carry_setup.sh; carry_adapter .carry
T=$OUT/estimated_fsdp2_same_config-$C.txt
{ date -u +%FT%TZ; nvidia-smi -L; } > $T 2>&1
ARGS="examples/torch/train_gpt.py --parallel fsdp2 --log-all-ranks --mark-steps --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024 --steps 25 --micro-batch 16 --bucket-mb 25"
timeout 80 .carry/bin/ranklens record --lib $PWD/.carry/lib/libnccl.so.2 --trace /tmp/real --payloads small -- \
  $PY -m torch.distributed.run --standalone --nproc-per-node 2 $ARGS > /tmp/real.log 2>&1
echo "real (recorded, not in the history): rc=$? $(grep -o '"rank": [01]\|"median_step_ms": [0-9.]*' /tmp/real.log | paste -sd' ')" | tee -a $T
for v in "lib fsdp3.hist" "old fsdp3-v3.hist"; do
  set -- $v
  for r in 0 1; do
    CUDA_VISIBLE_DEVICES=$r RANKLENS_TIMING=estimated RANKLENS_HISTORY=$PWD/.carry/hist/$2 RANKLENS_TRACE_DIR=/tmp/rep-$1 timeout 100 \
      .carry/bin/ranklens replay --lib $PWD/.carry/$1/libnccl.so.2 --rank $r --fidelity timing --trace /tmp/real -- $PY $ARGS \
      > /tmp/rep-$1-$r.log 2>&1 &
  done
  wait
  for r in 0 1; do
    echo "estimated replay, library .carry/$1 ($( [[ $1 == lib ]] && echo $C || echo 194370d )), history $2, rank $r: $(grep -o '"median_step_ms": [0-9.]*' /tmp/rep-$1-$r.log) $(grep -o 'replay_estimated[^,;]*' /tmp/rep-$1-$r.log | head -1)" | tee -a $T
  done
  grep -h -i "warn\|error" /tmp/rep-$1-*.log | head -5 >> $T
done
date -u +%FT%TZ >> $T
