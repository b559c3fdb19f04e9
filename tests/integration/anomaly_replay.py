#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The demo's claim, checked: every rank of the shipped anomaly recording (examples/traces/anomaly-2ranks, recorded on
a GPU), replayed alone at value fidelity on RankLens's host device, ends with exactly the real rank's result: the
step after which its parameters turned non-finite, how many were, and the digest of its final parameters.

usage: anomaly_replay.py RANKLENS NCCL_ANOMALY TRACE WORKDIR
"""
import json
import os
import re
import shutil
import subprocess
import sys


def main() -> int:
    ranklens, example, trace, work = sys.argv[1:5]
    if not os.path.isfile(os.path.join(trace, "recorded_results.json")):
        print(f"{trace} is missing: it is shipped with the repository (scripts/make-demo-trace.sh remakes it on a GPU)")
        return 1
    with open(os.path.join(trace, "recorded_results.json")) as f:
        recorded = json.load(f)
    failures = []
    for rank, real in sorted(recorded.items()):
        events = os.path.join(work, f"rank{rank}")
        shutil.rmtree(events, ignore_errors=True)
        proc = subprocess.run([ranklens, "replay", "--trace", trace, "--rank", rank, "--fidelity", "value",
                               "--device", "host", "--trace-dir", events, "--", example],
                              capture_output=True, text=True, timeout=300)
        out = proc.stdout + proc.stderr
        results = [json.loads(l[len("RESULT "):]) for l in out.splitlines() if l.startswith("RESULT {")]
        calls = re.search(r"Replay of the recording: (\d+) calls, (\d+) matched", out)
        keys = ("first_nonfinite_step", "nonfinite", "digest")
        if proc.returncode != 0 or not results:
            failures.append(f"rank {rank}: exit {proc.returncode}, no RESULT line:\n{out[-3000:]}")
        elif any(results[-1].get(k) != real[k] for k in keys):
            failures.append(f"rank {rank}: real {dict((k, real[k]) for k in keys)}, replayed "
                            f"{dict((k, results[-1].get(k)) for k in keys)}")
        elif not calls or calls.group(1) != calls.group(2):
            failures.append(f"rank {rank}: not every recorded call matched: {calls.group(0) if calls else out[-2000:]}")
        else:
            print(f"rank {rank}: identical to the real rank ({real['digest']}, non-finite after step "
                  f"{real['first_nonfinite_step']}); {calls.group(0)}")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
