#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Hot paths of two builds side by side, in one run, rounds interleaved (no GPU needed):

  replay host time per call   bench/replay_host_overhead of each build (the library core, host device), per fidelity
  record host time per call   the candidate's bench/record_host_overhead against each build's libnccl.so.2, both
                              forwarding to the same stand-in real NCCL (tests/fake_real_nccl): RankLens's own time
  trace writer throughput     bench/trace_store_bench of each build: metadata append + flush, payload write

  bench/hot_paths.py --baseline OLD_BUILD_DIR [--candidate build/release] [--rounds 5] [--json OUT]

A build dir is a release build tree (cmake --preset release; its bench/ and tests/fake_real_nccl/ targets built).
Prints each metric's median over rounds for both builds and the ratio candidate/baseline (below 1: faster). Run it on
an idle machine: other processes distort host-time figures more than any change being measured.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

REPLAY = [("replay structure", ["--fidelity", "structure", "--gap-us", "0"]),
          ("replay timing", ["--fidelity", "timing", "--gap-us", "0"]),
          ("replay value+payloads", ["--fidelity", "value", "--payloads", "--gap-us", "0"])]
RECORD = [("record payloads none", ["--payloads", "none"]), ("record payloads small", ["--payloads", "small"])]
WRITER = "meta/append_flush/batch:256/|payload/write/bf16/4MiB/level:-1/threads:1/|payload/write/f32/64KiB/level:-1/threads:1/"


def run(cmd, timeout=600):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        sys.exit(f"hot_paths: {' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return proc.stdout


def replay_ns(build, args, calls):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.json")
        run([os.path.join(build, "bench/replay_host_overhead"), "--calls", str(calls), *args, "--json", out])
        return json.load(open(out))["median_ns"]


def record_ns(candidate, build, args, calls):
    with tempfile.TemporaryDirectory() as d:
        return _record_ns(candidate, build, args, calls, os.path.join(d, "trace"))


def _record_ns(candidate, build, args, calls, trace):
    text = run([os.path.join(candidate, "bench/record_host_overhead"), "--device", "host",
                "--real", os.path.join(candidate, "tests/fake_real_nccl/libnccl.so.2"),
                "--ranklens", os.path.join(build, "nccl_fake/libnccl.so.2"), "--calls", str(calls), "--trace-dir", trace, *args, "--json"])
    return json.loads(text.strip().splitlines()[-1])["added_median_ns"]


def writer(build):
    text = run([os.path.join(build, "bench/trace_store_bench"), f"--benchmark_filter={WRITER}",
                "--benchmark_format=json"])
    out = {}
    for b in json.loads(text)["benchmarks"]:
        name = b["name"].split("/iterations")[0].split("/min_time")[0]
        # Metadata benchmarks count records (records_per_s), payload writes bytes (bytes_per_second).
        if "records_per_s" in b:
            out[f"writer {name} (Mrecords/s)"] = b["records_per_s"] / 1e6
        else:
            out[f"writer {name} (MB/s)"] = b["bytes_per_second"] / 1e6
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", required=True, help="the previous library's release build dir")
    ap.add_argument("--candidate", default="build/release", help="this checkout's release build dir")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--json", help="write the result here (bench/results/hot_paths.json)")
    a = ap.parse_args()
    builds = {"baseline": os.path.abspath(a.baseline), "candidate": os.path.abspath(a.candidate)}
    samples = {}
    for r in range(a.rounds):
        for side in (("baseline", "candidate") if r % 2 == 0 else ("candidate", "baseline")):
            b = builds[side]
            for name, args in REPLAY:
                samples.setdefault((name + " (ns/call)", side), []).append(replay_ns(b, args, a.calls))
            for name, args in RECORD:
                samples.setdefault((name + " (ns/call)", side), []).append(
                    record_ns(builds["candidate"], b, args, a.calls))
            for name, v in writer(b).items():
                samples.setdefault((name, side), []).append(v)
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    rows = []
    for metric in dict.fromkeys(k[0] for k in samples):
        base = statistics.median(samples[(metric, "baseline")])
        cand = statistics.median(samples[(metric, "candidate")])
        rows.append({"metric": metric, "baseline_median": base, "candidate_median": cand,
                     "ratio": cand / base if base else None})
        print(f"{metric:62s} baseline {base:10.1f}  candidate {cand:10.1f}  ratio {cand / base:5.2f}")
    if a.json:
        def commit(d):
            src = subprocess.run(["git", "-C", d, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
            return src.stdout.strip()
        srcdir = lambda b: os.path.dirname(os.path.dirname(b))  # <checkout>/build/release
        result = {"benchmark": "hot_paths", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                  "machine": f"{platform.node()} ({os.cpu_count()} CPUs), host device, no GPU",
                  "command": "bench/hot_paths.py " + " ".join(sys.argv[1:]),
                  "baseline_commit": commit(srcdir(builds["baseline"])),
                  "candidate_commit": commit(srcdir(builds["candidate"])),
                  "rounds": a.rounds, "calls": a.calls, "rows": rows,
                  "samples": {f"{m} [{s}]": v for (m, s), v in samples.items()}}
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
