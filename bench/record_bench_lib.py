#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Shared helpers of the record-mode benchmarks (record_nccl_tests.sh, record_overhead_torch.py,
record_fidelity_torch.py): provenance, running one command under a time limit with a log, reading a recorded
trace with the pure-Python reader (tools/python/ranklens_trace.py: records need only `msgpack`), and parsing
NVIDIA nccl-tests output.

Command line (used by bench/record_nccl_tests.sh, handy by hand too):

    python3 bench/record_bench_lib.py trace-stats TRACE_DIR [--window-stage step --window START:STOP]
    python3 bench/record_bench_lib.py nccl-tests-parse LOG
    python3 bench/record_bench_lib.py wheel-nccl               # path of the pip wheel's libnccl.so.2
    python3 bench/record_bench_lib.py nccl-tests-summary --runs RUNS.tsv --out OUT.json [...]

Everything prints JSON on stdout; errors go to stderr with exit status 1 (2 for bad usage).
Python 3.10+, standard library only (plus msgpack for traces).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import glob
import json
import math
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from typing import Any, Iterable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
READER_DIR = os.path.join(REPO, "tools", "python")

# Record type names as the reader reports them (docs/trace-format.md).
RECORD_NAMES = ["CommInit", "CommEnd", "Call", "GroupEnd", "Stage", "GroupBegin", "Timing", "PayloadRef", "Edit"]
OPS = ["AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter", "AlltoAll", "Gather", "Scatter", "Send",
       "Recv"]
MANIFEST_COUNTERS = ["records_written", "records_dropped", "payloads_written", "payloads_dropped",
                     "payload_raw_bytes", "payload_compressed_bytes", "segments", "payload_files"]


# ------------------------------------------------------------------------------------------------ provenance

def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def commit_info() -> dict:
    """RANKLENS_COMMIT first (the GPU machine's copy of the tree has no .git), then `git rev-parse HEAD`."""
    env = os.environ.get("RANKLENS_COMMIT", "").strip()
    if env:
        return {"commit": env, "commit_source": "env RANKLENS_COMMIT", "dirty": None}
    if shutil.which("git"):
        try:
            r = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
            if r.returncode == 0 and r.stdout.strip():
                s = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=30)
                return {"commit": r.stdout.strip(), "commit_source": "git",
                        "dirty": bool(s.stdout.strip()) if s.returncode == 0 else None}
        except (OSError, subprocess.TimeoutExpired):
            pass
    print("warning: RANKLENS_COMMIT is unset and `git rev-parse HEAD` failed; recording commit 'unknown'",
          file=sys.stderr)
    return {"commit": "unknown", "commit_source": "none", "dirty": None}


