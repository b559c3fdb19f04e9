#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Makes the demo's recording, examples/traces/anomaly-2ranks, on a machine with one GPU: a real 2-rank NCCL job
# (examples/nccl_anomaly: rank 1 puts NaNs into its gradient at step 4) recorded with every received payload, its
# ranks sharing the GPU (--share-gpu), then the real results each rank printed (recorded_results.json, which
# scripts/demo.sh and the test ranklens_replay_anomaly_is_bit_identical compare replays with) and a README.
#
#   scripts/make-demo-trace.sh [--prefix DIR] [--real-nccl LIB] [--out DIR]
#
# --prefix: an install tree from scripts/gpu-bundle.sh (DIR/bin/ranklens, DIR/bin/nccl_anomaly), default the release
# build; --real-nccl: the real libnccl.so.2 (default: the one `ranklens record` finds, e.g. PyTorch's wheel);
# --out: where the trace goes (default examples/traces/anomaly-2ranks; it must not exist).
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX="" REAL="" OUTDIR=examples/traces/anomaly-2ranks
while [[ $# -gt 0 ]]; do
  case $1 in
    --prefix) PREFIX=$2; shift 2 ;;
    --real-nccl) REAL=$2; shift 2 ;;
    --out) OUTDIR=$2; shift 2 ;;
    *) sed -n '3,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
done
if [[ -n $PREFIX ]]; then
  ranklens=$PREFIX/bin/ranklens example=$PREFIX/bin/nccl_anomaly
  export LD_LIBRARY_PATH=$PREFIX/deps:$PREFIX/cudart${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
else
  ranklens=build/release/tools/ranklens example=build/release/examples/nccl_anomaly
fi
[[ -e $OUTDIR ]] && { echo "error: $OUTDIR exists; remove it or give --out" >&2; exit 2; }
command -v torchrun >/dev/null || { echo "error: torchrun not found (the job is launched with PyTorch's torchrun)" >&2; exit 2; }
log=$(mktemp)
# staging_full: wait keeps every payload (the job is tiny; a skipped payload would make the replay estimate it).
RANKLENS_STAGING_FULL=wait "$ranklens" record --share-gpu --payloads all ${REAL:+--real-nccl "$REAL"} --trace "$OUTDIR" \
  -- torchrun --standalone --nproc-per-node 2 --no-python "$example" --nan-rank 1 --nan-step 4 2>&1 | tee "$log"
python3 - "$log" "$OUTDIR" <<'PY'
import json, sys
results = {}
for line in open(sys.argv[1]):
    i = line.find("RESULT {")
    if i >= 0:
        r = json.loads(line[i + len("RESULT "):])
        results[str(r["rank"])] = r
if sorted(results) != ["0", "1"]:
    sys.exit(f"error: the job did not print a RESULT line for both ranks (got {sorted(results)}); see the output above")
json.dump(results, open(f"{sys.argv[2]}/recorded_results.json", "w"), indent=1, sort_keys=True)
PY
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
cat > "$OUTDIR/README.md" <<MD
# anomaly-2ranks: a peer's NaN, recorded

> A real 2-rank NCCL job (examples/nccl_anomaly) in which rank 1 puts NaNs into its gradient at step 4, recorded
> with every received payload on one ${gpu:-GPU}, its two ranks sharing the GPU:
> \`ranklens record --share-gpu --payloads all -- torchrun --nproc-per-node 2 --no-python nccl_anomaly --nan-rank 1 --nan-step 4\`
> (scripts/make-demo-trace.sh). recorded_results.json holds what each real rank printed: the step after which its
> parameters turned non-finite, how many, and the digest of its final parameters.
MD
echo "made $OUTDIR: $(cat "$OUTDIR/recorded_results.json" | tr -d '\n ')"
