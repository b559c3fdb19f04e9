#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Train a small GPT with Megatron-LM's own pretrain_gpt.py (megatron-core 0.19, tag core_v0.19.0) on mock data, with
# the local transformer implementation: no Transformer Engine, no apex. An ordinary torchrun job; nothing in it
# knows about RankLens.
#
#   examples/megatron/run_gpt.sh MEGATRON_DIR --tp T --pp P [options] [extra pretrain_gpt.py args...]
#
#   MEGATRON_DIR        a Megatron-LM checkout holding pretrain_gpt.py and megatron/ (scripts/prepare_frameworks.sh
#                       makes one: tar xzf .carry/frameworks/megatron-lm.tgz -C /tmp/mlm)
#   --tp T, --pp P      tensor- and pipeline-parallel sizes (default 1 each)
#   --nproc N           processes (GPUs) on this node (default 2); data-parallel size DP = N / (T*P)
#   --steps N           training iterations (default 10)
#   --micro-batch M     sequences per micro-batch (default 2)
#   --microbatches K    micro-batches per iteration and DP rank (default 4, so PP has a pipeline to fill);
#                       global batch = M * DP * K
#   --layers/--hidden/--heads/--seq-len/--vocab   model size (default 8 / 512 / 8 / 512 / 8192)
#   --no-deterministic  leave out --deterministic-mode (on by default: torch deterministic algorithms,
#                       CUBLAS_WORKSPACE_CONFIG=:4096:8, NCCL_ALGO=Ring unless set)
#   --gloo              leave out --disable-gloo-process-groups (on by default: NCCL groups only, as a lone replayed
#                       rank cannot join a Gloo group; docs/frameworks.md)
#   --no-compile        TORCHDYNAMO_DISABLE=1: Megatron's jit_fuser is torch.compile, and its start-up warms up the
#                       bias+GeLU and bias+dropout+add functions even with those fusions off (Inductor + Triton
#                       compile, cached under /tmp/torchinductor_$USER); this runs them eagerly instead
#   --one-rank          run pretrain_gpt.py as ONE process, without torchrun, taking RANK/WORLD_SIZE/LOCAL_RANK/
#                       MASTER_* from the environment: what `ranklens replay` runs (--nproc stays the job's size)
#   --save-params DIR   after the last iteration, save a checkpoint in Megatron's legacy per-rank torch format
#                       (DIR/iter_<N>/mp_rank_<tp>[_<pp>]/model_optim_rng.pt, model only: no optimizer, no RNG)
#   --digest            run pretrain_gpt.py through pretrain_digest.py (beside this script), which prints each rank's
#                       parameter checksum when training ends (`RANKLENS_DIGEST params sha256:<hex>`)
#   --dry-run           print the command and exit
#   anything else       passed on to pretrain_gpt.py, after this script's own arguments (so, for options that take
#                       a value, it overrides them)
#
# PYTHON selects the interpreter (default python3, with torch). Megatron-LM needs nothing here beyond torch, numpy,
# packaging and PyYAML, but rank 0 compiles its dataset helpers (megatron/core/datasets/helpers.cpp) at start-up
# with make, g++, pybind11, python3-config and Python.h.
set -euo pipefail

usage() { sed -n '3,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
[[ $# -ge 1 && "$1" != -* ]] || usage
MEGATRON_DIR="$(cd "$1" && pwd)"; shift
[[ -f "$MEGATRON_DIR/pretrain_gpt.py" ]] || { echo "run_gpt.sh: no pretrain_gpt.py in $MEGATRON_DIR" >&2; exit 2; }

TP=1 PP=1 NPROC=2 STEPS=10 MBS=2 NMICRO=4
LAYERS=8 HIDDEN=512 HEADS=8 SEQ=512 VOCAB=8192
DETERMINISTIC=1 COMPILE=1 GLOO=0 DRY=0 ONE_RANK=0 SAVE_DIR= DIGEST=0
EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --tp) TP="$2"; shift 2 ;;
    --pp) PP="$2"; shift 2 ;;
    --nproc) NPROC="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --micro-batch) MBS="$2"; shift 2 ;;
    --microbatches) NMICRO="$2"; shift 2 ;;
    --layers) LAYERS="$2"; shift 2 ;;
    --hidden) HIDDEN="$2"; shift 2 ;;
    --heads) HEADS="$2"; shift 2 ;;
    --seq-len) SEQ="$2"; shift 2 ;;
    --vocab) VOCAB="$2"; shift 2 ;;
    --no-deterministic) DETERMINISTIC=0; shift ;;
    --no-compile) COMPILE=0; shift ;;
    --gloo) GLOO=1; shift ;;
    --dry-run) DRY=1; shift ;;
    --one-rank) ONE_RANK=1; shift ;;
    --digest) DIGEST=1; shift ;;
    --save-params) SAVE_DIR="$2"; shift 2 ;;
    -h|--help) usage ;;
    *) EXTRA+=("$1"); shift ;;
  esac
