#!/bin/bash
# Session 17, call G (nvidia-h200-x2): session 16 left peer_pacing's handling of captured calls untested on a GPU (it
# needs a 2-rank recording). examples/torch/graph_allreduce.py (two all-reduces captured into a CUDA graph, launched
# 5 times, plus eager calls) recorded on 2 GPUs, then each rank replayed at timing fidelity with and without
# peer_pacing: recorded. Captured calls must stay unpaced (their graph's later launches would read the chain an earlier
# launch wrote); the replays must complete and match every call.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env
export NCCL_DEBUG=WARN
log=$OUT/graph_peer_pacing-$C.log
cat /tmp/meta.txt > $log
prog=(examples/torch/graph_allreduce.py --launches 5)
d=/tmp/g17g-$RANDOM; rm -rf $d*
timeout 150 .carry/bin/ranklens record --lib .carry/lib/libnccl.so.2 --trace $d -- \
  $PY -m torch.distributed.run --standalone --nproc-per-node 2 "${prog[@]}" >> $log 2>&1
echo "record rc=$?"
.carry/bin/ranklens trace summary $d >> $log 2>&1
for r in 0 1; do
  for pacing in off recorded; do
    echo "== rank $r peer_pacing $pacing" >> $log
    CUDA_VISIBLE_DEVICES=$r RANKLENS_PEER_PACING=$pacing timeout 150 .carry/bin/ranklens replay --lib .carry/lib/libnccl.so.2 \
      --trace $d --rank $r -t $d-replay-$r-$pacing -- $PY "${prog[@]}" > /tmp/rp.out 2>&1
    rc=$?; cat /tmp/rp.out >> $log
    echo "rank $r pacing $pacing rc=$rc $(grep -o 'replay_holds_paced [0-9]*' /tmp/rp.out | head -1) $(grep -E '^Replay of' /tmp/rp.out | cut -c1-160)"
    .carry/bin/ranklens trace summary $d-replay-$r-$pacing 2>/dev/null | grep -o "replay_untimed [0-9]*\|replay_holds [0-9]*\|replay_holds_paced [0-9]*" | tr '\n' ' '; echo
  done
done
