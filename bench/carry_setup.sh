# SPDX-License-Identifier: Apache-2.0
# Sourced (not run) by the bench scripts that use the carried build on a GPU machine, from the repository root
# (.carry/: bin/, lib/, frameworks/ from scripts/prepare_frameworks.sh).

# carry_adapter CARRY: the Python adapter where the carried launcher looks for it (../share/ranklens/python beside
# its binary); left alone when already current, so that two scripts running at once do not pull it from each other.
carry_adapter() {
  diff -rq tools/python "$1/share/ranklens/python" > /dev/null 2>&1 && return 0
  mkdir -p "$1/share/ranklens" && rm -rf "$1/share/ranklens/python" && cp -r tools/python "$1/share/ranklens/python"
}

# carry_frameworks PY SITE MLM: DeepSpeed and its dependencies installed into SITE from the carried wheels, and
# Megatron-LM unpacked into MLM, each unless already there. Non-zero status (with the step named) on failure.
carry_frameworks() {
  [[ -d $2/deepspeed ]] || "$1" -m pip install -q --no-index --no-deps --no-compile --target "$2" \
    .carry/frameworks/whl/*.whl || { echo "pip install of .carry/frameworks/whl into $2 failed" >&2; return 1; }
  [[ -f $3/pretrain_gpt.py ]] || { mkdir -p "$3" && tar xzf .carry/frameworks/megatron-lm.tgz -C "$3"; } \
    || { echo "unpacking .carry/frameworks/megatron-lm.tgz into $3 failed" >&2; return 1; }
}

# carry_env: what every GPU-side results script sets up first, from the repository root: PY (the machine's torch
# interpreter), unbuffered Python output, the carried yaml-cpp and ISA-L on LD_LIBRARY_PATH, C (the commit the carried build
# was made from, .carry/COMMIT), /tmp/meta.txt (date, GPUs, CPUs) and the adapter beside the carried launcher.
carry_env() {
  PY=/opt/torch/.venv/bin/python; [[ -x $PY ]] || PY=$(command -v python3)
  export PYTHONUNBUFFERED=1
  export LD_LIBRARY_PATH=$PWD/.carry/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}  # yaml-cpp, ISA-L (Debian 12)
  C=$(head -1 .carry/COMMIT)
  { date -u +%FT%TZ; nvidia-smi -L; nproc; lscpu | grep "Model name"; } > /tmp/meta.txt 2>&1
  carry_adapter .carry
}

# carry_real_nccl: SITE (the torch interpreter's site-packages) and REAL (the wheel's real libnccl.so.2 there), for
# the GPU tests that compare RankLens with the real NCCL and for record mode. Call after carry_env.
carry_real_nccl() {
  SITE=$($PY -c 'import site; print(site.getsitepackages()[0])')
  REAL=$(find "$SITE" -path '*nvidia/nccl/lib/libnccl.so.2' | head -1)
  [[ -n $REAL ]] || echo "carry_real_nccl: no nvidia/nccl/lib/libnccl.so.2 under $SITE" >&2
}

# carry_step_ms LOG: the median step time of the last RESULT line a train_gpt.py run printed (after carry_env).
carry_step_ms() {
  grep -h "^RESULT" "$1" | tail -1 | sed 's/^RESULT //' | $PY -c 'import json,sys; print(json.load(sys.stdin).get("median_step_ms"))'
}

# carry_result_row OUT LABEL LOG [RANKDIR] [THREADS_JSON] [EXTRA_JSON]: appends one JSON row to OUT: LABEL, the run's
# median step time (LOG), its manifest's payload/staging/prefetch counters and payload_compressed_bytes (RANKDIR, a
# trace's rank directory), bench/thread_cpu.py's per-thread CPU (THREADS_JSON) and EXTRA_JSON's fields. Empty
# arguments leave those parts out. Used by results scripts from s22a on (s21b-s21g carry their own copy, as run).
carry_result_row() {
  local extra=${6:-}
  [[ -n $extra ]] || extra='{}'
  $PY - "$2" "$3" "${4:-}" "${5:-}" "$extra" <<'PY' >> "$1"
import json, sys
sys.path.insert(0, "tools/python")
import ranklens_trace as rt
label, log, rank, tc, extra = sys.argv[1:6]
steps = [json.loads(l[7:]) for l in open(log) if l.startswith("RESULT ")]
row = {"label": label, "median_step_ms": steps[-1].get("median_step_ms") if steps else None}
if rank:
    m = rt.parse_manifest(open(rank + "/" + rt.MANIFEST, "rb").read())
    row["counters"] = {k: v for k, v in m.get("counters", {}).items() if "payload" in k or "staging" in k or "prefetch" in k}
    row["payload_compressed_bytes"] = m.get("payload_compressed_bytes")
row["threads"] = json.load(open(tc))["threads"] if tc else None
row.update(json.loads(extra))
print(json.dumps(row))
PY
}

# carry_gpu_tests_and_baseline OUT_JSONL WORKDIR TRAIN_ARGS: the GPU tests against the carried library (into
# $OUT/gpu_tests-$C.txt, one summary line on stdout), then the job alone through torchrun on one GPU (WORKDIR/base.log,
# its median step time on stdout and as the row "baseline" of OUT_JSONL). Used by results scripts from s22h on.
carry_gpu_tests_and_baseline() {
  LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH RANKLENS_DEVICE=cuda timeout 90 .carry/bin/test_cuda_device \
    > "$OUT/gpu_tests-$C.txt" 2>&1
  echo "GPU tests rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/gpu_tests-$C.txt" | tr '\n' ' ')"
  timeout 120 $PY -m torch.distributed.run --standalone --nproc-per-node 1 $3 > "$2/base.log" 2>&1
  echo "baseline rc=$? median_step_ms $(carry_step_ms "$2/base.log")"
  carry_result_row "$1" baseline "$2/base.log"
}

# carry_record OUT_JSONL WORKDIR NAME LIBRARY TRAIN_ARGS EXTRA_JSON [VAR=VALUE...]: records the job on one GPU through
# torchrun with payloads all and LIBRARY (VAR=VALUE... set for it), the recorder's threads sampled: the trace in
# WORKDIR/NAME, its log NAME.log, the samples NAME.tc; one summary line on stdout and the row NAME (with EXTRA_JSON's
# fields) in OUT_JSONL. Used by results scripts from s24b on.
carry_record() {
  local out=$1 w=$2 name=$3 lib=$4 train=$5 extra=$6
  shift 6
  $PY bench/thread_cpu.py --match train_gpt.py --wait 120 > "$w/$name.tc" &
  env "$@" timeout 150 .carry/bin/ranklens record --lib "$lib" --trace "$w/$name" --payloads all -- \
    $PY -m torch.distributed.run --standalone --nproc-per-node 1 $train > "$w/$name.log" 2>&1
  echo "$name rc=$? median_step_ms $(carry_step_ms "$w/$name.log") trace $(du -sh "$w/$name" | cut -f1)"
  wait
  carry_result_row "$out" "$name" "$w/$name.log" "$w/$name/rank0" "$w/$name.tc" "$extra"
}

# carry_stamp OUT_JSONL MACHINE SCRIPT: adds the commit, the time, MACHINE and the command (bash SCRIPT) to every row.
carry_stamp() {
  local command="bash $3"
  sed -i "s|}\$|, \"commit\": \"$C\", \"date\": \"$(date -u +%FT%TZ)\", \"machine\": \"$2\", \"command\": \"$command\"}|" "$1"
}

# carry_value_replay OUT_JSONL WORKDIR NAME LIBRARY TRACE TRAIN_ARGS: replays rank 0 of TRACE at value fidelity with
# LIBRARY through `ranklens replay` (log WORKDIR/NAME.log, its trace WORKDIR/NAME): one summary line on stdout (its
# median step time, the result line, the launcher's warnings) and the row NAME in OUT_JSONL. From s25a on.
carry_value_replay() {
  local out=$1 w=$2 name=$3 lib=$4 trace=$5 train=$6
  timeout 150 .carry/bin/ranklens replay --lib "$lib" --rank 0 --fidelity value --trace "$trace" \
    --trace-dir "$w/$name" -- $PY $train > "$w/$name.log" 2>&1
  echo "$name rc=$? median_step_ms $(carry_step_ms "$w/$name.log") $(grep -E '^result' "$w/$name.log")" \
    "warnings: $(grep -c '^warning' "$w/$name.log")"
  grep -E '^warning' "$w/$name.log" | cut -c1-400
  carry_result_row "$out" "$name" "$w/$name.log" "$w/$name/rank0" "" \
    "{\"warnings\": $(grep -E '^warning' "$w/$name.log" | $PY -c 'import json,sys; print(json.dumps(sys.stdin.read().splitlines()))')}"
}

# carry_steady_ms LOG: the median of train_gpt.py's steps 10 and later in LOG (its "step N loss L time_ms T" lines):
# a full-payload recording's steady state, past the ~10 steps staging and the writer's queue absorb. From s26a on
# (s25b-s25i carry their own copy, as run).
carry_steady_ms() {
  grep -h "step .* time_ms" "$1" | $PY -c '
import re, statistics, sys
ms = [float(m.group(2)) for m in (re.search(r"step (\d+) loss \S+ time_ms (\S+)", l) for l in sys.stdin) if m and int(m.group(1)) >= 10]
print(round(statistics.median(ms), 3) if ms else None)'
}

# carry_record_steady OUT_JSONL WORKDIR NAME LIBRARY TRAIN_ARGS EXTRA_JSON [VAR=VALUE...]: carry_record, then the
# steps 10-29 median as the row's steady_ms (EXTRA_JSON must hold "steady_ms": null), and what `ranklens trace
# summary` and `ranklens record` said of the compression threads and staging; the trace stays in WORKDIR/NAME. For
# results scripts after s26d (s26a-s26d carry their own copy, as run).
carry_record_steady() {
  local out=$1 w=$2 name=$3
  carry_record "$@"
  local s; s=$(carry_steady_ms "$w/$name.log"); echo "$name steady_ms $s"
  sed -i "\$s/\"steady_ms\": null/\"steady_ms\": $s/" "$out"
  .carry/bin/ranklens trace summary "$w/$name/rank0" | grep -E "compression threads"
  sed -n '/^Recorded/,$p' "$w/$name.log"
}