done
if (( NPROC % (TP * PP) != 0 )); then
  echo "run_gpt.sh: --nproc $NPROC is not a multiple of TP*PP = $((TP * PP))" >&2; exit 2
fi
DP=$(( NPROC / (TP * PP) ))
GBS=$(( MBS * DP * NMICRO ))

# Megatron asserts this for TP>1 on pre-Blackwell GPUs (the H200 is Hopper): one hardware queue keeps the TP
# communication kernels in issue order with the GEMMs.
export CUDA_DEVICE_MAX_CONNECTIONS=1
(( COMPILE )) || export TORCHDYNAMO_DISABLE=1
# Rank 0 compiles megatron/core/datasets/helpers.cpp with `make`, whose Makefile calls plain `python3`: make it the
# interpreter this job runs with.
PYTHON="${PYTHON:-python3}"
PYTHON_BIN="$(command -v "$PYTHON")" || { echo "run_gpt.sh: no interpreter '$PYTHON' (PYTHON)" >&2; exit 2; }
PATH="$(dirname "$PYTHON_BIN"):$PATH"
export PATH
export PYTHONPATH="$MEGATRON_DIR${PYTHONPATH:+:$PYTHONPATH}"

ARGS=(
  --tensor-model-parallel-size "$TP" --pipeline-model-parallel-size "$PP"
  --num-layers "$LAYERS" --hidden-size "$HIDDEN" --num-attention-heads "$HEADS"
  --seq-length "$SEQ" --max-position-embeddings "$SEQ" --position-embedding-type learned_absolute
  --micro-batch-size "$MBS" --global-batch-size "$GBS"
  --train-iters "$STEPS" --lr 3e-4 --lr-decay-style constant --weight-decay 0.1 --clip-grad 1.0 --seed 1234
  --bf16
  # Zero dropout: the loss then depends on the data and the weights only, not on the dropout RNG streams.
  --attention-dropout 0.0 --hidden-dropout 0.0
  # Local (PyTorch) layers; every fusion below otherwise wants apex, Transformer Engine or Megatron's CUDA kernels.
  --transformer-impl local
  --no-gradient-accumulation-fusion --no-masked-softmax-fusion --no-bias-gelu-fusion --no-bias-dropout-fusion
  --no-rope-fusion --no-persist-layer-norm
  # Synthetic tokens, no tokenizer files.
  --mock-data --tokenizer-type NullTokenizer --vocab-size "$VOCAB" --num-workers 0
  # Train only: no evaluation, no checkpoint (unless --save-params), no TensorBoard or W&B.
  --eval-iters 0 --eval-interval 1000000
  --log-interval 1
  --distributed-timeout-minutes 5
)
(( DETERMINISTIC )) && ARGS+=(--deterministic-mode)
(( GLOO )) || ARGS+=(--disable-gloo-process-groups)

[[ -n $SAVE_DIR ]] && ARGS+=(--save "$SAVE_DIR" --save-interval "$STEPS" --ckpt-format torch --no-save-optim --no-save-rng)
SCRIPT=("$MEGATRON_DIR/pretrain_gpt.py")
(( DIGEST )) && SCRIPT=("$(cd "$(dirname "$0")" && pwd)/pretrain_digest.py" "$MEGATRON_DIR/pretrain_gpt.py")
if (( ONE_RANK )); then
  CMD=("$PYTHON_BIN" "${SCRIPT[@]}" "${ARGS[@]}" "${EXTRA[@]}")
else
  CMD=("$PYTHON_BIN" -m torch.distributed.run --standalone --nproc-per-node "$NPROC" "${SCRIPT[@]}" "${ARGS[@]}"
       "${EXTRA[@]}")
fi
echo "run_gpt.sh: TP=$TP PP=$PP DP=$DP nproc=$NPROC global_batch=$GBS steps=$STEPS deterministic=$DETERMINISTIC" \
     "compile=$COMPILE gloo=$GLOO" >&2
if (( DRY )); then
  printf '%q ' "${CMD[@]}"; echo
  exit 0
fi
exec "${CMD[@]}"
