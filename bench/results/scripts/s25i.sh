#!/bin/bash
# Session 25, call I (nvidia-h200, one GPU), about 2 minutes: s25h found the compression threads busy only about half
# the time they had payloads while the job waited for staging: what holds payloads between staging and them? The
# 30-step GPT-2 small DDP job, payloads all, staging_full wait: the defaults, payload_queue_bytes 4 GiB (1 GiB), and
# timing_poll_us 200 (2000: how often the background thread hands finished copies on); steady_ms: steps 10-29.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_handover-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 30 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s25i-XXXXXX)
steady() { grep -h "step .* time_ms" "$1" | $PY -c '
import re, statistics, sys
ms = [float(m.group(2)) for m in (re.search(r"step (\d+) loss \S+ time_ms (\S+)", l) for l in sys.stdin) if m and int(m.group(1)) >= 10]
print(round(statistics.median(ms), 3) if ms else None)'; }
{
  for arm in default queue4g poll200; do
    vars=(RANKLENS_STAGING_FULL=wait)
    [[ $arm == queue4g ]] && vars+=(RANKLENS_PAYLOAD_QUEUE_BYTES=4GiB)
    [[ $arm == poll200 ]] && vars+=(RANKLENS_TIMING_POLL_US=200)
    carry_record "$out" $W $arm .carry/lib/libnccl.so.2 "$T" "{\"arm\": \"$arm\", \"steady_ms\": null}" "${vars[@]}"
    s=$(steady $W/$arm.log); echo "$arm steady_ms $s"
    sed -i "\$s/\"steady_ms\": null/\"steady_ms\": $s/" "$out"
    .carry/bin/ranklens trace summary $W/$arm/rank0 | grep -E "compression threads"
    grep -E "waited" $W/$arm.log
    rm -rf $W/$arm
  done
} > "$OUT/s25i-$C.log" 2>&1
cat "$OUT/s25i-$C.log"
carry_stamp "$out" "nvidia-h200 (one H200)" bench/results/scripts/s25i.sh
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s25i-$C.txt"
