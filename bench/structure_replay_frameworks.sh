#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Issue #8's scale check, on ONE GPU without any recording: structure replay of
#   megatron  Megatron-LM GPT, TP=4 x PP=4 x DP=4 (64 virtual ranks), as rank 21: pipeline stage 1 of 4 (a middle
#             stage), data-parallel rank 1, tensor-parallel rank 1 (Megatron's rank order: tp fastest, then dp, then
#             pp: rank = tp + 4*dp + 16*pp)
#   zero3     DeepSpeed ZeRO-3 (GPT-2 small sizes) as rank 37 of 64
# each for STEPS (5) steps, passing when the job exits 0 with finite losses (a middle pipeline stage computes no loss:
# it passes by finishing every iteration without a NaN report). The receive buffers get the default fill, clone
# (FILL=... to change it): object collectives (Megatron's all_gather_object of parameter-group sizes, DeepSpeed's
# checks that every rank holds the same counts) need peers that look like this rank; zero-filled sizes fail to
# unpickle. A middle pipeline stage receives activations by Recv (zeros under clone) and no token ids.
# Run from the repository root after scripts/prepare_frameworks.sh, with the carried build (carry [".carry"]):
#   OUT=/tmp/out bench/structure_replay_frameworks.sh [megatron] [zero3]
set -u
PY=${PY:-/opt/torch/.venv/bin/python}
OUT=${OUT:-/tmp/structure-replay-frameworks}
CARRY=${CARRY:-$PWD/.carry}
STEPS=${STEPS:-5}
FILL=${FILL:-clone}
RL="$CARRY/bin/ranklens"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$CARRY/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PYTHON="$PY" PYTHONPATH=/tmp/site
source "$(dirname "$0")/carry_setup.sh"
carry_adapter "$CARRY" && carry_frameworks "$PY" /tmp/site /tmp/mlm || exit 2
failures=0
run() {  # name, rank, command...
  local name=$1 rank=$2; shift 2
  local start=$SECONDS
  timeout 300 "$RL" replay --rank "$rank" --world-size 64 --fill "$FILL" -- "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  local finite=no
  if [[ $name == megatron* ]]; then
    # Only the last pipeline stage computes and prints the loss: a middle stage passes by finishing every
    # iteration (exit 0) without Megatron reporting a NaN.
    grep -qiE "nan iterations: *[1-9]|loss: nan" "$OUT/$name.log" || finite=yes
  else
    grep -q '"all_finite": true' "$OUT/$name.log" && finite=yes
  fi
  # Steps actually taken: the adapter marks every optimizer step in the replay trace ("N stage markers" in the
  # launcher's summary). Exit 0 alone is not enough: a Megatron rank that skips training exits 0 too.
  local steps
  steps=$(grep -oE "[0-9]+ stage markers" "$OUT/$name.log" | tail -1 | grep -oE "^[0-9]+")
  local ok=no
  [[ $rc == 0 && $finite == yes && ${steps:-0} -ge $STEPS ]] && ok=yes
  echo "CHECK $name rank $rank of 64: rc $rc, finite $finite, optimizer steps ${steps:-0} of $STEPS, $((SECONDS - start)) s -> $([[ $ok == yes ]] && echo PASS || echo FAIL)" | tee -a "$OUT/checks.txt"
  [[ $ok == yes ]] || failures=$((failures + 1))
}
for what in "${@:-megatron zero3}"; do
  for w in $what; do
    case $w in
      megatron) run megatron-tp4pp4dp4 21 bash examples/megatron/run_gpt.sh /tmp/mlm --tp 4 --pp 4 --nproc 64 \
                  --steps "$STEPS" --one-rank ;;
      zero3) run zero3-64 37 "$PY" examples/deepspeed/train_zero.py --zero-stage 3 --steps "$STEPS" --d-model 768 \
               --layers 12 --heads 12 --vocab 50304 --seq-len 1024 --micro-batch 4 --log-all-ranks ;;
      *) echo "unknown case $w (megatron, zero3)" >&2; exit 2 ;;
    esac
  done
done
exit $((failures > 0))
