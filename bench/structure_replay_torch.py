#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Acceptance run of structure replay under PyTorch, on one GPU: does one rank of an N-rank job train?

Cases (each a subprocess, output in <out>/logs/<case>.log):
  import_preload   `import torch` with the RankLens libnccl.so.2 in LD_PRELOAD: is it mapped, do
                   NCCL symbols bind to it, what do ncclGetVersion and torch.cuda.nccl.version() say
  ddp_r1_of_2      ranklens replay --rank 1 --world-size 2 -- python3 examples/torch/train_gpt.py --parallel ddp
  ddp_r37_of_64    the same as rank 37 of 64
  fsdp2_r37_of_64  rank 37 of 64 with --parallel fsdp2
With --real, when at least 2 GPUs are visible, also the same script for real through
`torchrun --standalone --nproc-per-node 2` (ddp and fsdp2, with the real NCCL), plus the one-rank
case fsdp2_r1_of_2, and a replay-vs-real comparison of rank 1 (step time, first-step loss).

A one-rank case passes when its exit code is 0, its RESULT line says all losses were finite and
every requested step completed, and its preload check found the RankLens library bound.
Writes <out>/structure_replay_torch.json (commit, date, device, torch version, command lines,
return codes, parsed results, pass/fail) and prints a table. Exit status 1 if any case failed.

Example (on the GPU machine, from the repository root):
    python3 bench/structure_replay_torch.py --lib build/nccl_fake/libnccl.so.2 --steps 20
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import math
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = "examples/torch/train_gpt.py"  # relative to REPO (the cases run with cwd=REPO)
PRELOAD_CHECK = "bench/preload_check.py"  # relative to REPO
FORMAT_VERSION = "1.0"

ONE_RANK_CASES = {
    # name: (rank, world_size, parallel)
    "ddp_r1_of_2": (1, 2, "ddp"),
    "ddp_r37_of_64": (37, 64, "ddp"),
    "fsdp2_r37_of_64": (37, 64, "fsdp2"),
}
EXTRA_ONE_RANK_CASES_FOR_REAL = {"fsdp2_r1_of_2": (1, 2, "fsdp2")}
REAL_CASES = {"real_ddp_2gpu": "ddp", "real_fsdp2_2gpu": "fsdp2"}
ALL_DEFAULT_CASES = ["import_preload", *ONE_RANK_CASES]

PROBE = r"""
import json, sys
out = {"python": sys.version.split()[0]}
try:
    import torch
except Exception as e:
    print("PROBE " + json.dumps({"error": f"import torch: {type(e).__name__}: {e}"})); sys.exit(1)
out["torch"] = torch.__version__
out["cuda_available"] = torch.cuda.is_available()
out["device_count"] = torch.cuda.device_count() if out["cuda_available"] else 0
out["device_names"] = [torch.cuda.get_device_name(i) for i in range(out["device_count"])]
try:
    out["torch_cuda_nccl_version"] = list(torch.cuda.nccl.version())
except Exception as e:
    out["torch_cuda_nccl_version"] = None
print("PROBE " + json.dumps(out))
"""

IMPORT_CHECK = (
    "import sys; sys.path.insert(0, sys.argv[2]); import preload_check as boot; import torch; "
    'r = boot.preload_report(sys.argv[1]); r["cuda_available"] = torch.cuda.is_available(); '
    'boot.print_report(r); sys.exit(0 if r["ok"] else 3)'
)

