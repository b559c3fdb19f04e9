#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Replay acceptance, overlap case: does a replay predict what moving a wait buys?

examples/torch/overlap_branches.py computes branch A, launches an asynchronous all-reduce of A's "gradient" gA,
and computes branch B, which does not read gA. --wait early waits for the all-reduce before B, --wait late after
B (B then overlaps the all-reduce). Per run (--runs, default 5):

  real early   torchrun --nproc-per-node 2 ... --wait early, with the recorder (LD_PRELOAD=--lib,
               RANKLENS_MODE=record, RANKLENS_PAYLOADS=none, its own RANKLENS_TRACE_DIR): the early recording
  real late    the same with --wait late, also through the recorder (payloads none; its trace is only counted),
               or without any RankLens when --late-without-recorder
  replay early every rank of the early recording, alone: ranklens replay --fidelity timing --trace <early
               recording> -- overlap_branches.py --wait early; rank r on GPU r % (visible GPUs), all ranks at once,
               each process seeing only its GPU (CUDA_VISIBLE_DEVICES)
  replay late  the same program with --wait late, replayed against THAT run's early recording (the NCCL calls are
               the same, in the same order, with the same signatures; only the wait moved)

Even-numbered runs take the arms in reverse order (real late, real early, replay late, replay early) so that drift
affects both waits alike; a replay always follows the recording it replays.

Step times are each process's RESULT step_ms after --warmup steps (default 5 warm-up + 20 measured). Per rank r:
    real reduction   = 1 - median(real late, rank r)   / median(real early, rank r)
    replay reduction = 1 - median(replay late, rank r) / median(replay early, rank r)
    difference       = replay reduction - real reduction, in percentage points
reported per run and pooled (medians over the measured steps of every run). A rank passes when the pooled
|difference| <= --tolerance-pp (default 2) and every replay of it exited 0 with every call matched (no mismatch, as
many calls as the early recording holds); the check passes when every rank does.

Output: --json (default bench/results/replay/replay_overlap_torch.json; commit, device, command, date, every run's
step times and CUDA-event phases, per-run and pooled reductions) and a combined log next to it (same name, .log).
Per-process logs and traces stay under --work.

Example (2-GPU machine, repository root; est. ~4-5 minutes with the defaults, --budget stops starting runs):
    RANKLENS_COMMIT=<sha> /opt/torch/.venv/bin/python bench/replay_overlap_torch.py \\
        --lib .carry/lib/libnccl.so.2 --python /opt/torch/.venv/bin/python --json $OUT/replay_overlap_torch.json
Exit status: 0 when the check passed, 1 otherwise, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import record_bench_lib as lib  # noqa: E402
import replay_fidelity_torch as rf  # noqa: E402  (clean_env, results_of, median_after)

REPO = lib.REPO
SCRIPT = "examples/torch/overlap_branches.py"
WAITS = ("early", "late")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", required=True, help="RankLens libnccl.so.2")
    p.add_argument("--python", default=sys.executable, help="interpreter with torch (default: %(default)s)")
    p.add_argument("--nproc", type=int, default=2, help="GPUs of the real runs (default: %(default)s)")
    p.add_argument("--runs", type=int, default=5, help="runs, each: real early, real late, replays (default: "
                   "%(default)s)")
    p.add_argument("--steps", type=int, default=25, help="steps per process, warm-up included (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=5, help="steps left out of the medians (default: %(default)s)")
    p.add_argument("--tolerance-pp", type=float, default=2.0,
                   help="|replay reduction - real reduction| allowed, percentage points (default: %(default)s)")
    p.add_argument("--script-args", default="",
                   help="extra arguments of overlap_branches.py for every run, one shell-quoted string, e.g. "
                        "'--grad-mib 1024 --b-iters 2' (a single option without a space needs the form --script-args=--OPT=V; "
                        "default: none, the script's defaults)")
    p.add_argument("--late-without-recorder", action="store_true",
                   help="run the real late arm without RankLens (default: through the recorder too, payloads none)")
    p.add_argument("--no-alternate", action="store_true",
                   help="same arm order in every run (default: even runs reversed)")
    p.add_argument("--ranklens", default=os.path.join(REPO, "build", "release", "tools", "ranklens"),
                   help="the ranklens launcher that replays a rank (default: %(default)s)")
    p.add_argument("--json", default=os.path.join(REPO, "bench", "results", "replay", "replay_overlap_torch.json"))
    p.add_argument("--work", default="/tmp/ranklens-replay-overlap", help="per-process logs and traces")
    p.add_argument("--timeout", type=float, default=150, help="seconds per process (default: %(default)s)")
    p.add_argument("--budget", type=float, default=480,
                   help="start a run only if the time spent plus the longest run so far stays within this many "
                        "seconds (default: %(default)s); runs not started are reported and fail the check")
    p.add_argument("--replay-env", action="append", default=[], metavar="KEY=VALUE",
                   help="extra environment of the replays, e.g. RANKLENS_HOLD_BLOCKS=16 (repeatable)")
    args = p.parse_args(argv)
    if args.runs <= 0 or args.nproc <= 0 or args.steps <= args.warmup or args.warmup < 0:
        p.error("want --runs > 0, --nproc > 0, 0 <= --warmup < --steps")
    for kv in args.replay_env:
        if "=" not in kv:
            p.error(f"--replay-env {kv!r}: want KEY=VALUE")
    args.lib = os.path.abspath(args.lib)
    args.json = os.path.abspath(args.json)
    args.script_argv = shlex.split(args.script_args)
    return args


def reduction(late: float | None, early: float | None) -> float | None:
    return 1.0 - late / early if late is not None and early else None


def pp(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:+.2f} pp"


def fmt_pp(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.2f} pp"


def ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f} ms"


