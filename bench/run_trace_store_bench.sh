#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds and runs trace_store_bench (release preset) and writes bench/results/trace_store_bench.json: the Google
# Benchmark JSON (medians, means, stddev and cv of REPS repetitions) plus a top-level "ranklens" object with commit,
# dirty state, date, device, command lines, load average and a summary of medians and ratios.
#
#   bench/run_trace_store_bench.sh                       # everything, 7 repetitions (about 2.5 minutes on the 2-core dev VM)
#   REPS=9 bench/run_trace_store_bench.sh                # more repetitions
#   bench/run_trace_store_bench.sh --benchmark_filter=meta   # extra flags go to the benchmark binary
#   OUT=/tmp/x.json bench/run_trace_store_bench.sh       # write elsewhere
#   WAIT_IDLE_S=0 bench/run_trace_store_bench.sh         # do not wait for idle CPUs first (default: up to 600 s)
#   BIN=/tmp/old/trace_store_bench LIBRARY_COMMIT=abc1234 bench/run_trace_store_bench.sh
#                                                        # another build of the benchmark (e.g. an older commit's,
#                                                        # for a before/after): not rebuilt; the JSON names the
#                                                        # checkout's commit and, apart, LIBRARY_COMMIT it was built at
#
# On a shared machine other processes distort the numbers. The script waits (up to WAIT_IDLE_S) until the CPUs are
# at most 10% busy over 3 s, and records how much CPU time other processes used during the run
# (ranklens.contention); compare it with the run's wall time x cores before trusting a result.
# Scratch traces go to $TMPDIR (default /tmp); keep it on the same filesystem as the results for comparable numbers.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SCRIPT_COMMAND="bench/run_trace_store_bench.sh"
(($#)) && SCRIPT_COMMAND+="$(printf ' %q' "$@")"
for var in WAIT_IDLE_S OUT REPS TMPDIR BIN LIBRARY_COMMIT; do  # the settings given, as they were given
  if [[ -n "${!var+x}" ]]; then SCRIPT_COMMAND="$var=$(printf '%q' "${!var}") $SCRIPT_COMMAND"; fi
done
REPS="${REPS:-7}"
OUT="${OUT:-bench/results/trace_store_bench.json}"

BIN_GIVEN="${BIN:-}"
if [[ -z "${BIN:-}" ]]; then
  cmake --preset release >/dev/null
  cmake --build --preset release --target trace_store_bench
  BIN=build/release/bench/trace_store_bench
fi
[[ -x "$BIN" ]] || { echo "run_trace_store_bench.sh: $BIN was not built (is libbenchmark-dev installed?)" >&2; exit 1; }

SCRATCH="${TMPDIR:-/tmp}"
mkdir -p "$(dirname "$OUT")"
if [[ "$(stat -c %d "$SCRATCH")" != "$(stat -c %d "$(dirname "$OUT")")" ]]; then
  echo "run_trace_store_bench.sh: warning: $SCRATCH is not on the filesystem of $(dirname "$OUT")" >&2
fi
# Busy and total jiffies of all CPUs (from /proc/stat).
cpu_jiffies() {
  local _ u n s i w q sq st
  read -r _ u n s i w q sq st _ < /proc/stat
  echo "$((u + n + s + q + sq + st)) $((u + n + s + i + w + q + sq + st))"
}
busy_pct_over_3s() {
  local b1 t1 b2 t2
  read -r b1 t1 <<<"$(cpu_jiffies)"
  sleep 3
  read -r b2 t2 <<<"$(cpu_jiffies)"
  echo $((100 * (b2 - b1) / (t2 - t1 > 0 ? t2 - t1 : 1)))
}
WAIT_IDLE_S="${WAIT_IDLE_S:-600}"
deadline=$((SECONDS + WAIT_IDLE_S))
BUSY_BEFORE="$(busy_pct_over_3s)"
while ((BUSY_BEFORE > 10 && SECONDS < deadline)); do
  echo "run_trace_store_bench.sh: CPUs ${BUSY_BEFORE}% busy; waiting for them to idle (WAIT_IDLE_S=$WAIT_IDLE_S)" >&2
  sleep 7
  BUSY_BEFORE="$(busy_pct_over_3s)"
done

RAW="$(mktemp "${SCRATCH}/trace_store_bench.XXXXXX.json")"
CPU_FILE="$(mktemp "${SCRATCH}/trace_store_bench.XXXXXX.cpu")"
trap 'rm -f "$RAW" "$CPU_FILE"' EXIT

# Repetitions of all benchmarks are interleaved in random order, so that a burst of load from another process hits a
# few repetitions of many benchmarks (the medians survive it) rather than every repetition of one.
BENCH_CMD=("$BIN" "--benchmark_repetitions=$REPS" --benchmark_enable_random_interleaving=true
           --benchmark_report_aggregates_only=true
           "--benchmark_out=$RAW" --benchmark_out_format=json "$@")
LOAD_BEFORE="$(cat /proc/loadavg)"
START="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
read -r BUSY_J0 _ <<<"$(cpu_jiffies)"
# Run through python3 to learn the benchmark's own CPU time (user + system, all its threads).
python3 -c 'import resource, subprocess, sys
rc = subprocess.run(sys.argv[2:]).returncode
r = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write(f"{r.ru_utime + r.ru_stime}\n")
sys.exit(rc)' "$CPU_FILE" "${BENCH_CMD[@]}"
read -r BUSY_J1 _ <<<"$(cpu_jiffies)"
END="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
LOAD_AFTER="$(cat /proc/loadavg)"

export RL_RAW="$RAW" RL_OUT="$OUT" RL_START="$START" RL_END="$END" RL_LOAD_BEFORE="$LOAD_BEFORE" \
       RL_LOAD_AFTER="$LOAD_AFTER" RL_BUSY_BEFORE="$BUSY_BEFORE" RL_BUSY_JIFFIES="$((BUSY_J1 - BUSY_J0))" \
       RL_CLK_TCK="$(getconf CLK_TCK)" RL_BENCH_CPU_S="$(cat "$CPU_FILE")" RL_SCRIPT_COMMAND="$SCRIPT_COMMAND" RL_SCRATCH="$SCRATCH" \
       RL_GIVEN_BIN="${BIN_GIVEN:-}" RL_LIBRARY_COMMIT="${LIBRARY_COMMIT:-}" \
       RL_BENCH_COMMAND="$(printf '%q ' "${BENCH_CMD[@]}" | sed "s|$RAW|<tmp>.json|")"
python3 - <<'PY'
import json, os, re, subprocess

def sh(*args, strip=True):
    try:
        out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
        return out.strip() if strip else out.rstrip("\n")
    except (OSError, subprocess.CalledProcessError):
        return None

env = os.environ
with open(env["RL_RAW"]) as f:
    bench = json.load(f)

# Medians (and cv) by clean name: "payload/write/f32/64KiB/level:1/threads:1/min_time:0.250/real_time" ->
# "payload/write/f32/64KiB/level:1/threads:1".
def clean(name):
    return re.sub(r"(/(min_time|iterations):[^/]+|/real_time)+$", "", name)

median, cv = {}, {}
for b in bench["benchmarks"]:
    if b.get("run_type") != "aggregate":
        continue
    key = clean(b["run_name"])
    if b["aggregate_name"] == "median":
        median[key] = b
    elif b["aggregate_name"] == "cv":
        cv[key] = b

def m(key, field):
    b = median.get(key)
    return None if b is None or field not in b else b[field]

def c(key, field):  # coefficient of variation across repetitions, percent
    b = cv.get(key)
    return None if b is None or field not in b else round(100 * b[field], 1)

def r(x, digits=3):
    return None if x is None else float(f"{x:.{digits}g}")

def ratio(a, b):
    return None if a is None or b is None or b == 0 else r(a / b)

summary = {}
meta = []
for key in ["meta/pack_only", "meta/append", "meta/append_flush/batch:16", "meta/append_flush/batch:256",
            "meta/append_flush/batch:4096"]:
    if key not in median:
        continue
    meta.append({"benchmark": key, "records_per_s": r(m(key, "records_per_s")),
                 "ns_per_record": r(m(key, "real_time")) if key in ("meta/pack_only", "meta/append") else
                 r(1e9 / m(key, "records_per_s")),
                 "cv_pct": c(key, "records_per_s"), "others_cpu_pct": r(m(key, "others_cpu_pct"), 2),
                 "allocs_per_record": r(m(key, "allocs_per_record") or m(key, "allocs_per_append")),
                 "ctx_switches_per_record": r(m(key, "ctx_switches_per_record")),
                 "close_ms": r(m(key, "close_ms"))})
summary["metadata_write"] = meta
summary["metadata_ratios"] = {
    "append_ns_over_pack_only_ns": ratio(m("meta/append", "real_time"), m("meta/pack_only", "real_time")),
    "append_only_over_append_flush_batch16_records_per_s":
        ratio(m("meta/append", "records_per_s"), m("meta/append_flush/batch:16", "records_per_s")),
}

dtypes, sizes, levels = ["f32", "bf16"], ["64KiB", "4MiB"], [1, 3]
rows = []
for d in dtypes:
    for s in sizes:
        for l in levels:
            base = f"{d}/{s}/level:{l}"
            t1, t2 = f"payload/write/{base}/threads:1", f"payload/write/{base}/threads:2"
            fresh, reused = f"zstd/compress/{base}/ctx:fresh", f"zstd/compress/{base}/ctx:reused"
            if t1 not in median and t2 not in median:
                continue
            rows.append({"data": base,
                         "write_MB_per_s_threads1": r(m(t1, "MB_per_s")), "cv_pct_threads1": c(t1, "MB_per_s"),
                         "write_MB_per_s_threads2": r(m(t2, "MB_per_s")), "cv_pct_threads2": c(t2, "MB_per_s"),
                         "others_cpu_pct_threads1": r(m(t1, "others_cpu_pct"), 2),
                         "others_cpu_pct_threads2": r(m(t2, "others_cpu_pct"), 2),
                         "speedup_threads2_over_1": ratio(m(t2, "MB_per_s"), m(t1, "MB_per_s")),
                         "compression_ratio": r(m(t1, "ratio") or m(t2, "ratio"), 4),
                         "caller_us_per_payload_threads1": r(m(t1, "caller_us_per_payload")),
                         "caller_allocs_per_payload": r(m(t1, "caller_allocs_per_payload")),
                         "zstd_1thread_fresh_ctx_MB_per_s": r(m(fresh, "MB_per_s")),
                         "zstd_1thread_reused_ctx_MB_per_s": r(m(reused, "MB_per_s")),
                         "others_cpu_pct_zstd": r(max(m(fresh, "others_cpu_pct") or 0, m(reused, "others_cpu_pct") or 0), 2),
                         "reused_over_fresh_ctx": ratio(m(reused, "MB_per_s"), m(fresh, "MB_per_s")),
                         "writer_threads1_over_zstd_reused": ratio(m(t1, "MB_per_s"), m(reused, "MB_per_s"))})
summary["payload_write"] = rows

summary["crc32_MB_per_s"] = {d: r(m(f"crc32/{d}/8MiB", "MB_per_s")) for d in dtypes if f"crc32/{d}/8MiB" in median}
summary["others_cpu_pct_note"] = ("others_cpu_pct: median share of the machine's CPU time that other processes used "
                                  "while the benchmark's loop ran (0 = idle machine apart from the benchmark)")

scan = []
for key in ["read/scan/count", "read/scan/decode_call"]:
    if key in median:
        scan.append({"benchmark": key, "records_per_s": r(m(key, "records_per_s")), "cv_pct": c(key, "records_per_s"),
                     "others_cpu_pct": r(m(key, "others_cpu_pct"), 2),
                     "ns_per_record": r(1e9 / m(key, "records_per_s")),
                     "allocs_per_record": r(m(key, "allocs_per_record"))})
summary["read_scan"] = scan

rows = []
for d in dtypes:
    for s in sizes:
        for l in levels:
            base = f"{d}/{s}/level:{l}"
            rp, dm, zd = f"read/payload/{base}", f"read/decode_in_memory/{base}", f"zstd/decompress/{base}"
            if rp not in median:
                continue
            rows.append({"data": base, "readPayload_MB_per_s": r(m(rp, "MB_per_s")), "cv_pct": c(rp, "MB_per_s"),
                         "others_cpu_pct": r(max(m(k, "others_cpu_pct") or 0 for k in (rp, dm, zd)), 2),
                         "decodePayload_in_memory_MB_per_s": r(m(dm, "MB_per_s")),
                         "zstd_reused_dctx_MB_per_s": r(m(zd, "MB_per_s")),
                         "readPayload_over_zstd_reused": ratio(m(rp, "MB_per_s"), m(zd, "MB_per_s")),
                         "readPayload_allocs_per_payload": r(m(rp, "allocs_per_payload"))})
summary["read_payload"] = rows

# Single-threaded baselines: wall time / CPU time near 1.0 means nothing else took their core.
single = [b for k, b in median.items() if k.startswith(("zstd/", "crc32/", "meta/pack_only"))]
wall_over_cpu = sorted(b["real_time"] / b["cpu_time"] for b in single if b.get("cpu_time"))
from datetime import datetime
wall_s = (datetime.fromisoformat(env["RL_END"].replace("Z", "+00:00")) -
          datetime.fromisoformat(env["RL_START"].replace("Z", "+00:00"))).total_seconds()
all_busy_s = int(env["RL_BUSY_JIFFIES"]) / int(env["RL_CLK_TCK"])
bench_cpu_s = float(env["RL_BENCH_CPU_S"])
contention = {
    "cpus_busy_pct_before_start": int(env["RL_BUSY_BEFORE"]),
    "run_wall_s": wall_s,
    "benchmark_cpu_s": round(bench_cpu_s, 1),
    "other_processes_cpu_s": round(max(0.0, all_busy_s - bench_cpu_s), 1),
    "other_processes_share_of_capacity_pct": round(100 * max(0.0, all_busy_s - bench_cpu_s) /
                                                   (wall_s * os.cpu_count()), 1) if wall_s else None,
    "single_thread_baselines_wall_over_cpu_median": r(wall_over_cpu[len(wall_over_cpu) // 2]) if wall_over_cpu
                                                    else None,
    "single_thread_baselines_wall_over_cpu_max": r(wall_over_cpu[-1]) if wall_over_cpu else None,
}

cpu_model, cores = None, 0
with open("/proc/cpuinfo") as f:
    for line in f:
        if line.startswith("model name") and cpu_model is None:
            cpu_model = line.split(":", 1)[1].strip()
        if line.startswith("processor"):
            cores += 1
mem_kib = None
with open("/proc/meminfo") as f:
    for line in f:
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
dirty_files = (sh("git", "status", "--porcelain", "--untracked-files=all", strip=False) or "").splitlines()
# The code measured: payload/ (writer, reader, format) and this benchmark. Other edits in the tree do not matter here.
payload_dirty = [line for line in dirty_files if line[3:].startswith("payload/")]
bench["ranklens"] = {
    "benchmark": "trace_store_bench",
    "commit": sh("git", "rev-parse", "HEAD"),
    "dirty": bool(dirty_files),
    "dirty_note": "numbers come from the working tree, which differs from the commit in these paths"
                  if dirty_files else None,
    "dirty_files": dirty_files,
    "payload_dirty_files": payload_dirty,
    "date": env["RL_START"],
    "finished": env["RL_END"],
    "device": {
        "description": f"2-core dev VM (no GPU): {cpu_model}, {cores} cores" if cores == 2
                       else f"{cpu_model}, {cores} cores",
        "cpu_model": cpu_model, "cores": cores,
        "memory_GiB": round(mem_kib / 2**20, 1) if mem_kib else None,
        "kernel": sh("uname", "-r"),
        "scratch_dir": env["RL_SCRATCH"],
        "scratch_filesystem": sh("df", "--output=fstype", env["RL_SCRATCH"]).splitlines()[-1].strip()
        if sh("df", "--output=fstype", env["RL_SCRATCH"]) else None,
    },
    "contention": contention,
    "load_average_before": env["RL_LOAD_BEFORE"],
    "load_average_after": env["RL_LOAD_AFTER"],
    "command": env["RL_SCRIPT_COMMAND"],
    "benchmark_command": env["RL_BENCH_COMMAND"].strip(),
    "build": ("given: " + env["RL_GIVEN_BIN"] + " (not built by this script)") if env.get("RL_GIVEN_BIN") else
             "cmake --preset release (RelWithDebInfo); cmake --build --preset release --target trace_store_bench",
    "library_commit": env.get("RL_LIBRARY_COMMIT") or None,
    "units": "MB = 1e6 bytes of raw (uncompressed) payload; times are wall clock (UseRealTime); every value in "
             "summary is the median over the repetitions; cv_pct = stddev/mean across repetitions, percent; "
             "others_cpu_pct = CPU share other processes took during the loop (median)",
    "summary": summary,
}
def finite(x):  # Google Benchmark writes NaN for the cv of all-zero counters; JSON has no NaN
    if isinstance(x, float) and x != x or x in (float("inf"), float("-inf")):
        return None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [finite(v) for v in x]
    return x

bench = finite(bench)
with open(env["RL_OUT"], "w") as f:
    json.dump(bench, f, indent=1, allow_nan=False)
    f.write("\n")

def table(rows):
    if not rows:
        return
    cols = list(rows[0])
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join("" if row[k] is None else str(row[k]) for k in cols) + " |")
    print()

print(f"\nwrote {env['RL_OUT']}\n")
for name in ["metadata_write", "payload_write", "read_scan", "read_payload"]:
    print(f"### {name}\n")
    table(summary[name])
print("metadata_ratios:", json.dumps(summary["metadata_ratios"]))
print("crc32_MB_per_s:", json.dumps(summary["crc32_MB_per_s"]))
print("contention:", json.dumps(contention))
PY
