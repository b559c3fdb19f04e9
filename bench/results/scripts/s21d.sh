#!/bin/bash
# Session 21, call D (nvidia-h200, one GPU), about 4 minutes: after bf92e3e (the writer frees a payload's room per
# payload) full-payload recording ran 562 ms per step with 4 compression threads and 387 ms with 12 (the job: 52 ms),
# and then the background thread ("RankLens Poll"), copying every payload out of staging, was the busy one. 6e88dfe
# compresses payloads in place in staging instead. Side by side in one call, GPT-2 small DDP recorded with payloads
# all (staging_full wait, /dev/shm, 10 steps): before (bf92e3e, .carry/old/bf92e3e) and after (6e88dfe) with the
# automatic 4 threads and with payload_threads 12 (staging 256 MiB), and after with 12 threads and 1 GiB of staging at
# levels -1 and -5; per-thread CPU; a value replay of one recording (the trace reads back); the GPU tests (their
# recorder sinks changed).
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_full_payload_inplace-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 10 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s21d-XXXXXX)
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
  for cfg in before:0:-1:256MiB after:0:-1:256MiB before:12:-1:256MiB after:12:-1:256MiB after:12:-1:1GiB \
             after:12:-5:1GiB; do
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
    --trace $W/rec-after-t12-l-1-1GiB --trace-dir $W/out -- $PY $T > $W/rep.log 2>&1
  echo "value replay of rec-after-t12-l-1-1GiB rc=$? median_step_ms $(step $W/rep.log)"
  grep -E '^Replay of the recording|^result' $W/rep.log
  for f in rec-after-t12-l-1-1GiB rep; do echo "===== $f"; tail -n 12 $W/$f.log; done
} > "$OUT/s21d-$C.log" 2>&1
head -14 "$OUT/s21d-$C.log"
sed -i "s/}\$/, \"commit\": \"$C\", \"date\": \"$(date -u +%FT%TZ)\", \"machine\": \"nvidia-h200 (one H200)\", \"command\": \"bash bench\/results\/scripts\/s21d.sh\"}/" "$out"
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s21d-$C.txt"
