#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Overhead of the RankLens recorder on real 2-GPU training: step time with and without record mode.

For each parallel mode (DDP, FSDP2), runs examples/torch/train_gpt.py (GPT-2 small: 768 wide, 12 layers, 12 heads,
vocabulary 50304, 1024 tokens, bf16 autocast) under `torchrun --standalone --nproc-per-node 2`, alternating
process-level runs in the order

    baseline  plain torch, the wheel's NCCL (no LD_PRELOAD, no RANKLENS_* variable)
    timing    recorder, RANKLENS_PAYLOADS=none  (calls + GPU durations only)
    kernel    the same with RANKLENS_TIMING_CLOCK=kernel (durations from NCCL's profiler; not in the default --arms)
    small     recorder, RANKLENS_PAYLOADS=small (received buffers up to payload_max_bytes; not in the default)
    full      recorder, RANKLENS_PAYLOADS=all   (every received buffer too)

repeated --repeats times. Each run's time is the mean over ranks of train_gpt.py's median_step_ms (steps after the
first 3). Per arm it reports the median step time over repeats and the ratio to baseline (the median over repeats
of the per-repeat ratio arm / baseline of the same repeat: runs side by side in one invocation, so that drift of the
machine reaches both). For a small overhead, raise --repeats: the per-repeat ratios show the spread. For recorded runs it counts the trace's records and
reads the manifests' payload counters (payload_raw_bytes, payload_compressed_bytes, records_dropped,
payloads_dropped) and the bytes on disk; full-payload traces are deleted once counted (--keep-traces).

Outputs: --json (default bench/results/record_overhead_torch.json; the kept result is
bench/results/record/record_overhead_torch.json; rewritten after every run) and one combined log (--log, default:
the JSON path with .log) holding every run's output; per-run logs and traces go to --work.

Example (GPU machine, repository root; about 6 minutes with the defaults, at most 10):
    RANKLENS_COMMIT=<sha> /opt/torch/.venv/bin/python bench/record_overhead_torch.py \\
        --lib .carry/lib/libnccl.so.2 --json $OUT/record_overhead_torch.json
Exit status: 0 when every run passed, 1 otherwise, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import record_bench_lib as lib  # noqa: E402

