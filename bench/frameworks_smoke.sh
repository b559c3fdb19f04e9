#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Smoke test of the issue's five framework configurations under plain torchrun (no RankLens), one after another on
# a machine with 2 GPUs: DeepSpeed ZeRO-2 and ZeRO-3 (examples/deepspeed/train_zero.py, GPT-2 small sizes) and
# Megatron-LM GPT with TP=2, PP=2 and DP=2 (examples/megatron/run_gpt.sh). It answers "does each one run here at
# all, and how long does it take", before any recording is tried.
#
# Run from the repository root, with .carry/frameworks/ made by scripts/prepare_frameworks.sh (device tool:
# carry [".carry"]):
#   bench/frameworks_smoke.sh
# Environment:
#   PY          interpreter with torch [/opt/torch/.venv/bin/python]
#   OUT         output folder [/tmp/frameworks-smoke]; logs go to OUT/frameworks/: setup.log, <config>.log for
#               each configuration, summary.txt (7 files, so they all come back from a limited $OUT)
#   CONFIGS     which configurations, in order [zero2 zero3 tp2 pp2 dp2]
#   STEPS       training steps / iterations per configuration [10]
#   CONFIG_TIMEOUT_S  limit per configuration [150]
#   BUDGET_S    limit for the whole script [560]: a configuration gets at most what is left of it, and is skipped
#               when under 30 s are left, so the script ends inside a 600 s command limit
# Never stops at a failing configuration. Exit status: 0 if all that ran passed, 1 otherwise.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2
PY="${PY:-/opt/torch/.venv/bin/python}"
OUT="${OUT:-/tmp/frameworks-smoke}"
LOGS="$OUT/frameworks"
CONFIGS="${CONFIGS:-zero2 zero3 tp2 pp2 dp2}"
STEPS="${STEPS:-10}"
CONFIG_TIMEOUT_S="${CONFIG_TIMEOUT_S:-150}"
BUDGET_S="${BUDGET_S:-560}"
source "$(dirname "$0")/carry_setup.sh"
SITE=/tmp/site
MLM=/tmp/mlm
PARAMS=/tmp/frameworks-smoke-params  # --save-params output: hundreds of MB, so not under $OUT
mkdir -p "$LOGS" "$PARAMS"
SUMMARY="$LOGS/summary.txt"
: > "$SUMMARY"
export PYTHONUNBUFFERED=1

say() { echo "$*" | tee -a "$SUMMARY"; }

# ---------------------------------------------------------------------------------------------------------------
# Setup: wheels, Megatron-LM, versions, Megatron's dataset helpers, into setup.log (key lines go to the summary).
# ---------------------------------------------------------------------------------------------------------------
setup() {
  echo "== machine"
  nvidia-smi -L 2>&1
  env | grep -E '^(NCCL_|TORCH_|NVSHMEM_|CUDA_)' | sort
  echo "== wheels -> $SITE"
  echo "== Megatron-LM -> $MLM"
  rm -rf "$SITE" "$MLM"  # fresh: what is checked is the carried wheels and sources
  carry_frameworks "$PY" "$SITE" "$MLM" 2>&1 || echo "SETUP-FAIL: the carried frameworks (above)"
  echo "== versions"
  "$PY" -W ignore - <<'EOF' 2>&1
import importlib, sys
print("python", sys.version.split()[0], sys.executable)
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count(),
      "nccl", ".".join(map(str, torch.cuda.nccl.version())))
for name in ("numpy", "typing_extensions", "pydantic", "hjson", "einops", "psutil", "cpuinfo", "ninja", "msgpack",
             "tqdm", "pybind11", "triton", "pynvml", "transformer_engine", "apex"):
    try:
        m = importlib.import_module(name)
        print(name, getattr(m, "__version__", getattr(m, "VERSION", "?")), getattr(m, "__file__", ""))
    except Exception as e:  # report and go on: the runs below show what it breaks
        print(name, "NOT IMPORTABLE:", type(e).__name__, e)
try:
    import deepspeed
    print("deepspeed", deepspeed.__version__, "accelerator", deepspeed.get_accelerator()._name)
except Exception as e:
    print("deepspeed NOT IMPORTABLE:", type(e).__name__, e)
sys.path.insert(0, "/tmp/mlm")
try:
    from megatron.core import package_info
    print("megatron.core", package_info.__version__)
except Exception as e:
    print("megatron.core NOT IMPORTABLE:", type(e).__name__, e)
EOF
  echo "== build tools (Megatron compiles megatron/core/datasets/helpers.cpp with make on rank 0)"
  for t in make g++ python3 python3-config nvcc ninja; do
    printf '%-15s %s\n' "$t" "$(command -v "$t" || echo MISSING)"
  done
  "$PY" -c 'import sysconfig, os; h = os.path.join(sysconfig.get_paths()["include"], "Python.h")
print(h, os.path.exists(h))'
  # Build the helpers once here, as Megatron would, so no configuration pays for it or races on it. When
  # python3-config is missing the Makefile names the module without its suffix: give it the suffix then.
  local ext
  ext="$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
  make -C "$MLM/megatron/core/datasets" 2>&1 | tail -3
  if ! (cd "$MLM/megatron/core/datasets" && "$PY" -c 'import helpers_cpp' 2>/dev/null); then
    echo "helpers_cpp not importable after plain make; trying LIBEXT=$ext"
    make -C "$MLM/megatron/core/datasets" LIBEXT="$ext" 2>&1 | tail -3
  fi
  (cd "$MLM/megatron/core/datasets" && "$PY" -c 'import helpers_cpp as h; print("helpers_cpp OK", h.__file__)') 2>&1 \
    || echo "SETUP-FAIL: megatron.core.datasets.helpers_cpp is not importable: every Megatron run will fail"
}

