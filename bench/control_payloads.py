#!/usr/bin/env python3
"""How many of a recorded rank's control-sized calls (receiving 1..MAX bytes) and larger ones have a stored payload.

    python3 bench/control_payloads.py TRACE/rank0 [--max-bytes 65536]

Prints one JSON object: control_calls, control_stored, larger_calls, larger_stored. Sends and empty calls receive
nothing and are not counted. For results scripts that compare what a recording under staging_full: skip kept."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "python"))
import ranklens_trace as rt  # noqa: E402

SEND = 8  # events::Op::kSend


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("rank_dir")
    p.add_argument("--max-bytes", type=int, default=65536, help="payload_max_bytes of the recording")
    a = p.parse_args()
    reader = rt.RankReader.open(a.rank_dir)
    stored = {rt.record_key(rt.PAYLOAD_REF, ref) for ref in reader.payloads()}
    counts = {"control_calls": 0, "control_stored": 0, "larger_calls": 0, "larger_stored": 0}
    for r in reader.records():
        if r.name != "Call" or r.fields is None:
            continue
        f = r.fields
        if f["op"] == SEND or f["bytes"] == 0:
            continue
        kind = "control" if f["bytes"] <= a.max_bytes else "larger"
        counts[kind + "_calls"] += 1
        key = rt.record_key(rt.CALL, f)
        counts[kind + "_stored"] += key in stored
    print(json.dumps(counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
