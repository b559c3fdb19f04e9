#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Where the estimator's leave-one-job-out error comes from, from a history file (`ranklens history build`).

For each recorded job left out, every transfer time of it is estimated as the median of the other jobs' transfer
times of the same op, size, communicator size and grouping (the estimator's same-size rule, `ranklens estimate
eval`'s leave-one-job-out). Printed per job and op: the median signed error (estimate - recorded) / recorded. A job
whose signed errors all lean one way is slower or faster than its neighbours as a whole (e.g. its compute contends
with its transfers more), which no per-call feature of the history can tell. Then the overall median |error|, plain
and with the neighbours narrowed to calls at a similar place in the step (|stepPhase difference| <= --phase-width,
when at least 3 such samples exist): whether the step phase would help as a neighbourhood key; and narrowed to the
same occurrence of the op and size in the step (HistorySample.stepOccurrence, history version 4; derived from the
phases of a version-3 history, a new step where the phase falls), at least 3 again: the estimator's "same-place" rule.

    python3 bench/history_job_bias.py HISTORY [--phase-width 0.1]
"""
import argparse
import collections
import statistics
import sys

# HistorySample's msgpack array (timing/include/ranklens/estimator.h): op, datatype, bytes, nranks, crossesNodes,
# role, grouped, durationNs, run, transferNs, stepPhase (version 3), otherStreamsBusy (version 3), stepOccurrence
# (version 4).
OP, BYTES, NRANKS, GROUPED, RUN, TRANSFER, PHASE, OCCURRENCE = 0, 2, 3, 6, 8, 9, 10, 12
OP_NAMES = {0: "AllReduce", 1: "Broadcast", 2: "Reduce", 3: "AllGather", 4: "ReduceScatter"}


def load(path: str) -> dict:
    import msgpack
    with open(path, "rb") as f:
        history = msgpack.unpackb(f.read(), raw=False, strict_map_key=False)
    if history.get("format") != "ranklens-history":
        raise ValueError(f"{path}: not a RankLens history (format {history.get('format')!r})")
    return history


def job_of(rank_dir: str) -> str:
    """As timing::jobOf: the parent of a rank<N> directory, else the directory itself."""
    parent, _, leaf = rank_dir.rstrip("/").rpartition("/")
    return parent if leaf.startswith("rank") and leaf[4:].isdigit() else rank_dir


def phase(sample: list) -> float:
    return sample[PHASE] if len(sample) > PHASE else -1.0


def occurrences(history: dict) -> list:
    """Each sample's stepOccurrence: stored (version 4), else counted per run, step, op, size and grouping, a step
    starting where a run's phase falls (samples are in call order per run); -1 outside marked steps."""
    if history.get("version", 0) >= 4:
        return [s[OCCURRENCE] if len(s) > OCCURRENCE else -1 for s in history["samples"]]
    out, last, counts = [], {}, {}
    for s in history["samples"]:
        run, p = s[RUN], phase(s)
        if p < 0:
            out.append(-1)
            continue
        if run not in last or p < last[run]:
            counts[run] = collections.Counter()
        last[run] = p
        k = (s[OP], s[BYTES], s[GROUPED])
        out.append(counts[run][k])
        counts[run][k] += 1
    return out


def analyse(history: dict, phase_width: float) -> dict:
    occurrence = dict(zip(map(id, history["samples"]), occurrences(history)))
    samples = [s for s in history["samples"] if s[TRANSFER] > 0]
    jobs = [job_of(history["runs"][s[RUN]]) for s in samples]
    key = lambda s: (s[OP], s[BYTES], s[NRANKS], s[GROUPED])  # noqa: E731
    per_job: dict[str, dict[str, list[float]]] = {}
    plain, phased, placed = [], [], []
    for left_out in sorted(set(jobs)):
        others = collections.defaultdict(list)
        for s, j in zip(samples, jobs):
            if j != left_out:
                others[key(s)].append(s)
        for s, j in zip(samples, jobs):
            same = others.get(key(s)) if j == left_out else None
            if not same:
                continue
            estimate = statistics.median(o[TRANSFER] for o in same)
            error = (estimate - s[TRANSFER]) / s[TRANSFER]
            per_job.setdefault(left_out, {}).setdefault(OP_NAMES.get(s[OP], str(s[OP])), []).append(error)
            plain.append(abs(error))
            near = [o for o in same if phase(s) >= 0 and phase(o) >= 0 and abs(phase(o) - phase(s)) <= phase_width]
            plain_estimate = estimate
            if len(near) >= 3:
                estimate = statistics.median(o[TRANSFER] for o in near)
            phased.append(abs((estimate - s[TRANSFER]) / s[TRANSFER]))
            here = occurrence[id(s)]
            place = [o for o in same if here >= 0 and occurrence[id(o)] == here]
            estimate = statistics.median(o[TRANSFER] for o in place) if len(place) >= 3 else plain_estimate
            placed.append(abs((estimate - s[TRANSFER]) / s[TRANSFER]))
    return {"jobs": {j: {op: {"calls": len(e), "median_signed_error": statistics.median(e)} for op, e in ops.items()}
                     for j, ops in per_job.items()},
            "median_abs_error": statistics.median(plain) if plain else None,
            "median_abs_error_phase": statistics.median(phased) if phased else None,
            "median_abs_error_occurrence": statistics.median(placed) if placed else None,
            "phase_width": phase_width}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("history", help="a history file (ranklens history build)")
    p.add_argument("--phase-width", type=float, default=0.1, help="step-phase neighbourhood (default %(default)s)")
    a = p.parse_args(argv)
    try:
        result = analyse(load(a.history), a.phase_width)
    except (OSError, ValueError) as e:
        print(f"history_job_bias: {e}", file=sys.stderr)
        return 2
    print(f"{a.history}: leave one job out, same-size median of the other jobs' transfer times")
    print("  job                                       op              calls   median signed error")
    for job, ops in sorted(result["jobs"].items()):
        for op, r in sorted(ops.items()):
            print(f"  {job[-40:]:<40}  {op:<14} {r['calls']:>6}   {r['median_signed_error'] * 100:+8.2f}%")
    if result["median_abs_error"] is None:
        print("no transfer time of one job has a same-size sample in another")
        return 1
    print(f"median |error|: {result['median_abs_error'] * 100:.2f}%; neighbours within step phase "
          f"{a.phase_width}: {result['median_abs_error_phase'] * 100:.2f}%; at the same occurrence in the step: "
          f"{result['median_abs_error_occurrence'] * 100:.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