RESULT_RE = re.compile(r"(?:^|\s)RESULT (\{.*\})\s*$")
CHECK_RE = re.compile(r"(?:^|\s)PRELOAD_CHECK (\{.*\})\s*$")
PROBE_RE = re.compile(r"(?:^|\s)PROBE (\{.*\})\s*$")


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", default=os.path.join(REPO, "build", "nccl_fake", "libnccl.so.2"),
                   help="the RankLens libnccl.so.2 (default: %(default)s)")
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results"),
                   help="result folder; logs go to OUT/logs (default: %(default)s)")
    p.add_argument("--steps", type=int, default=20, help="training steps per case (default: %(default)s)")
    p.add_argument("--real", action="store_true",
                   help="also run the script for real on 2 GPUs with torchrun (skipped with fewer than 2 GPUs)")
    p.add_argument("--cases", default=",".join(ALL_DEFAULT_CASES),
                   help="comma-separated subset of: " + ", ".join(ALL_DEFAULT_CASES) + " (default: all)")
    p.add_argument("--fill", choices=("clone", "keep", "zero", "poison"), default=None,
                   help="pass --fill to ranklens replay (default: the library's, clone)")
    p.add_argument("--ranklens", default=os.path.join(REPO, "build", "release", "tools", "ranklens"),
                   help="the ranklens launcher that runs each one-rank case (default: %(default)s)")
    p.add_argument("--train-args", default="",
                   help="extra arguments for train_gpt.py in every case, one shell-quoted string "
                        "(e.g. \"--layers 2 --d-model 256\")")
    p.add_argument("--timeout", type=int, default=240,
                   help="seconds per case before its process group is killed; keep the sum under any outer "
                        "limit, the JSON is rewritten after every case (default: %(default)s)")
    args = p.parse_args(argv)
    if args.steps <= 0:
        p.error(f"--steps must be positive, got {args.steps}")
    args.case_list = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in args.case_list if c not in ALL_DEFAULT_CASES]
    if unknown:
        p.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(ALL_DEFAULT_CASES)}")
    try:
        args.train_extra = shlex.split(args.train_args)
    except ValueError as e:
        p.error(f"--train-args: {e}")
    return args


# ----------------------------------------------------------------------------------------------
# Provenance
# ----------------------------------------------------------------------------------------------
def git(*cmd: str) -> str | None:
    if shutil.which("git") is None:
        return None
    try:
        r = subprocess.run(["git", "-C", REPO, *cmd], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def commit_info() -> dict:
    head = git("rev-parse", "HEAD")
    if head:
        status = git("status", "--porcelain", "--untracked-files=no")
        return {"commit": head, "commit_source": "git", "dirty": bool(status) if status is not None else None}
    env = os.environ.get("RANKLENS_COMMIT")
    if env:
        return {"commit": env, "commit_source": "env RANKLENS_COMMIT", "dirty": None}
    print("warning: no git commit (git rev-parse HEAD failed) and RANKLENS_COMMIT is unset; recording 'unknown'. "
          "Set RANKLENS_COMMIT=<sha> when running from a copy without .git", file=sys.stderr)
    return {"commit": "unknown", "commit_source": "none", "dirty": None}


def nvidia_smi_names() -> list[str] | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return None
    return [line.strip() for line in r.stdout.splitlines() if line.strip()]


def file_info(path: str) -> dict:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    st = os.stat(path)
    return {"path": path, "sha256": h.hexdigest(), "bytes": st.st_size,
            "mtime": _dt.datetime.fromtimestamp(st.st_mtime, _dt.timezone.utc).isoformat(timespec="seconds")}


def probe_torch(env: dict[str, str]) -> dict:
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=REPO,
                       timeout=300)
    for line in r.stdout.splitlines():
        m = PROBE_RE.search(line)
        if m:
            return json.loads(m.group(1))
    return {"error": f"probe exited {r.returncode}: {(r.stderr or r.stdout).strip()[-2000:]}"}


# ----------------------------------------------------------------------------------------------
# Running cases
# ----------------------------------------------------------------------------------------------
def command_line(argv: list[str], env_changes: dict[str, str], env_removed: list[str]) -> str:
    parts = []
    if env_removed:
        parts.append("env " + " ".join(f"-u {k}" for k in env_removed))
    parts += [f"{k}={shlex.quote(v)}" for k, v in env_changes.items()]
    parts.append(shlex.join(argv))
    return " ".join(parts)


