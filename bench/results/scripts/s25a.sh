#!/bin/bash
# Session 25, call A (nvidia-h200, one GPU), about 5 minutes: with every payload stored, does a staging full of
# gradients still keep the control values? GPT-2 small DDP on one GPU with --reduce-loss (a 4-byte all-reduce right
# after each backward pass), payloads all, 256 MiB of staging, staging_full: skip (the default): 8fb4816 (before the
# control reserve) against this commit, alternating, twice; what each kept (bench/control_payloads.py). Then a value
# replay of one such trace (the warnings it must print), and a recording with staging_full: wait value-replayed (none).
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_control_reserve-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --reduce-loss --steps 20 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024 --deterministic"
W=$(mktemp -d /dev/shm/s25a-XXXXXX)
old=.carry/old/8fb4816/libnccl.so.2 new=.carry/lib/libnccl.so.2
{
  carry_gpu_tests_and_baseline "$out" $W "$T"
  for round in 1 2; do
    for lib in 8fb4816 $C; do
      L=$new; [[ $lib == 8fb4816 ]] && L=$old
      name=skip-$lib-$round
      kept=$(mktemp)
      carry_record "$out" $W $name $L "$T" "{\"library\": \"$lib\", \"round\": $round}" RANKLENS_STAGING_BYTES=256MiB
      $PY bench/control_payloads.py $W/$name/rank0 | tee $kept
      # the kept counts on the row just written
      $PY - "$out" "$kept" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rows[-1]["kept"] = json.load(open(sys.argv[2]))
open(sys.argv[1], "w").write("".join(json.dumps(r) + "\n" for r in rows))
PY
      rm -f $kept
      [[ $round == 2 && $lib == "$C" ]] && mv $W/$name $W/skipped || rm -rf $W/$name
    done
  done
  carry_value_replay "$out" $W value-skip $new $W/skipped "$T"
  carry_record "$out" $W wait-$C $new "$T" "{\"library\": \"$C\", \"staging_full\": \"wait\"}" RANKLENS_STAGING_FULL=wait
  $PY bench/control_payloads.py $W/wait-$C/rank0
  carry_value_replay "$out" $W value-wait $new $W/wait-$C "$T"
} > "$OUT/s25a-$C.log" 2>&1
cat "$OUT/s25a-$C.log"
carry_stamp "$out" "nvidia-h200 (one H200)" bench/results/scripts/s25a.sh
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s25a-$C.txt"
