#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Host time a replay spends inside RankLens per call, from a replay's own trace.

A replay trace's Call record is stamped when the call enters the library (Call.timeNs) and its Timing record when
the call's hold is enqueued (Timing.startNs): in between come matching, the arrival mark, the payload restore and
the hold's launch. From the hold to the next call is the program's own time. Per op and size class (<= 8 KiB, more),
over the calls after --skip, medians and p90 of both, in microseconds.

    python3 bench/replay_call_host_time.py TRACE_ROOT_OR_RANK_DIR [--skip 300] [--recording RECORDED_ROOT]

With --recording (the trace the replay replayed), each row also gives the recorded host time of the same calls
(Call.hostNs: the real NCCL's call, with the recorder's own few microseconds), so that RankLens's cost per call is
read beside the real library's.

Reads traces with tools/python/ranklens_trace.py (the independent reader of docs/trace-format.md).
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ranklens_trace as rt  # noqa: E402
from record_bench_lib import OPS, call_host_times, p90  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", help="a replay's trace root or one rank directory")
    p.add_argument("--skip", type=int, default=300, help="calls left out at the start (warm-up; default %(default)s)")
    p.add_argument("--recording", help="the recorded trace root (or rank directory) the replay replayed")
    a = p.parse_args(argv)
    try:
        directories = rt.rank_directories(a.trace)
    except rt.TraceFormatError as e:
        print(f"replay_call_host_time: {e} (give a replay's trace root or one of its rank directories)",
              file=sys.stderr)
        return 2
    for directory in directories:
        reader = rt.RankReader.open(directory)
        calls = [r.fields for r in reader.records() if r.name == "Call"]
        timings = [r.fields for r in reader.records() if r.name == "Timing"]
        inside, outside, previous_hold = {}, {}, None
        for op, nbytes, call_ns, hold_ns in call_host_times(calls, timings, a.skip):
            key = (op, size_class(nbytes))
            if hold_ns is not None:
                inside.setdefault(key, []).append((hold_ns - call_ns) / 1e3)
                if previous_hold is not None:
                    outside.setdefault(key, []).append((call_ns - previous_hold) / 1e3)
            previous_hold = hold_ns
        recorded = {}
        if a.recording:
            try:
                recorded = recorded_host_times(a.recording, os.path.basename(os.path.normpath(directory)), a.skip)
            except (rt.TraceFormatError, OSError) as e:
                print(f"replay_call_host_time: --recording: {e}", file=sys.stderr)
                return 2
        print(f"{directory}: {len(calls)} calls, {a.skip} skipped")
        header = f"  {'op':<14}{'size':<8}{'calls':>7}{'in RankLens median':>20}{'p90':>9}{'program median':>17}{'p90':>9}"
        print(header + (f"{'recorded median':>18}{'p90':>9}" if a.recording else ""))
        for key in sorted(inside):
            v, w = inside[key], outside.get(key, [0.0])
            line = (f"  {key[0]:<14}{key[1]:<8}{len(v):>7}{statistics.median(v):>17.1f} us{p90(v):>6.1f} us"
                    f"{statistics.median(w):>14.1f} us{p90(w):>6.1f} us")
            if a.recording:
                r = recorded.get(key)
                line += f"{statistics.median(r):>15.1f} us{p90(r):>6.1f} us" if r else f"{'-':>18}{'-':>9}"
            print(line)
    return 0


def size_class(nbytes: int) -> str:
    return "<=8KiB" if nbytes <= 8192 else ">8KiB"


def recorded_host_times(recording: str, rank_name: str, skip: int) -> dict:
    """(op, size class) -> the recorded calls' host times in microseconds (Call.hostNs; those without one left out),
    from `recording`'s directory of the same rank (or `recording` itself when it is a rank directory)."""
    directory = os.path.join(recording, rank_name)
    if not os.path.isdir(directory):
        directory = recording
    reader = rt.RankReader.open(directory)
    out: dict = {}
    for c in [r.fields for r in reader.records() if r.name == "Call"][skip:]:
        if c["hostNs"] > 0:
            key = (OPS[c["op"]], size_class(c["bytes"]))
            out.setdefault(key, []).append(c["hostNs"] / 1e3)
    return out


if __name__ == "__main__":
    sys.exit(main())
