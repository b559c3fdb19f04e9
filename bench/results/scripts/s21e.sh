#!/bin/bash
# Session 21, call E (nvidia-h200, one GPU), about 3 minutes: compressing payloads in place in staging was slower
# (s21d; reverted in cbe7fff), so the background thread still copies each payload out of staging, and 0938b9b makes
# that copy reuse buffers kept from payloads already compressed (a fresh 39 MB vector is a fresh mmap to fault in).
# Side by side in one call, GPT-2 small DDP recorded with payloads all (staging_full wait, /dev/shm, 10 steps, 256 MiB
# of staging): before (bf92e3e, .carry/old/bf92e3e) and after (0938b9b) with the automatic 4 threads and with
# payload_threads 12, and after with 12 threads at level -5; per-thread CPU; a value replay of one recording.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_full_payload_reuse-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 10 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s21e-XXXXXX)
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
  LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH RANKLENS_DEVICE=cuda timeout 90 .carry/bin/test_cuda_device \
    > "$OUT/gpu_tests-$C.txt" 2>&1
  echo "GPU tests rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/gpu_tests-$C.txt" | tr '\n' ' ')"
  timeout 120 $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/base.log 2>&1
  echo "baseline rc=$? median_step_ms $(step $W/base.log)"; row baseline $W/base.log "" "" '{}'
  for cfg in before:0:-1:256MiB after:0:-1:256MiB before:12:-1:256MiB after:12:-1:256MiB after:12:-5:256MiB; do
    IFS=: read -r lib t l sb <<< "$cfg"; name=rec-$lib-t$t-l$l-$sb
    L=.carry/lib/libnccl.so.2; [[ $lib == before ]] && L=.carry/old/bf92e3e/libnccl.so.2
    $PY bench/thread_cpu.py --match train_gpt.py --wait 120 > $W/$name.tc &
    RANKLENS_PAYLOAD_THREADS=$t RANKLENS_PAYLOAD_ZSTD_LEVEL=$l RANKLENS_STAGING_BYTES=$sb RANKLENS_STAGING_FULL=wait \
      timeout 150 .carry/bin/ranklens record --lib $L --trace $W/$name --payloads all -- \
      $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/$name.log 2>&1
    echo "$name rc=$? median_step_ms $(step $W/$name.log) trace $(du -sh $W/$name | cut -f1)"; wait
    row "record $lib, payload_threads $t (0: automatic, 4 here), level $l, staging $sb" $W/$name.log $W/$name/rank0 \
      $W/$name.tc "{\"library\": \"$lib\", \"payload_threads\": $t, \"zstd_level\": $l, \"staging_bytes\": \"$sb\"}"
  done
  timeout 120 .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 --rank 0 --fidelity value \
    --trace $W/rec-after-t12-l-1-256MiB --trace-dir $W/out -- $PY $T > $W/rep.log 2>&1
  echo "value replay of rec-after-t12-l-1-256MiB rc=$? median_step_ms $(step $W/rep.log)"
  grep -E '^Replay of the recording|^result' $W/rep.log
  for f in rec-after-t12-l-1-256MiB rep; do echo "===== $f"; tail -n 12 $W/$f.log; done
} > "$OUT/s21e-$C.log" 2>&1
head -14 "$OUT/s21e-$C.log"
sed -i "s/}\$/, \"commit\": \"$C\", \"date\": \"$(date -u +%FT%TZ)\", \"machine\": \"nvidia-h200 (one H200)\", \"command\": \"bash bench\/results\/scripts\/s21e.sh\"}/" "$out"
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s21e-$C.txt"