def gpu_names() -> list[str]:
    """nvidia-smi's GPU names, one per GPU ([] without nvidia-smi or on failure)."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [x.strip() for x in r.stdout.splitlines() if x.strip()] if r.returncode == 0 else []


def provenance(argv: list[str] | None = None) -> dict:
    names = gpu_names()
    return {**commit_info(), "date": utc_now(), "host": platform.node(),
            "device": names[0] if names else "none (nvidia-smi found no GPU)", "devices": names,
            "command": shlex.join(argv if argv is not None else [sys.executable, *sys.argv]),
            "cwd": os.getcwd()}


def file_sha256(path: str) -> str | None:
    import hashlib
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def find_wheel_nccl(extra_dirs: Iterable[str] = ()) -> str | None:
    """The pip wheel's libnccl.so.2 reachable from this interpreter: <sys.path entry>/nvidia/**/libnccl.so.2
    (nvidia/nccl/lib, nvidia/nccl/lib64, nvidia/cu13/lib, ...). Searches sys.path and `extra_dirs` only."""
    roots = [*extra_dirs, *sys.path]
    try:
        import site
        roots += site.getsitepackages() + [site.getusersitepackages()]
    except Exception:
        pass
    seen = set()
    for root in roots:
        if not root or not os.path.isdir(root) or root in seen:
            continue
        seen.add(root)
        hits = sorted(glob.glob(os.path.join(root, "nvidia", "**", "libnccl.so.2"), recursive=True))
        # Prefer .../nccl/lib/ then anything else.
        hits.sort(key=lambda p: (0 if os.sep + "nccl" + os.sep in p else 1, p))
        for h in hits:
            if os.path.isfile(h):
                return h
    return None


# ----------------------------------------------------------------------------------------------- processes

class CombinedLog:
    """One log file collecting everything a benchmark did (the only log that must come back from $OUT)."""

    def __init__(self, path: str | None):
        self.path = path
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(f"# started {utc_now()}\n")

    def write(self, text: str) -> None:
        if not self.path:
            return
        with open(self.path, "a", encoding="utf-8", errors="replace") as f:
            f.write(text if text.endswith("\n") else text + "\n")

    def say(self, msg: str) -> None:
        """Progress line: stdout and the combined log."""
        line = f"[{_dt.datetime.now().strftime('%H:%M:%S')}] {msg}"
        print(line, flush=True)
        self.write(line)

    def append_file(self, title: str, path: str, max_lines: int | None = None) -> None:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError as e:
            lines = [f"(cannot read {path}: {e})"]
        if max_lines is not None and len(lines) > max_lines:
            head = max_lines // 3
            lines = lines[:head] + [f"... ({len(lines) - max_lines} lines left out; full log: {path}) ..."] + \
                lines[-(max_lines - head):]
        self.write(f"\n===== {title} ({path}) =====\n" + "\n".join(lines) + "\n===== end {title} =====\n"
                   .replace("{title}", title))


def env_diff_line(env_set: dict[str, str], env_unset: Iterable[str] = ()) -> str:
    parts = []
    unset = sorted(env_unset)
    if unset:
        parts.append("env " + " ".join(f"-u {k}" for k in unset))
    parts += [f"{k}={shlex.quote(v)}" for k, v in env_set.items()]
    return " ".join(parts)


def run_logged(argv: list[str], env_set: dict[str, str], log_path: str, timeout: float,
               env_unset: Iterable[str] = (), cwd: str = REPO, watch=None, watch_every: float = 2.0) -> dict:
    """Runs argv with os.environ + env_set - env_unset, stdout+stderr to log_path, in its own process group
    (killed as a whole on timeout or interrupt). `watch()`, called every `watch_every` seconds while it runs, may
    return a reason to stop it early (e.g. the disk filling up). Returns rc, wall_s, timed_out, aborted,
    command_line."""
    env = dict(os.environ)
    for k in env_unset:
        env.pop(k, None)
    env.update(env_set)
    cmdline = (env_diff_line(env_set, env_unset) + " " + shlex.join(argv)).strip()
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    t0 = time.monotonic()
    timed_out = False
    with open(log_path, "w", encoding="utf-8") as log:
        log.write(f"# command: {cmdline}\n# cwd: {cwd}\n# started: {utc_now()}\n\n")
        log.flush()
        try:
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            log.write(f"error: cannot start: {e}\n")
            return {"rc": 127, "wall_s": 0.0, "timed_out": False, "command_line": cmdline, "log": log_path}
        aborted = None
        try:
            deadline = t0 + timeout
            while True:
                try:
                    rc = proc.wait(timeout=max(0.05, min(watch_every, deadline - time.monotonic())))
                    break
                except subprocess.TimeoutExpired:
                    if time.monotonic() >= deadline:
                        raise
                    reason = watch() if watch else None
                    if reason:
                        aborted = reason
                        kill_group(proc)
                        rc = proc.returncode
                        log.write(f"\n# killed by the benchmark: {reason}\n")
                        break
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc)
            rc = proc.returncode
            log.write(f"\n# killed after {timeout} s (timeout)\n")
        except BaseException:
            kill_group(proc)
            raise
    return {"rc": rc, "wall_s": round(time.monotonic() - t0, 2), "timed_out": timed_out, "aborted": aborted,
            "command_line": cmdline, "log": log_path}


class GpuSampler:
    """nvidia-smi's SM clock, board power and utilization of every GPU, sampled while a run lasts (a context
    manager; nothing happens when disabled or without nvidia-smi). At the H200's power limit a job next to real NCCL
    runs at lower clocks than its replay, so GPU-bound comparisons need these beside the step times."""

    QUERY = "index,clocks.sm,power.draw,utilization.gpu"

    def __init__(self, enabled: bool, every_ms: int = 500, program: str = "nvidia-smi"):
        self.enabled, self.every_ms, self.program = enabled, every_ms, program
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []

    def __enter__(self):
        if self.enabled and shutil.which(self.program):
            self.proc = subprocess.Popen([self.program, f"--query-gpu={self.QUERY}", "--format=csv,noheader,nounits",
                                          f"-lms={self.every_ms}"], stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
        return self

    def __exit__(self, *exc):
        if self.proc is not None:
            self.proc.terminate()
            try:
                out, _ = self.proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                out, _ = self.proc.communicate()
            self.lines = (out or "").splitlines()
        return False

    def summary(self, busy_percent: float = 80) -> dict:
        """Per GPU index: samples taken while it was busy (utilization > busy_percent), median and lowest SM clock
        (MHz), median power (W). {} when nothing was sampled."""
        busy: dict[str, list[tuple[float, float]]] = {}
        for line in self.lines:
            fields = [f.strip() for f in line.split(",")]
            try:
                index, sm, power, util = fields[0], float(fields[1]), float(fields[2]), float(fields[3])
            except (IndexError, ValueError):
                continue  # "[N/A]", a header, a partial line at the end
            if util > busy_percent:
                busy.setdefault(index, []).append((sm, power))
        return {index: {"samples": len(v), "sm_mhz_median": statistics.median(x[0] for x in v),
                        "sm_mhz_min": min(x[0] for x in v), "power_w_median": statistics.median(x[1] for x in v)}
                for index, v in sorted(busy.items())}


def kill_group(proc: subprocess.Popen) -> None:
    """Stops the process group this module started (SIGTERM, then SIGKILL)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=15)
            return
        except subprocess.TimeoutExpired:
            continue