def phases(result: dict) -> str:
    """overlap_branches.py's CUDA-event phase medians of one process, for the log."""
    if result.get("median_a_ms") is None:
        return ""
    return (f" (A {ms(result.get('median_a_ms'))}, B {ms(result.get('median_b_ms'))}, exposed wait "
            f"{ms(result.get('median_exposed_wait_ms'))})")


class Bench:
    def __init__(self, args):
        self.args = args
        self.log = lib.CombinedLog(os.path.splitext(args.json)[0] + ".log")
        self.doc = {**lib.provenance(), "settings": {
            "runs": args.runs, "nproc": args.nproc, "steps": args.steps, "warmup": args.warmup,
            "tolerance_pp": args.tolerance_pp, "script": SCRIPT, "script_args": args.script_argv,
            "late_recorded": not args.late_without_recorder, "alternate": not args.no_alternate,
            "replay_env": args.replay_env, "lib": args.lib, "lib_sha256": lib.file_sha256(args.lib)},
            "runs": [], "checks": []}
        os.makedirs(args.work, exist_ok=True)
        self.gpus = None

    def visible_gpus(self) -> int:
        if self.gpus is None:
            r = subprocess.run([self.args.python, "-c", "import torch; print(torch.cuda.device_count())"],
                               capture_output=True, text=True)
            try:
                self.gpus = max(int(r.stdout.strip().splitlines()[-1]), 1)
            except (ValueError, IndexError):
                self.gpus = 1
        return self.gpus

    def script(self, wait: str) -> list[str]:
        a = self.args
        return [SCRIPT, "--wait", wait, "--steps", str(a.steps), "--warmup", str(a.warmup), "--log-all-ranks",
                *a.script_argv]

    def real(self, run: int, wait: str, record: bool) -> dict:
        a = self.args
        name = f"run{run}-real-{wait}"
        trace = os.path.join(a.work, "traces", name)
        shutil.rmtree(trace, ignore_errors=True)
        extra = {}
        if record:
            os.makedirs(trace)
            extra = {"LD_PRELOAD": a.lib, "RANKLENS_MODE": "record", "RANKLENS_TRACE_DIR": trace,
                     "RANKLENS_PAYLOADS": "none"}
        env, unset = rf.clean_env(extra)
        argv = [a.python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(a.nproc),
                *self.script(wait)]
        log_path = os.path.join(a.work, "logs", name + ".log")
        self.log.say(f"{name} ({'recorder, payloads none' if record else 'no RankLens'}) ...")
        res = lib.run_logged(argv, env, log_path, a.timeout, unset)
        results = rf.results_of(log_path)
        out = {"name": name, "kind": "real", "wait": wait, "recorded": record, "trace": trace if record else None,
               "command": res["command_line"], "rc": res["rc"], "timed_out": res["timed_out"],
               "wall_s": res["wall_s"], "log": log_path, "ranks": {}}
        calls = lib.recorded_call_counts(trace, self.args.python) if record else {}
        for rank in range(a.nproc):
            r = results.get(rank) or {}
            out["ranks"][rank] = {"result": r, "median_step_ms": rf.median_after(r.get("step_ms"), a.warmup),
                                  "recorded_calls": calls.get(rank)}
        self.log.say(f"{name}: rc {res['rc']}, {res['wall_s']:.0f} s; median step " +
                     ", ".join(f"rank {k} {ms(v['median_step_ms'])}{phases(v['result'])}"
                               for k, v in out["ranks"].items()) +
                     (f"; recorded calls {calls}" if record else ""))
        self.log.append_file(name, log_path, max_lines=80)
        return out

    def replay(self, run: int, wait: str, trace: str) -> dict:
        """Every rank of `trace` at once, rank r on GPU r % (visible GPUs), each process seeing only its GPU."""
        a = self.args
        name = f"run{run}-replay-{wait}"
        out_trace = os.path.join(a.work, "traces", name)
        shutil.rmtree(out_trace, ignore_errors=True)
        extra = dict(kv.split("=", 1) for kv in a.replay_env)
        gpus = self.visible_gpus()
        jobs = []
        for rank in range(a.nproc):
            env, unset = rf.clean_env({"CUDA_VISIBLE_DEVICES": str(rank % gpus), "RANKLENS_TRACE_DIR": out_trace,
                                       **extra})
            argv = [a.ranklens, "replay", "--lib", a.lib, "--rank", str(rank), "--fidelity", "timing", "--trace", trace,
                    "--quiet", "--", a.python, *self.script(wait)]
            jobs.append((rank, argv, env, unset, os.path.join(a.work, "logs", f"{name}-rank{rank}.log")))
        self.log.say(f"{name} (timing, against {os.path.basename(trace)}), {a.nproc} ranks at once on {gpus} "
                     "GPU(s) ...")
        with cf.ThreadPoolExecutor(len(jobs)) as pool:
            futures = {rank: pool.submit(lib.run_logged, argv, env, log_path, a.timeout, unset)
                       for rank, argv, env, unset, log_path in jobs}
        stats = lib.trace_stats_any(out_trace, python=a.python)
        out = {"name": name, "kind": "replay", "wait": wait, "trace": trace, "event_trace": out_trace, "ranks": {},
               "stats_errors": stats.get("errors")}
        for rank, _argv, _env, _unset, log_path in jobs:
            res = futures[rank].result()
            counters = {}
            for r in stats.get("ranks", []):
                if (r.get("manifest") or {}).get("rank") == rank or r.get("dir", "").endswith(f"rank{rank}"):
                    counters = r.get("counters") or {}
            result = rf.results_of(log_path).get(rank) or {}
            out["ranks"][rank] = {"rc": res["rc"], "timed_out": res["timed_out"], "wall_s": res["wall_s"],
                                  "command": res["command_line"], "log": log_path, "result": result,
                                  "median_step_ms": rf.median_after(result.get("step_ms"), a.warmup),
                                  "counters": counters}
            self.log.say(f"{name} rank {rank}: rc {res['rc']}, {res['wall_s']:.0f} s, median step "
                         f"{ms(out['ranks'][rank]['median_step_ms'])}{phases(result)}")
            self.log.append_file(f"{name}-rank{rank}", log_path, max_lines=60)
        return out

    def one_run(self, run: int) -> dict:
        a = self.args
        t0 = time.monotonic()
        waits = WAITS if a.no_alternate or run % 2 == 1 else tuple(reversed(WAITS))
        arms = {}
        for wait in waits:
            arms[f"real_{wait}"] = self.real(run, wait, record=(wait == "early" or not a.late_without_recorder))
        trace = arms["real_early"]["trace"]
        for wait in waits:
            arms[f"replay_{wait}"] = self.replay(run, wait, trace)
        entry = {"run": run, "order": list(waits), "arms": arms, "wall_s": round(time.monotonic() - t0, 1),
                 "per_rank": {}}
        for rank in range(a.nproc):
            m = {arm: arms[arm]["ranks"][rank]["median_step_ms"] for arm in arms}
            real_red = reduction(m["real_late"], m["real_early"])
            rep_red = reduction(m["replay_late"], m["replay_early"])
            entry["per_rank"][rank] = {
                **{f"median_step_ms_{arm}": v for arm, v in m.items()},
                "real_reduction": real_red, "replay_reduction": rep_red,
                "difference_pp": (rep_red - real_red) * 100 if real_red is not None and rep_red is not None else None}
            self.log.say(f"run {run} rank {rank}: real early {ms(m['real_early'])} late {ms(m['real_late'])} -> "
                         f"{pp(real_red)}; replay early {ms(m['replay_early'])} late {ms(m['replay_late'])} -> "
                         f"{pp(rep_red)}")
        self.log.say(f"run {run} done in {entry['wall_s']} s")
        return entry

    def pooled(self, rank: int) -> dict:
        """Medians over the measured steps of every run, per arm; the reductions from them; replay signatures."""
        a = self.args
        arms = ("real_early", "real_late", "replay_early", "replay_late")
        steps = {arm: [] for arm in arms}
        phases = {arm: {} for arm in arms}
        per_run_diff = []
        sig_problems = []
        for run in self.doc["runs"]:
            for arm in arms:
                res = run["arms"][arm]["ranks"][rank]["result"] or {}
                steps[arm] += (res.get("step_ms") or [])[a.warmup:]
                for ph in ("a_ms", "b_ms", "exposed_wait_ms"):
                    phases[arm].setdefault(ph, []).extend((res.get(ph) or [])[a.warmup:])
            d = run["per_rank"][rank]["difference_pp"]
            if d is not None:
                per_run_diff.append(d)
            recorded = run["arms"]["real_early"]["ranks"][rank]["recorded_calls"]
            for wait in WAITS:
                rep = run["arms"][f"replay_{wait}"]["ranks"][rank]
                ok, sig = lib.replay_signature_ok(rep, recorded)
                rep["signature_match"], rep["signature"] = ok, sig
                if not ok or rep["rc"] != 0:
                    sig_problems.append(f"run {run['run']} replay {wait}: rc {rep['rc']}, {sig}")
            for wait in WAITS:
                real = run["arms"][f"real_{wait}"]
                if real["rc"] != 0:
                    sig_problems.append(f"run {run['run']} real {wait}: rc {real['rc']}")
        med = {arm: statistics.median(v) if v else None for arm, v in steps.items()}
        real_red = reduction(med["real_late"], med["real_early"])
        rep_red = reduction(med["replay_late"], med["replay_early"])
        diff = (rep_red - real_red) * 100 if real_red is not None and rep_red is not None else None
        complete = len(self.doc["runs"]) == a.runs and all(
            len(steps[arm]) == a.runs * (a.steps - a.warmup) for arm in arms)
        check = {"check": "overlap", "rank": rank, "runs": len(self.doc["runs"]), "runs_requested": a.runs,
                 "complete": complete, "measured_steps": {arm: len(v) for arm, v in steps.items()},
                 **{f"median_step_ms_{arm}": v for arm, v in med.items()},
                 "real_reduction": real_red, "replay_reduction": rep_red, "difference_pp": diff,
                 "per_run_difference_pp": per_run_diff,
                 "median_per_run_difference_pp": statistics.median(per_run_diff) if per_run_diff else None,
                 "phase_medians_ms": {arm: {ph: (statistics.median(v) if v else None) for ph, v in d.items()}
                                      for arm, d in phases.items()},
                 "problems": sig_problems, "tolerance_pp": a.tolerance_pp}
        check["within_tolerance"] = diff is not None and abs(diff) <= a.tolerance_pp
        check["pass"] = bool(complete and not sig_problems and check["within_tolerance"])
        return check


