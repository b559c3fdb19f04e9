#!/bin/bash
# Session 17, call B (nvidia-h200, one GPU): 1) test_reduction_parity again after the fp8 one-rank refusal (37d4fb9)
# and the GPU tests; 2) replay without a recording (5deaa31): train_gpt.py DDP as rank 1 of 2 with every call held
# for its estimate from a history of examples/traces/ddp-2xh200 (the same job's recording: not held out), beside the
# replay of that recording and a structure replay; then rank 37 of 64 (extrapolated) and its structure replay.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env
SITE=$($PY -c 'import site; print(site.getsitepackages()[0])')
REAL=$(find "$SITE" -path '*nvidia/nccl/lib/libnccl.so.2' | head -1)
cp /tmp/meta.txt $OUT/meta-$C.txt
LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH RANKLENS_REAL_NCCL=$REAL RANKLENS_DEVICE=cuda timeout 240 \
  .carry/bin/test_reduction_parity > $OUT/reduction_parity-$C.txt 2>&1
echo "reduction parity rc=$?"; grep -E "compared|PASSED|FAILED" $OUT/reduction_parity-$C.txt | head
LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH RANKLENS_DEVICE=cuda timeout 200 .carry/bin/test_cuda_device \
  > $OUT/gpu_tests-$C.txt 2>&1
echo "gpu tests rc=$?"; tail -1 $OUT/gpu_tests-$C.txt

D=$OUT/estimated_unrecorded-$C; mkdir -p $D
R=.carry/bin/ranklens; LIB=--lib=.carry/lib/libnccl.so.2
$R history build examples/traces/ddp-2xh200 -o $D/ddp.hist > $D/history.log 2>&1
TRAIN=(examples/torch/train_gpt.py --steps 10 --mark-steps --log-all-ranks)
run() {  # name, launcher arguments...
  local name=$1; shift
  timeout 240 $R replay $LIB -t $D/$name "$@" -- $PY "${TRAIN[@]}" > $D/$name.log 2>&1
  echo "$name rc=$? $(grep -o '"median_step_ms": [0-9.]*' $D/$name.log | head -1)"
}
for round in 1 2; do
  run recorded-r$round --trace examples/traces/ddp-2xh200 --rank 1
  run estimated-r$round --history $D/ddp.hist --rank 1 --world-size 2
  run structure-r$round --rank 1 --world-size 2
done
run estimated64 --history $D/ddp.hist --rank 37 --world-size 64
run structure64 --rank 37 --world-size 64
grep -h "Replay without a recording\|Replay of the recording\|Held on\|step time\|Step time" $D/*.log | head -20
