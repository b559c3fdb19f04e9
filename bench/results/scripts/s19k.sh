#!/bin/bash
# Session 19, call K (nvidia-h200, not run in session 19: no device time left): what bounds full-payload recording
# (s19g/s19h/s19j: ~1.3 s per step for 0.48 GB of payloads, whatever the zstd level). The disk's write speed (dd to
# /tmp with fdatasync), then GPT-2 small DDP on one GPU recorded with payloads all into /tmp and into /dev/shm
# (memory), with the recording's counters (staging waits, skips, payload bytes).
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 15 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
log=$OUT/record_pace-$C.log
step() { grep -h "^RESULT" "$1" | tail -1 | sed 's/^RESULT //' | $PY -c 'import json,sys; print(json.load(sys.stdin).get("median_step_ms"))'; }
counters() { $PY - "$1" <<'PY'
import sys
sys.path.insert(0, "tools/python")
import ranklens_trace as rt
m = rt.parse_manifest(open(sys.argv[1] + "/" + rt.MANIFEST, "rb").read())
c = m.get("counters", {})
print(" ".join(f"{k}={v}" for k, v in sorted(c.items()) if "payload" in k or "staging" in k), 
      "payload_compressed_bytes=%s" % m.get("payload_compressed_bytes"))
PY
}
{
  echo "dd to /tmp: $(dd if=/dev/zero of=/tmp/s19k-dd bs=1M count=4096 conv=fdatasync 2>&1 | tail -1)"; rm -f /tmp/s19k-dd
  echo "dd to /dev/shm: $(dd if=/dev/zero of=/dev/shm/s19k-dd bs=1M count=4096 conv=fdatasync 2>&1 | tail -1)"
  rm -f /dev/shm/s19k-dd
  for where in /tmp /dev/shm; do
    W=$(mktemp -d $where/s19k-XXXXXX)
    RANKLENS_STAGING_FULL=wait timeout 200 .carry/bin/ranklens record --lib .carry/lib/libnccl.so.2 --trace $W/rec \
      --payloads all -- $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/rec.log 2>&1
    echo "record into $where rc=$? median_step_ms $(step $W/rec.log) trace $(du -sh $W/rec | cut -f1)"
    echo "    $(counters $W/rec/rank0)"
    rm -rf $W
  done
} 2>&1 | tee "$log"
cp /tmp/meta.txt "$OUT/meta_s19k-$C.txt"
