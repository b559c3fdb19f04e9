#!/bin/bash
# Session 17, call A (nvidia-h200, one GPU): clone reductions (a sum over N ranks is N x this rank's data; PreMulSum
# applies its scalar) on the GPU. 1) the CUDA device's reduction kernel against the host device, bit for bit, and
# one-rank reductions against the real NCCL (every operator and datatype); 2) the GPU tests; 3) structure replay of
# DDP as rank 0 of 64 and of 48 (train_gpt.py, deterministic, 10 steps) against the same script without DDP
# (--parallel none: rank 0's data), with this build and with the previous commit's library (.carry/lib-old).
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env
SITE=$($PY -c 'import site; print(site.getsitepackages()[0])')
REAL=$(find "$SITE" -path '*nvidia/nccl/lib/libnccl.so.2' | head -1)
cp /tmp/meta.txt $OUT/meta-$C.txt
LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH RANKLENS_REAL_NCCL=$REAL RANKLENS_DEVICE=cuda timeout 240 \
  .carry/bin/test_reduction_parity > $OUT/reduction_parity-$C.txt 2>&1
echo "reduction parity rc=$?"; tail -3 $OUT/reduction_parity-$C.txt; grep -E "FAILED|Failure|element" $OUT/reduction_parity-$C.txt | head -20
LD_LIBRARY_PATH=$PWD/.carry/lib:$LD_LIBRARY_PATH RANKLENS_DEVICE=cuda timeout 200 .carry/bin/test_cuda_device \
  > $OUT/gpu_tests-$C.txt 2>&1
echo "gpu tests rc=$?"; tail -1 $OUT/gpu_tests-$C.txt; grep -E "FAILED" $OUT/gpu_tests-$C.txt | head

ARGS=(--deterministic --steps 10 --no-autocast)
D=$OUT/solo_vs_structure-$C; mkdir -p $D
$PY examples/torch/train_gpt.py --parallel none "${ARGS[@]}" --save-params $D/solo.pt > $D/solo.log 2>&1
echo "solo rc=$?"
for lib in lib lib-old; do
  for n in 64 48; do
    timeout 200 $PY scripts/survivor.py --lib .carry/$lib/libnccl.so.2 --rank 0 --world-size $n -- \
      examples/torch/train_gpt.py --parallel ddp "${ARGS[@]}" --save-params $D/$lib-ddp-r0of$n.pt \
      > $D/$lib-ddp-r0of$n.log 2>&1
    echo "$lib ddp r0 of $n rc=$?"
  done
done
$PY - "$D" > $D/compare.txt 2>&1 <<'PY'
import json, sys, torch
d = sys.argv[1]
def result(name):
    for line in open(f"{d}/{name}.log"):
        if line.startswith("RESULT "):
            return json.loads(line[7:])
solo = result("solo"); sp = torch.load(f"{d}/solo.pt")["params"]
print("solo losses", [round(x, 6) for x in solo["losses"]])
for lib in ("lib", "lib-old"):
    for n in (64, 48):
        name = f"{lib}-ddp-r0of{n}"
        r = result(name)
        if r is None:
            print(name, "no RESULT"); continue
        p = {k.removeprefix("module."): v for k, v in torch.load(f"{d}/{name}.pt")["params"].items()}
        diffs = [(p[k].float() - v.float()).abs().max().item() for k, v in sp.items()]
        same = all(torch.equal(p[k], v) for k, v in sp.items())
        loss_diff = max(abs(a - b) for a, b in zip(r["losses"], solo["losses"]))
        print(f"{name}: losses {[round(x, 6) for x in r['losses']]}")
        print(f"{name}: parameters bit-identical to solo: {same}; largest parameter difference {max(diffs):.3e}; "
              f"largest loss difference {loss_diff:.3e}")
PY
cat $D/compare.txt
