#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The demo's claim, checked: every rank of the shipped anomaly recording (examples/traces/anomaly-2ranks, recorded on
a GPU), replayed alone at value fidelity on RankLens's host device, ends with exactly the real rank's result: the
step after which its parameters turned non-finite, how many were, and the digest of its final parameters.

With --damaged: a copy of rank 0's recording with one frame's CRC-32 flipped halfway through its segment is
replayed the same way; the replay must fail, saying before the run where the damage is and, at the first call past
it, that the recording is read only up to it (not that the payload policy left payloads out, nor that it ends).

usage: anomaly_replay.py [--damaged] RANKLENS NCCL_ANOMALY TRACE WORKDIR
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys


def damaged(ranklens: str, example: str, trace: str, work: str) -> int:
    copy, events = os.path.join(work, "damaged"), os.path.join(work, "damaged-events")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.rmtree(events, ignore_errors=True)
    shutil.copytree(os.path.join(trace, "rank0"), os.path.join(copy, "rank0"))
    seg = os.path.join(copy, "rank0", "seg-000000.rls")
    data = bytearray(open(seg, "rb").read())
    frames, at = [], 16  # the segment header, then frames: u32 body length, u32 CRC-32, body
    while at + 8 <= len(data):
        frames.append(at)
        at += 8 + struct.unpack_from("<I", data, at)[0]
    at = frames[len(frames) // 2]
    data[at + 4] ^= 0xFF
    open(seg, "wb").write(data)
    proc = subprocess.run([ranklens, "replay", "--trace", copy, "--rank", "0", "--fidelity", "value", "--device",
                           "host", "--trace-dir", events, "--", example],
                          capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    want = [f"warning: {seg}: offset {at}: CRC-32 mismatch: the replay has only the records before it",
            f"lost to damage at {seg}: offset {at}: CRC-32 mismatch",
            f"the recording is read only up to its damage, {seg}: offset {at}: CRC-32 mismatch"]
    missing = [w for w in want if w not in out]
    if proc.returncode == 0 or missing or "left out by its payload policy (" in out:
        print(f"FAIL exit {proc.returncode}; missing {missing}:\n{out[-4000:]}")
        return 1
    print(f"damaged at offset {at}: exit {proc.returncode}, the damage said before the run and at the first call past it")
    return 0


def main() -> int:
    if sys.argv[1] == "--damaged":
        return damaged(*sys.argv[2:6])
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