def run_case(name: str, argv: list[str], env: dict[str, str], env_changes: dict[str, str],
             env_removed: list[str], logs: str, timeout: int) -> dict:
    log_path = os.path.join(logs, f"{name}.log")
    cmdline = command_line(argv, env_changes, env_removed)
    print(f"[bench] {name}: {cmdline}", flush=True)
    started = utc_now()
    t0 = time.monotonic()
    timed_out = False
    with open(log_path, "w", encoding="utf-8") as log:
        log.write(f"# case: {name}\n# cwd: {REPO}\n# command: {cmdline}\n# started: {started}\n\n")
        log.flush()
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            rc = proc.returncode
        except BaseException:
            _kill_group(proc)
            raise
    wall = time.monotonic() - t0
    with open(log_path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    results, checks, bad = [], [], []
    for line in text.splitlines():
        for regex, sink in ((RESULT_RE, results), (CHECK_RE, checks)):
            m = regex.search(line)
            if m:
                try:
                    sink.append(json.loads(m.group(1)))
                except json.JSONDecodeError as e:
                    bad.append(f"unparsable line ({e}): {line[:200]}")
    tail = text.splitlines()[-15:]
    return {"name": name, "command": argv, "command_line": cmdline, "env_set": env_changes,
            "env_removed": env_removed, "cwd": REPO, "started": started, "wall_s": round(wall, 2),
            "rc": rc, "timed_out": timed_out, "log": os.path.relpath(log_path, REPO) if log_path.startswith(REPO)
            else log_path, "results": results, "preload_checks": checks, "parse_errors": bad, "_tail": tail}


def _kill_group(proc: subprocess.Popen) -> None:
    """Stop the case's process group (only what this driver started)."""
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 15)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def judge_training(case: dict, steps: int, expect_ranks: list[int], need_check: bool) -> None:
    reasons = []
    if case["timed_out"]:
        reasons.append(f"timed out after {case['wall_s']} s")
    if case["rc"] != 0:
        reasons.append(f"exit code {case['rc']}")
    by_rank = {r.get("rank"): r for r in case["results"]}
    for rank in expect_ranks:
        r = by_rank.get(rank)
        if r is None:
            reasons.append(f"no RESULT line from rank {rank}")
            continue
        if not r.get("all_finite"):
            reasons.append(f"rank {rank}: non-finite loss at steps {r.get('nonfinite_steps')}")
        if r.get("steps") != steps:
            reasons.append(f"rank {rank}: {r.get('steps')} of {steps} steps completed")
    if need_check:
        if not case["preload_checks"]:
            reasons.append("no PRELOAD_CHECK line")
        elif not all(c.get("ok") for c in case["preload_checks"]):
            reasons.append("preload check failed: the RankLens library is not what torch uses")
    case["pass"] = not reasons
    case["reasons"] = reasons


def judge_import(case: dict) -> None:
    reasons = []
    if case["rc"] != 0:
        reasons.append(f"exit code {case['rc']}")
    if not case["preload_checks"]:
        reasons.append("no PRELOAD_CHECK line (did `import torch` fail? see the log)")
    else:
        c = case["preload_checks"][-1]
        if not c.get("lib_mapped"):
            reasons.append("library not mapped after import torch")
        if not c.get("lib_bound"):
            reasons.append(f"NCCL symbols bind to {c.get('bound_to')}, not to the library")
        case["torch_cuda_nccl_version"] = c.get("torch_cuda_nccl_version")
        case["runtime_nccl_version"] = c.get("runtime_version")
        case["lib_mapped"] = c.get("lib_mapped")
        case["lib_bound"] = c.get("lib_bound")
        case["mapped_libnccl"] = c.get("mapped")
    case["pass"] = not reasons
    case["reasons"] = reasons


