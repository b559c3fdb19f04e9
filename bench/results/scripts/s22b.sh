#!/bin/bash
# Session 22, call B (nvidia-h200, one GPU), about 4 minutes. s22a: payload_shuffle auto recorded at 550 ms per step
# against 284 with planes always and 883 without, the trace 2.37 GB against 2.02 and 2.94: the automatic rule (planes
# only if the first 256 KiB shrink by 5% as they are) left many gradient payloads as they were, though the middle of
# three gradient buckets shrank 30-49% as they are (s21f slices). Why: each 256 KiB block at 0, 1/4, 1/2 and 3/4 of
# every large payload of the first and last recorded step, compressed as it is and as planes at level -1
# (bench/payload_codec_choices, one JSON line per block and layout). Also the first 4 MiB of the first payload whose
# first block does not shrink by 5%, for the dev VM. And value replay pace of a recording with planes always (s22a:
# the auto recording replayed at 69 ms per step with 4 threads, 143 with 8; the one without planes at 184): 4 threads
# twice, 2 and 8 once.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/replay_value_planes-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 10 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s22b-XXXXXX)
{
  RANKLENS_PAYLOAD_SHUFFLE=on RANKLENS_STAGING_FULL=wait timeout 150 .carry/bin/ranklens record \
    --lib .carry/lib/libnccl.so.2 --trace $W/rec --payloads all -- \
    $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/rec.log 2>&1
  echo "record rc=$? median_step_ms $(carry_step_ms $W/rec.log) trace $(du -sh $W/rec | cut -f1)"
  .carry/bin/rlpayload ls $W/rec --json > $W/ls.json
  $PY - $W "$OUT/payload_blocks-$C.jsonl" <<'PY'
import json, subprocess, sys, os
w, dest = sys.argv[1], sys.argv[2]
p = [x for x in json.load(open(w + "/ls.json"))["payloads"] if x["bytes"] >= 4 << 20]
picks = p[:12] + p[-12:]  # about the first and the last step's buckets
B = 256 << 10
exported_head = False
with open(dest, "w") as out:
    for x in picks:
        raw = f"{w}/p.raw"
        subprocess.run([".carry/bin/rlpayload", "export", w + "/rec", "-c", str(x["comm"]), "-s", str(x["seq"]), "-o",
                        raw, "-f", "raw"], check=True, stdout=subprocess.DEVNULL)
        data = open(raw, "rb").read()
        for frac in (0, 0.25, 0.5, 0.75):
            off = int(len(data) * frac) // B * B
            open(f"{w}/b.raw", "wb").write(data[off:off + B])
            r = subprocess.run([".carry/bin/payload_codec_choices", "--json", "--element-bytes", "4", "--levels", "-1",
                                "--repeats", "3", f"{w}/b.raw"], check=True, capture_output=True, text=True)
            for line in r.stdout.splitlines():
                d = json.loads(line)
                d.update(seq=x["seq"], payload_bytes=x["bytes"], dtype=x["dtype"], block_offset=off)
                out.write(json.dumps(d) + "\n")
                if frac == 0 and d["layout"] == "raw" and d["ratio"] < 1 / 0.95 and not exported_head:
                    open(os.environ["OUT"] + f"/payload_head-seq{x['seq']}-{x['dtype']}.raw", "wb").write(data[:4 << 20])
                    exported_head = True
        print("seq", x["seq"], "bytes", x["bytes"], flush=True)
PY
  for pt in 0 8 2 0; do
    name=rep-p$pt-$RANDOM
    RANKLENS_PREFETCH_THREADS=$pt timeout 120 .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 --rank 0 \
      --fidelity value --trace $W/rec --trace-dir $W/out-$name -- $PY $T > $W/$name.log 2>&1
    echo "$name rc=$? median_step_ms $(carry_step_ms $W/$name.log) $(grep -E '^result' $W/$name.log)"
    carry_result_row "$out" "value replay of a recording with payload_shuffle on, prefetch_threads $pt (0: automatic, 4 here)" \
      $W/$name.log $W/out-$name/rank0 "" "{\"prefetch_threads\": $pt}"
  done
} > "$OUT/s22b-$C.log" 2>&1
tail -8 "$OUT/s22b-$C.log"
sed -i "s/}\$/, \"commit\": \"$C\", \"date\": \"$(date -u +%FT%TZ)\", \"machine\": \"nvidia-h200 (one H200)\", \"command\": \"bash bench\/results\/scripts\/s22b.sh\"}/" "$out"
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s22b-$C.txt"
