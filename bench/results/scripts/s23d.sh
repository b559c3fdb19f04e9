#!/bin/bash
# Session 23, call D (nvidia-h200, one GPU), about 7 minutes: byte planes with their own zstd match finder (cf40ed0:
# a 64-entry hash table and 7-byte matches at the fast levels) against the library before it (dd7a6a9, carried in
# .carry/old/dd7a6a9, payload_shuffle auto by default), and on the new library payload_shuffle on against auto. GPT-2
# small DDP on one GPU recorded with payloads all (staging_full wait, /dev/shm, 10 steps, the recorder's threads
# sampled), then value-replayed by the same library; 2 rounds, the arms alternating. Then 4 gradient payloads of the
# new library's trace exported raw and measured with payload_codec_choices (both match finders, levels -1 and 1).
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
out=$OUT/record_planes_finder-$C.jsonl; : > "$out"
T="examples/torch/train_gpt.py --parallel ddp --log-all-ranks --mark-steps --steps 10 --micro-batch 16
   --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
W=$(mktemp -d /dev/shm/s23d-XXXXXX)
{
  timeout 120 $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/base.log 2>&1
  echo "baseline rc=$? median_step_ms $(carry_step_ms $W/base.log)"; carry_result_row "$out" baseline $W/base.log
  for round in 1 2; do
    for arm in dd7a6a9:auto $C:on $C:auto; do
      IFS=: read -r lib shuffle <<< "$arm"
      L=.carry/lib/libnccl.so.2; [[ $lib == dd7a6a9 ]] && L=.carry/old/dd7a6a9/libnccl.so.2
      name=rec-$lib-$shuffle-$round
      $PY bench/thread_cpu.py --match train_gpt.py --wait 120 > $W/$name.tc &
      RANKLENS_PAYLOAD_SHUFFLE=$shuffle RANKLENS_STAGING_FULL=wait timeout 150 .carry/bin/ranklens record --lib $L \
        --trace $W/$name --payloads all -- $PY -m torch.distributed.run --standalone --nproc-per-node 1 $T > $W/$name.log 2>&1
      echo "$name rc=$? median_step_ms $(carry_step_ms $W/$name.log) trace $(du -sh $W/$name | cut -f1)"; wait
      carry_result_row "$out" "record, library $lib, payload_shuffle $shuffle, round $round" $W/$name.log \
        $W/$name/rank0 $W/$name.tc "{\"library\": \"$lib\", \"payload_shuffle\": \"$shuffle\", \"round\": $round}"
      rep=rep-$lib-$shuffle-$round
      $PY bench/thread_cpu.py --match train_gpt.py --wait 120 > $W/$rep.tc &
      timeout 120 .carry/bin/ranklens replay --lib $L --rank 0 --fidelity value --trace $W/$name \
        --trace-dir $W/out-$rep -- $PY $T > $W/$rep.log 2>&1
      echo "$rep rc=$? median_step_ms $(carry_step_ms $W/$rep.log) $(grep -E '^result' $W/$rep.log)"; wait
      carry_result_row "$out" "value replay, library $lib, payload_shuffle $shuffle, round $round" $W/$rep.log \
        $W/out-$rep/rank0 $W/$rep.tc "{\"library\": \"$lib\", \"payload_shuffle\": \"$shuffle\", \"round\": $round}"
      rm -rf $W/out-$rep
      [[ $round == 1 && $lib == "$C" && $shuffle == on ]] && mv $W/$name $W/keep || rm -rf $W/$name
    done
  done
  # Real gradients, both match finders: the largest buckets of step 5 (seq 60-63 of the gradient communicator).
  for s in 60 61 62 63; do .carry/bin/rlpayload export $W/keep/rank0 -c 0 -s $s -f raw -o $W/g$s.raw 2>&1 | tail -1; done
  .carry/bin/payload_codec_choices $W/g*.raw --levels -1,1 --repeats 3 --json > "$OUT/payload_codec_planes_finder-$C.jsonl"
  echo "codec rc=$?"; .carry/bin/payload_codec_choices $W/g*.raw --levels -1 --repeats 3 | head -20
} > "$OUT/s23d-$C.log" 2>&1
cat "$OUT/s23d-$C.log"
sed -i "s/}\$/, \"commit\": \"$C\", \"date\": \"$(date -u +%FT%TZ)\", \"machine\": \"nvidia-h200 (one H200)\", \"command\": \"bash bench\/results\/scripts\/s23d.sh\"}/" "$out" "$OUT/payload_codec_planes_finder-$C.jsonl"
rm -rf $W
cp /tmp/meta.txt "$OUT/meta_s23d-$C.txt"
