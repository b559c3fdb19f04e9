#!/bin/bash
# Session 17, call C (nvidia-h200, one GPU): after the estimator's fallback changes (f974838: a negative latency keeps
# the bandwidth; the commit after: fits from calls inside marked steps) and test_reduction_parity's refactor: the
# GPU tests, then s17b.sh's replays without a recording once more (rank 1 of 2, rank 37 of 64) beside the replay of
# the recording.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env
SITE=$($PY -c 'import site; print(site.getsitepackages()[0])')
REAL=$(find "$SITE" -path '*nvidia/nccl/lib/libnccl.so.2' | head -1)
cp /tmp/meta.txt $OUT/meta-$C.txt
for t in test_reduction_parity test_cuda_device; do
  LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH RANKLENS_REAL_NCCL=$REAL RANKLENS_DEVICE=cuda timeout 240 \
    .carry/bin/$t > $OUT/$t-$C.txt 2>&1
  echo "$t rc=$?"; grep -E "compared|PASSED|FAILED" $OUT/$t-$C.txt | head -5
done
D=$OUT/estimated_unrecorded-$C; mkdir -p $D
R=.carry/bin/ranklens; LIB=--lib=.carry/lib/libnccl.so.2
$R history build examples/traces/ddp-2xh200 -o $D/ddp.hist > $D/history.log 2>&1
TRAIN=(examples/torch/train_gpt.py --steps 10 --mark-steps --log-all-ranks)
run() {  # name, launcher arguments...
  local name=$1; shift
  timeout 240 $R replay $LIB -t /tmp/ev-$name "$@" -- $PY "${TRAIN[@]}" > $D/$name.log 2>&1
  echo "$name rc=$? $(grep -o '"median_step_ms": [0-9.]*' $D/$name.log | head -1)"
}
run recorded --trace examples/traces/ddp-2xh200 --rank 1
run estimated --history $D/ddp.hist --rank 1 --world-size 2
run estimated64 --history $D/ddp.hist --rank 37 --world-size 64
grep -h "Replay without a recording\|Replay of the recording\|Held on" $D/*.log
