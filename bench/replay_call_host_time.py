#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Host time a replay spends inside RankLens per call, from a replay's own trace.

A replay trace's Call record is stamped when the call enters the library (Call.timeNs) and its Timing record when
the call's hold is enqueued (Timing.startNs): in between come matching, the arrival mark, the payload restore and
the hold's launch. From the hold to the next call is the program's own time. Per op and size class (<= 8 KiB, more),
over the calls after --skip, medians and p90 of both, in microseconds.

    python3 bench/replay_call_host_time.py TRACE_ROOT_OR_RANK_DIR [--skip 300]

Reads traces with tools/python/ranklens_trace.py (the independent reader of docs/trace-format.md).
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ranklens_trace as rt  # noqa: E402
from record_bench_lib import call_host_times, p90  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", help="a replay's trace root or one rank directory")
    p.add_argument("--skip", type=int, default=300, help="calls left out at the start (warm-up; default %(default)s)")
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
            key = (op, "<=8KiB" if nbytes <= 8192 else ">8KiB")
            if hold_ns is not None:
                inside.setdefault(key, []).append((hold_ns - call_ns) / 1e3)
                if previous_hold is not None:
                    outside.setdefault(key, []).append((call_ns - previous_hold) / 1e3)
            previous_hold = hold_ns
        print(f"{directory}: {len(calls)} calls, {a.skip} skipped")
        print(f"  {'op':<14}{'size':<8}{'calls':>7}{'in RankLens median':>20}{'p90':>9}{'program median':>17}{'p90':>9}")
        for key in sorted(inside):
            v, w = inside[key], outside.get(key, [0.0])
            print(f"  {key[0]:<14}{key[1]:<8}{len(v):>7}{statistics.median(v):>17.1f} us{p90(v):>6.1f} us"
                  f"{statistics.median(w):>14.1f} us{p90(w):>6.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