def clean_env_for_real(base: dict[str, str], lib: str) -> tuple[dict[str, str], list[str], dict[str, str]]:
    """The environment for real NCCL: no RankLens library in LD_PRELOAD, no RANKLENS_* variables."""
    env = dict(base)
    removed = [k for k in env if k.startswith(("RANKLENS_",))]
    removed += [k for k in ("TORCHELASTIC_USE_AGENT_STORE", "TORCH_NCCL_BCAST_UNIQUEID", "RANK", "WORLD_SIZE",
                            "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k in env]
    changes: dict[str, str] = {}
    if "LD_PRELOAD" in env:
        keep = [p for p in env["LD_PRELOAD"].replace(":", " ").split()
                if os.path.realpath(p) != os.path.realpath(lib) and os.path.basename(p) != "libnccl.so.2"]
        if keep:
            changes["LD_PRELOAD"] = ":".join(keep)
        else:
            removed.append("LD_PRELOAD")
    for k in removed:
        env.pop(k, None)
    env.update(changes)
    return env, sorted(set(removed)), changes


def sanitize(obj):
    """JSON-safe copy: non-finite floats become None, private keys are dropped."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: sanitize(v) for k, v in obj.items() if not str(k).startswith("_")}
    if isinstance(obj, (list, tuple)):
        return [sanitize(v) for v in obj]
    return obj


def compare(replay: dict | None, real: dict | None, rank: int, parallel: str) -> dict | None:
    if not replay or not real:
        return None
    a = next((r for r in replay["results"] if r.get("rank") == rank), None)
    b = next((r for r in real["results"] if r.get("rank") == rank), None)
    if not a or not b:
        return None
    out = {"parallel": parallel, "rank": rank, "replay_case": replay["name"], "real_case": real["name"],
           "replay_median_step_ms": a.get("median_step_ms"), "real_median_step_ms": b.get("median_step_ms")}
    if a.get("median_step_ms") and b.get("median_step_ms"):
        out["replay_over_real"] = a["median_step_ms"] / b["median_step_ms"]
    la, lb = (a.get("losses") or [None])[0], (b.get("losses") or [None])[0]
    out["step0_loss_replay"], out["step0_loss_real"] = la, lb
    if la is not None and lb is not None:
        out["step0_loss_abs_diff"] = abs(la - lb)
    out["note"] = ("step 0 sees identical weights and data in both runs under DDP, so its loss should match; "
                   "later steps differ because replay all-reduces only this rank's gradients"
                   if parallel == "ddp" else
                   "under FSDP2 the replay's all-gathers replicate this rank's shard (clone fill), so losses "
                   "differ from the real run from step 0; only the step time is comparable")
    return out


def print_table(cases: list[dict]) -> None:
    rows = [("case", "rank", "rc", "steps", "final_loss", "finite", "median_ms", "result")]
    for c in cases:
        if c.get("skipped"):
            rows.append((c["name"], "-", "-", "-", "-", "-", "-", "SKIP"))
            continue
        verdict = "PASS" if c.get("pass") else "FAIL"
        if c["name"] == "import_preload":
            info = f"nccl {c.get('runtime_nccl_version')}"
            rows.append((c["name"], "-", str(c["rc"]), "-", info, "-", "-", verdict))
            continue
        if not c["results"]:
            rows.append((c["name"], "-", str(c["rc"]), "-", "-", "-", "-", verdict))
        for r in sorted(c["results"], key=lambda r: r.get("rank", -1)):
            fl, med = r.get("final_loss"), r.get("median_step_ms")
            rows.append((c["name"], f"{r.get('rank')}/{r.get('world_size')}", str(c["rc"]), str(r.get("steps")),
                         f"{fl:.4f}" if isinstance(fl, (int, float)) else "-", str(r.get("all_finite")),
                         f"{med:.2f}" if isinstance(med, (int, float)) else "-", verdict))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for i, row in enumerate(rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    for c in cases:
        if not c.get("skipped") and not c.get("pass"):
            print(f"FAIL {c['name']}: {'; '.join(c.get('reasons', []))} (log: {c['log']})")
            for line in c.get("_tail", []):
                print(f"    | {line}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    lib = os.path.abspath(args.lib)
    if not os.path.isfile(lib):
        print(f"error: --lib {lib}: no such file; build the library first (cmake -S . -B build && "
              "cmake --build build) or pass --lib PATH", file=sys.stderr)
        return 2
    out = os.path.abspath(args.out)
    logs = os.path.join(out, "logs")
    os.makedirs(logs, exist_ok=True)

    base_env = dict(os.environ)
    real_env, real_removed, real_changes = clean_env_for_real(base_env, lib)
    probe = probe_torch(real_env)
    if "error" in probe:
        print(f"error: cannot inspect torch with {sys.executable}: {probe['error']}. Run this with the Python "
              "that has the torch under test", file=sys.stderr)
        return 2
    smi = nvidia_smi_names()
    names = smi if smi else probe.get("device_names", [])
    report = {
        "format_version": FORMAT_VERSION,
        "benchmark": "structure_replay_torch",
        **commit_info(),
        "date": utc_now(),
        "host": platform.node(),
        "device": names[0] if names else "none",
        "devices": names,
        "device_source": "nvidia-smi" if smi else "torch.cuda.get_device_name",
        "torch_version": probe.get("torch"),
        "torch_cuda_nccl_version": probe.get("torch_cuda_nccl_version"),
        "python": probe.get("python"),
        "python_executable": sys.executable,
        "lib": file_info(lib),
        "steps": args.steps,
        "fill": args.fill or "library default",
        "train_args": args.train_extra,
        "driver_command": shlex.join([sys.executable, *sys.argv]),
        "cases": [],
    }
    if not probe.get("cuda_available"):
        print("warning: torch sees no CUDA device; the training cases will fail", file=sys.stderr)

    train_common = ["--steps", str(args.steps), "--log-all-ranks", *args.train_extra]
    cases: list[dict] = report["cases"]
    by_name: dict[str, dict] = {}
    path = os.path.join(out, "structure_replay_torch.json")

    def write_report(complete: bool) -> None:
        judged = [c for c in cases if not c.get("skipped")]
        report["all_pass"] = bool(judged) and all(c.get("pass") for c in judged)
        report["complete"] = complete
        report["finished"] = utc_now() if complete else None
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(sanitize(report), f, indent=2, allow_nan=False)
            f.write("\n")
        os.replace(tmp, path)

    if "import_preload" in args.case_list:
        old = base_env.get("LD_PRELOAD", "").strip()
        changes = {"LD_PRELOAD": f"{lib}:{old}" if old else lib}
        env = {**base_env, **changes}
        c = run_case("import_preload", [sys.executable, "-c", IMPORT_CHECK, lib, os.path.join(REPO, "bench")],
                     env, changes, [], logs, args.timeout)
        judge_import(c)
        cases.append(c)
        by_name[c["name"]] = c
        write_report(False)

    want_real = args.real
    n_gpus = probe.get("device_count", 0)
    one_rank_cases = {k: v for k, v in ONE_RANK_CASES.items() if k in args.case_list}
    if want_real and n_gpus >= 2:
        one_rank_cases.update(EXTRA_ONE_RANK_CASES_FOR_REAL)
    for name, (rank, world, parallel) in one_rank_cases.items():
        argv_ = [args.ranklens, "replay", "--lib", lib, "--rank", str(rank), "--world-size", str(world),
                 "--no-events", "--quiet"]
        if args.fill:
            argv_ += ["--fill", args.fill]
        argv_ += ["--", sys.executable, PRELOAD_CHECK, lib, TRAIN, "--parallel", parallel, *train_common]
        c = run_case(name, argv_, base_env, {}, [], logs, args.timeout)
        judge_training(c, args.steps, [rank], need_check=True)
        cases.append(c)
        by_name[name] = c
        write_report(False)

    if want_real:
        if n_gpus < 2:
            for name in REAL_CASES:
                cases.append({"name": name, "skipped": f"needs 2 GPUs, torch sees {n_gpus}", "pass": None})
            print(f"[bench] --real skipped: torch sees {n_gpus} GPU(s)", flush=True)
        else:
            for name, parallel in REAL_CASES.items():
                argv_ = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                         TRAIN, "--parallel", parallel, *train_common]
                c = run_case(name, argv_, real_env, real_changes, real_removed, logs, args.timeout)
                judge_training(c, args.steps, [0, 1], need_check=False)
                cases.append(c)
                by_name[name] = c
                write_report(False)
            report["comparison"] = [x for x in (
                compare(by_name.get("ddp_r1_of_2"), by_name.get("real_ddp_2gpu"), 1, "ddp"),
                compare(by_name.get("fsdp2_r1_of_2"), by_name.get("real_fsdp2_2gpu"), 1, "fsdp2"),
            ) if x]

    write_report(True)

    print()
    print(f"structure replay under torch {report['torch_version']} on {report['device']} "
          f"(commit {report['commit'][:12]}, lib sha256 {report['lib']['sha256'][:12]})")
    print_table(cases)
    for cmp_ in report.get("comparison", []):
        ratio = cmp_.get("replay_over_real")
        print(f"{cmp_['parallel']} rank {cmp_['rank']}: replay {cmp_.get('replay_median_step_ms')} ms vs real "
              f"{cmp_.get('real_median_step_ms')} ms" + (f" (x{ratio:.3f})" if ratio else "")
              + (f", step-0 loss diff {cmp_['step0_loss_abs_diff']:.3g}" if "step0_loss_abs_diff" in cmp_ else ""))
    print(f"wrote {path}")
    print("ALL PASS" if report["all_pass"] else "SOME CASES FAILED")
    return 0 if report["all_pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
