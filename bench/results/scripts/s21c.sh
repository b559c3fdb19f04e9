#!/bin/bash
# Session 21, call C (nvidia-h200, one GPU), about 4 minutes: s21b found that more compression threads barely sped up
# full-payload recording (4/8/12 threads: 1108/1052/935 ms per step): the writer's queue (a fixed 256 MiB, ~6 of
# GPT-2 small DDP's 39 MB buckets) freed a payload's room only when its whole batch was written. a42502e frees it per
# payload and makes the queue payload_queue_bytes (1 GiB). Side by side in one call, each recorded with payloads all
# (staging_full wait, /dev/shm, 10 steps): the library before (d7936a3, carried in .carry/old/d7936a3) and after
# (a42502e) with the automatic 4 threads and with payload_threads 12, and after with 12 threads at level -5; per-thread
# CPU (bench/thread_cpu.py); then a value replay of the after/4-thread recording (the trace reads back).
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_full_payload_queue-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 10 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s21c-XXXXXX)
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
  for cfg in before:0:-1 after:0:-1 before:12:-1 after:12:-1 after:12:-5; do
    IFS=: read -r lib t l <<< "$cfg"; name=rec-$lib-t$t-l$l
    L=.carry/lib/libnccl.so.2; [[ $lib == before ]] && L=.carry/old/d7936a3/libnccl.so.2
    $PY bench/thread_cpu.py --match train_gpt.py --wait 120 > $W/$name.tc &
    RANKLENS_PAYLOAD_THREADS=$t RANKLENS_PAYLOAD_ZSTD_LEVEL=$l RANKLENS_STAGING_FULL=wait timeout 150 \
      .carry/bin/ranklens record --lib $L --trace $W/$name --payloads all -- \
      $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/$name.log 2>&1
    echo "$name rc=$? median_step_ms $(step $W/$name.log) trace $(du -sh $W/$name | cut -f1)"; wait
    row "record $lib, payload_threads $t (0: automatic, 4 here), level $l" $W/$name.log $W/$name/rank0 $W/$name.tc \
      "{\"library\": \"$lib\", \"payload_threads\": $t, \"zstd_level\": $l}"
  done
  timeout 120 .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 --rank 0 --fidelity value \
    --trace $W/rec-after-t0-l-1 --trace-dir $W/out -- $PY $T > $W/rep.log 2>&1
  echo "value replay of rec-after-t0-l-1 rc=$? median_step_ms $(step $W/rep.log)"
  grep -E '^Replay of the recording|^result' $W/rep.log
  for f in rec-after-t0-l-1 rep; do echo "===== $f"; tail -n 12 $W/$f.log; done
} > "$OUT/s21c-$C.log" 2>&1
head -12 "$OUT/s21c-$C.log"
sed -i "s/}\$/, \"commit\": \"$C\", \"date\": \"$(date -u +%FT%TZ)\", \"machine\": \"nvidia-h200 (one H200)\", \"command\": \"bash bench\/results\/scripts\/s21c.sh\"}/" "$out"
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s21c-$C.txt"
