#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Makes real PyTorch Flight Recorder dumps of a hang and a desync, 2 and 4 ranks, on ONE GPU.
#
#   tests/data/flight_recorder/make_dumps.sh OUTDIR [--ranklens PATH] [--python PY] [--timeout S]
#                                            [--cases "hang-2 hang-4 desync-2 desync-4 desync_dtype-2 desync_op-2"]
#
# Each case runs examples/torch/fr_hang.py under `ranklens run --share-gpu -- PY -m torch.distributed.run
# --standalone --nproc-per-node N` (the ranks share cuda:0, each with its own NCCL_HOSTID) with the Flight
# Recorder on (TORCH_NCCL_TRACE_BUFFER_SIZE, TORCH_NCCL_DUMP_ON_TIMEOUT=1, TORCH_NCCL_ENABLE_TIMING=1, a dump
# prefix, a short process-group timeout), and leaves in OUTDIR/<case>/:
#   fr/rank_<R>                 the watchdog's dumps on timeout (pickle), as production jobs leave them
#   self/pickle/rank_<R>        each rank's own dump through torch's Python API (pickle), when stuck or done
#   self/json/rank_<R>.json     the JSON variant of the same (torch's _dump_nccl_trace_json)
#   job.log, torchrun/          the job's output (FR_HANG lines say what each rank did) and per-rank logs
#   fr_trace-<dir>.txt          `PY -m torch.distributed.flight_recorder.fr_trace` on each dump directory
#                               (-j: its entry listing too)
#   ranklens-<fr|self>*         `ranklens import flight-recorder` of those dumps (the trace and the diagnosis),
#                               `ranklens export flight-recorder` of that trace with fr_trace on it, and rank 0 of
#                               the unmodified script replayed alone on the GPU against the import
#                               (ranklens-<..>-replay-rank0.txt: where it stopped)
# and OUTDIR/make_dumps.log (set -x), OUTDIR/versions.txt, OUTDIR/summary.txt.
# --ranklens: the ranklens executable, or an install tree (PATH/bin/ranklens). Every job and every fr_trace run
# has a time limit (the job's process group is killed past it), so the script always ends.
set -uo pipefail

usage() { sed -n '3,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[[ $# -ge 1 && $1 != -* ]] || usage
OUT=$(mkdir -p "$1" && cd "$1" && pwd) || exit 2
shift
RANKLENS="" PY=python3 PG_TIMEOUT=20 CASES="hang-2 hang-4 desync-2 desync-4 desync_dtype-2 desync_op-2"
while [[ $# -gt 0 ]]; do
  case $1 in
    --ranklens) RANKLENS=$2; shift 2 ;;
    --python) PY=$2; shift 2 ;;
    --timeout) PG_TIMEOUT=$2; shift 2 ;;
    --cases) CASES=$2; shift 2 ;;
    *) usage ;;
  esac
done
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
SCRIPT=$REPO/examples/torch/fr_hang.py

exec > >(tee "$OUT/make_dumps.log") 2>&1
# The trace goes to the log only, not into the output files the commands are redirected to.
exec 19>&2
BASH_XTRACEFD=19
set -x

if [[ -z $RANKLENS ]]; then
  RANKLENS=$(command -v ranklens || echo "$REPO/build/release/tools/ranklens/ranklens")
elif [[ -d $RANKLENS ]]; then
  for c in "$RANKLENS/bin/ranklens" "$RANKLENS/ranklens" "$RANKLENS/tools/ranklens/ranklens"; do
    [[ -x $c ]] && { RANKLENS=$c; break; }
  done
fi
[[ -x $RANKLENS ]] || { echo "error: no ranklens executable at '$RANKLENS' (give --ranklens PATH)"; exit 2; }
command -v "$PY" >/dev/null || { echo "error: no python '$PY' (give --python PY)"; exit 2; }

{
  date -u
  "$RANKLENS" --version 2>&1 | head -3
  timeout 120 "$PY" -c 'import torch, sys; print("python", sys.version.split()[0]); print("torch", torch.__version__);
print("cuda", torch.version.cuda, "available", torch.cuda.is_available(), "devices", torch.cuda.device_count());
print("nccl", ".".join(map(str, torch.cuda.nccl.version())));
import torch.distributed.flight_recorder.fr_trace as f; print("fr_trace", f.__file__)' 2>&1
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -2
} > "$OUT/versions.txt"
cat "$OUT/versions.txt"

# Runs "$@" in its own process group; kills the whole group past $1 seconds. Prints the exit status.
run_limited() {
  local limit=$1; shift
  setsid "$@" &
  local pid=$! waited=0
  while kill -0 "$pid" 2>/dev/null; do
    if (( waited >= limit )); then
      echo "make_dumps: time limit ${limit}s reached, killing process group $pid"
      kill -TERM -- "-$pid" 2>/dev/null; sleep 10; kill -KILL -- "-$pid" 2>/dev/null
      break
    fi
    sleep 1; waited=$((waited + 1))
  done
  wait "$pid"
}

