#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# RankLens's demo on a shipped recording, on any machine (a GPU is used when there is one; without one RankLens's
# host device stands in):
#   scripts/demo.sh              numerics: rank 0 of a 2-rank job in which rank 1 put NaNs into its gradient at step 4
#                                (examples/traces/anomaly-2ranks), replayed ALONE at value fidelity: its parameters
#                                turn non-finite where and as they did in the real job, bit for bit
#   scripts/demo.sh --torch      the same check on the DDP example (examples/traces/ddp-2xh200; needs a GPU and
#                                PyTorch, PYTHON), with its step times where this machine is like the recording's
#   scripts/demo.sh --structure  no recording: rank 3 of a virtual 8-rank TP x DP job (structure replay)
# Extra arguments go to `ranklens replay`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh release >&2
ranklens=build/release/tools/ranklens
case "${1:-}" in
  --torch)
    shift
    exec "$ranklens" replay --trace examples/traces/ddp-2xh200 --rank 1 "$@" \
      -- "${PYTHON:-python3}" examples/torch/train_gpt.py --steps 10 --mark-steps --log-all-ranks ;;
  --structure)
    shift
    exec "$ranklens" replay --rank 3 --world-size 8 --config examples/minitrain-world8.yaml "$@" \
      -- build/release/examples/nccl_minitrain --steps 3 --tp 2 ;;
esac

trace=examples/traces/anomaly-2ranks
if [[ ! -f $trace/recorded_results.json ]]; then
  # The recording is made on a GPU (scripts/make-demo-trace.sh) and shipped; a checkout without it still shows
  # something true rather than failing.
  echo "== $trace is not in this checkout: make it on a machine with one GPU and PyTorch with"
  echo "   scripts/make-demo-trace.sh (about a minute). Meanwhile, the structure demo: rank 3 of a virtual 8-rank job."
  exec "$ranklens" replay --rank 3 --world-size 8 --config examples/minitrain-world8.yaml "$@" \
    -- build/release/examples/nccl_minitrain --steps 3 --tp 2
fi
log=$(mktemp -d)/replay.log
echo "== The recording: $trace (how it was made: $trace/README.md)"
sed -n 's/^> //p' "$trace/README.md"
echo
echo "== Rank 0 replayed alone at value fidelity; rank 1 does not run: its effects come from the recording"
echo "\$ $ranklens replay --trace $trace --rank 0 --fidelity value -- build/release/examples/nccl_anomaly $*"
set +e
"$ranklens" replay --trace "$trace" --rank 0 --fidelity value "$@" -- build/release/examples/nccl_anomaly \
  > "$log" 2>&1
status=$?
set -e
grep -E "^nccl_anomaly: rank 0 step|^(Replay of the recording|first divergence|  (median|comparable|not comparable|\(replay on)|    the)" \
  "$log" || true
echo
echo "== Verdict (the whole replay's output: $log)"
python3 - "$trace/recorded_results.json" "$log" "$status" <<'PY'
import json, re, sys
recorded = json.load(open(sys.argv[1]))["0"]
text = open(sys.argv[2]).read()
status = int(sys.argv[3])
m = [json.loads(l[len("RESULT "):]) for l in text.splitlines() if l.startswith("RESULT {")]
if status != 0 or not m:
    print(f"FAILED: the replay exited with status {status} and printed no result; see the log above")
    sys.exit(1)
replayed = m[-1]
same = all(replayed[k] == recorded[k] for k in ("first_nonfinite_step", "nonfinite", "digest"))
matched = re.search(r"Replay of the recording: (\d+) calls, (\d+) matched", text)
calls = f"{matched.group(2)} of {matched.group(1)} calls matched the recording" if matched else "calls unknown"
if same:
    print(f"IDENTICAL: rank 0's parameters became non-finite after step {replayed['first_nonfinite_step']} "
          f"({replayed['nonfinite']} of them), exactly as in the real job, and its final parameters are bit for bit "
          f"the real rank 0's ({replayed['digest']}); {calls}. The NaNs came from rank 1, which did not run here: "
          f"RankLens restored its share of each all-reduce from the recording.")
else:
    print(f"DIFFERENT: the real rank 0 had {recorded}, the replay {replayed}; {calls}")
    sys.exit(1)
PY