def main(argv=None) -> int:
    args = parse_args(argv)
    if not os.path.isfile(args.lib):
        print(f"error: --lib {args.lib}: no such file", file=sys.stderr)
        return 2
    bench = Bench(args)
    t0 = time.monotonic()
    longest = 0.0
    for run in range(1, args.runs + 1):
        spent = time.monotonic() - t0
        if run > 1 and spent + longest > args.budget:
            bench.log.say(f"budget: {spent:.0f} s spent + {longest:.0f} s for a run > --budget {args.budget:.0f} s; "
                          f"runs {run}..{args.runs} not started")
            bench.doc["runs_not_started"] = list(range(run, args.runs + 1))
            break
        try:
            entry = bench.one_run(run)
        except Exception as e:  # keep what was measured
            bench.log.say(f"run {run}: error {type(e).__name__}: {e}")
            bench.doc.setdefault("errors", []).append(f"run {run}: {type(e).__name__}: {e}")
            break
        longest = max(longest, entry["wall_s"])
        bench.doc["runs"].append(entry)
        lib.write_json(args.json, bench.doc)
    bench.doc["checks"] = []
    for rank in range(args.nproc):
        try:
            c = bench.pooled(rank)
        except Exception as e:
            c = {"check": "overlap", "rank": rank, "pass": False, "error": f"{type(e).__name__}: {e}"}
        bench.doc["checks"].append(c)
        bench.log.say(
            f"CHECK overlap rank {rank}: pooled over {c.get('runs')} run(s): real early "
            f"{ms(c.get('median_step_ms_real_early'))}, late {ms(c.get('median_step_ms_real_late'))} -> reduction "
            f"{pp(c.get('real_reduction'))}; replay early {ms(c.get('median_step_ms_replay_early'))}, late "
            f"{ms(c.get('median_step_ms_replay_late'))} -> {pp(c.get('replay_reduction'))}; difference "
            f"{fmt_pp(c.get('difference_pp'))} (tolerance {args.tolerance_pp} pp); problems {c.get('problems') or c.get('error') or 'none'} -> "
            f"{'PASS' if c.get('pass') else 'FAIL'}")
    bench.doc["wall_s"] = round(time.monotonic() - t0, 1)
    bench.doc["all_pass"] = bool(bench.doc["checks"]) and all(c.get("pass") for c in bench.doc["checks"])
    lib.write_json(args.json, bench.doc)
    bench.log.say(f"done in {bench.doc['wall_s']} s: {'PASS' if bench.doc['all_pass'] else 'FAIL'}; "
                  f"JSON {args.json}")
    return 0 if bench.doc["all_pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