fr_trace_on() {  # fr_trace_on DUMPDIR NAME CASEDIR
  local d=$1 name=$2 dir=$3
  compgen -G "$d/rank_*" >/dev/null || { echo "no dumps in $d" > "$dir/fr_trace-$name.txt"; return; }
  run_limited 120 "$PY" -m torch.distributed.flight_recorder.fr_trace "$d" > "$dir/fr_trace-$name.txt" 2>&1
  echo "exit status $?" >> "$dir/fr_trace-$name.txt"
  run_limited 120 "$PY" -m torch.distributed.flight_recorder.fr_trace --allow-incomplete-ranks "$d" \
    > "$dir/fr_trace-$name-incomplete.txt" 2>&1
  echo "exit status $?" >> "$dir/fr_trace-$name-incomplete.txt"
  run_limited 120 "$PY" -m torch.distributed.flight_recorder.fr_trace -j "$d" > "$dir/fr_trace-$name-entries.txt" 2>&1
  echo "exit status $?" >> "$dir/fr_trace-$name-entries.txt"
}

: > "$OUT/summary.txt"
for case in $CASES; do
  kind=${case%-*} n=${case##*-}
  mode=${kind%%_*} variant=size
  [[ $kind == *_* ]] && variant=${kind#*_}
  dir=$OUT/$case
  rm -rf "$dir"; mkdir -p "$dir/fr" "$dir/self" "$dir/torchrun"
  limit=$(( ${PG_TIMEOUT%.*} * 6 + 120 ))
  run_limited "$limit" env \
    TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_FR_BUFFER_SIZE=2000 \
    TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_NCCL_ENABLE_MONITORING=1 TORCH_NCCL_ENABLE_TIMING=1 \
    TORCH_NCCL_DEBUG_INFO_TEMP_FILE="$dir/fr/rank_" TORCH_FR_DUMP_TEMP_FILE="$dir/fr/rank_" \
    TORCH_NCCL_DESYNC_DEBUG=1 NCCL_DEBUG=WARN PYTHONUNBUFFERED=1 FR_HANG_DUMP_DIR="$dir/self" \
    "$RANKLENS" run --share-gpu -- "$PY" -m torch.distributed.run --standalone --nproc-per-node "$n" \
      --log-dir "$dir/torchrun" --tee 3 \
      "$SCRIPT" --mode "$mode" --desync "$variant" --timeout "$PG_TIMEOUT" \
    > "$dir/job.log" 2>&1
  rc=$?
  echo "$rc" > "$dir/rc"
  fr_trace_on "$dir/fr" fr "$dir"
  fr_trace_on "$dir/self/pickle" self "$dir"
  # RankLens on the same dumps: import (with the cross-rank diagnosis), export back for fr_trace, and rank 0 of the
  # unmodified script replayed alone against the import (it should stop at the collective the dump left started).
  for src in fr self/pickle; do
    tag=${src%%/*}
    compgen -G "$dir/$src/rank_*" >/dev/null || continue
    run_limited 120 "$RANKLENS" import flight-recorder "$dir/$src"/rank_* -o "$dir/ranklens-$tag/trace" \
      > "$dir/ranklens-$tag-import.txt" 2>&1
    echo "exit status $?" >> "$dir/ranklens-$tag-import.txt"
    run_limited 120 "$RANKLENS" export flight-recorder "$dir/ranklens-$tag/trace" -o "$dir/ranklens-$tag/export" \
      > "$dir/ranklens-$tag-export.txt" 2>&1
    fr_trace_on "$dir/ranklens-$tag/export" "export-$tag" "$dir"
    run_limited $(( ${PG_TIMEOUT%.*} * 3 + 60 )) env NCCL_DEBUG=WARN "$RANKLENS" replay \
      --trace "$dir/ranklens-$tag/trace" --rank 0 --fidelity structure --trace-dir "$dir/ranklens-$tag/replayed" -- \
      "$PY" "$SCRIPT" --mode "$mode" --desync "$variant" --timeout "$PG_TIMEOUT" \
      > "$dir/ranklens-$tag-replay-rank0.txt" 2>&1
    echo "exit status $?" >> "$dir/ranklens-$tag-replay-rank0.txt"
  done
  find "$dir" -name __pycache__ -prune -exec rm -rf {} +
  {
    printf '%-16s job exit %-4s watchdog dumps %s, own pickles %s, JSON %s\n' "$case" "$rc" \
      "$(ls "$dir/fr" | wc -l)" "$(ls "$dir/self/pickle" 2>/dev/null | wc -l)" "$(ls "$dir/self/json" 2>/dev/null | wc -l)"
    grep -h '^FR_HANG\|FR_HANG {' "$dir/job.log" | grep -v '"start"' | sed 's/^.*FR_HANG /    /' | sort -u
    for f in "$dir"/ranklens-*-import.txt; do
      printf '    %s: %s\n' "$(basename "$f")" "$(grep -m1 -A1 '^diagnosis' "$f" | tail -1 | cut -c1-200)"
    done
    for f in "$dir"/ranklens-*-replay-rank0.txt; do
      printf '    %s: %s\n' "$(basename "$f")" "$(grep -m1 -A1 'reached the call\|differs from the recording' "$f" | tail -1 | cut -c1-200)"
    done
    for f in "$dir"/fr_trace-*.txt; do
      [[ $f == *-entries.txt ]] && continue
      printf '    %s: %s\n' "$(basename "$f")" "$(grep -m1 -i 'culprit\|mismatch\|error\|not match' "$f" | cut -c1-160)"
    done
  } >> "$OUT/summary.txt"
done
set +x
cat "$OUT/summary.txt"
ls -lR "$OUT" > "$OUT/files.txt"
echo "make_dumps: done; copy $OUT back (tar czf fr-dumps.tgz -C $(dirname "$OUT") $(basename "$OUT"))"
