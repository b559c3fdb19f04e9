#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Replay fidelity on the GPU machines: record a 2-GPU torch job, replay every rank alone on one GPU, compare.

For each parallel mode (DDP, FSDP2; examples/torch/train_gpt.py):
(a) timing  Record --model (GPT-2-small, 124M, bf16; or gpt2-medium) on --nproc GPUs with `ranklens record`
            (payloads: small), --steps steps, every step marked. Replay each rank with `ranklens replay --fidelity
            timing --trace <recording>` on one GPU (rank r on GPU r % visible GPUs, all ranks at once; each replay
            sees one GPU). Reported per rank: the raw signature match (the replay's counters: every call matched, no
            mismatch, as many calls as recorded) and the median step time over steps --warmup..end, replay vs the
            recorded run's same rank; with --repeats N, N record/replay pairs interleaved and the medians over runs
            compared (the real step time of one configuration moves between runs).
(b) value   Record the smaller default model with --deterministic, payloads: all (staging_full: wait) and
            --save-params; replay each rank with --fidelity value --deterministic --save-params; every parameter
            tensor of the replayed rank must be torch.equal to that rank's in the real run.

Outputs --json (default bench/results/replay/replay_fidelity_torch.json) and a combined log next to it; per-run
logs, traces and parameters under --work.

Example (2-GPU machine, repository root; about 6 minutes):
    RANKLENS_COMMIT=<sha> /opt/torch/.venv/bin/python bench/replay_fidelity_torch.py \\
        --lib .carry/lib/libnccl.so.2 --json $OUT/replay_fidelity_torch.json
