#!/bin/bash
# Session 19, call B (nvidia-h200, one GPU): s19a again with a stand-in for NCCL's kernel before every call
# (record_host_overhead --nccl-like-ns 5000: a one-block kernel of 5 us on the call's stream, which a call of several
# ranks would launch and a 1-rank call does not): does the copy kernel take the SM slot that kernel frees (high
# priority), or wait behind the busy stream's pending blocks? Busy blocks of 20 and 200 us, both shapes, and no
# busy stream; copy kernel at high and at the stream's priority, copy engine, no payloads. The first attempt (ae357b6,
# 3 rounds) ran out of time: without a busy stream the stand-in's first launch loaded its module behind the closed
# gate and hung until the per-run limit. Its 12 lines (round 1, busy shapes) are kept; this runs 2 rounds, 200 us
# blocks for the threads shape only.
# S19B_SHAPES, S19B_ROUNDS and S19B_LONG (0: no 200 us blocks) narrow it (s19c.sh).
set -u
cd "$(dirname "$0")/../../.."
shapes=${S19B_SHAPES:-none shared threads}
rounds=${S19B_ROUNDS:-1 2}
long=${S19B_LONG:-1}
traces=$(mktemp -d /tmp/s19b-XXXXXX)  # a fresh trace directory per run, also on a machine that ran this before
source bench/carry_setup.sh; carry_env; carry_real_nccl
lib=.carry/lib/libnccl.so.2
out=$OUT/record_copy_contended_nccl_like-$C.jsonl
way_env() {
  case $1 in
    high) echo "RANKLENS_PAYLOAD_COPY_PRIORITY=high RANKLENS_PAYLOAD_COPY_KERNEL_BYTES=64KiB" ;;
    stream) echo "RANKLENS_PAYLOAD_COPY_PRIORITY=stream RANKLENS_PAYLOAD_COPY_KERNEL_BYTES=64KiB" ;;
    engine) echo "RANKLENS_PAYLOAD_COPY_PRIORITY=high RANKLENS_PAYLOAD_COPY_KERNEL_BYTES=0" ;;
  esac
}
n=0
run() {
  local kind=$1 way=$2 round=$3; shift 3
  local payloads=small; [[ $way == none ]] && payloads=none
  n=$((n + 1))
  line=$(env $(way_env $way) timeout 40 .carry/bin/record_host_overhead --real "$REAL" --ranklens $lib \
           --payloads $payloads --trace-dir $traces/$n --json "$@") \
    && echo "{\"kind\": \"$kind\", \"way\": \"$way\", \"round\": $round, ${line#\{}" >> "$out" \
    || { echo "$kind $way round $round failed: $*"; return 1; }
}
for round in $rounds; do
  ways="high stream engine none"; [[ $((round % 2)) == 0 ]] && ways="none engine stream high"
  for way in $ways; do
    for shape in $shapes; do
      [[ $shape == none && -n ${skip_none:-} ]] && continue
      run nccl_like $way $round --calls 2000 --batch 100 --contended $shape --busy-ns 20000 --nccl-like-ns 5000 \
        || { [[ $shape == none ]] && skip_none=1; }
    done
    [[ $long == 1 ]] && run nccl_like_long $way $round --calls 1000 --batch 50 --contended threads --busy-ns 200000 --nccl-like-ns 5000
  done
done
python3 - "$out" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
for kind, shapes in (("nccl_like", ("none", "shared", "threads")), ("nccl_like_long", ("threads",))):
    for shape in shapes:
        cells = []
        for way in ("high", "stream", "engine", "none"):
            sel = [r for r in rows if r["kind"] == kind and r["way"] == way and r["contended"] == shape]
            if sel:
                cells.append("%s real %.0f added %.0f ns (n=%d)" % (way, statistics.median(r["gpu_ns_per_call_real"] for r in sel),
                             statistics.median(r["gpu_added_ns"] for r in sel), len(sel)))
        print(kind, shape, "|", "; ".join(cells))
PY
cp /tmp/meta.txt "$OUT/meta_s19b-$C.txt"