REPO = lib.REPO
TRAIN = "examples/torch/train_gpt.py"
MODEL_ARGS = "--d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"
ARMS = {"baseline": None, "timing": "none", "kernel": "none", "small": "small", "full": "all"}  # -> RANKLENS_PAYLOADS
ARM_ENV = {"kernel": {"RANKLENS_TIMING_CLOCK": "kernel"}}  # an arm's own variables, after --recorder-env


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", default=".carry/lib/libnccl.so.2", help="RankLens's libnccl.so.2 (default: %(default)s)")
    p.add_argument("--real-nccl", default=None,
                   help="set RANKLENS_REAL_NCCL to this path in recorded runs (default: unset: the library finds the "
                        "wheel's NCCL that torch preloads)")
    p.add_argument("--python", default=sys.executable,
                   help="interpreter with torch, used as PY -m torch.distributed.run (default: %(default)s)")
    p.add_argument("--modes", default="ddp,fsdp2", help="parallel modes, comma-separated (default: %(default)s)")
    p.add_argument("--arms", default="baseline,timing,full",
                   help="arms in run order, from " + ", ".join(ARMS) + " (default: %(default)s; baseline is needed "
                        "for ratios)")
    p.add_argument("--repeats", type=int, default=2, help="repeats of the arm sequence per mode (default: %(default)s)")
    p.add_argument("--steps", type=int, default=30, help="training steps per run (default: %(default)s)")
    p.add_argument("--micro-batch", type=int, default=8, help="sequences per rank per step (default: %(default)s)")
    p.add_argument("--nproc", type=int, default=2, help="processes (GPUs) per run (default: %(default)s)")
    p.add_argument("--model-args", default=MODEL_ARGS, help="model size arguments (default: %(default)s)")
    p.add_argument("--train-args", default="", help="extra train_gpt.py arguments, one shell-quoted string")
    p.add_argument("--json", default=os.path.join(REPO, "bench", "results", "record_overhead_torch.json"),
                   help="result JSON (default: %(default)s)")
    p.add_argument("--log", default=None, help="combined log (default: the --json path with .log)")
    p.add_argument("--recorder-env", action="append", default=[], metavar="KEY=VALUE",
                   help="extra variable for the recorder arms, e.g. RANKLENS_STAGING_FULL=wait (repeatable; the "
                        "caller's own RANKLENS_* variables are removed from every run)")
    p.add_argument("--work", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "ranklens-record-overhead"),
                   help="per-run logs and traces (default: %(default)s)")
    p.add_argument("--trace-root", default=None, help="where recorded traces go (default: WORK/traces)")
    p.add_argument("--keep-traces", choices=("none", "metadata", "all"), default="metadata",
                   help="keep no trace, only those without payload blobs (timing), or all (default: %(default)s)")
    p.add_argument("--timeout", type=int, default=150, help="seconds per run before it is killed (default: %(default)s)")
    p.add_argument("--budget", type=int, default=420,
                   help="start a run only if the time spent plus the previous run's duration stays within this many "
                        "seconds; the rest are reported as skipped (default: %(default)s; with --timeout 150 the "
                        "whole benchmark ends within 10 minutes)")
    p.add_argument("--min-free-gib", type=float, default=16.0,
                   help="skip a full-payload run when the trace filesystem has less free space (default: %(default)s)")
    p.add_argument("--abort-free-gib", type=float, default=4.0,
                   help="stop a recorded run when free space under --trace-root falls below this "
                        "(default: %(default)s)")
    args = p.parse_args(argv)
    args.mode_list = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in args.mode_list if m not in ("ddp", "fsdp2")]
    if bad or not args.mode_list:
        p.error(f"--modes: want ddp and/or fsdp2, got {args.modes!r}")
    args.arm_list = [a.strip() for a in args.arms.split(",") if a.strip()]
    bad = [a for a in args.arm_list if a not in ARMS]
    if bad or not args.arm_list or len(set(args.arm_list)) != len(args.arm_list):
        p.error(f"--arms: want distinct names from {', '.join(ARMS)}, got {args.arms!r}")
    for name in ("repeats", "steps", "micro_batch", "nproc", "timeout", "budget"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if args.steps <= 3:
        p.error("--steps must be above 3 (train_gpt.py leaves the first 3 steps out of median_step_ms)")
    try:
        args.model_extra = shlex.split(args.model_args)
        args.train_extra = shlex.split(args.train_args)
    except ValueError as e:
        p.error(f"--model-args/--train-args: {e}")
    args.json = os.path.abspath(args.json)
    args.log = os.path.abspath(args.log) if args.log else os.path.splitext(args.json)[0] + ".log"
    args.work = os.path.abspath(args.work)
    args.trace_root = os.path.abspath(args.trace_root) if args.trace_root else os.path.join(args.work, "traces")
    args.lib = os.path.abspath(args.lib)
    return args


def arm_env(args, arm: str, trace_dir: str | None) -> tuple[dict[str, str], list[str]]:
    """(variables to set, variables to remove) for one arm."""
    unset = [k for k in os.environ if k.startswith("RANKLENS_")]
    preload = [x for x in os.environ.get("LD_PRELOAD", "").replace(":", " ").split()
               if os.path.basename(x) != "libnccl.so.2"]
    env: dict[str, str] = {}
    if ARMS[arm] is None:
        if "LD_PRELOAD" in os.environ:
            if preload:
                env["LD_PRELOAD"] = ":".join(preload)
            else:
                unset.append("LD_PRELOAD")
        return env, unset
    env["LD_PRELOAD"] = ":".join([args.lib, *preload])
    env["RANKLENS_MODE"] = "record"
    env["RANKLENS_TRACE_DIR"] = trace_dir or ""
    env["RANKLENS_PAYLOADS"] = ARMS[arm]
    if args.real_nccl:
        env["RANKLENS_REAL_NCCL"] = os.path.abspath(args.real_nccl)
    for item in args.recorder_env:
        key, _, value = item.partition("=")
        env[key] = value
    env.update(ARM_ENV.get(arm, {}))
    return env, [k for k in unset if k not in env]


def judge(run: dict, args) -> None:
    reasons = []
    if run["timed_out"]:
        reasons.append(f"timed out after {args.timeout} s")
    if run.get("aborted"):
        reasons.append(f"stopped: {run['aborted']}")
    if run["rc"] != 0:
        reasons.append(f"exit code {run['rc']}")
    by_rank = {r.get("rank"): r for r in run["results"]}
    for rank in range(args.nproc):
        r = by_rank.get(rank)
        if r is None:
            reasons.append(f"no RESULT line from rank {rank}")
        elif not r.get("all_finite"):
            reasons.append(f"rank {rank}: non-finite loss")
        elif r.get("steps") != args.steps:
            reasons.append(f"rank {rank}: {r.get('steps')} of {args.steps} steps")
    tr = run.get("trace")
    if tr is not None:
        if tr["errors"]:
            reasons += tr["errors"][:3]
        if tr["rank_dirs"] != args.nproc:
            reasons.append(f"trace has {tr['rank_dirs']} rank directories, want {args.nproc} (is the recorder "
                           "loaded? LD_PRELOAD, RANKLENS_MODE)")
        if tr["Call"] == 0:
            reasons.append("trace has no Call records")
        if tr["Timing"] == 0:
            reasons.append("trace has no Timing records")
        if tr["records_dropped"] or tr["payloads_dropped"]:
            run["warnings"].append(f"recorder dropped {tr['records_dropped']} records and {tr['payloads_dropped']} "
                                   "payloads")
    run["pass"] = not reasons
    run["reasons"] = reasons


def summarise(runs: list[dict], args) -> dict:
    out: dict = {}
    for mode in args.mode_list:
        base_by_rep = {r["repeat"]: r["step_ms"] for r in runs
                       if r["mode"] == mode and r["arm"] == "baseline" and r.get("pass") and r.get("step_ms")}
        base_losses = {r["repeat"]: r.get("losses_rank0") for r in runs
                       if r["mode"] == mode and r["arm"] == "baseline" and r.get("pass")}
        arms = {}
        for arm in args.arm_list:
            mine = [r for r in runs if r["mode"] == mode and r["arm"] == arm and not r.get("skipped")]
            ok = [r for r in mine if r.get("pass") and r.get("step_ms")]
            ratios = [r["step_ms"] / base_by_rep[r["repeat"]] for r in ok
                      if arm != "baseline" and r["repeat"] in base_by_rep]
            entry = {"runs": len(mine), "passed": len(ok), "step_ms": [r["step_ms"] for r in ok],
                     "median_step_ms": lib.median_or_none(r["step_ms"] for r in ok)}
            if arm != "baseline":
                entry["ratios_to_baseline"] = [round(x, 5) for x in ratios]
                entry["ratio_to_baseline"] = lib.median_or_none(ratios)
                entry["overhead_pct"] = (entry["ratio_to_baseline"] - 1) * 100 if ratios else None
                entry["ratio_of_medians"] = (entry["median_step_ms"] / lib.median_or_none(base_by_rep.values())
                                             if entry["median_step_ms"] and base_by_rep else None)
                same = [r.get("losses_rank0") == base_losses.get(r["repeat"]) for r in ok
                        if base_losses.get(r["repeat"]) is not None]
                entry["losses_identical_to_baseline"] = all(same) if same else None
                traces = [r["trace"] for r in ok if r.get("trace")]
                if traces:
                    def tot(k):
                        return sum(t.get(k) or 0 for t in traces)
                    entry["trace_totals"] = {k: tot(k) for k in (
                        "Call", "Timing", "PayloadRef", "records_written", "records_dropped", "payloads_written",
                        "payloads_dropped", "payload_raw_bytes", "payload_compressed_bytes", "bytes_on_disk",
                        "timing_failed")}
                    counters: dict = {}
                    for t in traces:
                        for k, v in (t.get("counters") or {}).items():
                            counters[k] = counters.get(k, 0) + v
                    entry["trace_totals"]["counters"] = counters
                    entry["payload_raw_MB_per_step"] = tot("payload_raw_bytes") / 1e6 / (len(traces) * args.steps)
            arms[arm] = entry
        out[mode] = arms
    return out


def print_table(summary: dict, say) -> None:
    rows = [("mode", "arm", "runs ok", "median step ms", "ratio", "overhead %", "payload MB/step", "dropped rec/pay")]
    for mode, arms in summary.items():
        for arm, e in arms.items():
            tt = e.get("trace_totals") or {}
            rows.append((mode, arm, f"{e['passed']}/{e['runs']}",
                         f"{e['median_step_ms']:.2f}" if e["median_step_ms"] else "-",
                         f"{e['ratio_to_baseline']:.4f}" if e.get("ratio_to_baseline") else "-",
                         f"{e['overhead_pct']:+.2f}" if e.get("overhead_pct") is not None else "-",
                         f"{e['payload_raw_MB_per_step']:.1f}" if e.get("payload_raw_MB_per_step") is not None else "-",
                         f"{tt.get('records_dropped', '-')}/{tt.get('payloads_dropped', '-')}" if tt else "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, r in enumerate(rows):
        say("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if i == 0:
            say("  ".join("-" * w for w in widths))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log = lib.CombinedLog(args.log)
    say = log.say
    recorded = any(ARMS[a] is not None for a in args.arm_list)
    if recorded and not os.path.isfile(args.lib):
        print(f"error: --lib {args.lib}: no such file (RankLens's libnccl.so.2; on the GPU machine "
              ".carry/lib/libnccl.so.2)", file=sys.stderr)
        return 2
    if shutil.which(args.python) is None and not os.path.isfile(args.python):
        print(f"error: --python {args.python}: not found", file=sys.stderr)
        return 2
    os.makedirs(os.path.join(args.work, "logs"), exist_ok=True)
    os.makedirs(args.trace_root, exist_ok=True)

    doc = {"benchmark": "record_overhead_torch", **lib.provenance(), "python": args.python,
           "lib": args.lib if recorded else None, "real_nccl": args.real_nccl, "modes": args.mode_list,
           "arms": {a: ARMS[a] for a in args.arm_list}, "repeats": args.repeats, "steps": args.steps,
           "micro_batch": args.micro_batch, "nproc": args.nproc, "model_args": args.model_extra,
           "train_args": args.train_extra, "trace_root": args.trace_root, "work": args.work,
           "order": "per mode: for each repeat, the arms in the order given", "runs": []}
    if recorded:
        doc["lib_sha256"] = lib.file_sha256(args.lib)
    say(f"record_overhead_torch: {doc['command']}")
    say(f"commit {doc['commit']}, device {doc['device']} x{len(doc['devices'])}, python {args.python}")
    plan = [(mode, rep, arm) for mode in args.mode_list for rep in range(args.repeats) for arm in args.arm_list]
    say(f"{len(plan)} runs of {args.steps} steps; budget {args.budget} s; json {args.json}; log {args.log}")

    runs: list[dict] = doc["runs"]
    t_start = time.monotonic()
    last_wall = 0.0
    for i, (mode, rep, arm) in enumerate(plan, 1):
        name = f"{mode}-{arm}-r{rep}"
        run: dict = {"name": name, "mode": mode, "arm": arm, "repeat": rep, "payloads": ARMS[arm], "warnings": []}
        runs.append(run)
        elapsed = time.monotonic() - t_start
        if elapsed + last_wall > args.budget:
            run["skipped"] = f"budget: {elapsed:.0f} s elapsed of {args.budget} s"
            say(f"[{i}/{len(plan)}] {name}: SKIPPED ({run['skipped']})")
            continue
        trace_dir = os.path.join(args.trace_root, name) if ARMS[arm] is not None else None
        if trace_dir:
            shutil.rmtree(trace_dir, ignore_errors=True)
            if ARMS[arm] == "all":
                free = lib.free_gib(args.trace_root)
                if free < args.min_free_gib:
                    run["skipped"] = f"only {free:.1f} GiB free under {args.trace_root} (--min-free-gib)"
                    say(f"[{i}/{len(plan)}] {name}: SKIPPED ({run['skipped']})")
                    continue
        if trace_dir:
            os.makedirs(trace_dir, exist_ok=True)
        env_set, env_unset = arm_env(args, arm, trace_dir)
        argv_ = [args.python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.nproc),
                 TRAIN, "--parallel", mode, "--steps", str(args.steps), "--micro-batch", str(args.micro_batch),
                 *args.model_extra, *args.train_extra]
        log_path = os.path.join(args.work, "logs", name + ".log")
        say(f"[{i}/{len(plan)}] {name} ...")
        def disk_watch(root=args.trace_root, floor=args.abort_free_gib):
            free = lib.free_gib(root)
            return f"only {free:.1f} GiB left free under {root} (--abort-free-gib {floor})" if free < floor else None

        res = lib.run_logged(argv_, env_set, log_path, args.timeout, env_unset,
                             watch=disk_watch if trace_dir else None)
        last_wall = res["wall_s"]
        text = lib.read_text(log_path)
        results, bad = lib.parse_result_lines(text)
        run.update({"command": res["command_line"], "rc": res["rc"], "timed_out": res["timed_out"],
                    "aborted": res["aborted"],
                    "wall_s": res["wall_s"], "log": log_path, "parse_errors": bad,
                    "results": [{k: r.get(k) for k in ("rank", "median_step_ms", "steps", "all_finite", "final_loss",
                                                       "device")} for r in results]})
        medians = [r.get("median_step_ms") for r in results if isinstance(r.get("median_step_ms"), (int, float))]
        run["step_ms"] = sum(medians) / len(medians) if medians else None
        r0 = next((r for r in results if r.get("rank") == 0), None)
        run["losses_rank0"] = r0.get("losses") if r0 else None
        if trace_dir:
            st = lib.trace_stats_any(trace_dir, args.python)
            t = st.get("totals", {})
            run["trace"] = {**{k: t.get(k, 0) for k in (
                "Call", "Timing", "PayloadRef", "Stage", "CommInit", "records_written", "records_dropped",
                "payloads_written", "payloads_dropped", "payload_raw_bytes", "payload_compressed_bytes",
                "bytes_on_disk", "problems", "rank_dirs", "all_closed", "timing_failed", "counters")},
                "errors": st["errors"], "dir": trace_dir}
            keep = args.keep_traces == "all" or (args.keep_traces == "metadata" and ARMS[arm] == "none")
            if not keep:
                shutil.rmtree(trace_dir, ignore_errors=True)
                run["trace"]["deleted"] = True
        judge(run, args)
        base = next((r for r in runs if r["mode"] == mode and r["repeat"] == rep and r["arm"] == "baseline"
                     and r.get("pass")), None)
        ratio = f" (x{run['step_ms'] / base['step_ms']:.4f} of baseline)" if base and run.get("step_ms") and \
            arm != "baseline" and base.get("step_ms") else ""
        extra = ""
        if run.get("trace"):
            tr = run["trace"]
            extra = (f"; trace {tr['Call']} calls, {tr['Timing']} timings, {tr['PayloadRef']} payloads "
                     f"({tr['payload_raw_bytes'] / 1e6:.1f} MB raw, {tr['payload_compressed_bytes'] / 1e6:.1f} MB "
                     f"compressed), dropped {tr['records_dropped']}/{tr['payloads_dropped']}, "
                     f"{tr['bytes_on_disk'] / 1e6:.1f} MB on disk")
            nonzero = {k: v for k, v in (tr.get("counters") or {}).items() if v}
            if nonzero:
                extra += "; counters " + ", ".join(f"{k} {v}" for k, v in sorted(nonzero.items()))
        step_txt = f"{run['step_ms']:.2f} ms/step" if run.get("step_ms") else "no step time"
        say(f"[{i}/{len(plan)}] {name}: {'PASS' if run['pass'] else 'FAIL'} rc {res['rc']}, {res['wall_s']:.0f} s, "
            f"{step_txt}{ratio}{extra}; elapsed {time.monotonic() - t_start:.0f} s")
        if not run["pass"]:
            say(f"    reasons: {'; '.join(run['reasons'])}")
        for w in run["warnings"]:
            say(f"    warning: {w}")
        log.append_file(name, log_path, max_lines=400)
        doc["summary"] = summarise(runs, args)
        lib.write_json(args.json, doc)

    doc["summary"] = summarise(runs, args)
    judged = [r for r in runs if not r.get("skipped")]
    doc["all_pass"] = bool(judged) and all(r.get("pass") for r in judged)
    doc["skipped_runs"] = sum(1 for r in runs if r.get("skipped"))
    doc["complete"] = doc["skipped_runs"] == 0
    doc["elapsed_s"] = round(time.monotonic() - t_start, 1)
    doc["finished"] = lib.utc_now()
    lib.write_json(args.json, doc)
    say("")
    say(f"recorder overhead, {args.nproc} x {doc['device']}, {args.steps} steps, {args.repeats} repeats "
        f"(commit {str(doc['commit'])[:12]}):")
    print_table(doc["summary"], say)
    say(f"wrote {args.json} and {args.log}; {doc['elapsed_s']:.0f} s; "
        + ("ALL RUNS PASSED" if doc["all_pass"] else "SOME RUNS FAILED OR NONE RAN")
        + (f"; {doc['skipped_runs']} skipped" if doc["skipped_runs"] else ""))
    return 0 if doc["all_pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
