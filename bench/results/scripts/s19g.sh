#!/bin/bash
# Session 19, call G (nvidia-h200, one GPU): can value replay keep pace with a GPU-bound job whose every gradient
# bucket is a stored payload? GPT-2 small (124M, bf16 autocast) DDP on ONE GPU (a 1-rank job: its all-reduces
# receive what they send, 0.5 GB of fp32 gradients per step, as each rank of a 2-rank job does), micro-batch 16,
# 15 steps: the job without RankLens, recorded with payloads all (staging_full: wait), then replayed at timing
# fidelity and at value fidelity (payload_device_bytes default, and 0: from pinned memory); median step times
# (steps 4-15) and the replay's prefetch counters. S19G_RUNS lists other replays (s19h.sh): value-tN sets
# RANKLENS_PREFETCH_THREADS=N, value-pinned RANKLENS_PAYLOAD_DEVICE_BYTES=0.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 15 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /tmp/s19g-XXXXXX)
L=.carry/lib/libnccl.so.2
R=.carry/bin/ranklens
log=$OUT/value_replay_pace-$C.log
step() { grep -h "^RESULT" "$1" | tail -1 | sed 's/^RESULT //' | $PY -c 'import json,sys; r=json.load(sys.stdin); print(r.get("median_step_ms"))'; }
counters() { $PY - "$1" <<'PY'
import sys
sys.path.insert(0, "tools/python")
import ranklens_trace as rt
c = rt.parse_manifest(open(sys.argv[1] + "/" + rt.MANIFEST, "rb").read()).get("counters", {})
print(" ".join(f"{k}={v}" for k, v in sorted(c.items()) if "prefetch" in k or "payload" in k or "upload" in k))
PY
}
{
  timeout 150 $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/base.log 2>&1
  echo "baseline rc=$? median_step_ms $(step $W/base.log)"
  RANKLENS_STAGING_FULL=wait timeout 200 $R record --lib $L --trace $W/rec --payloads all -- \
    $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/rec.log 2>&1
  echo "record (payloads all) rc=$? median_step_ms $(step $W/rec.log) trace $(du -sh $W/rec | cut -f1)"
  for run in ${S19G_RUNS:-timing value value-pinned}; do
    fid=${run%%-*}; extra=""
    case $run in
      *-pinned) extra="RANKLENS_PAYLOAD_DEVICE_BYTES=0" ;;
      *-t*) extra="RANKLENS_PREFETCH_THREADS=${run##*-t}" ;;
    esac
    env $extra timeout 150 $R replay --lib $L --rank 0 --fidelity $fid --trace $W/rec --trace-dir $W/out-$run -- \
      $PY $T > $W/$run.log 2>&1
    echo "replay $run rc=$? median_step_ms $(step $W/$run.log)"
    grep -E "^Replay of the recording|^Held on" $W/$run.log | sed 's/^/    /'
    echo "    $(counters $W/out-$run/rank0)"
  done
} 2>&1 | tee "$log"
for f in base rec ${S19G_RUNS:-timing value value-pinned}; do echo "===== $f"; tail -n 25 $W/$f.log; done >> "$log"
cp /tmp/meta.txt "$OUT/meta_s19g-$C.txt"
