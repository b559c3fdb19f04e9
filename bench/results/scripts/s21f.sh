#!/bin/bash
# Session 21, call F (nvidia-h200, one GPU), about 1.5 minutes: real gradient bytes to measure compression choices on
# the dev VM (zstd levels, byte shuffling), since zstd on real fp32 gradients (about 200 MB/s per thread compressing,
# 0.8 GB/s decoding) bounds both full-payload recording and value replay. GPT-2 small DDP on one GPU recorded for 4
# steps with payloads all; the last step's all-reduce payloads listed, and 15 MiB slices of three of them (the first,
# a middle and the last bucket of that step) exported raw into $OUT (files back from a call are at most 16 MiB).
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 4 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s21f-XXXXXX)
{
  RANKLENS_STAGING_FULL=wait timeout 150 .carry/bin/ranklens record --lib .carry/lib/libnccl.so.2 --trace $W/rec \
    --payloads all -- $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/rec.log 2>&1
  echo "record rc=$?"
  .carry/bin/rlpayload ls $W/rec --op AllReduce --json > $W/ls.json
  .carry/bin/rlpayload ls $W/rec --op AllReduce | tail -n 14
  $PY - $W <<'PY'
import json, subprocess, sys, os
w = sys.argv[1]
p = [x for x in json.load(open(w + "/ls.json"))["payloads"] if x["bytes"] >= 16 << 20]
last = p[-12:]  # the last step's buckets (about ten per step)
picks = [last[0], last[len(last) // 2], last[-1]]
for i, x in enumerate(picks):
    out = f"{w}/p{i}.raw"
    subprocess.run([".carry/bin/rlpayload", "export", w + "/rec", "-c", str(x["comm"]), "-s", str(x["seq"]), "-o", out,
                    "-f", "raw"], check=True)
    with open(out, "rb") as f:
        f.seek(max(0, (os.path.getsize(out) - (15 << 20)) // 2))
        data = f.read(15 << 20)
    open(os.environ["OUT"] + f"/gradient_slice{i}-seq{x['seq']}-{x['dtype']}.raw", "wb").write(data)
    print("exported", x)
PY
} 2>&1 | tee $OUT/s21f-$C.log
rm -rf $W
