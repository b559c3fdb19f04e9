#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Adds transfer times to a version-1 history (ranklens history build before 2026-11-30) whose traces are gone.

`ranklens history build` pairs each collective across the ranks of a job by communicator and sequence number and
keeps the shortest duration as the transfer time (history version 2). A version-1 history has neither pairing key,
only each rank's samples in call order, so this script pairs the k-th sample of each (op, communicator size, bytes,
grouped) of one rank with the k-th of the job's other ranks -- the same pairing wherever the ranks issue the same
calls in the same order (DDP, FSDP2), and writes a version-2 history. Only for histories whose traces are lost; build
new ones from the traces.

    bench/history_transfer_from_order.py OLD.hist NEW.hist
"""
import collections
import os
import sys

import msgpack


def job_of(rank_dir: str) -> str:
    head, base = os.path.split(rank_dir.rstrip("/"))
    return head if base.startswith("rank") else rank_dir


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    with open(argv[1], "rb") as f:
        h = msgpack.unpack(f, raw=False, strict_map_key=False)
    if h.get("format") != "ranklens-history":
        sys.exit(f"{argv[1]}: not a RankLens history")
    runs, samples = h["runs"], h["samples"]
    order = collections.defaultdict(list)  # (job, run, op, nranks, bytes, grouped) -> sample indices
    for i, s in enumerate(samples):
        op, _, nbytes, nranks, _, _, grouped, _, run = s[:9]
        order[(job_of(runs[run]), run, op, nranks, nbytes, grouped)].append(i)
    instances = collections.defaultdict(list)  # (job, op, nranks, bytes, grouped, k) -> sample indices
    for (job, _, op, nranks, nbytes, grouped), idx in order.items():
        for k, i in enumerate(idx):
            instances[(job, op, nranks, nbytes, grouped, k)].append(i)
    paired = 0
    for s in samples:
        del s[9:]
        s.append(s[7] if s[3] == 1 else -1)
    for (job, op, nranks, *_), idx in instances.items():
        if op in (8, 9) or nranks == 1 or len(idx) < 2:  # Send, Recv: no pairing; 1 rank: its own duration
            continue
        shortest = min(samples[i][7] for i in idx)
        for i in idx:
            samples[i][9] = shortest
            paired += 1
    h["version"] = 2
    with open(argv[2], "wb") as f:
        msgpack.pack(h, f)
    print(f"{argv[2]}: {len(samples)} samples, {paired} with a transfer time")


if __name__ == "__main__":
    main(sys.argv)
