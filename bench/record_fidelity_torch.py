#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Acceptance checks of record mode on 2 GPUs: the recorder must not change results, and its GPU durations
must agree with the profiler's.

(a) bitwise   For each parallel mode (DDP, FSDP2): examples/torch/train_gpt.py --deterministic (with
              CUBLAS_WORKSPACE_CONFIG=:4096:8) without the recorder and with it (RANKLENS_PAYLOADS=small, the
              default), each saving every rank's final parameters (--save-params; FSDP2: the local shards). Every
              tensor must be torch.equal between the two runs; otherwise the max abs difference is reported. The
              per-step losses of both runs are compared too. --control adds a second run without the recorder
              (real vs real), to tell recorder effects from nondeterminism.
(b) profile   For each mode: one recorded run with --profile-nccl (torch.profiler over steps START..STOP-1, CUDA
              activity; train_gpt.py marks every step with ranklensMarkStage("step", i)). Per rank, the sum of the
              trace's Timing durations for the calls whose Call.timeNs lies between Stage(step=START) and
              Stage(step=STOP) is compared with the profiler's total time of kernels named nccl*: the ratio must be
              within --tolerance (default 5%).

Outputs: --json (default bench/results/record_fidelity_torch.json; the kept result is
bench/results/record/record_fidelity_torch.json; rewritten after every run) and one combined log (--log, default:
the JSON path with .log); per-run logs, saved parameters, profiles and traces go to --work.

Example (GPU machine, repository root; about 3 minutes):
    RANKLENS_COMMIT=<sha> /opt/torch/.venv/bin/python bench/record_fidelity_torch.py \\
        --lib .carry/lib/libnccl.so.2 --json $OUT/record_fidelity_torch.json
Exit status: 0 when every check passed, 1 otherwise, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import record_bench_lib as lib  # noqa: E402

REPO = lib.REPO
TRAIN = "examples/torch/train_gpt.py"
MODEL_ARGS = "--d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024"

