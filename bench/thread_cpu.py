#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Which threads of a running job are busy: samples /proc/PID/task/*/stat of every process whose command line holds
--match (RankLens names its threads "RankLens Poll", "RankLens Zstd", "RankLens Write", "RankLens Fetch") until they
have all exited, and prints one JSON line: per thread name, how many threads, CPU seconds, and the busiest
thread's share of a sampling interval (1.0: one core saturated, what bounds a serial stage).

  bench/thread_cpu.py --match train_gpt.py [--interval 0.5] [--wait 60] > threads.json &
  ... start the job ...
"""
import argparse
import json
import os
import sys
import time

TICKS = os.sysconf("SC_CLK_TCK")


def matching_pids(match, me):
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if match.encode() in f.read():
                    pids.append(int(entry))
        except OSError:
            pass
    return pids


def sample(pids):
    """{(pid, tid): (name, cpu seconds)}"""
    out = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            # comm is in parentheses and may hold spaces: the fields after the last ')' are fixed.
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2:].split()
            out[(pid, int(tid))] = (name, (int(fields[11]) + int(fields[12])) / TICKS)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--match", required=True, help="a string of the job's command line")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between samples")
    parser.add_argument("--wait", type=float, default=60, help="seconds to wait for the job to start")
    parser.add_argument("--label", default="", help="copied into the output")
    args = parser.parse_args()

    deadline = time.time() + args.wait
    while not matching_pids(args.match, os.getpid()):
        if time.time() > deadline:
            sys.exit(f"thread_cpu: no process matching {args.match!r} within {args.wait} s")
        time.sleep(0.05)
    start = time.time()
    last = sample(matching_pids(args.match, os.getpid()))
    total, busiest, threads = {}, {}, {}
    while True:
        time.sleep(args.interval)
        pids = matching_pids(args.match, os.getpid())
        if not pids:
            break
        now = sample(pids)
        for key, (name, cpu) in now.items():
            threads.setdefault(name, set()).add(key)
            delta = cpu - last.get(key, (name, 0.0))[1]
            total[name] = total.get(name, 0.0) + delta
            busiest[name] = max(busiest.get(name, 0.0), delta / args.interval)
        last = now
    names = sorted(total, key=lambda n: -total[n])
    print(json.dumps({"label": args.label, "match": args.match, "wall_s": round(time.time() - start, 2),
                      "threads": {n: {"count": len(threads[n]), "cpu_s": round(total[n], 2),
                                      "busiest_share": round(busiest[n], 2)} for n in names}}))


if __name__ == "__main__":
    main()