def read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


_DECODER = json.JSONDecoder()


def tagged_objects(line: str, tag: str) -> tuple[list[dict], list[str]]:
    """Every `TAG {json}` in one line (not preceded by a letter or digit). Ranks that print at the same moment can
    share a line: `...}RESULT {...}` holds two."""
    out, bad = [], []
    needle = tag + " {"
    start = 0
    while (i := line.find(needle, start)) >= 0:
        start = i + len(needle)
        if i > 0 and line[i - 1].isalnum():
            continue
        try:
            obj, end = _DECODER.raw_decode(line, i + len(tag) + 1)
        except json.JSONDecodeError as e:
            bad.append(f"{e}: {line[i:i + 200]}")
            continue
        out.append(obj)
        start = end
    return out, bad


def parse_result_lines(text: str) -> tuple[list[dict], list[str]]:
    """train_gpt.py's `RESULT {json}` lines (one per rank, possibly two on one line)."""
    out, bad = [], []
    for line in text.splitlines():
        objs, errors = tagged_objects(line, "RESULT")
        out += objs
        bad += errors
    return out, bad


def tail(text: str, n: int = 15) -> list[str]:
    return text.splitlines()[-n:]


def dir_bytes(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def free_gib(path: str) -> float:
    p = os.path.abspath(path)
    while not os.path.exists(p):
        p = os.path.dirname(p)
    return shutil.disk_usage(p).free / 2**30


def sanitize(obj: Any) -> Any:
    """JSON-safe copy: non-finite floats become None, keys starting with '_' are dropped."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): sanitize(v) for k, v in obj.items() if not str(k).startswith("_")}
    if isinstance(obj, (list, tuple)):
        return [sanitize(v) for v in obj]
    return obj


def write_json(path: str, doc: Any) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(sanitize(doc), f, indent=2, allow_nan=False)
        f.write("\n")
    os.replace(tmp, path)


def median_or_none(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return statistics.median(vals) if vals else None


def mean_or_none(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return statistics.fmean(vals) if vals else None


# ------------------------------------------------------------------------------------------------- traces

def _reader():
    if READER_DIR not in sys.path:
        sys.path.insert(0, READER_DIR)
    import ranklens_trace  # noqa: E402  (needs msgpack; zstandard only for payload blobs)
    return ranklens_trace


def call_host_times(calls: list, timings: list, skip: int = 0) -> list:
    """A replay trace's calls after the first `skip`, in call order: (op name, bytes, Call stamp, the stamp of its
    hold's Timing record or None: grouped calls share one per stream). The stamps' difference is RankLens's host time
    in the call (matching, arrival mark, payload restore, the hold's launch); a hold to the next call's stamp is the
    program's own time."""
    rt = _reader()
    by_call = {rt.call_key(t["commId"], t["op"], t["peer"], t["seq"]): t for t in timings}
    out = []
    for c in calls[skip:]:
        t = by_call.get(rt.record_key(rt.CALL, c))
        out.append((OPS[c["op"]], c["bytes"], c["timeNs"], t["startNs"] if t is not None else None))
    return out


def p90(values: list) -> float:
    """The 90th percentile (nearest rank below) of a non-empty list."""
    return sorted(values)[int(0.9 * (len(values) - 1))]


def trace_stats(trace_dir: str, window: tuple[int, int] | None = None, window_stage: str = "step",
                keep_records: bool = False) -> dict:
    """Per rank directory: record counts by type, manifest counters, Timing totals, problems; totals over ranks.
    With `window` (START, STOP): the Timing records of the calls whose Call.timeNs lies in
    [Stage(name=window_stage, step=START).timeNs, Stage(name=window_stage, step=STOP).timeNs) and their summed
    durationNs (a grouped call's Timing records are found by groupId; an ungrouped one's by call identity).
    Never raises for a broken trace: errors land in the result's "errors"."""
    out: dict[str, Any] = {"trace_dir": trace_dir, "ranks": [], "errors": []}
    if not os.path.isdir(trace_dir):
        out["errors"].append(f"{trace_dir}: no such directory (did the recorder run? is RANKLENS_TRACE_DIR right?)")
        return out
    try:
        rt = _reader()
    except SystemExit as e:  # the reader exits when msgpack is missing
        out["errors"].append(str(e))
        return out
    dirs = rt.rank_directories(trace_dir)
    if not dirs:
        out["errors"].append(f"{trace_dir}: no rank directory with a manifest.msgpack (was the recorder loaded and "
                             "in record mode? LD_PRELOAD / LD_LIBRARY_PATH, RANKLENS_MODE=record)")
    for d in dirs:
        rank: dict[str, Any] = {"dir": os.path.relpath(d, trace_dir), "bytes_on_disk": dir_bytes(d)}
        try:
            reader = rt.RankReader.open(d)
        except Exception as e:  # TraceFormatError and anything unexpected
            rank["error"] = f"{type(e).__name__}: {e}"
            out["errors"].append(f"{d}: {rank['error']}")
            out["ranks"].append(rank)
            continue
        m = reader.manifest
        rank["manifest"] = {k: m.get(k) for k in ("rank", "world_size", "local_rank", "host", "pid", "gpu_name",
                                                  "nccl_version", "mode", "writer", "closed", *MANIFEST_COUNTERS)}
        rank["counters"] = dict(m.get("counters") or {})  # format 1.1: the library's own counters
        counts = {name: 0 for name in RECORD_NAMES}
        calls_by_op: dict[str, int] = {}
        timing_total_ns = 0
        timing_captured = 0
        calls, timings, stages = [], [], []
        unknown = 0
        for rec in reader.records():
            if rec.fields is None:
                unknown += 1
                continue
            counts[rec.name] = counts.get(rec.name, 0) + 1
            f = rec.fields
            if rec.name == "Call":
                op = OPS[f["op"]] if 0 <= f["op"] < len(OPS) else f"op{f['op']}"
                calls_by_op[op] = calls_by_op.get(op, 0) + 1
                calls.append(f)
            elif rec.name == "Timing":
                # durationNs -1: the events failed; captured (CUDA graph): not measured (0). Neither is summed.
                if f["durationNs"] > 0 and not f["captured"]:
                    timing_total_ns += f["durationNs"]
                timing_captured += bool(f["captured"])
                timings.append(f)
            elif rec.name == "Stage":
                stages.append(f)
        rank["records"] = counts
        rank["unknown_records"] = unknown
        rank["calls_by_op"] = calls_by_op
        rank["timing_total_ns"] = timing_total_ns
        rank["timing_captured"] = timing_captured
        rank["negative_durations"] = sum(1 for t in timings if t["durationNs"] < 0)
        rank["problems"] = [p.describe() for p in reader.problems]
        if window is not None:
            rank["window"] = timing_window(rt, calls, timings, stages, window, window_stage)
        if m.get("mode") == "replay":  # RankLens's own host time per call (warm-up: the first tenth left out)
            inside = [(hold - call) / 1e3 for _, _, call, hold in call_host_times(calls, timings, len(calls) // 10)
                      if hold is not None]
            if inside:
                rank["replay_call_host_us"] = {"median": statistics.median(inside), "p90": p90(inside)}
        if keep_records:
            rank["_calls"], rank["_timings"], rank["_stages"] = calls, timings, stages
        out["ranks"].append(rank)
    tot: dict[str, Any] = {name: sum(r.get("records", {}).get(name, 0) for r in out["ranks"]) for name in RECORD_NAMES}
    for k in MANIFEST_COUNTERS:
        tot[k] = sum((r.get("manifest", {}).get(k) or 0) for r in out["ranks"])
    tot["bytes_on_disk"] = sum(r["bytes_on_disk"] for r in out["ranks"])
    tot["timing_total_ns"] = sum(r.get("timing_total_ns", 0) for r in out["ranks"])
    tot["problems"] = sum(len(r.get("problems", [])) for r in out["ranks"])
    tot["timing_failed"] = sum(r.get("negative_durations", 0) for r in out["ranks"])
    counters: dict[str, int] = {}
    for r in out["ranks"]:
        for k, v in (r.get("counters") or {}).items():
            counters[k] = counters.get(k, 0) + v
    tot["counters"] = counters
    tot["rank_dirs"] = len(out["ranks"])
    tot["all_closed"] = bool(out["ranks"]) and all(r.get("manifest", {}).get("closed") for r in out["ranks"])
    out["totals"] = tot
    return out


def trace_stats_any(trace_dir: str, python: str | None = None, window: tuple[int, int] | None = None,
                    window_stage: str = "step") -> dict:
    """trace_stats in this process when msgpack imports here, else through `python record_bench_lib.py
    trace-stats` (e.g. msgpack only in the torch virtual environment)."""
    import importlib.util
    if importlib.util.find_spec("msgpack") is not None:
        return trace_stats(trace_dir, window, window_stage)
    if not python:
        return {"trace_dir": trace_dir, "ranks": [], "errors": ["msgpack is not importable here and no other "
                                                               "python was given"], "totals": {}}
    argv = [python, os.path.abspath(__file__), "trace-stats", trace_dir, "--window-stage", window_stage]
    if window:
        argv += ["--window", f"{window[0]}:{window[1]}"]
    stderr = ""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        stderr = r.stderr
        doc = json.loads(r.stdout)
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        return doc
    except (OSError, subprocess.TimeoutExpired, ValueError) as e:
        return {"trace_dir": trace_dir, "ranks": [], "totals": {},
                "errors": [f"{shlex.join(argv)} failed: {e}; stderr: {stderr[-500:]}"]}


def recorded_call_counts(trace_dir: str, python: str | None = None) -> dict[int, int]:
    """Call records per rank of a recorded trace (rank -> count)."""
    out = {}
    for r in trace_stats_any(trace_dir, python=python).get("ranks", []):
        rank = (r.get("manifest") or {}).get("rank")
        if rank is not None:
            out[rank] = (r.get("records") or {}).get("Call")
    return out


def replay_signature_ok(replay_rank: dict, recorded_calls: int | None) -> tuple[bool, str]:
    """From a replay's manifest counters (replay_rank["counters"]): every call matched, no mismatch, no unmatched
    communicator, as many calls as recorded. Returns (ok, a one-line description)."""
    c = replay_rank.get("counters") or {}
    calls, matched, mism = c.get("replay_calls"), c.get("replay_calls_matched"), c.get("replay_mismatches")
    ok = calls is not None and calls == matched and mism == 0 and c.get("replay_comms_unmatched", 0) == 0 and \
        (recorded_calls is None or calls == recorded_calls)
    return ok, f"calls {calls} (recorded {recorded_calls}), matched {matched}, mismatches {mism}"


def timing_window(rt, calls: list[dict], timings: list[dict], stages: list[dict], window: tuple[int, int],
                  stage_name: str) -> dict:
    start, stop = window
    marks = {}
    for s in stages:
        if s["name"] == stage_name and s["step"] in (start, stop) and s["step"] not in marks:
            marks[s["step"]] = s["timeNs"]
    res: dict[str, Any] = {"stage": stage_name, "start_step": start, "stop_step": stop,
                           "stage_marks": sum(1 for s in stages if s["name"] == stage_name)}
    if start not in marks or stop not in marks:
        res["error"] = (f"Stage records name={stage_name!r} step={start} and step={stop} not both found "
                        f"({res['stage_marks']} {stage_name!r} marks in the trace; was ranklensMarkStage called?)")
        return res
    t0, t1 = marks[start], marks[stop]
    res["t0_ns"], res["t1_ns"] = t0, t1
    res["window_ns"] = t1 - t0
    in_calls = [c for c in calls if t0 <= c["timeNs"] < t1]
    groups = {c["groupId"] for c in in_calls if c["groupId"]}
    keys = {rt.call_key(c["commId"], c["op"], c["rootOrPeer"], c["seq"]) for c in in_calls if not c["groupId"]}
    sel = [t for t in timings
           if (t["groupId"] and t["groupId"] in groups)
           or (not t["groupId"] and rt.call_key(t["commId"], t["op"], t["peer"], t["seq"]) in keys)]
    timed_keys = {rt.call_key(t["commId"], t["op"], t["peer"], t["seq"]) for t in sel if not t["groupId"]}
    timed_groups = {t["groupId"] for t in sel if t["groupId"]}
    by_op: dict[str, dict] = {}
    for c in in_calls:
        op = OPS[c["op"]] if 0 <= c["op"] < len(OPS) else f"op{c['op']}"
        e = by_op.setdefault(op, {"calls": 0, "bytes": 0})
        e["calls"] += 1
        e["bytes"] += c["bytes"]
    res.update({
        "calls": len(in_calls), "calls_by_op": by_op, "groups": len(groups),
        "timing_records": len(sel),
        "timing_total_ns": sum(t["durationNs"] for t in sel if t["durationNs"] > 0 and not t["captured"]),
        "timing_failed": sum(1 for t in sel if t["durationNs"] < 0),
        "timing_captured": sum(1 for t in sel if t["captured"]),
        "ungrouped_calls_without_timing": len(keys - timed_keys), "groups_without_timing": len(groups - timed_groups),
    })
    return res


# ------------------------------------------------------------------------------------------------ nccl-tests

_VERSION_RE = re.compile(r"nccl-tests version (\S+).*?nccl-headers=(\d+).*?nccl-library=(\d+)")
_OOB_RE = re.compile(r"#\s*Out of bounds values\s*:\s*(\d+)\s*(\S*)")
_BW_RE = re.compile(r"#\s*Avg bus bandwidth\s*:\s*([-+0-9.eE]+|nan|inf)")


def _num(tok: str) -> float | None:
    try:
        v = float(tok)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def parse_nccl_tests(text: str) -> dict:
    """Size rows (size, count, type, redop, root, then per variant out-of-place / in-place: time algbw busbw
    #wrong), the 'Out of bounds values' and 'Avg bus bandwidth' footer lines, versions and error lines."""
    rows = []
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        tok = s.split()
        if len(tok) < 9 or not tok[0].isdigit() or not tok[1].isdigit():
            continue
        variants = []
        rest = tok[5:]
        while len(rest) >= 4 and all(_num(t) is not None or t == "N/A" for t in rest[:3]) and \
                (_num(rest[3]) is not None or rest[3] == "N/A"):
            time_us, algbw, busbw, wrong = rest[:4]
            variants.append({"time_us": _num(time_us), "algbw": _num(algbw), "busbw": _num(busbw),
                             "wrong": None if wrong == "N/A" else _num(wrong)})
            rest = rest[4:]
        if not variants:
            continue
        rows.append({"size": int(tok[0]), "count": int(tok[1]), "type": tok[2], "redop": tok[3], "root": tok[4],
                     "out_of_place": variants[0], "in_place": variants[1] if len(variants) > 1 else None})
    res: dict[str, Any] = {"rows": rows}
    m = _VERSION_RE.search(text)
    if m:
        res["nccl_tests_version"], res["nccl_headers"], res["nccl_library"] = m.group(1), int(m.group(2)), int(
            m.group(3))
    m = _OOB_RE.search(text)
    res["out_of_bounds"] = int(m.group(1)) if m else None
    res["out_of_bounds_verdict"] = m.group(2) if m else None
    m = _BW_RE.search(text)
    res["avg_busbw"] = _num(m.group(1)) if m else None
    # nccl-tests prints N/A in the in-place column of ops that have no in-place form (alltoall, sendrecv); only an
    # unchecked out-of-place cell means the data was not checked.
    wrong_total, wrong_missing, inplace_na = 0, 0, 0
    for r in rows:
        for v in (r["out_of_place"], r["in_place"]):
            if v is None:
                continue
            if v["wrong"] is None:
                if v is r["in_place"]:
                    inplace_na += 1
                else:
                    wrong_missing += 1
            else:
                wrong_total += int(v["wrong"])
    res["in_place_not_applicable"] = inplace_na
    res["wrong_total"] = wrong_total
    res["wrong_unchecked_cells"] = wrong_missing
    res["error_lines"] = [l.strip() for l in text.splitlines()
                          if re.search(r"(?i)\b(error|failed|abort|segmentation|core dumped)\b", l)
                          and "Out of bounds" not in l and "Avg bus bandwidth" not in l][:20]
    return res


def judge_nccl_tests(parsed: dict, rc: int | None, timed_out: bool) -> tuple[bool, list[str]]:
    reasons = []
    if timed_out:
        reasons.append("timed out")
    if rc != 0:
        reasons.append(f"exit code {rc}")
    if not parsed["rows"]:
        reasons.append("no result rows")
    if parsed["out_of_bounds"] is None:
        reasons.append("no 'Out of bounds values' line")
    elif parsed["out_of_bounds"] != 0:
        reasons.append(f"{parsed['out_of_bounds']} out-of-bounds values")
    if parsed["wrong_total"]:
        reasons.append(f"{parsed['wrong_total']} wrong values")
    if parsed["wrong_unchecked_cells"]:
        reasons.append(f"{parsed['wrong_unchecked_cells']} cells not checked (#wrong N/A: was -c 1 given?)")
    return not reasons, reasons


def nccl_tests_summary(runs_tsv: str, extra: dict) -> dict:
    """Builds the JSON summary of bench/record_nccl_tests.sh from its runs table (tab-separated:
    test arm rc timed_out wall_s log trace_dir command)."""
    tests: dict[str, dict] = {}
    order: list[str] = []
    with open(runs_tsv, encoding="utf-8") as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 8:
                raise ValueError(f"{runs_tsv}: bad line (want 8 tab-separated fields): {line!r}")
            test, arm, rc, timed_out, wall_s, log, trace_dir, command = parts[:8]
            text = read_text(log)
            parsed = parse_nccl_tests(text)
            ok, reasons = judge_nccl_tests(parsed, int(rc), timed_out == "1")
            entry = {"rc": int(rc), "timed_out": timed_out == "1", "wall_s": float(wall_s), "log": log,
                     "command": command, "pass": ok, "reasons": reasons,
                     "avg_busbw_GBps": parsed["avg_busbw"], "out_of_bounds": parsed["out_of_bounds"],
                     "wrong_total": parsed["wrong_total"], "sizes": len(parsed["rows"]),
                     "nccl_library": parsed.get("nccl_library"), "nccl_tests_version": parsed.get("nccl_tests_version"),
                     "error_lines": parsed["error_lines"],
                     "rows": [{"size": r["size"], "oop_time_us": r["out_of_place"]["time_us"],
                               "oop_busbw": r["out_of_place"]["busbw"], "oop_wrong": r["out_of_place"]["wrong"],
                               "ip_time_us": r["in_place"]["time_us"] if r["in_place"] else None,
                               "ip_busbw": r["in_place"]["busbw"] if r["in_place"] else None,
                               "ip_wrong": r["in_place"]["wrong"] if r["in_place"] else None}
                              for r in parsed["rows"]]}
            if trace_dir and trace_dir != "-":
                st = trace_stats(trace_dir)
                t = st.get("totals", {})
                entry["trace"] = {"dir": trace_dir, "errors": st["errors"], "rank_dirs": t.get("rank_dirs", 0),
                                  "calls": t.get("Call", 0), "timings": t.get("Timing", 0),
                                  "payload_refs": t.get("PayloadRef", 0), "comm_inits": t.get("CommInit", 0),
                                  "groups": t.get("GroupEnd", 0), "records_dropped": t.get("records_dropped", 0),
                                  "payloads_dropped": t.get("payloads_dropped", 0),
                                  "payload_raw_bytes": t.get("payload_raw_bytes", 0),
                                  "bytes_on_disk": t.get("bytes_on_disk", 0), "problems": t.get("problems", 0),
                                  "all_closed": t.get("all_closed", False),
                                  "timing_failed": t.get("timing_failed", 0), "counters": t.get("counters", {}),
                                  "per_rank": [{"dir": r["dir"], "records": r.get("records"),
                                                "calls_by_op": r.get("calls_by_op"), "error": r.get("error"),
                                                "negative_durations": r.get("negative_durations"),
                                                "problems": r.get("problems", [])[:5]}
                                               for r in st["ranks"]]}
                tr = entry["trace"]
                cpp = trace_dir.rstrip("/") + ".summary.json"  # `ranklens trace summary --json`, if it ran
                if os.path.isfile(cpp):
                    try:
                        with open(cpp, encoding="utf-8") as f:
                            tr["calls_cpp_summary"] = sum(int(r.get("calls", 0)) for r in json.load(f))
                    except (OSError, ValueError, TypeError, AttributeError) as e:
                        tr["calls_cpp_summary_error"] = f"{cpp}: {e}"
                trace_reasons = []
                if tr["errors"]:
                    trace_reasons += tr["errors"]
                if tr["calls"] == 0:
                    trace_reasons.append("no Call records (was the recorder loaded? LD_LIBRARY_PATH, RANKLENS_MODE)")
                if tr["timings"] == 0:
                    trace_reasons.append("no Timing records")
                if tr["timing_failed"]:
                    trace_reasons.append(f"{tr['timing_failed']} Timing records with durationNs -1 (events failed)")
                if tr["records_dropped"] or tr["payloads_dropped"]:
                    trace_reasons.append(f"dropped: {tr['records_dropped']} records, {tr['payloads_dropped']} payloads")
                if tr["problems"]:
                    trace_reasons.append(f"{tr['problems']} reader problems")
                if "calls_cpp_summary" in tr and tr["calls_cpp_summary"] != tr["calls"]:
                    trace_reasons.append(f"Call count: Python reader {tr['calls']}, ranklens trace summary "
                                         f"{tr['calls_cpp_summary']}")
                if tr["rank_dirs"] and not tr["all_closed"]:
                    trace_reasons.append("a rank's manifest is not closed")
                entry["trace_ok"] = not trace_reasons
                entry["trace_reasons"] = trace_reasons
            if test not in tests:
                tests[test] = {"test": test}
                order.append(test)
            tests[test][arm] = entry
    results = []
    for name in order:
        t = tests[name]
        real, rec = t.get("real"), t.get("record")
        t["pass_real"] = real["pass"] if real else None
        t["pass_record"] = rec["pass"] if rec else None
        t["trace_ok"] = rec.get("trace_ok") if rec else None
        t["avg_busbw_real"] = real["avg_busbw_GBps"] if real else None
        t["avg_busbw_record"] = rec["avg_busbw_GBps"] if rec else None
        if t["avg_busbw_real"] and t["avg_busbw_record"]:
            t["busbw_record_over_real"] = round(t["avg_busbw_record"] / t["avg_busbw_real"], 4)
        t["nccl_library_real"] = real.get("nccl_library") if real else None
        t["nccl_library_record"] = rec.get("nccl_library") if rec else None
        t["warnings"] = []
        if t["nccl_library_real"] and t["nccl_library_record"] is not None and \
                t["nccl_library_record"] != t["nccl_library_real"]:
            t["warnings"].append(f"ncclGetVersion through the recorder says {t['nccl_library_record']}, the real "
                                 f"NCCL {t['nccl_library_real']}")
        t["calls"] = rec["trace"]["calls"] if rec and "trace" in rec else None
        t["timings"] = rec["trace"]["timings"] if rec and "trace" in rec else None
        t["payload_refs"] = rec["trace"]["payload_refs"] if rec and "trace" in rec else None
        results.append(t)
    doc = {"benchmark": "record_nccl_tests", **extra, "tests": results}
    doc["complete"] = not extra.get("skipped_tests")
    doc["all_pass"] = bool(results) and doc["complete"] and all(
        t["pass_real"] is not False and t["pass_record"] and t["trace_ok"] for t in results)
    doc["summary"] = [
        {"test": t["test"], "real": t["pass_real"], "record": t["pass_record"], "trace_ok": t["trace_ok"],
         "busbw_real": t["avg_busbw_real"], "busbw_record": t["avg_busbw_record"],
         "ratio": t.get("busbw_record_over_real"), "calls": t["calls"], "timings": t["timings"],
         "payload_refs": t["payload_refs"]} for t in results]
    return doc


def print_nccl_tests_table(doc: dict, out=sys.stdout) -> None:
    rows = [("test", "real", "record", "trace", "busbw real", "busbw rec", "rec/real", "Calls", "Timings", "Payloads")]

    def f(v, fmt="{:.2f}"):
        return "-" if v is None else fmt.format(v) if isinstance(v, float) else str(v)

    def pf(v):
        return "-" if v is None else "PASS" if v else "FAIL"

    for s in doc["summary"]:
        rows.append((s["test"], pf(s["real"]), pf(s["record"]), pf(s["trace_ok"]), f(s["busbw_real"]),
                     f(s["busbw_record"]), f(s["ratio"], "{:.3f}"), f(s["calls"]), f(s["timings"]),
                     f(s["payload_refs"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, r in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip(), file=out)
        if i == 0:
            print("  ".join("-" * w for w in widths), file=out)
    for t in doc["tests"]:
        for arm in ("real", "record"):
            e = t.get(arm)
            if e and not e["pass"]:
                print(f"FAIL {t['test']} [{arm}]: {'; '.join(e['reasons'])} (log {e['log']})", file=out)
        rec = t.get("record")
        if rec and rec.get("trace_reasons"):
            print(f"TRACE {t['test']}: {'; '.join(rec['trace_reasons'])}", file=out)
        for w in t.get("warnings", []):
            print(f"WARNING {t['test']}: {w}", file=out)


# --------------------------------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("trace-stats", help="record counts, manifest counters and Timing totals of a trace (JSON)")
    s.add_argument("trace")
    s.add_argument("--window", metavar="START:STOP", help="also sum the Timing durations of calls between "
                   "Stage(step=START) and Stage(step=STOP)")
    s.add_argument("--window-stage", default="step", help="Stage name delimiting the window (default: step)")
    s = sub.add_parser("nccl-tests-parse", help="parse one nccl-tests log (JSON)")
    s.add_argument("log")
    sub.add_parser("wheel-nccl", help="print the pip wheel's libnccl.so.2 path seen from this interpreter")
    s = sub.add_parser("nccl-tests-summary", help="JSON summary of record_nccl_tests.sh runs")
    s.add_argument("--runs", required=True, help="runs table written by record_nccl_tests.sh")
    s.add_argument("--out", required=True, help="JSON file to write")
    s.add_argument("--meta", default="{}", help="extra top-level JSON fields (a JSON object)")
    args = p.parse_args(argv)

    if args.cmd == "trace-stats":
        window = None
        if args.window:
            try:
                a, b = args.window.split(":")
                window = (int(a), int(b))
            except ValueError:
                p.error(f"--window {args.window!r}: want START:STOP (integers)")
        st = trace_stats(args.trace, window, args.window_stage)
        print(json.dumps(sanitize(st), indent=2))
        return 1 if st["errors"] else 0
    if args.cmd == "nccl-tests-parse":
        if not os.path.isfile(args.log):
            print(f"error: {args.log}: no such file", file=sys.stderr)
            return 1
        parsed = parse_nccl_tests(read_text(args.log))
        print(json.dumps(sanitize(parsed), indent=2))
        return 0
    if args.cmd == "wheel-nccl":
        path = find_wheel_nccl()
        if not path:
            print(f"error: no nvidia/**/libnccl.so.2 under the sys.path of {sys.executable}; pass the real NCCL "
                  "explicitly", file=sys.stderr)
            return 1
        print(path)
        return 0
    if args.cmd == "nccl-tests-summary":
        try:
            meta = json.loads(args.meta)
            if not isinstance(meta, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            p.error(f"--meta: {e}")
        names = gpu_names()
        extra = {**commit_info(), "date": utc_now(), "host": platform.node(),
                 "device": names[0] if names else "none (nvidia-smi found no GPU)", "devices": names, **meta}
        try:
            doc = nccl_tests_summary(args.runs, extra)
        except (OSError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        write_json(args.out, doc)
        print_nccl_tests_table(doc)
        print(f"wrote {args.out}")
        if not doc["complete"]:
            print(f"NOT RUN: {', '.join(doc.get('skipped_tests', []))}")
        print("ALL PASS" if doc["all_pass"] else "SOME CHECKS FAILED OR TESTS NOT RUN")
        return 0 if doc["all_pass"] else 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