# Runs in a subprocess with --python (torch may live only there). argv: base_pattern other_pattern nranks.
# A path is a --save-params file ({"params": {name: tensor}}) or a directory of checkpoints (Megatron's legacy
# per-rank files, {"model": nested state dict}; its package must be importable): then the other side's files are
# compared with the same files of the base, tensor by tensor, and "files" counts them.
COMPARE = r"""
import json, os, sys, torch
base, other, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def load(path):
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except TypeError:
        return torch.load(path, map_location="cpu")
def tensors(obj, prefix=""):
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from tensors(v, f"{prefix}.{k}" if prefix else str(k))
def checkpoint_files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs
                  if f.endswith(".pt"))
def params(root, files):
    out = {}
    for rel in files:
        model = torch.load(os.path.join(root, rel), map_location="cpu", weights_only=False)["model"]
        out.update({f"{rel}:{k}": v for k, v in tensors(model)})
    return out
out = []
for rank in range(n):
    r = {"rank": rank, "base": base.format(rank=rank), "other": other.format(rank=rank)}
    try:
        if os.path.isdir(r["base"]):
            files = checkpoint_files(r["other"]) if os.path.isdir(r["other"]) else []
            r["files"] = len(files)
            if not files:
                raise FileNotFoundError(f"no checkpoint under {r['other']} (a rank that is not data-parallel rank 0 "
                                        "saves none)")
            a, b = params(r["base"], files), params(r["other"], files)
        else:
            a, b = load(r["base"])["params"], load(r["other"])["params"]
    except Exception as e:
        r["error"] = f"{type(e).__name__}: {e}"
        out.append(r)
        continue
    r["tensors"] = len(a)
    r["missing"] = sorted(set(a) ^ set(b))[:20]
    r["equal"] = 0
    r["different"] = []
    r["max_abs_diff"] = 0.0
    r["elements"] = 0
    for k in sorted(set(a) & set(b)):
        x, y = a[k], b[k]
        r["elements"] += x.numel()
        if x.shape == y.shape and x.dtype == y.dtype and torch.equal(x, y):
            r["equal"] += 1
            continue
        d = {"name": k, "shape_a": list(x.shape), "shape_b": list(y.shape), "dtype_a": str(x.dtype),
             "dtype_b": str(y.dtype)}
        if x.shape == y.shape:
            diff = (x.double() - y.double()).abs()
            d["max_abs_diff"] = float(diff.max()) if diff.numel() else 0.0
            d["differing_elements"] = int((diff != 0).sum())
            r["max_abs_diff"] = max(r["max_abs_diff"], d["max_abs_diff"])
        else:
            r["max_abs_diff"] = float("inf")
        r["different"].append(d)
    r["identical"] = not r["missing"] and not r["different"] and r["equal"] == len(a)
    r["different"] = r["different"][:20]
    out.append(r)
print("COMPARE " + json.dumps(out, allow_nan=True))
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", default=".carry/lib/libnccl.so.2", help="RankLens's libnccl.so.2 (default: %(default)s)")
    p.add_argument("--real-nccl", default=None,
                   help="set RANKLENS_REAL_NCCL in recorded runs (default: unset: the library finds torch's NCCL)")
    p.add_argument("--python", default=sys.executable,
                   help="interpreter with torch: runs torchrun and the tensor comparison (default: %(default)s)")
    p.add_argument("--modes", default="ddp,fsdp2", help="parallel modes, comma-separated (default: %(default)s)")
    p.add_argument("--checks", default="bitwise,profile", help="bitwise and/or profile (default: %(default)s)")
    p.add_argument("--control", action="store_true",
                   help="bitwise: also a second run without the recorder (real vs real)")
    p.add_argument("--steps", type=int, default=20, help="training steps per run (default: %(default)s)")
    p.add_argument("--micro-batch", type=int, default=8, help="sequences per rank per step (default: %(default)s)")
    p.add_argument("--nproc", type=int, default=2, help="processes (GPUs) per run (default: %(default)s)")
    p.add_argument("--model-args", default=MODEL_ARGS, help="model size arguments (default: %(default)s)")
    p.add_argument("--train-args", default="", help="extra train_gpt.py arguments, one shell-quoted string")
    p.add_argument("--payloads", default="small", choices=("none", "small", "all"),
                   help="RANKLENS_PAYLOADS of the bitwise recorded run (default: %(default)s)")
    p.add_argument("--profile-payloads", default="small", choices=("none", "small", "all"),
                   help="RANKLENS_PAYLOADS of the profiled run (default: %(default)s)")
    p.add_argument("--profile-steps", default="5:15", help="steps profiled, START:STOP, STOP excluded "
                   "(default: %(default)s)")
    p.add_argument("--tolerance", type=float, default=0.05,
                   help="allowed |trace / profiler - 1| of the NCCL time (default: %(default)s)")
    p.add_argument("--json", default=os.path.join(REPO, "bench", "results", "record_fidelity_torch.json"),
                   help="result JSON (default: %(default)s)")
    p.add_argument("--log", default=None, help="combined log (default: the --json path with .log)")
    p.add_argument("--work", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "ranklens-record-fidelity"),
                   help="per-run logs, parameters, profiles (default: %(default)s)")
    p.add_argument("--trace-root", default=None, help="where recorded traces go (default: WORK/traces)")
    p.add_argument("--recorder-env", action="append", default=[], metavar="KEY=VALUE",
                   help="extra environment of the recorded runs, e.g. RANKLENS_TIMING_CLOCK=kernel (repeatable)")
    p.add_argument("--timeout", type=int, default=150, help="seconds per run before it is killed (default: %(default)s)")
    p.add_argument("--budget", type=int, default=420,
                   help="start a run only if the time spent plus the previous run's duration stays within this many "
                        "seconds; later checks are reported as skipped (default: %(default)s)")
    args = p.parse_args(argv)
    args.mode_list = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not args.mode_list or any(m not in ("ddp", "fsdp2") for m in args.mode_list):
        p.error(f"--modes: want ddp and/or fsdp2, got {args.modes!r}")
    args.check_list = [c.strip() for c in args.checks.split(",") if c.strip()]
    if not args.check_list or any(c not in ("bitwise", "profile") for c in args.check_list):
        p.error(f"--checks: want bitwise and/or profile, got {args.checks!r}")
    try:
        a, b = (int(v) for v in args.profile_steps.split(":"))
    except ValueError:
        p.error(f"--profile-steps {args.profile_steps!r}: want START:STOP")
    if not 0 <= a < b:
        p.error("--profile-steps: want 0 <= START < STOP")
    args.window = (a, b)
    if "profile" in args.check_list and args.steps < b:
        p.error(f"--steps {args.steps} is below the profile window's STOP {b}")
    for name in ("steps", "micro_batch", "nproc", "timeout", "budget"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if not 0 < args.tolerance < 1:
        p.error("--tolerance must be in (0, 1)")
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
    for item in args.recorder_env:
        if "=" not in item or not item.partition("=")[0]:
            p.error(f"--recorder-env {item!r}: want KEY=VALUE")
    return args


def env_for(args, payloads: str | None, trace_dir: str | None) -> tuple[dict[str, str], list[str]]:
    unset = [k for k in os.environ if k.startswith("RANKLENS_")]
    preload = [x for x in os.environ.get("LD_PRELOAD", "").replace(":", " ").split()
               if os.path.basename(x) != "libnccl.so.2"]
    env = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    if payloads is None:
        if "LD_PRELOAD" in os.environ:
            if preload:
                env["LD_PRELOAD"] = ":".join(preload)
            else:
                unset.append("LD_PRELOAD")
        return env, unset
    env.update({"LD_PRELOAD": ":".join([args.lib, *preload]), "RANKLENS_MODE": "record",
                "RANKLENS_TRACE_DIR": trace_dir or "", "RANKLENS_PAYLOADS": payloads})
    if args.real_nccl:
        env["RANKLENS_REAL_NCCL"] = os.path.abspath(args.real_nccl)
    for item in args.recorder_env:
        key, _, value = item.partition("=")
        env[key] = value
    return env, [k for k in unset if k not in env]


class OutOfBudget(Exception):
    pass


class Runner:
    def __init__(self, args, log: lib.CombinedLog, doc: dict):
        self.args, self.log, self.doc = args, log, doc
        self.n = 0
        self.t0 = time.monotonic()
        self.last_wall = 0.0

    def run(self, name: str, mode: str, payloads: str | None, extra: list[str]) -> dict:
        args = self.args
        elapsed = time.monotonic() - self.t0
        if elapsed + self.last_wall > args.budget:
            raise OutOfBudget(f"{name}: {elapsed:.0f} s spent, last run {self.last_wall:.0f} s, --budget {args.budget}")
        self.n += 1
        trace_dir = os.path.join(args.trace_root, name) if payloads is not None else None
        if trace_dir:
            shutil.rmtree(trace_dir, ignore_errors=True)
            os.makedirs(trace_dir, exist_ok=True)
        env_set, env_unset = env_for(args, payloads, trace_dir)
        argv = [args.python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.nproc),
                TRAIN, "--parallel", mode, "--steps", str(args.steps), "--micro-batch", str(args.micro_batch),
                "--log-all-ranks", *args.model_extra, *args.train_extra, *extra]
        log_path = os.path.join(args.work, "logs", name + ".log")
        self.log.say(f"run {self.n}: {name} ...")
        res = lib.run_logged(argv, env_set, log_path, args.timeout, env_unset)
        self.last_wall = res["wall_s"]
        text = lib.read_text(log_path)
        results, bad = lib.parse_result_lines(text)
        run = {"name": name, "mode": mode, "recorder": payloads is not None, "payloads": payloads,
               "command": res["command_line"], "rc": res["rc"], "timed_out": res["timed_out"], "wall_s": res["wall_s"],
               "log": log_path, "trace_dir": trace_dir, "parse_errors": bad,
               "results": {r.get("rank"): {k: r.get(k) for k in ("median_step_ms", "steps", "all_finite", "final_loss",
                                                                  "losses")} for r in results}}
        reasons = []
        if res["timed_out"]:
            reasons.append(f"timed out after {args.timeout} s")
        if res["rc"] != 0:
            reasons.append(f"exit code {res['rc']}")
        for rank in range(args.nproc):
            r = run["results"].get(rank)
            if r is None:
                reasons.append(f"no RESULT line from rank {rank}")
            elif r.get("steps") != args.steps or not r.get("all_finite"):
                reasons.append(f"rank {rank}: {r.get('steps')} of {args.steps} steps, all_finite {r.get('all_finite')}")
        run["ok"] = not reasons
        run["reasons"] = reasons
        run["_tail"] = lib.tail(text, 25)
        self.log.say(f"run {self.n}: {name}: {'ok' if run['ok'] else 'FAILED'} rc {res['rc']}, {res['wall_s']:.0f} s"
                     + (f"; {'; '.join(reasons)}" if reasons else ""))
        if not run["ok"]:
            for line in run["_tail"]:
                self.log.say(f"    | {line}")
        self.log.append_file(name, log_path, max_lines=300)
        self.doc["runs"].append(run)
        lib.write_json(self.args.json, self.doc)
        return run


def compare_params(args, base_pattern: str, other_pattern: str, env: dict | None = None) -> list[dict]:
    r = subprocess.run([args.python, "-c", COMPARE, base_pattern, other_pattern, str(args.nproc)],
                       capture_output=True, text=True, timeout=600, env=env)
    for line in r.stdout.splitlines():
        if line.startswith("COMPARE "):
            return json.loads(line[len("COMPARE "):])
    return [{"error": f"comparison failed (exit {r.returncode}): {(r.stderr or r.stdout)[-1500:]}"}]


def losses_equal(a: dict, b: dict, nproc: int) -> bool | None:
    pairs = [(a["results"].get(r), b["results"].get(r)) for r in range(nproc)]
    if any(x is None or y is None for x, y in pairs):
        return None
    return all(x.get("losses") == y.get("losses") for x, y in pairs)


def bitwise_check(args, runner: Runner, mode: str) -> dict:
    params = os.path.join(args.work, "params")
    os.makedirs(params, exist_ok=True)
    pat = {k: os.path.join(params, f"{mode}-{k}-rank{{rank}}.pt") for k in ("base", "rec", "control")}
    for k in pat:
        for r in range(args.nproc):
            try:
                os.remove(pat[k].format(rank=r))
            except OSError:
                pass
    base = runner.run(f"{mode}-bitwise-base", mode, None, ["--deterministic", "--save-params", pat["base"]])
    rec = runner.run(f"{mode}-bitwise-rec", mode, args.payloads, ["--deterministic", "--save-params", pat["rec"]])
    ctrl = runner.run(f"{mode}-bitwise-control", mode, None,
                      ["--deterministic", "--save-params", pat["control"]]) if args.control else None
    out: dict = {"mode": mode, "runs": [base["name"], rec["name"]] + ([ctrl["name"]] if ctrl else []),
                 "payloads": args.payloads}
    reasons = [f"{r['name']}: {'; '.join(r['reasons'])}" for r in (base, rec, ctrl) if r and not r["ok"]]
    if base["ok"] and rec["ok"]:
        out["per_rank"] = compare_params(args, pat["base"], pat["rec"])
        out["identical"] = all(r.get("identical") for r in out["per_rank"])
        out["max_abs_diff"] = max((r.get("max_abs_diff") or 0.0 for r in out["per_rank"]), default=None)
        out["losses_identical"] = losses_equal(base, rec, args.nproc)
        for r in out["per_rank"]:
            if r.get("error"):
                reasons.append(f"rank {r.get('rank')}: {r['error']}")
            elif not r.get("identical"):
                reasons.append(f"rank {r['rank']}: {len(r['different'])} of {r['tensors']} tensors differ "
                               f"(max abs diff {r['max_abs_diff']:.3g}), {len(r['missing'])} missing")
        if out["losses_identical"] is False:
            reasons.append("per-step losses differ")
        st = lib.trace_stats_any(rec["trace_dir"], args.python)
        t = st.get("totals", {})
        out["trace"] = {k: t.get(k) for k in ("Call", "Timing", "PayloadRef", "payloads_written", "payloads_dropped",
                                              "records_dropped", "payload_raw_bytes", "rank_dirs", "problems",
                                              "timing_failed", "counters")}
        out["trace"]["errors"] = st["errors"]
        if st["errors"] or not t.get("Call"):
            reasons.append(f"recorded trace unusable: {st['errors'][:2] or 'no Call records'} (was the recorder "
                           "loaded?)")
    if ctrl and base["ok"] and ctrl["ok"]:
        c = compare_params(args, pat["base"], pat["control"])
        out["control"] = {"per_rank": c, "identical": all(r.get("identical") for r in c),
                          "losses_identical": losses_equal(base, ctrl, args.nproc)}
    out["pass"] = not reasons
    out["reasons"] = reasons
    return out


def profile_check(args, runner: Runner, mode: str) -> dict:
    prof_dir = os.path.join(args.work, "profiles")
    os.makedirs(prof_dir, exist_ok=True)
    pattern = os.path.join(prof_dir, f"{mode}-rank{{rank}}.json")
    for r in range(args.nproc):
        try:
            os.remove(pattern.format(rank=r))
        except OSError:
            pass
    run = runner.run(f"{mode}-profile", mode, args.profile_payloads,
                     ["--profile-nccl", pattern, "--profile-steps", f"{args.window[0]}:{args.window[1]}"])
    out: dict = {"mode": mode, "run": run["name"], "profile_steps": list(args.window), "tolerance": args.tolerance,
                 "payloads": args.profile_payloads, "per_rank": []}
    reasons = [] if run["ok"] else [f"{run['name']}: {'; '.join(run['reasons'])}"]
    st = lib.trace_stats_any(run["trace_dir"], args.python, window=args.window)
    out["trace_errors"] = st["errors"]
    reasons += st["errors"][:3]
    by_rank = {}
    for rd in st.get("ranks", []):
        rank = (rd.get("manifest") or {}).get("rank")
        if rank is None or rank < 0:
            try:
                rank = int(rd["dir"].replace("rank", ""))
            except ValueError:
                rank = None
        by_rank[rank] = rd
    for rank in range(args.nproc):
        e: dict = {"rank": rank}
        try:
            with open(pattern.format(rank=rank), encoding="utf-8") as f:
                prof = json.load(f)
        except (OSError, ValueError) as err:
            prof = None
            e["error"] = f"no profiler output: {err}"
        rd = by_rank.get(rank)
        w = (rd or {}).get("window") or {}
        if rd is None:
            e["error"] = (e.get("error", "") + "; " if e.get("error") else "") + f"no trace directory for rank {rank}"
        elif w.get("error"):
            e["error"] = (e.get("error", "") + "; " if e.get("error") else "") + w["error"]
        if prof is not None:
            e.update({"profiler_nccl_us": prof.get("nccl_kernel_total_us"),
                      "profiler_nccl_kernels": prof.get("nccl_kernel_count"),
                      "profiler_all_kernels_us": prof.get("all_kernel_total_us"),
                      "profiled_steps": prof.get("profile_steps"), "profiled_wall_ms": prof.get("profiled_wall_ms"),
                      "mark_stage": prof.get("mark_stage"), "mark_failures": prof.get("mark_failures"),
                      "top_nccl_kernels": dict(list((prof.get("nccl_kernels_by_name") or {}).items())[:8])})
            if prof.get("error"):
                e["error"] = (e.get("error", "") + "; " if e.get("error") else "") + prof["error"]
            if not prof.get("mark_stage"):
                e["error"] = (e.get("error", "") + "; " if e.get("error") else "") + \
                    "ranklensMarkStage was not found in the process (no step marks)"
        if w and not w.get("error"):
            e.update({"trace_timing_us": w["timing_total_ns"] / 1e3, "trace_timing_records": w["timing_records"],
                      "trace_calls": w["calls"], "trace_groups": w["groups"], "trace_calls_by_op": w["calls_by_op"],
                      "trace_window_ms": w["window_ns"] / 1e6,
                      "ungrouped_calls_without_timing": w["ungrouped_calls_without_timing"],
                      "groups_without_timing": w["groups_without_timing"],
                      "trace_timing_failed": w["timing_failed"], "trace_timing_captured": w["timing_captured"]})
        if e.get("trace_timing_us") is not None and e.get("profiler_nccl_us"):
            e["ratio_trace_over_profiler"] = e["trace_timing_us"] / e["profiler_nccl_us"]
            e["within_tolerance"] = abs(e["ratio_trace_over_profiler"] - 1) <= args.tolerance
        elif e.get("trace_timing_us") is not None:
            e.setdefault("error", "profiler saw no nccl* kernel time")
        if e.get("error"):
            reasons.append(f"rank {rank}: {e['error']}")
        elif not e.get("within_tolerance"):
            reasons.append(f"rank {rank}: trace/profiler {e['ratio_trace_over_profiler']:.4f} outside 1 +- "
                           f"{args.tolerance}")
        if e.get("trace_timing_failed"):
            reasons.append(f"rank {rank}: {e['trace_timing_failed']} Timing records in the window failed "
                           "(durationNs -1)")
        if e.get("ungrouped_calls_without_timing") or e.get("groups_without_timing"):
            reasons.append(f"rank {rank}: {e['ungrouped_calls_without_timing']} calls and "
                           f"{e['groups_without_timing']} groups in the window have no Timing record")
        out["per_rank"].append(e)
    out["pass"] = not reasons
    out["reasons"] = reasons
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log = lib.CombinedLog(args.log)
    if not os.path.isfile(args.lib):
        print(f"error: --lib {args.lib}: no such file (RankLens's libnccl.so.2; on the GPU machine "
              ".carry/lib/libnccl.so.2)", file=sys.stderr)
        return 2
    if shutil.which(args.python) is None and not os.path.isfile(args.python):
        print(f"error: --python {args.python}: not found", file=sys.stderr)
        return 2
    for d in ("logs", "params", "profiles"):
        os.makedirs(os.path.join(args.work, d), exist_ok=True)
    os.makedirs(args.trace_root, exist_ok=True)
    doc = {"benchmark": "record_fidelity_torch", **lib.provenance(), "python": args.python, "lib": args.lib,
           "lib_sha256": lib.file_sha256(args.lib), "real_nccl": args.real_nccl, "modes": args.mode_list,
           "checks": args.check_list, "steps": args.steps, "micro_batch": args.micro_batch, "nproc": args.nproc,
           "model_args": args.model_extra, "train_args": args.train_extra, "payloads": args.payloads,
           "profile_payloads": args.profile_payloads, "tolerance": args.tolerance, "work": args.work,
           "trace_root": args.trace_root, "env_all_runs": {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"},
           "runs": [], "bitwise": {}, "profile": {}}
    log.say(f"record_fidelity_torch: {doc['command']}")
    log.say(f"commit {doc['commit']}, device {doc['device']} x{len(doc['devices'])}; json {args.json}; log {args.log}")
    t0 = time.monotonic()
    runner = Runner(args, log, doc)
    for mode in args.mode_list:
        for kind in args.check_list:  # the order given: bitwise then profile by default
            try:
                res = (bitwise_check if kind == "bitwise" else profile_check)(args, runner, mode)
            except OutOfBudget as e:
                res = {"mode": mode, "pass": False, "skipped": True, "reasons": [f"skipped, out of time budget: {e}"],
                       "per_rank": []}
            doc[kind][mode] = res
            if kind == "profile":
                for e in res["per_rank"]:
                    if "ratio_trace_over_profiler" in e:
                        log.say(f"profile {mode} rank {e['rank']}: trace {e['trace_timing_us']:.1f} us "
                                f"({e['trace_timing_records']} Timing, {e['trace_calls']} calls) vs profiler "
                                f"{e['profiler_nccl_us']:.1f} us ({e['profiler_nccl_kernels']} nccl kernels): "
                                f"ratio {e['ratio_trace_over_profiler']:.4f}")
            verdict = "SKIPPED" if res.get("skipped") else "PASS" if res["pass"] else "FAIL"
            log.say(f"{kind} {mode}: {verdict}" + (f" ({'; '.join(res['reasons'])})" if res["reasons"] else "")
                    + (f"; control (real vs real) identical: {res['control']['identical']}" if "control" in res
                       else ""))
            lib.write_json(args.json, doc)
    checks = list(doc["bitwise"].values()) + list(doc["profile"].values())
    doc["all_pass"] = bool(checks) and all(c["pass"] for c in checks)
    doc["elapsed_s"] = round(time.monotonic() - t0, 1)
    doc["finished"] = lib.utc_now()
    lib.write_json(args.json, doc)
    log.say("")
    for kind in ("bitwise", "profile"):
        for mode, c in doc[kind].items():
            log.say(f"{kind:8s} {mode:6s} {'SKIPPED' if c.get('skipped') else 'PASS' if c['pass'] else 'FAIL'}")
    log.say(f"wrote {args.json} and {args.log}; {doc['elapsed_s']:.0f} s; "
            + ("ALL CHECKS PASSED" if doc["all_pass"] else "SOME CHECKS FAILED"))
    return 0 if doc["all_pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
