#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs an already built hold_completion (builds nothing, so a binary carried to the GPU machine will do) and writes
#   OUT_DIR/hold_completion.json   the binary's --json output (commit, device, command, date, calibration, results)
#   OUT_DIR/hold_completion.log    the settings, nvidia-smi's view of the GPU, and everything the binary printed
# OUT_DIR defaults to bench/results/replay (created if missing). Relative paths are taken from the current directory.
#
#   bench/run_hold_completion.sh                                      # build/release/bench/hold_completion
#   RANKLENS_COMMIT=<sha> bench/run_hold_completion.sh .carry/bin/hold_completion
#   OUT_DIR=$OUT bench/run_hold_completion.sh .carry/bin/hold_completion --reps 200   # extra flags go to the binary
#
# The commit recorded is $RANKLENS_COMMIT, else `git rev-parse HEAD` in the repository root, else "unknown".
# Exit status: the binary's (0 done, 1 a CUDA call failed, 2 bad usage, 77 no usable GPU: skipped); 2 when the
# binary is missing.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${1:-$ROOT/build/release/bench/hold_completion}"
[[ $# -gt 0 ]] && shift
OUT_DIR="${OUT_DIR:-$ROOT/bench/results/replay}"
# Absolute paths before changing directory (so that `git rev-parse` runs in the repository).
case "$BIN" in /*) ;; *) BIN="$PWD/$BIN" ;; esac
case "$OUT_DIR" in /*) ;; *) OUT_DIR="$PWD/$OUT_DIR" ;; esac
if [[ ! -x "$BIN" ]]; then
  echo "run_hold_completion.sh: no executable at $BIN (build it: cmake --build --preset release --target hold_completion)" >&2
  exit 2
fi
mkdir -p "$OUT_DIR" || exit 2
JSON="$OUT_DIR/hold_completion.json"
LOG="$OUT_DIR/hold_completion.log"
cd "$ROOT" || exit 2

{
  echo "# run_hold_completion.sh $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# binary: $BIN"
  echo "# RANKLENS_COMMIT=${RANKLENS_COMMIT:-} host=$(hostname)"
  echo "# command: $BIN --json $JSON $*"
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=index,name,uuid,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,utilization.gpu \
      --format=csv 2>&1 | sed 's/^/# /'
  else
    echo "# nvidia-smi: not found"
  fi
} >"$LOG"

"$BIN" --json "$JSON" "$@" 2>&1 | tee -a "$LOG"
rc=${PIPESTATUS[0]}
echo "# exit status $rc" >>"$LOG"
case $rc in
  0) echo "run_hold_completion.sh: wrote $JSON and $LOG" ;;
  77) echo "run_hold_completion.sh: skipped (no usable GPU); log in $LOG" ;;
  *) echo "run_hold_completion.sh: hold_completion failed (exit $rc); log in $LOG" >&2 ;;
esac
exit "$rc"
