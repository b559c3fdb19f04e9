#!/bin/bash
# Session 25, call E (nvidia-h200, one GPU), about 2 minutes: zstd compressing byte planes of real GPT-2 gradients is
# the largest of full capture's stages (s25d: 8.5 of 16.9 CPU-s). How much of it is the Huffman coding of literals?
# Two gradient buckets of a GPT-2 small DDP recording (comm 0, seq 40 and 60), on one thread, level -1, the planes'
# match finder, literals coded (as the recorder) and stored raw (--literals both).
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/payload_codec_literals-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 8 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s25e-XXXXXX)
{
  RANKLENS_STAGING_FULL=wait timeout 150 .carry/bin/ranklens record --trace $W/t --payloads all -- \
    $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/rec.log 2>&1
  echo "record rc=$?"
  for seq in 40 60; do
    .carry/bin/rlpayload export $W/t/rank0 -c 0 -s $seq -f raw -o $W/g$seq.raw && ls -la $W/g$seq.raw
  done
  .carry/bin/payload_codec_choices $W/g40.raw $W/g60.raw --levels -1 --match-finder planes --literals both --repeats 3 --json \
    | tee -a "$out"
} > "$OUT/s25e-$C.log" 2>&1
cat "$OUT/s25e-$C.log"
carry_stamp "$out" "nvidia-h200 (one H200)" bench/results/scripts/s25e.sh
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s25e-$C.txt"
