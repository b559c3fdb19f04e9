#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Record mode under NVIDIA nccl-tests on one machine with 2 GPUs: every test runs twice, (a) plainly against the
# real NCCL and (b) through the RankLens recorder (RANKLENS_MODE=record) forwarding to that same NCCL, both with
# data checking (-c 1). A test passes when it exits 0, prints "# Out of bounds values : 0 OK" and every size row has
# 0 in both #wrong columns; the recorded trace must hold Call and Timing records, nothing dropped, no reader problem.
# Reports the average bus bandwidth of both arms, and the Call / Timing / PayloadRef records of each trace.
#
# Outputs (only two files, so that they come back from a limited $OUT):
#   OUT/record_nccl_tests.json   commit, device, date, commands, per test: pass real / record, avg busbw both,
#                                busbw ratio, trace record counts, per-size rows
#   OUT/record_nccl_tests.log    everything: settings, pre-flight checks, each run's full output, the table
# Per-run logs, traces and the unpacked binaries stay in the work directory (--work).
#
# Usage (repository root of the GPU machine; .carry/ holds lib/, bin/ and nccl-tests/):
#   RANKLENS_COMMIT=<sha> bench/record_nccl_tests.sh --out "$OUT"
#   bench/record_nccl_tests.sh --tests all_reduce,sendrecv --payloads all --timeout 60 --out /tmp/r
# Exit status: 0 all passed, 1 some check failed, 2 bad usage or a pre-flight check failed.
set -uo pipefail

usage() {
  cat <<'EOF'
Usage: bench/record_nccl_tests.sh [options]

Runs NVIDIA nccl-tests against the real NCCL and through the RankLens recorder, checks data (-c 1) in both,
and writes OUT/record_nccl_tests.json and OUT/record_nccl_tests.log.

Options (defaults in brackets; relative paths are taken from the current directory):
  --bin-dir DIR     nccl-tests binaries (*_perf), or a folder holding nccl-tests-bin.tar.xz to unpack
                    into the work directory [.carry/nccl-tests]
  --lib-dir DIR     folder of RankLens's libnccl.so.2 (and libyaml-cpp.so.0.7, libisal.so.2) [.carry/lib]
  --real-nccl PATH  the real libnccl.so.2 [the pip wheel's, found from --python's sys.path]
  --python PY       interpreter for discovery and the summary (needs msgpack to count records)
                    [/opt/torch/.venv/bin/python if present, else python3]
  --ranklens BIN    ranklens tool, for a C++ cross-check of the Call count [.carry/bin/ranklens, if present]
  --out DIR         where the JSON and the combined log go [bench/results]
  --work DIR        per-run logs, traces, unpacked binaries [${TMPDIR:-/tmp}/ranklens-record-nccl-tests]
  --tests LIST      comma-separated test names [all_reduce,all_gather,broadcast,reduce,reduce_scatter,
                    alltoall,gather,scatter,sendrecv] (missing binaries are skipped and reported; hypercube is
                    left out by default: with -g 2 it reported 312 wrong values against the real NCCL alone on
                    2x H200, so it cannot judge the recorder)
  --args "ARGS"     nccl-tests arguments ["-b 8 -e 64M -f 4 -g 2 -c 1 -n 5 -w 2"]
  --payloads MODE   RANKLENS_PAYLOADS for the recorder arm: none|small|all [small]
  --timeout SEC     per run, enforced with timeout(1) [120]
  --budget SEC      start a test only if the time spent plus the previous test's duration stays within SEC;
                    the rest are reported as skipped [450] (so the script ends within 10 minutes)
  --only-record     skip the real-NCCL arm
  -h, --help        this text

Environment: RANKLENS_COMMIT (the commit to record; else git rev-parse HEAD; else "unknown").
EOF
}

die() { echo "error: $*" >&2; exit 2; }

BIN_DIR=.carry/nccl-tests
LIB_DIR=.carry/lib
REAL_NCCL=
PY=
RANKLENS_BIN=
OUT_DIR=bench/results
WORK_DIR="${TMPDIR:-/tmp}/ranklens-record-nccl-tests"
TESTS=all_reduce,all_gather,broadcast,reduce,reduce_scatter,alltoall,gather,scatter,sendrecv
NT_ARGS="-b 8 -e 64M -f 4 -g 2 -c 1 -n 5 -w 2"
PAYLOADS=small
TIMEOUT=120
BUDGET=450
ONLY_RECORD=0
ORIG_ARGS=("$@")

