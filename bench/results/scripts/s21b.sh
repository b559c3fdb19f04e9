#!/bin/bash
# Session 21, call B (nvidia-h200, one GPU), about 5 minutes: s21a found full-payload recording bound by its
# compression threads (the automatic 4 all busy, ~190 MB/s each at zstd level -1 on GPT-2 small DDP's fp32
# gradients). Here, side by side in one call: the job alone, then recorded with payloads all (staging_full wait,
# trace in /dev/shm, 10 steps) with payload_threads 4, 8, 12 at level -1 and 8 at level -5, each with
# bench/thread_cpu.py's per-thread CPU and the manifest's byte counts; then value replays of the 8-thread recordings
# (level -1 and -5) with the automatic 4 decoding threads and with 8.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_full_payload_threads-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 10 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s21b-XXXXXX)
step() { grep -h "^RESULT" "$1" | tail -1 | sed 's/^RESULT //' | $PY -c 'import json,sys; print(json.load(sys.stdin).get("median_step_ms"))'; }
row() {  # label, log, trace rank dir or "", thread json, extra json fields
  $PY - "$@" <<'PY' >> "$out"
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
{
  timeout 120 $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/base.log 2>&1
  echo "baseline rc=$? median_step_ms $(step $W/base.log)"; row baseline $W/base.log "" "" '{}'
  for cfg in 4:-1 8:-1 12:-1 8:-5; do
    t=${cfg%%:*}; l=${cfg##*:}; name=rec-t$t-l$l
    $PY bench/thread_cpu.py --match train_gpt.py --wait 120 > $W/$name.tc &
    RANKLENS_PAYLOAD_THREADS=$t RANKLENS_PAYLOAD_ZSTD_LEVEL=$l RANKLENS_STAGING_FULL=wait timeout 150 \
      .carry/bin/ranklens record --lib .carry/lib/libnccl.so.2 --trace $W/$name --payloads all -- \
      $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/$name.log 2>&1
    echo "$name rc=$? median_step_ms $(step $W/$name.log) trace $(du -sh $W/$name | cut -f1)"; wait
    row "record payload_threads $t level $l" $W/$name.log $W/$name/rank0 $W/$name.tc \
      "{\"payload_threads\": $t, \"zstd_level\": $l}"
  done
  for rec in rec-t8-l-1 rec-t8-l-5; do
    for pt in 4 8; do
      name=rep-$rec-p$pt
      $PY bench/thread_cpu.py --match train_gpt.py --wait 120 > $W/$name.tc &
      RANKLENS_PREFETCH_THREADS=$pt timeout 120 .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 --rank 0 \
        --fidelity value --trace $W/$rec --trace-dir $W/out-$name -- $PY $T > $W/$name.log 2>&1
      echo "$name rc=$? median_step_ms $(step $W/$name.log) $(grep -E '^Replay of the recording' $W/$name.log | cut -c1-120)"
      wait
      row "value replay of $rec, prefetch_threads $pt" $W/$name.log $W/out-$name/rank0 $W/$name.tc \
        "{\"prefetch_threads\": $pt, \"recording\": \"$rec\"}"
    done
  done
  for f in base rec-t4-l-1 rep-rec-t8-l-5-p8; do echo "===== $f"; tail -n 12 $W/$f.log; done
} > "$OUT/s21b-$C.log" 2>&1
cat "$OUT/s21b-$C.log" | head -20
sed -i "s/}\$/, \"commit\": \"$C\", \"date\": \"$(date -u +%FT%TZ)\", \"machine\": \"nvidia-h200 (one H200)\", \"command\": \"bash bench\/results\/scripts\/s21b.sh\"}/" "$out"
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s21b-$C.txt"
