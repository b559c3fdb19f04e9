#!/bin/bash
# Session 13, call F (nvidia-h200-x2): RankLens's host time per replayed call beside the recorded (real NCCL) one,
# DDP and FSDP2 at micro-batch 32, replayed by 835fe35 and by 194370d ('before') one after the other on GPU 0.
set -u
cd "$(dirname "$0")/../.."
PY=/opt/torch/.venv/bin/python; [[ -x $PY ]] || PY=$(command -v python3)
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.carry/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
C=$(head -1 .carry/COMMIT)
source bench/carry_setup.sh; carry_adapter .carry
$PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/pysite .carry/pywhl/*.whl > /tmp/pip2.txt 2>&1 || cat /tmp/pip2.txt
{ date -u +%FT%TZ; nvidia-smi -L; nproc; lscpu | grep "Model name"; } > $OUT/meta-$C.txt 2>&1
T=$OUT/call_host_time_ddp_fsdp2-$C.txt
for mode in ddp fsdp2; do
  ARGS="examples/torch/train_gpt.py --parallel $mode --log-all-ranks --mark-steps --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024 --steps 25 --micro-batch 32"
  CUBLAS_WORKSPACE_CONFIG=:4096:8 RANKLENS_STAGING_FULL=wait timeout 120 .carry/bin/ranklens record --lib $PWD/.carry/lib/libnccl.so.2 \
    --trace /tmp/rec-$mode --payloads small -- $PY -m torch.distributed.run --standalone --nproc-per-node 2 $ARGS > /tmp/rec-$mode.log 2>&1
  echo "record $mode rc=$?"
  for lib in lib old; do
    CUBLAS_WORKSPACE_CONFIG=:4096:8 CUDA_VISIBLE_DEVICES=0 RANKLENS_TRACE_DIR=/tmp/rep-$mode-$lib timeout 120 .carry/bin/ranklens replay \
      --lib $PWD/.carry/$lib/libnccl.so.2 --rank 0 --fidelity timing --trace /tmp/rec-$mode -- $PY $ARGS > /tmp/rep-$mode-$lib.log 2>&1
    echo "replay $mode $lib rc=$?"
    { echo "## $mode, library .carry/$lib ($( [[ $lib == lib ]] && echo $C || echo 194370d ))"; grep -o '"median_step_ms": [0-9.]*' /tmp/rep-$mode-$lib.log;
      PYTHONPATH=/tmp/pysite $PY bench/replay_call_host_time.py /tmp/rep-$mode-$lib --skip 200 --recording /tmp/rec-$mode; } >> $T 2>&1
  done
  { echo "## $mode recorded"; grep -o '"rank": [01]\|"median_step_ms": [0-9.]*' /tmp/rec-$mode.log | paste - -; } >> $T
done
cat $T
date -u +%FT%TZ >> $OUT/meta-$C.txt
