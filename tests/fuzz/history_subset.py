#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes a history without the rank directories whose path contains a given text, for an evaluation of part of a
history whose traces are gone (e.g. the first run of each configuration alone: --drop=-run2/).

    tests/fuzz/history_subset.py IN.hist OUT.hist [--drop TEXT ...] [--max-samples N] [--drop-phases]

--max-samples keeps the first N samples of each run kept (small seeds for tests/fuzz/corpus/fuzz_history).
--drop-phases forgets every sample's step phase (-1), so that `ranklens estimate eval` scores the same-place rule
without its phase window.
"""
import argparse
import sys

import msgpack

RUN_FIELD = 8  # HistorySample::run, the index into History::runs (timing/include/ranklens/estimator.h)
PHASE_FIELD = 10  # HistorySample::stepPhase (history version 3 and later)


def subset(history: dict, drop: list, max_samples: int | None = None, drop_phases: bool = False) -> dict:
    keep = [i for i, run in enumerate(history["runs"]) if not any(text in run for text in drop)]
    index = {old: new for new, old in enumerate(keep)}
    out = dict(history)
    out["runs"] = [history["runs"][i] for i in keep]
    out["samples"] = []
    taken = [0] * len(keep)
    for sample in history["samples"]:
        run = index.get(sample[RUN_FIELD])
        if run is None or (max_samples is not None and taken[run] >= max_samples):
            continue
        taken[run] += 1
        sample = list(sample)
        sample[RUN_FIELD] = run
        if drop_phases and len(sample) > PHASE_FIELD:
            sample[PHASE_FIELD] = -1.0
        out["samples"].append(sample)
    return out


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("--drop", action="append", default=[], help="leave out runs whose path contains this")
    parser.add_argument("--max-samples", type=int, help="keep the first N samples of each run kept")
    parser.add_argument("--drop-phases", action="store_true", help="forget the samples' step phases")
    args = parser.parse_args(argv)
    if not args.drop and args.max_samples is None and not args.drop_phases:
        parser.error("nothing to leave out: give --drop, --max-samples or --drop-phases")
    with open(args.input, "rb") as f:
        history = msgpack.unpack(f, raw=False, strict_map_key=False)
    if history.get("format") != "ranklens-history":
        sys.exit(f"{args.input}: not a RankLens history")
    out = subset(history, args.drop, args.max_samples, args.drop_phases)
    if not out["runs"]:
        sys.exit(f"{args.input}: --drop leaves no run")
    with open(args.output, "wb") as f:
        msgpack.pack(out, f)
    print(f"{args.output}: {len(out['runs'])} of {len(history['runs'])} runs, "
          f"{len(out['samples'])} of {len(history['samples'])} samples")


if __name__ == "__main__":
    main(sys.argv[1:])
