#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Issue #6's acceptance on a 2-GPU machine, through the product path (`ranklens record` / `ranklens replay`, Python
# adapter), and the traces shipped in examples/traces:
#   1. value replay of every rank of the DDP, FSDP2, TP and PP examples (bench/replay_fidelity_torch.py, 10 steps,
#      deterministic): parameters bit-identical to the real run's;
#   2. the C++ libtorch client (examples/torch_cpp, built here against the installed torch): recorded, every rank
#      replayed at value fidelity, parameter files compared with cmp;
#   3. the shipped traces: the DDP example and nccl_minitrain recorded on 2 GPUs, then rank 1 of each replayed on
#      one GPU (what the README's main-job command does).
# Run from the repository root with the carried build (see bench/README.md):
#   OUT=/tmp/out bench/run_launcher_acceptance.sh
# .carry/ holds bin/{ranklens,nccl_minitrain}, lib/{libnccl.so.2,libyaml-cpp.so.0.7,libisal.so.2} and cudart/libcudart.so.13
# (nccl_minitrain's, from the CUDA toolkit; kept apart so that torch does not pick it up).
# Everything lands under $OUT (logs, JSON, traces); the exit status is 0 when every check passed.
set -u
PY=${PY:-/opt/torch/.venv/bin/python}
OUT=${OUT:-/tmp/ranklens-launcher-acceptance}
CARRY=${CARRY:-$PWD/.carry}
RL="$CARRY/bin/ranklens"
LIB="$CARRY/lib/libnccl.so.2"
STEPS=${STEPS:-10}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$CARRY/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"  # ranklens's own libyaml-cpp
source "$(dirname "$0")/carry_setup.sh"
carry_adapter "$CARRY" || exit 2
REAL_NCCL=$("$PY" -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))')
failures=0
check() { # name, status
  echo "CHECK $1: $([[ $2 == 0 ]] && echo PASS || echo "FAIL ($2)")" | tee -a "$OUT/checks.txt"
  [[ $2 == 0 ]] || failures=$((failures + 1))
}

echo "== C++ client build (background)"
examples/torch_cpp/build.sh /tmp/c10d-build "$PY" > "$OUT/c10d_build.log" 2>&1 &
build_pid=$!

echo "== 1. examples at value fidelity"
"$PY" bench/replay_fidelity_torch.py --lib "$LIB" --ranklens "$RL" --python "$PY" --modes ddp,fsdp2,tp,pp \
  --checks value --value-steps "$STEPS" --json "$OUT/replay_value_launcher.json" --work /tmp/rv --timeout 240
check "examples value replay (replay_value_launcher.json)" $?

echo "== 2. C++ client"
wait $build_pid
check "C++ client build" $?
client=/tmp/c10d-build/c10d_train
if [[ -x $client ]]; then
  rm -rf /tmp/c10d-trace /tmp/c10d && mkdir -p /tmp/c10d
  args=(--steps "$STEPS" --deterministic --mark-steps --log-all-ranks)
  RANKLENS_STAGING_FULL=wait "$RL" record --trace /tmp/c10d-trace --payloads all --real-nccl "$REAL_NCCL" -- \
    "$PY" -m torch.distributed.run --standalone --nproc-per-node 2 --no-python \
    "$client" "${args[@]}" --save-params /tmp/c10d/real-{rank}.bin > "$OUT/c10d_record.log" 2>&1
  check "C++ client record" $?
  for r in 0 1; do
    CUDA_VISIBLE_DEVICES=$r "$RL" replay --trace /tmp/c10d-trace --rank $r --fidelity value -- \
      "$client" "${args[@]}" --save-params /tmp/c10d/replay-{rank}.bin > "$OUT/c10d_replay_rank$r.log" 2>&1 &
  done
  wait
  for r in 0 1; do
    grep -q "^RESULT" "$OUT/c10d_replay_rank$r.log" && cmp /tmp/c10d/real-$r.bin /tmp/c10d/replay-$r.bin
    check "C++ client rank $r parameters identical after $STEPS steps" $?
  done
fi

echo "== 3. shipped traces"
rm -rf "$OUT/traces" && mkdir -p "$OUT/traces"
"$RL" record --trace "$OUT/traces/ddp-2xh200" --payloads small -- \
  "$PY" -m torch.distributed.run --standalone --nproc-per-node 2 examples/torch/train_gpt.py --steps "$STEPS" \
  --mark-steps --log-all-ranks > "$OUT/ddp_default_record.log" 2>&1
check "DDP default trace record" $?
LD_LIBRARY_PATH="$CARRY/cudart:$LD_LIBRARY_PATH" "$RL" record --trace "$OUT/traces/minitrain-2xh200" --payloads small --real-nccl "$REAL_NCCL" -- \
  "$PY" -m torch.distributed.run --standalone --nproc-per-node 2 --no-python "$CARRY/bin/nccl_minitrain" \
  --steps "$STEPS" > "$OUT/minitrain_record.log" 2>&1
check "nccl_minitrain trace record" $?
CUDA_VISIBLE_DEVICES=0 "$RL" replay --trace "$OUT/traces/ddp-2xh200" --rank 1 -- \
  "$PY" examples/torch/train_gpt.py --steps "$STEPS" --mark-steps --log-all-ranks > "$OUT/ddp_default_replay.log" 2>&1
check "DDP default trace replay as rank 1" $?
CUDA_VISIBLE_DEVICES=1 LD_LIBRARY_PATH="$CARRY/cudart:$LD_LIBRARY_PATH" "$RL" replay --trace "$OUT/traces/minitrain-2xh200" --rank 1 -- \
  "$CARRY/bin/nccl_minitrain" --steps "$STEPS" > "$OUT/minitrain_replay.log" 2>&1
check "nccl_minitrain trace replay as rank 1" $?
du -sh "$OUT"/traces/* | tee -a "$OUT/checks.txt"
echo "failures: $failures" | tee -a "$OUT/checks.txt"
exit $((failures > 0))