while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --bin-dir|--lib-dir|--real-nccl|--python|--ranklens|--out|--work|--tests|--args|--payloads|--timeout|--budget)
      [ $# -ge 2 ] || die "$1 needs a value (see --help)"
      case "$1" in
        --bin-dir) BIN_DIR=$2 ;; --lib-dir) LIB_DIR=$2 ;; --real-nccl) REAL_NCCL=$2 ;; --python) PY=$2 ;;
        --ranklens) RANKLENS_BIN=$2 ;; --out) OUT_DIR=$2 ;; --work) WORK_DIR=$2 ;; --tests) TESTS=$2 ;;
        --args) NT_ARGS=$2 ;; --payloads) PAYLOADS=$2 ;; --timeout) TIMEOUT=$2 ;; --budget) BUDGET=$2 ;;
      esac
      shift 2 ;;
    --*=*) opt=${1%%=*}; val=${1#*=}; shift; set -- "$opt" "$val" "$@" ;;
    --only-record) ONLY_RECORD=1; shift ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

case "$PAYLOADS" in none|small|all) ;; *) die "--payloads must be none, small or all, not '$PAYLOADS'" ;; esac
case "$TIMEOUT" in ''|*[!0-9]*) die "--timeout must be a positive integer of seconds, not '$TIMEOUT'" ;; esac
[ "$TIMEOUT" -gt 0 ] || die "--timeout must be positive"
case "$BUDGET" in ''|*[!0-9]*) die "--budget must be a non-negative integer of seconds, not '$BUDGET'" ;; esac
case "$NT_ARGS" in *"-c 0"*) echo "warning: --args has '-c 0': nothing will be checked" >&2 ;; esac

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
abspath() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac; }
BIN_DIR=$(abspath "$BIN_DIR"); LIB_DIR=$(abspath "$LIB_DIR"); OUT_DIR=$(abspath "$OUT_DIR")
WORK_DIR=$(abspath "$WORK_DIR")
[ -n "$REAL_NCCL" ] && REAL_NCCL=$(abspath "$REAL_NCCL")

if [ -z "$PY" ]; then
  if [ -x /opt/torch/.venv/bin/python ]; then PY=/opt/torch/.venv/bin/python
  elif command -v python3 >/dev/null; then PY=python3
  else die "no python: pass --python PY"; fi
fi
command -v "$PY" >/dev/null 2>&1 || die "--python $PY: not found"
if [ -z "$RANKLENS_BIN" ]; then
  if [ -x .carry/bin/ranklens ]; then RANKLENS_BIN=$(abspath .carry/bin/ranklens); fi
else
  RANKLENS_BIN=$(abspath "$RANKLENS_BIN")
  { [ -f "$RANKLENS_BIN" ] && [ -x "$RANKLENS_BIN" ]; } || die "--ranklens $RANKLENS_BIN: not an executable file"
fi

mkdir -p "$OUT_DIR" "$WORK_DIR/logs" "$WORK_DIR/traces" || die "cannot create $OUT_DIR or $WORK_DIR"
LOG="$OUT_DIR/record_nccl_tests.log"
JSON="$OUT_DIR/record_nccl_tests.json"
RUNS="$WORK_DIR/runs.tsv"
: > "$LOG" || die "cannot write $LOG"
: > "$RUNS"

say() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" | tee -a "$LOG"; }
fail_pre() { say "PRE-FLIGHT FAILED: $*"; echo "error: $*" >&2; exit 2; }

SCRIPT_CMD=$(printf '%q ' "$0" "${ORIG_ARGS[@]+"${ORIG_ARGS[@]}"}"); SCRIPT_CMD=${SCRIPT_CMD% }
say "command: $SCRIPT_CMD"
say "cwd $PWD; out $OUT_DIR; work $WORK_DIR; python $PY; timeout ${TIMEOUT}s; payloads $PAYLOADS"
say "nccl-tests args: $NT_ARGS"