T0=$SECONDS
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
PATH="$(dirname "$PY"):$PATH"  # Megatron's Makefile runs plain `python3`: make it the same interpreter
export PATH
setup > "$LOGS/setup.log" 2>&1
say "setup: $((SECONDS - T0)) s (log: $LOGS/setup.log)"
SETUP_KEYS='python|torch|deepspeed|megatron|pydantic|typing_extensions|helpers_cpp|SETUP-FAIL'
SETUP_KEYS+='|make|g\+\+|python3-config'
grep -E "^($SETUP_KEYS) |NOT IMPORTABLE|Python.h" "$LOGS/setup.log" | grep -v '^\(transformer_engine\|apex\) NOT' \
  | sed 's/^/  /' | tee -a "$SUMMARY"

# ---------------------------------------------------------------------------------------------------------------
# One configuration: own process group (setsid), so that whatever it leaves behind is ended before the next.
# ---------------------------------------------------------------------------------------------------------------
FAILED=0
run_config() {
  local name="$1"; shift
  local log="$LOGS/$name.log" left limit t0 rc pid
  left=$(( BUDGET_S - (SECONDS - T0) ))
  if (( left - 10 < 30 )); then
    say "=== $name: SKIPPED (only $left s of BUDGET_S=$BUDGET_S left)"; FAILED=1; return
  fi
  limit=$(( CONFIG_TIMEOUT_S < left - 10 ? CONFIG_TIMEOUT_S : left - 10 ))
  { printf '$'; printf ' %q' "$@"; echo; } > "$log"
  t0=$SECONDS
  setsid -w timeout -k 10 "$limit" "$@" >> "$log" 2>&1 &
  pid=$!
  wait "$pid"; rc=$?
  kill -KILL -- "-$pid" 2>/dev/null  # stragglers of this configuration only (its process group)
  sleep 1
  say "=== $name: rc=$rc wall=$((SECONDS - t0))s (limit ${limit}s$( ((rc == 124)) && echo ': TIMED OUT'))"
  grep -E '^RESULT ' "$log" | cut -c1-700 | tee -a "$SUMMARY"
  grep -E 'iteration +[0-9]+/ +[0-9]+ \|' "$log" | tail -2 | cut -c1-400 | tee -a "$SUMMARY"
  grep -E 'saved parameters to' "$log" | head -2 | tee -a "$SUMMARY"
  if (( rc != 0 )); then
    FAILED=1
    why "$log" | cut -c1-300 | tee -a "$SUMMARY"
  fi
}

# Why a configuration failed: the first worker traceback (torchrun's own ChildFailedError traceback skipped; its
# first line and last 16), the distinct exception lines, and our scripts' "error:" lines; else the log's tail.
why() {
  local found
  found="$(awk '
    function bare(l) { sub(/^\[(default|rank)[0-9]+\]: ?/, "", l); return l }
    bare($0) ~ /^Traceback \(most recent call last\)/ { inb = 1; n = 0; blk[n++] = $0; next }
    inb {
      blk[n++] = $0
      if (bare($0) !~ /^[ \t]/ && bare($0) != "") {         # the exception line ends the block
        inb = 0; joined = ""
        for (i = 0; i < n; i++) joined = joined blk[i] "\n"
        if (!shown && joined !~ /torch\/distributed\/run\.py|elastic\/agent/) {
          print blk[0]; if (n > 17) print "  ..."
          for (i = (n > 17 ? n - 16 : 1); i < n; i++) print blk[i]
          shown = 1
        }
      }
    }' "$1")"
  [[ -n "$found" ]] && echo "$found"
  grep -E '^(\[(default|rank)[0-9]+\]: ?)?[A-Za-z_.]*(Error|Exception|Interrupt)(: |$)|(^|: )error: ' "$1" \
    | grep -v 'ChildFailedError' | sort | uniq -c | sort -rn | head -6
  [[ -n "$found" ]] || tail -15 "$1"
}

TORCHRUN=("$PY" -m torch.distributed.run --standalone --nproc-per-node 2)
GPT2_SMALL=(--d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024 --micro-batch 4)
for cfg in $CONFIGS; do
  case "$cfg" in
    zero2|zero3)
      run_config "$cfg" "${TORCHRUN[@]}" examples/deepspeed/train_zero.py --zero-stage "${cfg#zero}" \
        "${GPT2_SMALL[@]}" --steps "$STEPS" --deterministic --save-params "$PARAMS/$cfg-{rank}.pt" ;;
    tp2) run_config tp2 env PYTHON="$PY" examples/megatron/run_gpt.sh "$MLM" --tp 2 --pp 1 --steps "$STEPS" ;;
    pp2) run_config pp2 env PYTHON="$PY" examples/megatron/run_gpt.sh "$MLM" --tp 1 --pp 2 --steps "$STEPS" ;;
    dp2) run_config dp2 env PYTHON="$PY" examples/megatron/run_gpt.sh "$MLM" --tp 1 --pp 1 --steps "$STEPS" ;;
    *) say "=== $cfg: unknown configuration (want zero2 zero3 tp2 pp2 dp2)"; FAILED=1 ;;
  esac
done
ls -la "$PARAMS" 2>/dev/null | sed 's/^/  /' | tee -a "$SUMMARY"
rm -rf "$PARAMS"
say "total: $((SECONDS - T0)) s; $( ((FAILED)) && echo 'SOME CONFIGURATIONS FAILED' || echo 'all passed')"
exit "$FAILED"