Beyond 2 GPUs (issue #9; the layout is a parameter), e.g. on 8 GPUs:
    ... --nproc 8 --modes fsdp2,megatron-tp2pp2dp2 --model gpt2-medium --checks timing,value --repeats 3
and on 4: --nproc 4 --modes fsdp2,megatron-tp2dp2.
Exit status: 0 when every check passed, 1 otherwise, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import record_bench_lib as lib  # noqa: E402
import record_fidelity_torch as rft  # noqa: E402  (parameter comparison)

REPO = lib.REPO
TRAIN = "examples/torch/train_gpt.py"
TRAIN_PARALLEL = "examples/torch/train_parallel.py"  # tp, tp-dp, pp


DEEPSPEED = "examples/deepspeed/train_zero.py"  # zero2, zero3
MEGATRON = "examples/megatron/run_gpt.sh"       # megatron-tp2, megatron-pp2, megatron-dp2


def megatron_layout(mode: str, nproc: int) -> list[str]:
    """megatron-tp2, -pp2, -dp2, -tp2pp2, -tp2dp2, -tp2pp2dp2, ...: run_gpt.sh's --tp/--pp; DP is what is left of
    --nproc (a dp given must agree with it)."""
    m = re.fullmatch(r"megatron-(?:tp(\d+))?(?:pp(\d+))?(?:dp(\d+))?", mode)
    if not m or not any(m.groups()):
        raise SystemExit(f"bad Megatron mode {mode!r}: megatron-tp<T>pp<P>dp<D>, each part optional (e.g. tp2pp2)")
    tp, pp = int(m.group(1) or 1), int(m.group(2) or 1)
    if nproc % (tp * pp) or (m.group(3) and tp * pp * int(m.group(3)) != nproc):
        raise SystemExit(f"{mode}: TP {tp} x PP {pp}{f' x DP {m.group(3)}' if m.group(3) else ''} does not fit "
                         f"--nproc {nproc}")
    return ["--tp", str(tp), "--pp", str(pp)]


def script_for(mode: str) -> str:
    return TRAIN_PARALLEL if mode in ("tp", "tp-dp", "pp") else TRAIN


def job_argv(a, mode: str, train: list[str], one_rank: bool) -> list[str]:
    """The job's command: under torchrun for the recording, one process (`one_rank`) for `ranklens replay`."""
    if mode.startswith("megatron-"):
        return ["bash", MEGATRON, a.megatron, *megatron_layout(mode, a.nproc), "--nproc", str(a.nproc),
                *a.megatron_arg, *train, *(["--one-rank"] if one_rank else [])]
    if mode in ("zero2", "zero3"):
        script, own = DEEPSPEED, ["--zero-stage", mode[-1]]
    else:
        script, own = script_for(mode), ["--parallel", mode]
    cmd = [script, *own, "--log-all-ranks", "--mark-steps", *train]
    return [a.python, *cmd] if one_rank else \
        [a.python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(a.nproc), *cmd]


def megatron_losses(log_path: str) -> list[float]:
    """Megatron prints `lm loss: X` per iteration on the last pipeline stage's last rank."""
    return [float(m) for m in re.findall(r"lm loss: ([0-9.Ee+-]+)", lib.read_text(log_path))]
GPT2_SMALL = ["--d-model", "768", "--layers", "12", "--heads", "12", "--vocab", "50304", "--seq-len", "1024"]
MODELS = {"gpt2-small": GPT2_SMALL,  # 124M
          "gpt2-medium": ["--d-model", "1024", "--layers", "24", "--heads", "16", "--vocab", "50304",
                          "--seq-len", "1024"]}  # 350M


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", required=True, help="RankLens libnccl.so.2")
    p.add_argument("--python", default=sys.executable, help="interpreter with torch (default: %(default)s)")
    p.add_argument("--nproc", type=int, default=2, help="GPUs of the recorded job (default: %(default)s)")
    p.add_argument("--modes", default="ddp,fsdp2",
                   help="comma list of ddp, fsdp2 (train_gpt.py), tp, tp-dp, pp (train_parallel.py), zero2, zero3 "
                        "(DeepSpeed, examples/deepspeed), megatron-tp<T>pp<P>dp<D> with any parts, e.g. megatron-tp2, "
                        "megatron-pp2, megatron-dp2, megatron-tp2pp2dp2 (Megatron-LM, examples/megatron; --megatron; "
                        "DP is what --nproc leaves) (default: %(default)s)")
    p.add_argument("--model", choices=sorted(MODELS), default="gpt2-small",
                   help="model of the timing runs of the GPT examples, not Megatron's (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=1,
                   help="timing: record and replay this many times, interleaved; the error is between the medians "
                        "over runs of the real and the replayed median step times (default: %(default)s)")
    p.add_argument("--megatron", default="/tmp/mlm", help="Megatron-LM checkout (default: %(default)s)")
    p.add_argument("--megatron-arg", action="append", default=[], metavar="ARG",
                   help="an option for examples/megatron/run_gpt.sh in recording and replay, e.g. "
                        "--megatron-arg=--gloo (Megatron's Gloo groups: stand-ins in the replay)")
    p.add_argument("--checks", default="timing,value",
                   help="comma list of timing, value, profile (diagnosis: GPU time of compute, communication and "
                        "idle, real vs replay, from torch.profiler; ddp and fsdp2) (default: %(default)s)")
    p.add_argument("--steps", type=int, default=25, help="steps of the timing runs (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=5, help="steps left out of the medians (default: %(default)s)")
    p.add_argument("--value-steps", type=int, default=20, help="steps of the value runs (default: %(default)s)")
    p.add_argument("--micro-batch", type=int, default=8, help="sequences per rank per step (default: %(default)s)")
    p.add_argument("--tolerance", type=float, default=0.01, help="median step-time error allowed (default: 1%%)")
    p.add_argument("--json", default=os.path.join(REPO, "bench", "results", "replay", "replay_fidelity_torch.json"))
    p.add_argument("--work", default="/tmp/ranklens-replay-fidelity", help="logs, traces, parameters")
    p.add_argument("--timeout", type=float, default=300, help="seconds per run (default: %(default)s)")
    p.add_argument("--sample-gpu", action="store_true",
                   help="sample every GPU's SM clock and power (nvidia-smi, every 500 ms) during each run; timing "
                        "checks then show real and replayed clocks side by side (at the power limit they differ)")
    p.add_argument("--budget", type=float, default=0,
                   help="seconds for the whole benchmark (0: none): no run starts unless the time spent plus the "
                        "longest run so far fits; timing checks then use the repeats completed and say so, and the "
                        "JSON and log are written as always (an outer timeout would lose the checks)")
    p.add_argument("--recording", metavar="TRACE_DIR",
                   help="timing: replay this existing recording (of --modes' one mode, made with the same --steps, "
                        "--micro-batch and --model) instead of recording; --repeats then replays it that many times. "
                        "Needs only one GPU: with fewer GPUs than ranks, ranks replay one after another")
    p.add_argument("--recorded-log", metavar="LOG",
                   help="with --recording: the recorded job's log, whose RESULT lines give the real step times "
                        "(without it both sides come from the step markers, through `ranklens compare`)")
    add_env_options(p, "timing, profile and value: replay every recording once more per variant")
    p.add_argument("--ranklens", default=os.path.join(REPO, "build", "release", "tools", "ranklens"),
                   help="the ranklens launcher (default: %(default)s)")
    args = p.parse_args(argv)
    args.lib = os.path.abspath(args.lib)
    args.ranklens = os.path.abspath(args.ranklens)
    args.json = os.path.abspath(args.json)
    args.record_env_map = {}
    for item in args.record_env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            p.error(f"--record-env {item!r}: want KEY=VALUE")
        args.record_env_map[key] = value
    args.variants = parse_variants(p, args.variant)
    if args.recording:
        if len(args.modes.split(",")) != 1 or args.checks != "timing":
            p.error("--recording replays one mode's recording: give one --modes and --checks timing")
        args.recording = os.path.abspath(args.recording)
        if not os.path.isdir(args.recording):
            p.error(f"--recording {args.recording}: not a directory")
    elif args.recorded_log:
        p.error("--recorded-log goes with --recording")
    return args


def add_env_options(p: argparse.ArgumentParser, variant_scope: str) -> None:
    """--record-env, --replay-env and --variant (parsed by parse_variants); this bench's and estimator_torch.py's."""
    p.add_argument("--record-env", action="append", default=[], metavar="KEY=VALUE",
                   help="extra environment of the recordings, e.g. RANKLENS_TIMING_CLOCK=kernel")
    p.add_argument("--replay-env", action="append", default=[], metavar="KEY=VALUE",
                   help="extra environment of every replay, e.g. RANKLENS_HOLD_FROM=start")
    p.add_argument("--variant", action="append", default=[], metavar="NAME:KEY=VALUE[,KEY=VALUE...]",
                   help=f"{variant_scope}, with this environment added, side by side with the plain replay (e.g. "
                        "nccl-shape:RANKLENS_HOLD_BLOCKS=24,RANKLENS_HOLD_THREADS=544); the key lib (lower case) "
                        "replays with another RankLens libnccl.so.2 instead (e.g. before:lib=old/libnccl.so.2); "
                        "checks are reported per variant")


def parse_variants(p: argparse.ArgumentParser, items: list[str]) -> dict[str, dict[str, str]]:
    """--variant NAME:KEY=VALUE[,KEY=VALUE...] items -> {"plain": {}, NAME: {KEY: VALUE}}; p.error on a bad one."""
    variants: dict[str, dict[str, str]] = {"plain": {}}
    for v in items:
        name, _, env = v.partition(":")
        pairs = [kv for kv in env.split(",") if kv]
        if not name or name in variants or not pairs or any("=" not in kv for kv in pairs):
            p.error(f"--variant {v!r}: expected a new NAME:KEY=VALUE[,KEY=VALUE...]")
        variants[name] = dict(kv.split("=", 1) for kv in pairs)
    return variants


def spread(values: list[float]) -> float | None:
    """(max - min) / median of run medians: how far apart the repeats of one side (real or replay) landed. Beside a
    step-time error it says whether the tolerance is resolvable at all with these runs (None for fewer than 2)."""
    if len(values) < 2:
        return None
    m = statistics.median(values)
    return (max(values) - min(values)) / m if m else None


def clean_env(extra: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    unset = [k for k in os.environ if k.startswith("RANKLENS_")]
    env = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8", **extra}
    return env, [k for k in unset if k not in env]


def results_of(log_path: str) -> dict:
    results, _ = lib.parse_result_lines(lib.read_text(log_path))
    return {r.get("rank"): r for r in results}


def median_after(step_ms: list[float] | None, warmup: int) -> float | None:
    if not step_ms or len(step_ms) <= warmup:
        return None
    return statistics.median(step_ms[warmup:])


def median_of(runs: list[dict], key: str) -> float | None:
    """The median of `key` over the runs that have it, None when none has."""
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def call_host_text(us) -> str:
    """RankLens's own host time per replayed call (median), for a CHECK line."""
    return "" if us is None else f"; in RankLens {us:.0f} us/call"


def host_text(ms_per_step: float | None) -> str:
    """'; host held X ms/step' (the replay's host_time holds), '' when unknown."""
    return "" if ms_per_step is None else f"; host held {ms_per_step:.1f} ms/step"


def gpu_text(runs: list[dict]) -> str:
    """'; SM MHz real a/b, replay c/d; W real ... ' from the runs' GPU samples (--sample-gpu), '' without them."""
    def values(side: str, key: str) -> str:
        return "/".join(f"{g[key]:.0f}" if g else "-" for g in ((r.get("gpu") or {}).get(side) for r in runs))
    if not any((r.get("gpu") or {}).get("real") for r in runs):
        return ""
    return (f"; SM MHz real {values('real', 'sm_mhz_median')}, replay {values('replay', 'sm_mhz_median')}"
            f"; W real {values('real', 'power_w_median')}, replay {values('replay', 'power_w_median')}")


class Bench:
    def __init__(self, args):
        self.args = args
        self.log = lib.CombinedLog(os.path.splitext(args.json)[0] + ".log")
        self.doc = {**lib.provenance(), "runs": [], "checks": [], "tolerance": args.tolerance}
        os.makedirs(args.work, exist_ok=True)
        self.t0 = time.monotonic()
        self.longest = 0.0  # seconds, the longest record or replay step so far

    def fits(self, what: str) -> bool:
        """Whether another run fits in --budget; says so when it does not."""
        a = self.args
        spent = time.monotonic() - self.t0
        if not a.budget or spent + self.longest <= a.budget:
            return True
        self.log.say(f"budget: {what} not started ({spent:.0f} s spent + {self.longest:.0f} s for the longest run "
                     f"so far > --budget {a.budget:.0f} s)")
        self.doc["budget_exhausted"] = True
        return False

    def timed(self, fn, *args, **kwargs):
        start = time.monotonic()
        try:
            return fn(*args, **kwargs)
        finally:
            self.longest = max(self.longest, time.monotonic() - start)

    def record(self, name: str, mode: str, payloads: str, train: list[str]) -> tuple[dict, str]:
        a = self.args
        trace = os.path.join(a.work, "traces", name)
        shutil.rmtree(trace, ignore_errors=True)  # `ranklens record` refuses a directory holding a recording
        os.makedirs(trace)
        job = job_argv(a, mode, train, one_rank=False)
        env, unset = clean_env({"RANKLENS_STAGING_FULL": "wait", **a.record_env_map})
        argv = [a.ranklens, "record", "--lib", a.lib, "--trace", trace, "--payloads", payloads, "--", *job]
        log_path = os.path.join(a.work, "logs", name + ".log")
        self.log.say(f"record {name} ...")
        with lib.GpuSampler(getattr(a, "sample_gpu", False)) as gpu:
            res = lib.run_logged(argv, env, log_path, a.timeout, unset)
        run = {"name": name, "kind": "record", "mode": mode, "command": res["command_line"], "rc": res["rc"],
               "wall_s": res["wall_s"], "results": results_of(log_path), "trace": trace, "log": log_path,
               "gpu": gpu.summary()}
        self.log.say(f"record {name}: rc {res['rc']}, {res['wall_s']:.0f} s")
        self.log.append_file(name, log_path, max_lines=120)
        self.doc["runs"].append(run)
        return run, trace

    def replay_all(self, name: str, mode: str, fidelity: str, trace: str, train_for_rank,
                   variant_env: dict | None = None) -> dict:
        """Replays every rank at once, rank r on GPU r % (visible GPUs), each seeing only its GPU."""
        a = self.args
        gpus = int(subprocess.run([a.python, "-c", "import torch; print(torch.cuda.device_count())"],
                                  capture_output=True, text=True).stdout.strip() or "1")
        procs = []
        variant_env = dict(variant_env or {})
        library = os.path.abspath(variant_env.pop("lib", a.lib))
        for rank in range(a.nproc):
            out_trace = os.path.join(a.work, "traces", f"{name}-replay")
            extra = {**dict(kv.split("=", 1) for kv in a.replay_env), **variant_env}
            env, unset = clean_env({"CUDA_VISIBLE_DEVICES": str(rank % max(gpus, 1)),
                                    "RANKLENS_TRACE_DIR": out_trace, **extra})
            job = job_argv(a, mode, train_for_rank(rank), one_rank=True)
            argv = [a.ranklens, "replay", "--lib", library, "--rank", str(rank), "--fidelity", fidelity,
                    "--trace", trace, "--", *job]
            log_path = os.path.join(a.work, "logs", f"{name}-replay-rank{rank}.log")
            procs.append((rank, log_path, out_trace, argv, env, unset))
        shutil.rmtree(os.path.join(a.work, "traces", f"{name}-replay"), ignore_errors=True)
        # One replay per GPU at a time: two on one GPU would slow each other down.
        at_once = min(len(procs), max(gpus, 1))
        self.log.say(f"replay {name} ({fidelity}), {a.nproc} ranks, {at_once} at a time ...")
        import concurrent.futures as cf
        with lib.GpuSampler(getattr(a, "sample_gpu", False)) as gpu, cf.ThreadPoolExecutor(at_once) as pool:
            futures = {rank: pool.submit(lib.run_logged, argv, env, log_path, a.timeout, unset)
                       for rank, log_path, _, argv, env, unset in procs}
        runs = {}
        for rank, log_path, out_trace, *_ in procs:
            res = futures[rank].result()
            stats = lib.trace_stats_any(out_trace, python=a.python)
            counters, call_host = {}, None
            for r in stats.get("ranks", []):
                if (r.get("manifest") or {}).get("rank") == rank or r.get("dir", "").endswith(f"rank{rank}"):
                    counters, call_host = r.get("counters") or {}, r.get("replay_call_host_us")
            runs[rank] = {"rc": res["rc"], "wall_s": res["wall_s"], "command": res["command_line"], "log": log_path,
                          "result": results_of(log_path).get(rank), "counters": counters, "log": log_path,
                          "call_host_us": call_host, "stats_errors": stats.get("errors")}
            self.log.say(f"replay {name} rank {rank}: rc {res['rc']}, {res['wall_s']:.0f} s")
            self.log.append_file(f"{name}-replay-rank{rank}", log_path, max_lines=80)
        run = {"name": name + "-replay", "kind": "replay", "fidelity": fidelity, "mode": mode, "ranks": runs,
               "variant_env": variant_env, "lib": library, "gpu": gpu.summary(), "gpus": max(gpus, 1),
               "trace": os.path.join(a.work, "traces", f"{name}-replay")}
        self.doc["runs"].append(run)
        return run

    def sequence_problems(self, trace: str) -> dict:
        """Per recorded rank: collective sequence numbers that repeat or are missing, per communicator."""
        out = {}
        try:
            stats = lib.trace_stats(trace, keep_records=True)
        except Exception as e:  # msgpack missing here, or anything else: say so, do not fail the run
            return {"error": f"{type(e).__name__}: {e}"}
        for r in stats.get("ranks", []):
            seqs: dict[int, list[int]] = {}
            for c in r.get("_calls", []):
                if c["op"] not in (8, 9):  # Send, Recv have per-peer sequences
                    seqs.setdefault(c["commId"], []).append(c["seq"])
            found = {}
            for comm, s in seqs.items():
                dup = sorted({x for x in s if s.count(x) > 1})[:10]
                missing = sorted(set(range(max(s) + 1)) - set(s))[:10] if s else []
                if dup or missing:
                    found[comm] = {"repeated": dup, "missing": missing}
            out[r.get("dir")] = found
        return out

    def compare_steps(self, recorded: str, replayed: str, rank: int) -> dict:
        """`ranklens compare`'s step section (step k = marker k to k+1, warm-up left out); {} when unavailable."""
        a = self.args
        res = subprocess.run([a.ranklens, "compare", recorded, replayed, "--rank", str(rank), "--warmup-steps",
                              str(a.warmup), "--json", "-"], capture_output=True, text=True)
        try:
            return json.loads(res.stdout).get("steps") or {}
        except json.JSONDecodeError:
            self.log.say(f"ranklens compare rank {rank}: rc {res.returncode}, {res.stderr.strip()[:300]}")
            return {}

    def timing_of(self, rec: dict, rep: dict, trace: str, calls: dict, rank: int) -> dict:
        """One recorded run and its replay, one rank: median step times (after --warmup) and signatures."""
        a = self.args
        real = (rec["results"].get(rank) or {}).get("step_ms")
        replay = ((rep["ranks"][rank].get("result")) or {}).get("step_ms")
        # The script's own step times where it prints them (RESULT); else (Megatron prints one rank's iteration
        # time) the adapter's step markers in both traces, through `ranklens compare`.
        markers = self.compare_steps(trace, rep["trace"], rank)
        source = "script"
        if not (real and replay) and markers.get("median_recorded_ns") and markers.get("median_replayed_ns"):
            source = "step markers"
            real = [s["recorded_ns"] / 1e6 for s in markers["per_step"]]
            replay = [s["replayed_ns"] / 1e6 for s in markers["per_step"]]
            m_real, m_rep = statistics.median(real), statistics.median(replay)
        else:
            m_real, m_rep = median_after(real, a.warmup), median_after(replay, a.warmup)
            real, replay = (real or [])[a.warmup:], (replay or [])[a.warmup:]
        per_step = [(y - x) / x for x, y in zip(real, replay)]
        sig_ok, sig = lib.replay_signature_ok(rep["ranks"][rank], calls.get(rank))
        # The GPU this rank ran on: its local rank in the job, rank % visible GPUs in the replays.
        gpu = {"real": (rec.get("gpu") or {}).get(str(rank)),
               "replay": (rep.get("gpu") or {}).get(str(rank % rep.get("gpus", 1)))}
        counters = rep["ranks"][rank].get("counters") or {}
        # The thread held for recorded host time (host_time), per step: where it nears the step-time error, the
        # recorded host time was likely a wait for a full launch queue (docs/frameworks.md).
        host_ms = counters.get("replay_host_held_ns")
        # RankLens's own host time per call in the replay (Call stamp to its hold), median: the payload prefetcher's
        # lock once cost ZeRO-3 0.3 ms per call (docs/frameworks.md).
        call_host = rep["ranks"][rank].get("call_host_us") or {}
        return {"step_times": source, "median_step_ms_real": m_real, "median_step_ms_replay": m_rep, "gpu": gpu,
                "host_held_ms_per_step": host_ms / 1e6 / a.steps if host_ms is not None else None,
                "call_host_us_median": call_host.get("median"),
                "median_step_error": (m_rep - m_real) / m_real if m_real and m_rep else None,
                "marker_median_step_error": markers.get("median_relative_error"),
                "median_abs_per_step_error": statistics.median([abs(e) for e in per_step]) if per_step else None,
                "signature_match": sig_ok, "signature": sig, "counters": rep["ranks"][rank].get("counters")}

    def timing(self, mode: str):
        a = self.args
        train = ["--steps", str(a.steps)] if mode.startswith("megatron-") else \
            [*MODELS[a.model], "--steps", str(a.steps), "--micro-batch", str(a.micro_batch)]
        per_rank: dict[tuple[str, int], list[dict]] = {(v, r): [] for v in a.variants for r in range(a.nproc)}
        if a.recording:  # an existing recording, read once and replayed again each repeat
            given = {"results": results_of(a.recorded_log) if a.recorded_log else {}, "gpu": {}}, a.recording
            self.doc.setdefault("sequence_problems", {})[a.recording] = self.sequence_problems(a.recording)
            given_calls = lib.recorded_call_counts(a.recording, a.python)
        for i in range(a.repeats):  # record, replay, record, replay...: both see the machine's drift alike
            name = f"{mode}-timing" + (f"-{i + 1}" if a.repeats > 1 else "")
            if not self.fits(name):
                break
            if a.recording:
                (rec, trace), calls = given, given_calls
            else:
                rec, trace = self.timed(self.record, name, mode, "small", train)
                self.doc.setdefault("sequence_problems", {})[name] = self.sequence_problems(trace)
                calls = lib.recorded_call_counts(trace, a.python)
            for variant, env in a.variants.items():
                label = name + ("" if variant == "plain" else f"-{variant}")
                if not self.fits(f"replay {label}"):
                    break
                rep = self.timed(self.replay_all, label, mode, "timing", trace, lambda r: train, env)
                for rank in range(a.nproc):
                    per_rank[(variant, rank)].append(self.timing_of(rec, rep, trace, calls, rank))
        for (variant, rank), runs in per_rank.items():
            if not runs:
                self.doc["checks"].append({"check": "timing", "mode": mode, "rank": rank, "variant": variant,
                                           "pass": False, "error": "no run completed within --budget"})
                continue
            reals = [r["median_step_ms_real"] for r in runs if r["median_step_ms_real"]]
            replays = [r["median_step_ms_replay"] for r in runs if r["median_step_ms_replay"]]
            complete = len(reals) == len(replays) == len(runs)
            m_real = statistics.median(reals) if complete else None
            m_rep = statistics.median(replays) if complete else None
            err = (m_rep - m_real) / m_real if m_real and m_rep else None
            sig_ok = all(r["signature_match"] for r in runs)
            check = {"check": "timing", "mode": mode, "rank": rank, "model": a.model, "micro_batch": a.micro_batch,
                     "repeats": a.repeats, "repeats_done": len(runs), "variant": variant,
                     "variant_env": a.variants[variant],
                     **(runs[0] if len(runs) == 1 else {"runs": runs}),
                     "median_step_ms_real": m_real, "median_step_ms_replay": m_rep, "median_step_error": err,
                     "real_run_spread": spread(reals), "replay_run_spread": spread(replays),
                     "host_held_ms_per_step": median_of(runs, "host_held_ms_per_step"),
                     "call_host_us_median": median_of(runs, "call_host_us_median"),
                     "signature_match": sig_ok,
                     "pass": bool(sig_ok and err is not None and abs(err) <= a.tolerance)}
            self.doc["checks"].append(check)
            errors = ", ".join("-" if r["median_step_error"] is None else f"{r['median_step_error'] * 100:+.2f}%"
                               for r in runs)
            label = "" if variant == "plain" else f" [{variant}]"
            spreads = "" if check["real_run_spread"] is None or check["replay_run_spread"] is None else (
                f"; runs spread real {check['real_run_spread'] * 100:.2f}%, replay "
                f"{check['replay_run_spread'] * 100:.2f}%")
            self.log.say(f"CHECK timing {mode}{label} rank {rank}: real {m_real} ms, replay {m_rep} ms (median over "
                         f"{len(runs)} run(s); per run {errors}{spreads}), error "
                         f"{err if err is None else f'{err * 100:+.2f}%'}"
                         f"; signatures: {runs[-1]['signature']}{'' if sig_ok else ' (a run did not match)'}"
                         f"{host_text(check['host_held_ms_per_step'])}"
                         f"{call_host_text(check['call_host_us_median'])}"
                         f"{gpu_text(runs)} -> {'PASS' if check['pass'] else 'FAIL'}")

    def profile(self, mode: str):
        """Diagnosis, not a pass/fail figure: torch.profiler over steps --warmup..--warmup+5 in one recorded run and
        in each rank's timing replay, GPU time split into compute, communication (NCCL kernels; the replay's
        holds), copies and idle, side by side. Says whether a step-time error comes from the local compute (slower
        next to real NCCL kernels, or on a busier machine) or from the holds and gaps."""
        a = self.args
        if script_for(mode) != TRAIN:
            raise SystemExit(f"--checks profile runs the train_gpt.py modes (ddp, fsdp2), not {mode}")
        window = f"{a.warmup}:{min(a.warmup + 5, a.steps)}"
        prof_dir = os.path.join(a.work, "profiles")
        os.makedirs(prof_dir, exist_ok=True)
        base = [*MODELS[a.model], "--steps", str(a.steps), "--micro-batch", str(a.micro_batch), "--profile-steps",
                window]
        real_pat = os.path.join(prof_dir, f"{mode}-real-rank{{rank}}.json")
        rep_pat = os.path.join(prof_dir, f"{mode}-replay-rank{{rank}}.json")
        rec, trace = self.record(f"{mode}-profile", mode, "small", [*base, "--profile-nccl", real_pat])
        for variant, env in a.variants.items():
            pattern = rep_pat.replace("-replay-", f"-replay-{variant}-")
            self.replay_all(f"{mode}-profile-{variant}", mode, "timing", trace,
                            lambda r, pattern=pattern: [*base, "--profile-nccl", pattern], env)

        def load(path: str) -> dict:
            try:
                with open(path, encoding="utf-8") as f:
                    return json.load(f)
            except (OSError, json.JSONDecodeError) as e:
                return {"error": f"{path}: {e}"}

        for variant in a.variants:
            for rank in range(a.nproc):
                real = load(real_pat.format(rank=rank))
                rep = load(rep_pat.replace("-replay-", f"-replay-{variant}-").format(rank=rank))
                split_real, split_rep = real.get("gpu_split_us") or {}, rep.get("gpu_split_us") or {}
                check = {"check": "profile", "mode": mode, "rank": rank, "window": window, "diagnostic": True,
                         "micro_batch": a.micro_batch, "variant": variant, "variant_env": a.variants[variant],
                         "real": real, "replay": rep, "pass": bool(split_real and split_rep)}
                self.doc["checks"].append(check)
                steps = len((real.get("step_ms") or [])) or 1

                def per_step(split: dict) -> str:
                    return ", ".join(f"{k} {v / steps / 1e3:.2f}" for k, v in split.items())
                self.log.say(f"PROFILE {mode} [{variant}] rank {rank} (ms per step, steps {window}): real "
                             f"[{per_step(split_real)}] step_ms {real.get('step_ms')}; replay [{per_step(split_rep)}] "
                             f"step_ms {rep.get('step_ms')}; real communication kernels "
                             f"{json.dumps(real.get('communication_kernel_shapes'))}")

    def value(self, mode: str):
        a = self.args
        params = os.path.join(a.work, "params")
        os.makedirs(params, exist_ok=True)
        megatron = mode.startswith("megatron-")
        real_pat = os.path.join(params, f"{mode}-real" + ("" if megatron else "-rank{rank}.pt"))
        rep_pat = os.path.join(params, f"{mode}-replay-rank{{rank}}" + ("" if megatron else ".pt"))
        for path in [real_pat.format(rank=0)] + [rep_pat.format(rank=r) for r in range(a.nproc)]:
            shutil.rmtree(path, ignore_errors=True)  # Megatron's checkpoint directories
        base = ["--steps", str(a.value_steps)] + ([] if megatron else ["--deterministic", "--micro-batch",
                                                                       str(a.micro_batch)])
        rec, trace = self.record(f"{mode}-value", mode, "all", [*base, "--save-params", real_pat])
        self.doc.setdefault("sequence_problems", {})[f"{mode}-value"] = self.sequence_problems(trace)
        calls = lib.recorded_call_counts(trace, self.args.python)
        # Each --variant replays the same recording once more (e.g. pinned:RANKLENS_PAYLOAD_DEVICE_BYTES=0), judged
        # alike, with its replayed median step time beside the others'.
        for variant, variant_env in a.variants.items():
            for path in [rep_pat.format(rank=r) for r in range(a.nproc)]:
                shutil.rmtree(path, ignore_errors=True)
            name = f"{mode}-value" if variant == "plain" else f"{mode}-value-{variant}"
            rep = self.replay_all(name, mode, "value", trace,
                                  lambda r: [*base, "--save-params", rep_pat.format(rank=r) if megatron else rep_pat],
                                  variant_env=variant_env or None)
            self.value_checks(mode, variant, megatron, rec, rep, calls, real_pat, rep_pat)

    def value_checks(self, mode, variant, megatron, rec, rep, calls, real_pat, rep_pat):
        a = self.args
        cmp_args = argparse.Namespace(python=a.python, nproc=a.nproc)
        # Megatron's checkpoints pickle its own classes: its directory goes on the comparison's PYTHONPATH.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [a.megatron, os.environ.get("PYTHONPATH")]))}
        per_rank = rft.compare_params(cmp_args, real_pat, rep_pat, env=env if megatron else None)
        for rank in range(a.nproc):
            r = per_rank[rank] if rank < len(per_rank) else {"error": "no comparison"}
            sig_ok, sig = lib.replay_signature_ok(rep["ranks"][rank], calls.get(rank))
            if megatron:  # printed by the last rank only: the recorded job's vs the replayed rank's, if it prints
                real_losses = megatron_losses(rec["log"]) or None
                rep_losses = megatron_losses(rep["ranks"][rank]["log"]) or None
            else:
                real_losses = (rec["results"].get(rank) or {}).get("losses")
                rep_losses = ((rep["ranks"][rank].get("result")) or {}).get("losses")
            step_ms = ((rep["ranks"][rank].get("result")) or {}).get("step_ms")
            check = {"check": "value", "mode": mode, "variant": variant, "rank": rank, "identical": r.get("identical"),
                     "median_step_ms_replay": median_after(step_ms, a.warmup),
                     "max_abs_diff": r.get("max_abs_diff"), "tensors": r.get("tensors"), "error": r.get("error"),
                     "losses_equal": real_losses == rep_losses if real_losses and rep_losses else None,
                     "signature_match": sig_ok, "signature": sig, "counters": rep["ranks"][rank].get("counters"),
                     "different": r.get("different", [])[:5]}
            # A Megatron rank that is not data-parallel rank 0 saves no checkpoint: its losses decide.
            no_checkpoint = megatron and not r.get("files") and check["losses_equal"] is True
            check["pass"] = bool((r.get("identical") or no_checkpoint) and sig_ok and check["losses_equal"] is not False)
            self.doc["checks"].append(check)
            label = mode if variant == "plain" else f"{mode} [{variant}]"
            self.log.say(f"CHECK value {label} rank {rank}: identical {r.get('identical')} (max abs diff "
                         f"{r.get('max_abs_diff')}), losses equal {check['losses_equal']}; replayed median step "
                         f"{check['median_step_ms_replay']} ms; signatures: {sig} -> "
                         f"{'PASS' if check['pass'] else 'FAIL'}")


def main(argv=None) -> int:
    args = parse_args(argv)
    bench = Bench(args)
    t0 = time.monotonic()
    for mode in args.modes.split(","):
        for check in args.checks.split(","):
            try:
                getattr(bench, check)(mode)
            except Exception as e:  # keep what was measured
                bench.doc["checks"].append({"check": check, "mode": mode, "pass": False,
                                            "error": f"{type(e).__name__}: {e}"})
                bench.log.say(f"CHECK {check} {mode}: error {type(e).__name__}: {e}")
            lib.write_json(args.json, bench.doc)
    bench.doc["wall_s"] = round(time.monotonic() - t0, 1)
    bench.doc["all_pass"] = all(c.get("pass") for c in bench.doc["checks"])
    lib.write_json(args.json, bench.doc)
    bench.log.say(f"done in {bench.doc['wall_s']} s: {'ALL PASS' if bench.doc['all_pass'] else 'SOME FAILED'}")
    return 0 if bench.doc["all_pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