# ---- pre-flight: binaries
NT_COMMIT=$(head -c 200 "$BIN_DIR/COMMIT" 2>/dev/null | tr -d '\n') ; NT_COMMIT=${NT_COMMIT:-unknown}
shopt -s nullglob
bins=("$BIN_DIR"/*_perf)
if [ ${#bins[@]} -eq 0 ] && [ -f "$BIN_DIR/nccl-tests-bin.tar.xz" ]; then
  UNPACK="$WORK_DIR/nccl-tests-bin"
  rm -rf "$UNPACK" && mkdir -p "$UNPACK"
  if ! tar -xJf "$BIN_DIR/nccl-tests-bin.tar.xz" -C "$UNPACK" 2>>"$LOG"; then
    "$PY" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$BIN_DIR/nccl-tests-bin.tar.xz" "$UNPACK" 2>>"$LOG" || fail_pre "cannot unpack $BIN_DIR/nccl-tests-bin.tar.xz"
  fi
  say "unpacked $BIN_DIR/nccl-tests-bin.tar.xz into $UNPACK"
  BIN_DIR=$UNPACK
  bins=("$BIN_DIR"/*_perf)
fi
[ ${#bins[@]} -gt 0 ] || fail_pre "no *_perf binaries (nor nccl-tests-bin.tar.xz) in $BIN_DIR; pass --bin-dir"
shopt -u nullglob
say "nccl-tests: ${#bins[@]} binaries in $BIN_DIR (commit $NT_COMMIT)"

# ---- pre-flight: libraries
OURS="$LIB_DIR/libnccl.so.2"
[ -f "$OURS" ] || fail_pre "$OURS: no such file (pass --lib-dir DIR holding RankLens's libnccl.so.2)"
if command -v ldd >/dev/null; then
  missing=$(ldd "$OURS" 2>&1 | grep "not found")
  [ -z "$missing" ] || fail_pre "$OURS has unresolved dependencies (libyaml-cpp.so.0.7 must sit beside it): $missing"
fi
if command -v nm >/dev/null && ! nm -D --defined-only "$OURS" 2>/dev/null | grep -q ' ranklensMarkStage$'; then
  say "warning: $OURS does not export ranklensMarkStage (is it RankLens's library?)"
fi
if [ -z "$REAL_NCCL" ]; then
  REAL_NCCL=$("$PY" "$HERE/record_bench_lib.py" wheel-nccl 2>>"$LOG") \
    || fail_pre "cannot find the pip wheel's libnccl.so.2 from $PY; pass --real-nccl PATH"
fi
[ -f "$REAL_NCCL" ] || fail_pre "--real-nccl $REAL_NCCL: no such file"
REAL_DIR=$(dirname "$REAL_NCCL")
if [ "$(readlink -f "$REAL_NCCL")" = "$(readlink -f "$OURS")" ]; then fail_pre "the real NCCL and ours are the same file"; fi
say "real NCCL: $REAL_NCCL"
say "RankLens:  $OURS ($(sha256sum "$OURS" | cut -c1-16))"
"$PY" -c 'import msgpack' 2>/dev/null || say "warning: $PY has no msgpack: traces cannot be counted (trace checks will fail)"

# ---- pre-flight: GPUs
if command -v nvidia-smi >/dev/null; then
  ngpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | grep -c .)
  say "GPUs: $ngpu ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1))"
  want=$(printf '%s\n' "$NT_ARGS" | sed -n 's/.*-g *\([0-9][0-9]*\).*/\1/p'); want=${want:-1}
  [ "$ngpu" -ge "$want" ] || say "warning: -g $want wants $want GPUs, nvidia-smi lists $ngpu"
else
  say "warning: no nvidia-smi: is this a GPU machine?"
fi

# Environment pieces: the real arm sees no RankLens variable and no preload.
clean_env=(env -u LD_PRELOAD)
for v in $(env | sed -n 's/^\(RANKLENS_[A-Za-z0-9_]*\)=.*/\1/p'); do clean_env+=(-u "$v"); done
LDP_REAL="$REAL_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
LDP_REC="$LIB_DIR:$REAL_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

run_one() {  # test arm binary
  local test=$1 arm=$2 bin=$3 log="$WORK_DIR/logs/$1.$2.log" trace="-" rc t0 t1 wall timed_out=0 cmd
  # shellcheck disable=SC2206
  local args=($NT_ARGS)
  if [ "$arm" = real ]; then
    cmd=("${clean_env[@]}" "LD_LIBRARY_PATH=$LDP_REAL" timeout -k 10 "$TIMEOUT" "$bin" "${args[@]}")
  else
    trace="$WORK_DIR/traces/$test"
    rm -rf "$trace" && mkdir -p "$trace"
    cmd=("${clean_env[@]}" "LD_LIBRARY_PATH=$LDP_REC" RANKLENS_MODE=record "RANKLENS_REAL_NCCL=$REAL_NCCL"
         "RANKLENS_TRACE_DIR=$trace" "RANKLENS_PAYLOADS=$PAYLOADS" timeout -k 10 "$TIMEOUT" "$bin" "${args[@]}")
  fi
  local cmdline; cmdline=$(printf '%q ' "${cmd[@]}"); cmdline=${cmdline% }
  say "$test [$arm] ..."
  { echo "# command: $cmdline"; echo "# started: $(date -u +%FT%TZ)"; echo; } > "$log"
  t0=$(date +%s.%N)
  "${cmd[@]}" >> "$log" 2>&1 < /dev/null
  rc=$?
  t1=$(date +%s.%N)
  wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then timed_out=1; echo "# timed out after ${TIMEOUT}s" >> "$log"; fi
  echo "# exit code $rc, ${wall}s" >> "$log"
  local oob bw
  oob=$(grep -m1 'Out of bounds values' "$log" | sed 's/^# *//')
  bw=$(grep -m1 'Avg bus bandwidth' "$log" | sed 's/^# *//')
  say "$test [$arm]: rc $rc, ${wall}s; ${oob:-no 'Out of bounds' line}; ${bw:-no busbw line}"
  if [ "$arm" = record ] && [ -n "$RANKLENS_BIN" ] && [ -d "$trace" ]; then
    LD_LIBRARY_PATH="$LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$RANKLENS_BIN" trace summary "$trace" --json > "$trace.summary.json" 2> "$trace.summary.err" \
      || say "warning: ranklens trace summary $trace failed: $(head -c 400 "$trace.summary.err")"
  fi
  { echo; echo "===== $test [$arm] ($log) ====="; cat "$log"; echo "===== end $test [$arm] ====="; } >> "$LOG"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$test" "$arm" "$rc" "$timed_out" "$wall" "$log" "$trace" \
    "$cmdline" >> "$RUNS"
}

IFS=',' read -r -a test_list <<< "$TESTS"
skipped=()
START=$SECONDS
last=0
for test in "${test_list[@]}"; do
  test=${test// /}
  [ -n "$test" ] || continue
  bin="$BIN_DIR/${test}_perf"
  if [ ! -x "$bin" ]; then
    say "skip $test: no executable $bin"
    skipped+=("$test (no binary)")
    continue
  fi
  if [ $((SECONDS - START + last)) -gt "$BUDGET" ]; then
    say "skip $test: time budget ($((SECONDS - START)) s spent, last test took $last s, --budget $BUDGET)"
    skipped+=("$test (time budget)")
    continue
  fi
  t_test=$SECONDS
  [ "$ONLY_RECORD" -eq 1 ] || run_one "$test" real "$bin"
  run_one "$test" record "$bin"
  last=$((SECONDS - t_test))
done
[ -s "$RUNS" ] || fail_pre "no test ran (tests: $TESTS; binaries in $BIN_DIR)"

skipped_json=$(printf '%s\n' "${skipped[@]+"${skipped[@]}"}" | "$PY" -c \
  'import json,sys; print(json.dumps([l.strip() for l in sys.stdin if l.strip()]))')
meta=$("$PY" - "$NT_ARGS" "$PAYLOADS" "$TIMEOUT" "$BIN_DIR" "$OURS" "$REAL_NCCL" "$WORK_DIR" "$skipped_json" \
  "$NT_COMMIT" "$SCRIPT_CMD" <<'EOF'
import hashlib, json, sys
args, payloads, timeout, bins, ours, real, work, skipped, nt_commit, cmd = sys.argv[1:11]
def sha(p):
    try:
        return hashlib.sha256(open(p, "rb").read()).hexdigest()
    except OSError:
        return None
print(json.dumps({"script": "bench/record_nccl_tests.sh", "script_command": cmd.strip(), "nccl_tests_args": args,
                  "payloads": payloads, "timeout_s": int(timeout), "bin_dir": bins, "nccl_tests_commit": nt_commit,
                  "ranklens_lib": ours, "ranklens_lib_sha256": sha(ours), "real_nccl": real, "work_dir": work,
                  "skipped_tests": json.loads(skipped)}))
EOF
) || meta='{}'

say "summary:"
"$PY" "$HERE/record_bench_lib.py" nccl-tests-summary --runs "$RUNS" --out "$JSON" --meta "$meta" 2>&1 | tee -a "$LOG"
status=${PIPESTATUS[0]}
say "done: $JSON, $LOG (status $status)"
exit "$status"
