#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Estimated durations on the GPU machines (issue #7): history, leave-one-run-out error, estimated-timing replay,
and a bucket-size what-if.

1. History   Record --history-configs (default six: DDP GPT-2-small with bucket_cap_mb 25/50 and micro-batch 4/8,
             FSDP2 with micro-batch 4/8) with `ranklens record` (timing; small payloads) and build one history
             from them with `ranklens history build`. `ranklens estimate eval` gives leave-one-call-out and
             leave-one-run-out errors per op and size class (target: leave-one-run-out median <= 5%). With
             --history-repeats N every configuration is recorded N times (all configurations, then all again),
             and the history built from the first run of each alone is evaluated too: leaving one run out then
             leaves its configuration's other runs in, which the one-run-per-configuration figure does not.
2. Held out  Record --heldout (a configuration not in the history: DDP, bucket 40, micro-batch 6) and replay every
             rank with `timing: estimated` and the history, once per --targets (estimate_target observed: durations
             with waits; transfer: the collective's own time): no recorded duration is used. Median step time vs the
             real run's same rank (target 2.5%).
3. What-if   Replay the history's DDP bucket-25 recording running the script with --bucket-mb 100 instead
             (on_mismatch: estimate, history above, payload_max_bytes 0: no recorded control values) and compare with a real bucket-100 run (recorded, not in the
             history; target 3%). The real runs of 2 and 3 are run twice (--real-repeats) because the real step time
             varies between runs of one configuration; the error is reported against each and their mean.
Every replay gets --replay-env; each --variant replays parts 2 and 3 once more with its environment on top, judged
against the same real runs (e.g. NCCL-shaped holds beside the default one-warp holds).

Outputs --json (default bench/results/estimator/estimator_torch.json), a combined log next to it, the history and
the eval JSON under --work.

With --micro-batch-scale 4 every micro-batch is 4 times larger (history 16/32, held-out 24, what-if 32): the steps
of the default sizes are bound by the host, whose speed moves the real step time by up to 25% between runs.

Example (2-GPU machine, repository root; about 6 minutes):
    RANKLENS_COMMIT=<sha> /opt/torch/.venv/bin/python bench/estimator_torch.py --lib .carry/lib/libnccl.so.2 \\
        --ranklens .carry/bin/ranklens --json $OUT/estimator_torch.json
Exit status: 0 when every check passed, 1 otherwise, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import record_bench_lib as lib  # noqa: E402
import replay_fidelity_torch as rfz  # noqa: E402  (recording and replaying every rank)

REPO = lib.REPO
# (parallel, bucket MiB, micro-batch) of the history's runs, the held-out run and the what-if (recorded, target).
HISTORY_CONFIGS = [("ddp", 25, 8), ("ddp", 50, 8), ("ddp", 25, 4), ("ddp", 50, 4), ("fsdp2", 25, 8), ("fsdp2", 25, 4)]
HELD_OUT_CONFIG = ("ddp", 40, 6)
WHAT_IF_CONFIGS = (("ddp", 25, 8), ("ddp", 100, 8))


def config_name(cfg) -> str:
    mode, bucket, micro_batch = cfg
    return f"{mode}-b{bucket}-mb{micro_batch}" if mode == "ddp" else f"{mode}-mb{micro_batch}"


def configurations(scale: int):
    """(history {name: cfg}, held-out (name, cfg), what-if (recorded name, (target name, cfg))) with every
    micro-batch multiplied by `scale` (4: GPU-bound GPT-2 small, whose step time the host no longer sets)."""
    scaled = lambda cfg: (cfg[0], cfg[1], cfg[2] * scale)  # noqa: E731
    history = {config_name(scaled(c)): scaled(c) for c in HISTORY_CONFIGS}
    recorded, target = map(scaled, WHAT_IF_CONFIGS)
    return (history, (config_name(scaled(HELD_OUT_CONFIG)), scaled(HELD_OUT_CONFIG)),
            (config_name(recorded), (config_name(target), target)))



def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", required=True, help="RankLens libnccl.so.2")
    p.add_argument("--ranklens", default=os.path.join(REPO, "build", "release", "tools", "ranklens"),
                   help="the ranklens launcher (default: %(default)s)")
    p.add_argument("--python", default=sys.executable, help="interpreter with torch (default: %(default)s)")
    p.add_argument("--nproc", type=int, default=2, help="GPUs of the recorded jobs (default: %(default)s)")
    p.add_argument("--steps", type=int, default=30, help="steps per run (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=5, help="steps left out of the medians (default: %(default)s)")
    p.add_argument("--real-repeats", type=int, default=2, help="real runs of each reference (default: %(default)s)")
    p.add_argument("--parts", default="history,heldout,whatif", help="comma list (default: %(default)s)")
    p.add_argument("--json", default=os.path.join(REPO, "bench", "results", "estimator", "estimator_torch.json"))
    p.add_argument("--work", default="/tmp/ranklens-estimator", help="logs, traces, history")
    p.add_argument("--targets", default="observed,transfer",
                   help="estimate_target values the held-out part replays with, one replay each (default: %(default)s)")
    p.add_argument("--history", help="an existing history file for the heldout and whatif parts (then leave out "
                                     "the history part); default: the one the history part builds under --work")
    p.add_argument("--timeout", type=float, default=200, help="seconds per run (default: %(default)s)")
    p.add_argument("--history-repeats", type=int, default=1,
                   help="runs of each history configuration (default: %(default)s)")
    rfz.add_env_options(p, "heldout and whatif: replay once more per variant against the same real runs")
    p.add_argument("--sample-gpu", action="store_true",
                   help="sample every GPU's SM clock and power during each run (nvidia-smi, every 500 ms); the step "
                        "checks then show the real and replayed clocks (a lone replayed GPU may run faster)")
    p.add_argument("--micro-batch-scale", type=int, default=1,
                   help="multiply every configuration's micro-batch (history 4/8, held-out 6, what-if 8); 4 makes "
                        "GPT-2 small GPU-bound on an H200, so that the host no longer sets the step time (default: "
                        "%(default)s)")
    args = p.parse_args(argv)
    if args.micro_batch_scale < 1:
        p.error("--micro-batch-scale must be >= 1")
    if args.history_repeats < 1:
        p.error("--history-repeats must be >= 1")
    args.variants = rfz.parse_variants(p, args.variant)
    args.lib, args.ranklens, args.json = map(os.path.abspath, (args.lib, args.ranklens, args.json))
    return args


def train_args(cfg, steps: int) -> list[str]:
    mode, bucket, micro_batch = cfg
    return [*rfz.GPT2_SMALL, "--steps", str(steps), "--micro-batch", str(micro_batch), "--bucket-mb", str(bucket)]


def clock_text(real: list, replay) -> str:
    """'; SM MHz real a, replay b; W real c, replay d' from --sample-gpu's summaries, '' without them."""
    if not replay and not any(real):
        return ""
    def show(g, key):
        return f"{g[key]:.0f}" if g else "-"
    return (f"; SM MHz real {'/'.join(show(g, 'sm_mhz_median') for g in real) or '-'}, replay "
            f"{show(replay, 'sm_mhz_median')}; W real {'/'.join(show(g, 'power_w_median') for g in real) or '-'}, "
            f"replay {show(replay, 'power_w_median')}")


class EstimatorBench:
    def __init__(self, args):
        self.args = args
        # The replay-fidelity bench records and replays, with its own parser's defaults for everything not set here
        # (a hand-made subset broke each time that bench gained an option).
        self.rf = rfz.Bench(rfz.parse_args(
            ["--lib", args.lib, "--python", args.python, "--nproc", str(args.nproc), "--ranklens", args.ranklens,
             "--work", args.work, "--timeout", str(args.timeout), "--tolerance", "0", "--json", args.json,
             *[f"--record-env={kv}" for kv in args.record_env], *[f"--replay-env={kv}" for kv in args.replay_env],
             *(["--sample-gpu"] if args.sample_gpu else [])]))
        self.doc = self.rf.doc
        self.doc.update({"checks": [], "targets": {"leave_one_run_out_median": 0.05, "estimated_step_time": 0.025,
                                                   "what_if_step_time": 0.03}})
        self.history = os.path.abspath(args.history) if args.history else os.path.join(args.work, "cluster.hist")
        self.configs, self.held_out, self.what_if = configurations(args.micro_batch_scale)
        self.doc["configurations"] = {"history": self.configs, "held_out": self.held_out, "what_if": self.what_if}
        self.traces: dict[str, str] = {}  # name -> its first run's trace
        self.all_traces: dict[str, list[str]] = {}
        self.real: dict[str, list[dict]] = {}  # name -> per run {rank: median step ms}

    def say(self, text: str):
        self.rf.log.say(text)

    def record(self, name: str, cfg, run_name: str | None = None):
        run, trace = self.rf.record(run_name or name, cfg[0], "small", train_args(cfg, self.args.steps))
        medians = {rank: rfz.median_after((r or {}).get("step_ms"), self.args.warmup)
                   for rank, r in run["results"].items()}
        self.real.setdefault(name, []).append(medians)
        self.traces.setdefault(name, trace)
        self.all_traces.setdefault(name, []).append(trace)
        if run["rc"] != 0:
            raise RuntimeError(f"record {run_name or name}: rc {run['rc']}")
        return trace

    def ranklens(self, *argv: str, name: str) -> dict:
        log = os.path.join(self.args.work, "logs", name + ".log")
        res = lib.run_logged([self.args.ranklens, *argv], {}, log, self.args.timeout)
        self.rf.log.append_file(name, log, max_lines=60)
        return res

    def part_history(self):
        if self.args.history:
            raise RuntimeError("--history names an existing history: leave the history part out (--parts)")
        for rep in range(self.args.history_repeats):
            for name, cfg in self.configs.items():
                self.record(name, cfg, run_name=name if rep == 0 else f"{name}-run{rep + 1}")
        ev = self.build_and_eval(self.history, [t for n in self.configs for t in self.all_traces[n]], "")
        self.doc["estimate_eval"] = ev
        if self.args.history_repeats > 1:
            first = os.path.join(self.args.work, "cluster-first-runs.hist")
            one = self.build_and_eval(first, [self.traces[n] for n in self.configs], "-first-runs")
            self.doc["estimate_eval_one_run_per_configuration"] = one
            o = (one.get("leave_one_run_out") or {}).get("all") or {}
            self.say(f"leave-one-run-out with one run per configuration ({one.get('runs')} runs): median "
                     f"{o.get('median')}, p90 {o.get('p90')} (not a check: no other run of the left-out "
                     "configuration remains)")
        loro = (ev.get("leave_one_run_out") or {}).get("all") or {}
        check = {"check": "leave_one_run_out", "runs": ev.get("runs"), "samples": ev.get("samples"),
                 "runs_per_configuration": self.args.history_repeats,
                 "median": loro.get("median"), "p90": loro.get("p90"), "count": loro.get("count"),
                 "pass": loro.get("median") is not None and loro["median"] <= 0.05}
        self.doc["checks"].append(check)
        self.say(f"CHECK leave-one-run-out: median {loro.get('median')}, p90 {loro.get('p90')} over "
                 f"{loro.get('count')} calls of {ev.get('runs')} runs -> {'PASS' if check['pass'] else 'FAIL'}")

    def build_and_eval(self, path: str, traces: list[str], suffix: str) -> dict:
        """`ranklens history build` of `traces` into `path`, then `ranklens estimate eval` of it."""
        if os.path.exists(path):
            os.remove(path)
        if self.ranklens("history", "build", *traces, "-o", path, name="history-build" + suffix)["rc"] != 0:
            raise RuntimeError("ranklens history build failed")
        eval_json = os.path.join(self.args.work, f"estimate_eval{suffix}.json")
        self.ranklens("estimate", "eval", "--history", path, "--json", eval_json, name="estimate-eval" + suffix)
        with open(eval_json, encoding="utf-8") as f:
            return json.load(f)

    def compare_steps(self, check: str, reference: str, replay: dict, extra: dict, target: float):
        """Replayed median step per rank vs each real run of `reference` and their mean."""
        for rank in range(self.args.nproc):
            rep = rfz.median_after(((replay["ranks"][rank].get("result")) or {}).get("step_ms"), self.args.warmup)
            reals = [r.get(rank) for r in self.real.get(reference, []) if r.get(rank)]
            errors = [(rep - r) / r for r in reals] if rep else []
            mean_real = statistics.mean(reals) if reals else None
            err = (rep - mean_real) / mean_real if rep and mean_real else None
            counters = replay["ranks"][rank].get("counters") or {}
            # GPU samples (--sample-gpu): the reference's recorded runs on this rank's GPU, the replay on its own.
            real_gpu = [(r.get("gpu") or {}).get(str(rank)) for r in self.rf.doc["runs"]
                        if r.get("kind") == "record" and r.get("name", "").split("-again")[0] == reference]
            replay_gpu = (replay.get("gpu") or {}).get(str(rank % replay.get("gpus", 1)))
            c = {"check": check, "rank": rank, "reference": reference, "median_step_ms_real_runs": reals,
                 "gpu": {"real": real_gpu, "replay": replay_gpu},
                 "median_step_ms_replay": rep, "errors_vs_each_real_run": errors, "error_vs_mean": err,
                 "replay_rc": replay["ranks"][rank].get("rc"), "counters": counters, **extra,
                 "pass": err is not None and abs(err) <= target and replay["ranks"][rank].get("rc") == 0}
            self.doc["checks"].append(c)
            self.say(f"CHECK {check} rank {rank}: real {reals} ms, replay {rep} ms, error vs mean "
                     f"{err if err is None else f'{err * 100:+.2f}%'} (estimated "
                     f"{counters.get('replay_estimated')} of {counters.get('replay_calls')} calls)"
                     f"{clock_text(real_gpu, replay_gpu)} -> {'PASS' if c['pass'] else 'FAIL'}")

    def replay(self, name: str, trace: str, cfg, env: dict[str, str], variant: str) -> dict:
        """One replay of every rank: --replay-env, then `env` (this part's settings), then the variant's."""
        label = name if variant == "plain" else f"{name}-{variant}"
        return self.rf.replay_all(label, cfg[0], "timing", trace, lambda r: train_args(cfg, self.args.steps),
                                  variant_env={**env, **self.args.variants[variant]})

    def variant_extra(self, variant: str) -> dict:
        return {"variant": variant, "variant_env": self.args.variants[variant]}

    def part_heldout(self):
        name, cfg = self.held_out
        trace = self.record(name, cfg)
        for i in range(1, self.args.real_repeats):
            self.record(name, cfg, run_name=f"{name}-again{i}")
        for target in self.args.targets.split(","):
            for variant in self.args.variants:
                rep = self.replay(f"{name}-estimated-{target}", trace, cfg,
                                  {"RANKLENS_TIMING": "estimated", "RANKLENS_HISTORY": self.history,
                                   "RANKLENS_ESTIMATE_TARGET": target}, variant)
                self.compare_steps(f"estimated_timing[{target}{'' if variant == 'plain' else ', ' + variant}]",
                                   name, rep, {"config": name, "estimate_target": target,
                                               **self.variant_extra(variant)}, 0.025)

    def part_whatif(self):
        recorded, (target, cfg) = self.what_if
        if recorded not in self.traces:
            self.record(recorded, self.configs[recorded])
        for i in range(self.args.real_repeats):
            self.record(target, cfg, run_name=target if i == 0 else f"{target}-again{i}")
        # No recorded control payloads: DDP takes its rebuilt bucket layout from rank 0's broadcast, so the recorded
        # (bucket 25) layout would override the change being asked about (with them, every call matched the recording).
        for variant in self.args.variants:
            rep = self.replay(f"whatif-{recorded}-as-b100", self.traces[recorded], cfg,
                              {"RANKLENS_ON_MISMATCH": "estimate", "RANKLENS_HISTORY": self.history,
                               "RANKLENS_PAYLOAD_MAX_BYTES": "0"}, variant)
            self.compare_steps("what_if_bucket_100" + ("" if variant == "plain" else f"[{variant}]"), target, rep,
                               {"recording": recorded, **self.variant_extra(variant)}, 0.03)


def main(argv=None) -> int:
    args = parse_args(argv)
    bench = EstimatorBench(args)
    t0 = time.monotonic()
    for part in args.parts.split(","):
        try:
            getattr(bench, "part_" + part)()
        except Exception as e:  # keep what was measured
            bench.doc["checks"].append({"check": part, "pass": False, "error": f"{type(e).__name__}: {e}"})
            bench.say(f"CHECK {part}: error {type(e).__name__}: {e}")
        bench.doc["real_median_step_ms"] = bench.real
        lib.write_json(args.json, bench.doc)
    bench.doc["wall_s"] = round(time.monotonic() - t0, 1)
    bench.doc["all_pass"] = all(c.get("pass") for c in bench.doc["checks"])
    lib.write_json(args.json, bench.doc)
    bench.say(f"done in {bench.doc['wall_s']} s: {'ALL PASS' if bench.doc['all_pass'] else 'SOME FAILED'}")
    return 0 if bench.doc["all_pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
