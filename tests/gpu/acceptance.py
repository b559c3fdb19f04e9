#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""RankLens's GPU acceptance run on ONE GPU (scripts/gpu-test.sh runs it): real multi-rank jobs whose ranks share the
GPU (`ranklens record --share-gpu`, real NCCL over sockets), every rank then replayed alone at value fidelity
(`ranklens replay --ranks all`).

Cases and verdicts:
  ddp-2, ddp-4, fsdp2-2, fsdp2-4   examples/torch/train_gpt.py
  tp-2, tp-fsdp2-8, pp-4           examples/torch/train_parallel.py (TP; TP=2 x FSDP2; a 4-stage pipeline)
  c10d-2                           the libtorch C++ client (examples/torch_cpp, built here against the torch wheel)
  minitrain-8                      examples/nccl_minitrain (plain NCCL C++, TP x DP)
  anomaly-2                        examples/nccl_anomaly, rank 1's gradient NaN at step 4 (the demo's job)
  zero2-2, zero3-2                 DeepSpeed ZeRO-2 / ZeRO-3 (examples/deepspeed/train_zero.py)
  megatron-8                       Megatron-LM pretrain_gpt.py, TP=2 x PP=2 x DP=2 (examples/megatron/run_gpt.sh)
    each: recorded with every payload; every rank replayed alone at value fidelity: exit code 0, 100% of the
    recorded calls matched, nothing diverged, and its parameters (digest, or c10d's parameter file) byte-identical
    to the same rank's in the recorded run
  unrecorded-ddp-2, unrecorded-minitrain-8
    the same job under `ranklens run --share-gpu` (no recorder): every rank's digest equals the recorded run's
  nccl-tests-<N>                   NVIDIA/nccl-tests -c 1, every collective and sendrecv, N = 2, 4, 8 MPI ranks, through
    the recorder (built here with MPI): each test exits 0 with 0 wrong values, and each rank's trace is readable

Prints a table and writes one JSON document (--json). Exit status 0 when every case passed, 1 otherwise (a case that
cannot run here, e.g. without MPI, fails with the reason). Pure standard library: it runs under the torch machine's
Python.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = ["--steps", "6", "--deterministic", "--digest", "--mark-steps", "--log-all-ranks"]
NCCL_TESTS = ["all_reduce", "all_gather", "broadcast", "reduce", "reduce_scatter", "alltoall", "gather", "scatter",
              "sendrecv"]
NCCL_TESTS_ARGS = ["-b", "8", "-e", "4M", "-f", "8", "-g", "1", "-c", "1", "-n", "2", "-w", "1"]
PRINT_LOCK = threading.Lock()


def say(text: str) -> None:
    with PRINT_LOCK:
        print(text, flush=True)


def run(cmd: list[str], log: str, env: dict | None = None, timeout: float = 300, cwd: str = REPO) -> int:
    """Runs cmd with its output in `log`; 124 when it outlasts `timeout` (its whole process group is stopped)."""
    os.makedirs(os.path.dirname(log), exist_ok=True)
    with open(log, "ab") as out:
        out.write(("$ " + " ".join(cmd) + "\n").encode())
        out.flush()
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)
        try:
            return p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            out.write(f"\n[acceptance] stopped after {timeout} s\n".encode())
            return 124


def tail(path: str, lines: int = 6) -> str:
    try:
        with open(path, errors="replace") as f:
            return " | ".join(l.rstrip() for l in f.readlines()[-lines:])
    except OSError:
        return f"(no {path})"


def results_by_rank(log: str) -> dict[int, dict]:
    """The `RESULT {json}` lines a job printed, by rank."""
    out = {}
    try:
        with open(log, errors="replace") as f:
            # Ranks sharing one output can interleave their lines ("RESULT {...}RESULT {...}" when Python writes the
            # text and its newline apart): every object is read from where its RESULT starts.
            decoder = json.JSONDecoder()
            for line in f:
                at = line.find("RESULT {")
                while at >= 0:
                    try:
                        doc, _ = decoder.raw_decode(line, at + len("RESULT "))
                    except json.JSONDecodeError:
                        doc = None
                    if isinstance(doc, dict) and isinstance(doc.get("rank"), int):
                        out[doc["rank"]] = doc
                    at = line.find("RESULT {", at + 1)
    except OSError:
        pass
    return out


class Acceptance:
    def __init__(self, a):
        self.a = a
        self.work = a.work
        prefix = a.prefix
        if prefix:
            self.ranklens = os.path.join(prefix, "bin", "ranklens")
            self.minitrain = os.path.join(prefix, "bin", "nccl_minitrain")
            self.anomaly = os.path.join(prefix, "bin", "nccl_anomaly")
            self.tool_libs = [os.path.join(prefix, "deps")]
            self.minitrain_libs = [os.path.join(prefix, "cudart")]
        else:
            build = a.build
            self.ranklens = os.path.join(build, "tools", "ranklens")
            self.minitrain = os.path.join(build, "examples", "nccl_minitrain")
            self.anomaly = os.path.join(build, "examples", "nccl_anomaly")
            self.tool_libs, self.minitrain_libs = [], []
        self.env = dict(os.environ)
        self.env["LD_LIBRARY_PATH"] = os.pathsep.join(self.tool_libs + [self.env.get("LD_LIBRARY_PATH", "")]).strip(":")
        self.env["PYTHONUNBUFFERED"] = "1"
        # Every payload kept: a payload skipped for a full staging would make its value replay fill instead.
        self.env["RANKLENS_STAGING_FULL"] = "wait"
        for v in ("NCCL_HOSTID", "CUDA_VISIBLE_DEVICES"):
            self.env.pop(v, None)
        self.py = a.python
        self.real_nccl = subprocess.run(
            [self.py, "-c", "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib', "
                            "'libnccl.so.2'))"], capture_output=True, text=True).stdout.strip()
        self.cases: list[dict] = []
        self.machine = subprocess.run(["sh", "-c", "nvidia-smi -L 2>/dev/null"], capture_output=True,
                                      text=True).stdout.strip()
        self.lock = threading.Lock()
        self.ddp2_digests: dict[int, str] | None = None
        self.minitrain8_digests: dict[int, str] | None = None
        self.ready = {"ddp-2": threading.Event(), "minitrain-8": threading.Event()}
        self.frameworks_ready: tuple[str, str | None] | None = None
        self.nccl_tests_built: tuple[str, str | None] | None = None

    # ------------------------------------------------------------------------------------------------ helpers

    def write_json(self, wall: float | None) -> bool:
        order = ["ddp-2", "unrecorded-ddp-2", "ddp-4", "fsdp2-2", "fsdp2-4", "tp-2", "tp-fsdp2-8", "pp-4", "c10d-2",
                 "minitrain-8", "unrecorded-minitrain-8", "anomaly-2", "zero2-2", "zero3-2", "megatron-8", "nccl-tests-2",
                 "nccl-tests-4", "nccl-tests-8"]
        self.cases.sort(key=lambda c: order.index(c["name"]) if c["name"] in order else len(order))
        all_pass = bool(self.cases) and all(c["pass"] for c in self.cases)
        doc = {"benchmark": "gpu acceptance (one GPU, ranks sharing it)", "commit": self.a.commit,
               "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
               "machine": self.machine, "command": "scripts/gpu-test.sh " + " ".join(sys.argv[1:]),
               "wall_s": wall, "finished": wall is not None, "all_pass": all_pass, "cases": self.cases}
        os.makedirs(os.path.dirname(os.path.abspath(self.a.json)), exist_ok=True)
        with open(self.a.json, "w") as f:
            json.dump(doc, f, indent=1)
        return all_pass

    def add(self, case: dict) -> None:
        with self.lock:
            self.cases.append(case)
            self.write_json(None)  # after every case: a run stopped midway keeps what it judged
        say(f"[acceptance] {case['name']}: {'PASS' if case['pass'] else 'FAIL'} ({case['seconds']} s) {case['detail']}")

    def torchrun(self, nproc: int, *argv: str) -> list[str]:
        return [self.py, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), *argv]

    def recorded_case(self, name: str, nproc: int, job: list[str], one_rank: list[str], env: dict | None = None,
                      files: tuple[str, str] | None = None) -> dict[int, str]:
        """Records `job` with its ranks sharing the GPU, replays every rank alone at value fidelity with `one_rank`,
        and judges each rank; `files`: (real, replay) parameter files with {rank}, compared instead of digests."""
        t0 = time.monotonic()
        d = os.path.join(self.work, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        env = {**self.env, **(env or {})}
        trace = os.path.join(d, "trace")
        rc = run([self.ranklens, "record", "--share-gpu", "--trace", trace, "--payloads", "all",
                  "--real-nccl", self.real_nccl, "--", *job], os.path.join(d, "record.log"), env, self.a.timeout)
        real = results_by_rank(os.path.join(d, "record.log"))
        case = {"name": name, "ranks": nproc, "record_exit": rc, "ranks_detail": []}
        problems = []
        if rc != 0:
            problems.append(f"recording exited {rc}: {tail(os.path.join(d, 'record.log'))}")
        elif len(real) != nproc and files is None:
            problems.append(f"the recorded run printed {len(real)} RESULT lines for {nproc} ranks")
        else:
            out = os.path.join(d, "replays")
            rrc = run([self.ranklens, "replay", "--trace", trace, "--ranks", "all", "--fidelity", "value",
                       "--parallel", str(self.a.parallel), "--out", out, "--rank-timeout", str(self.a.timeout), "--",
                       *one_rank], os.path.join(d, "replay.log"), env, self.a.timeout * 3)
            case["replay_exit"] = rrc
            try:
                with open(os.path.join(out, "report.json")) as f:
                    report = json.load(f)
            except (OSError, json.JSONDecodeError) as e:
                report = {"ranks": []}
                problems.append(f"no replay report ({e}): {tail(os.path.join(d, 'replay.log'))}")
            for r in report["ranks"]:
                rank = r["rank"]
                if files:
                    real_digest, replay_digest = (self.file_digest(p.format(rank=rank)) for p in files)
                else:
                    real_digest, replay_digest = (real.get(rank) or {}).get("digest"), r.get("digest")
                ok = bool(r.get("pass")) and real_digest is not None and real_digest == replay_digest
                case["ranks_detail"].append({"rank": rank, "exit": r.get("exit"), "calls": r.get("recorded_calls"),
                                             "matched": r.get("matched_calls"),
                                             "divergence": r.get("first_divergence"), "real": real_digest,
                                             "replay": replay_digest, "pass": ok, "problem": r.get("problem")})
                if not ok:
                    problems.append(f"rank {rank}: exit {r.get('exit')}, {r.get('matched_calls')}/"
                                    f"{r.get('recorded_calls')} matched, divergence {r.get('first_divergence')}, "
                                    f"digest real {real_digest} replay {replay_digest}"
                                    f"{', ' + r['problem'] if r.get('problem') else ''}")
            if len(report["ranks"]) != nproc:
                problems.append(f"{len(report['ranks'])} of {nproc} ranks replayed")
        ranks = case["ranks_detail"]
        calls = sum(r["calls"] or 0 for r in ranks)
        matched = sum(r["matched"] or 0 for r in ranks)
        case.update({"pass": not problems, "seconds": round(time.monotonic() - t0, 1),
                     "detail": (f"{len(ranks)} ranks replayed, {matched}/{calls} calls matched, "
                                f"{sum(r['pass'] for r in ranks)} identical" if not problems else "; ".join(problems))})
        self.add(case)
        return {rank: doc.get("digest") for rank, doc in real.items()}

    @staticmethod
    def file_digest(path: str) -> str | None:
        try:
            with open(path, "rb") as f:
                return "file sha256:" + hashlib.sha256(f.read()).hexdigest()[:32]
        except OSError:
            return None

    def unrecorded_case(self, name: str, nproc: int, job: list[str], recorded: str, env: dict | None = None) -> None:
        t0 = time.monotonic()
        self.ready[recorded].wait()
        want = self.ddp2_digests if recorded == "ddp-2" else self.minitrain8_digests
        d = os.path.join(self.work, name)
        shutil.rmtree(d, ignore_errors=True)
        rc = run([self.ranklens, "run", "--share-gpu", "--", *job], os.path.join(d, "run.log"),
                 {**self.env, **(env or {})}, self.a.timeout)
        got = {rank: doc.get("digest") for rank, doc in results_by_rank(os.path.join(d, "run.log")).items()}
        ok = rc == 0 and bool(want) and got == want and len(got) == nproc
        self.add({"name": name, "ranks": nproc, "pass": ok, "seconds": round(time.monotonic() - t0, 1),
                  "detail": (f"{nproc} ranks without the recorder: parameters identical to the recorded run's ({recorded})"
                             if ok else f"exit {rc}; digests without the recorder {got}, recorded {want}: "
                                        f"{tail(os.path.join(d, 'run.log'))}")})

    # ------------------------------------------------------------------------------------------------ cases

    # Four lanes run at once (--jobs), each case after the one before it in its lane; an unrecorded run follows the
    # recording whose digests it is held to. Balanced so that the whole run takes about seven minutes on one H200.
    LANES = [["ddp-2", "unrecorded-ddp-2", "fsdp2-2", "tp-2", "ddp-4", "fsdp2-4"],
             ["minitrain-8", "unrecorded-minitrain-8", "anomaly-2", "c10d-2", "pp-4", "tp-fsdp2-8"],
             ["zero2-2", "zero3-2", "megatron-8"],
             ["nccl-tests-2", "nccl-tests-4", "nccl-tests-8"]]
    GPT, PARALLEL = "examples/torch/train_gpt.py", "examples/torch/train_parallel.py"
    TORCH_CASES = {"ddp-2": (2, GPT, ["--parallel", "ddp"]), "fsdp2-2": (2, GPT, ["--parallel", "fsdp2"]),
                   "ddp-4": (4, GPT, ["--parallel", "ddp"]), "fsdp2-4": (4, GPT, ["--parallel", "fsdp2"]),
                   "tp-2": (2, PARALLEL, ["--parallel", "tp"]),
                   "pp-4": (4, PARALLEL, ["--parallel", "pp", "--layers", "8", "--microbatches", "4"]),
                   "tp-fsdp2-8": (8, PARALLEL, ["--parallel", "tp-dp", "--tp", "2"])}
    MINITRAIN = ["--steps", "6", "--digest"]
    # The demo's job (scripts/demo.sh): rank 1's NaNs reach rank 0 only through the all-reduce.
    ANOMALY = ["--nan-rank", "1", "--nan-step", "4"]

    def lane(self, names: list[str]) -> None:
        for name in names:
            if not self.wanted(name):
                if name in self.ready:
                    self.ready[name].set()
                continue
            try:
                self.run_case(name)
            finally:
                if name in self.ready:
                    self.ready[name].set()

    def run_case(self, name: str) -> None:
        mini_env = {"LD_LIBRARY_PATH": os.pathsep.join(self.minitrain_libs + [self.env["LD_LIBRARY_PATH"]]).strip(":")}
        if name in self.TORCH_CASES:
            nproc, script, extra = self.TORCH_CASES[name]
            digests = self.recorded_case(name, nproc, self.torchrun(nproc, script, *extra, *TRAIN),
                                         [self.py, script, *extra, *TRAIN])
            if name == "ddp-2":
                self.ddp2_digests = digests
        elif name == "unrecorded-ddp-2":
            self.unrecorded_case(name, 2, self.torchrun(2, self.GPT, "--parallel", "ddp", *TRAIN), "ddp-2")
        elif name == "minitrain-8":
            self.minitrain8_digests = self.recorded_case(
                name, 8, self.torchrun(8, "--no-python", self.minitrain, *self.MINITRAIN),
                [self.minitrain, *self.MINITRAIN], env=mini_env)
        elif name == "unrecorded-minitrain-8":
            self.unrecorded_case(name, 8, self.torchrun(8, "--no-python", self.minitrain, *self.MINITRAIN),
                                 "minitrain-8", env=mini_env)
        elif name == "anomaly-2":
            self.recorded_case(name, 2, self.torchrun(2, "--no-python", self.anomaly, *self.ANOMALY),
                               [self.anomaly, *self.ANOMALY], env=mini_env)
        elif name == "c10d-2":
            self.c10d_case()
        elif name in ("zero2-2", "zero3-2", "megatron-8"):
            site = self.frameworks(name)
            if site is None:
                return
            env = {"PYTHONPATH": os.pathsep.join(filter(None, [site, self.env.get("PYTHONPATH")]))}
            if name == "megatron-8":
                mlm = os.path.join(self.work, "megatron-lm")
                layout = ["bash", "examples/megatron/run_gpt.sh", mlm, "--tp", "2", "--pp", "2", "--nproc", "8",
                          "--steps", "6", "--digest"]
                self.recorded_case(name, 8, layout, [*layout, "--one-rank"], env={**env, "PYTHON": self.py})
            else:
                argv = ["examples/deepspeed/train_zero.py", "--zero-stage", name[4], *TRAIN]
                self.recorded_case(name, 2, self.torchrun(2, *argv), [self.py, *argv], env=env)
        elif name.startswith("nccl-tests-"):
            t0 = time.monotonic()
            bindir, problem = self.nccl_tests_built or self.build_nccl_tests()
            self.nccl_tests_built = (bindir, problem)
            nproc = int(name.rsplit("-", 1)[1])
            if problem:
                self.add({"name": name, "ranks": nproc, "pass": False, "seconds": round(time.monotonic() - t0, 1),
                          "detail": problem})
            else:
                self.nccl_tests_case(name, nproc, bindir)
        else:
            raise ValueError(f"unknown case {name}")

    def c10d_case(self) -> None:
        t0 = time.monotonic()
        build = os.path.join(self.work, "c10d-build")
        rc = run(["bash", "examples/torch_cpp/build.sh", build, self.py], os.path.join(self.work, "c10d-build.log"),
                 self.env, 600)
        client = os.path.join(build, "c10d_train")
        if rc != 0 or not os.path.exists(client):
            self.add({"name": "c10d-2", "ranks": 2, "pass": False, "seconds": round(time.monotonic() - t0, 1),
                      "detail": f"build failed ({rc}): {tail(os.path.join(self.work, 'c10d-build.log'))}"})
            return
        d = os.path.join(self.work, "c10d-2")
        args = ["--steps", "6", "--deterministic", "--mark-steps", "--log-all-ranks"]
        real, rep = os.path.join(d + "-params", "real-{rank}.bin"), os.path.join(d + "-params", "replay-{rank}.bin")
        shutil.rmtree(d + "-params", ignore_errors=True)
        os.makedirs(d + "-params")
        self.recorded_case("c10d-2", 2, self.torchrun(2, "--no-python", client, *args, "--save-params", real),
                           [client, *args, "--save-params", rep], files=(real, rep))

    def frameworks(self, name: str) -> str | None:
        """DeepSpeed importable (from the carried wheels if need be) and Megatron-LM unpacked, once: the site
        directory to put on PYTHONPATH ("" when DeepSpeed is installed already), or None with the case failed."""
        with self.lock:
            if self.frameworks_ready is None:
                self.frameworks_ready = self.prepare_frameworks()
        site, problem = self.frameworks_ready
        if problem:
            self.add({"name": name, "ranks": 2 if name.startswith("zero") else 8, "pass": False, "seconds": 0,
                      "detail": problem})
            return None
        return site

    def prepare_frameworks(self) -> tuple[str, str | None]:
        carry = os.path.join(REPO, ".carry", "frameworks")
        site = ""
        if subprocess.run([self.py, "-c", "import deepspeed"], capture_output=True).returncode != 0:
            site = os.path.join(self.work, "site")
            wheels = sorted(os.path.join(carry, "whl", w) for w in os.listdir(os.path.join(carry, "whl"))) \
                if os.path.isdir(os.path.join(carry, "whl")) else []
            if not wheels:
                return "", ("DeepSpeed is not installed and no wheels are carried (scripts/prepare_frameworks.sh "
                            "makes .carry/frameworks)")
            rc = run([self.py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--target",
                      site, *wheels], os.path.join(self.work, "frameworks.log"), self.env, 300)
            if rc != 0:
                return "", f"installing the carried DeepSpeed wheels failed: {tail(os.path.join(self.work, 'frameworks.log'))}"
        mlm = os.path.join(self.work, "megatron-lm")
        if not os.path.exists(os.path.join(mlm, "pretrain_gpt.py")):
            src = self.a.megatron or os.path.join(carry, "megatron-lm.tgz")
            if os.path.isdir(src):
                shutil.copytree(src, mlm, dirs_exist_ok=True)
            elif os.path.exists(src):
                os.makedirs(mlm, exist_ok=True)
                with tarfile.open(src) as t:
                    t.extractall(mlm)
            else:
                return "", "no Megatron-LM (--megatron DIR, or .carry/frameworks/megatron-lm.tgz)"
        return site, None

    def mpi(self) -> tuple[str | None, str | None, list[str]]:
        """MPI_HOME (with include/mpi.h), mpirun, and the flags this mpirun needs; None where not found."""
        mpirun = shutil.which("mpirun")
        homes = [os.environ.get("MPI_HOME", "")]
        if mpirun:
            homes.append(os.path.dirname(os.path.dirname(os.path.realpath(mpirun))))
        homes += ["/usr/lib/x86_64-linux-gnu/openmpi", "/opt/hpcx/ompi", "/usr/local/mpi", "/opt/openmpi",
                  "/usr/local/openmpi", "/usr/mpi/gcc/openmpi"]
        home = next((h for h in homes if h and os.path.exists(os.path.join(h, "include", "mpi.h"))), None)
        version = subprocess.run([mpirun, "--version"], capture_output=True, text=True).stdout if mpirun else ""
        flags = ["--allow-run-as-root", "--bind-to", "none"] if "Open MPI" in version or "OpenRTE" in version else []
        return home, mpirun, flags

    def build_nccl_tests(self) -> tuple[str, str | None]:
        if self.a.nccl_tests and os.path.exists(os.path.join(self.a.nccl_tests, "all_reduce_perf")):
            return self.a.nccl_tests, None
        home, mpirun, _ = self.mpi()
        if not mpirun or not home:
            return "", (f"MPI not usable here (mpirun {mpirun or 'not found'}, mpi.h "
                        f"{'found in ' + home if home else 'not found: set MPI_HOME'})")
        src = os.path.join(self.work, "nccl-tests")
        if not os.path.isdir(src):
            tgz = self.a.nccl_tests or os.path.join(REPO, ".carry", "nccl-tests.tgz")
            if os.path.isdir(tgz):
                shutil.copytree(tgz, src)
            elif os.path.exists(tgz):
                with tarfile.open(tgz) as t:
                    t.extractall(self.work)
            else:
                return "", "no nccl-tests sources (--nccl-tests DIR|TGZ, or .carry/nccl-tests.tgz: scripts/gpu-bundle.sh)"
        # NCCL_HOME: the header RankLens implements, and the real NCCL the tests link (the one torch carries).
        nccl_home = os.path.join(self.work, "nccl-home")
        os.makedirs(os.path.join(nccl_home, "lib"), exist_ok=True)
        os.makedirs(os.path.join(nccl_home, "include"), exist_ok=True)
        header = next((h for h in [os.path.join(REPO, ".carry", "nccl-home", "include", "nccl.h"),
                                   os.path.join(os.path.dirname(os.path.dirname(self.real_nccl)), "include", "nccl.h"),
                                   "/usr/local/cuda/include/nccl.h", "/usr/include/nccl.h"] if os.path.exists(h)), None)
        if not header or not self.real_nccl:
            return "", f"no nccl.h ({header}) or real libnccl.so.2 ({self.real_nccl}) to build nccl-tests with"
        # The whole NCCL include set beside it (nccl_device.h, nccl_device/): nvcc searches NCCL_HOME before the
        # toolkit's own include directory, whose device-API headers may be another NCCL version's.
        for entry in os.listdir(os.path.dirname(header)):
            path = os.path.join(os.path.dirname(header), entry)
            if entry.startswith("nccl"):
                (shutil.copytree(path, os.path.join(nccl_home, "include", entry), dirs_exist_ok=True)
                 if os.path.isdir(path) else shutil.copy(path, os.path.join(nccl_home, "include", entry)))
        for name in ("libnccl.so", "libnccl.so.2"):
            link = os.path.join(nccl_home, "lib", name)
            if not os.path.lexists(link):
                os.symlink(self.real_nccl, link)
        cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
        rc = run(["make", "-C", src, f"-j{os.cpu_count()}", "MPI=1", f"MPI_HOME={home}", f"CUDA_HOME={cuda}",
                  f"NCCL_HOME={nccl_home}", "NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90"],
                 os.path.join(self.work, "nccl-tests-build.log"), self.env, 600)
        bindir = os.path.join(src, "build")
        if rc != 0 or not os.path.exists(os.path.join(bindir, "all_reduce_perf")):
            return "", f"nccl-tests build failed ({rc}): {tail(os.path.join(self.work, 'nccl-tests-build.log'))}"
        return bindir, None

    def nccl_tests_case(self, name: str, nproc: int, bindir: str) -> None:
        t0 = time.monotonic()
        _, mpirun, flags = self.mpi()
        passed, problems, rows = 0, [], []
        for test in NCCL_TESTS:
            d = os.path.join(self.work, name, test)
            shutil.rmtree(d, ignore_errors=True)
            log = os.path.join(d, "record.log")
            env = {**self.env, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                   "LD_LIBRARY_PATH": os.pathsep.join([os.path.join(self.work, "nccl-home", "lib"),
                                                       self.env["LD_LIBRARY_PATH"]]).strip(":")}
            rc = run([self.ranklens, "record", "--share-gpu", "--trace", os.path.join(d, "trace"), "--real-nccl",
                      self.real_nccl, "--", mpirun, *flags, "-np", str(nproc),
                      os.path.join(bindir, f"{test}_perf"), *NCCL_TESTS_ARGS], log, env, self.a.timeout)
            text = open(log, errors="replace").read()
            wrong = [line for line in text.splitlines() if re.match(r"^\s+\d+\s+\d+\s", line)
                     and any(f not in ("0", "N/A") for f in (line.split()[8:9] + line.split()[12:13]))]
            rank_dirs = [x for x in os.listdir(os.path.join(d, "trace")) if x.startswith("rank")] \
                if os.path.isdir(os.path.join(d, "trace")) else []
            doctor = subprocess.run([self.ranklens, "doctor", "--no-python", "--trace", os.path.join(d, "trace")],
                                    capture_output=True, text=True, env=self.env)
            traced = len(rank_dirs) == nproc and all(
                f"[ok  ] trace {r}" in doctor.stdout for r in rank_dirs)
            ok = rc == 0 and "Out of bounds values : 0 OK" in text and not wrong and traced
            rows.append({"test": test, "exit": rc, "wrong_rows": wrong[:3], "rank_traces": len(rank_dirs),
                         "traces_readable": traced, "pass": ok})
            passed += ok
            if not ok:
                problems.append(f"{test}: exit {rc}, {len(wrong)} rows with wrong values, {len(rank_dirs)} rank traces "
                                f"{'readable' if traced else 'NOT all readable'}: {tail(log, 3)}")
        self.add({"name": name, "ranks": nproc, "pass": not problems, "seconds": round(time.monotonic() - t0, 1),
                  "tests": rows,
                  "detail": (f"{passed}/{len(NCCL_TESTS)} tests pass their own check (-c 1) through the recorder, "
                             f"{nproc} rank traces each" if not problems else "; ".join(problems))})

    def wanted(self, name: str) -> bool:
        return not self.a.cases or name in self.a.cases


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = p.add_mutually_exclusive_group()
    where.add_argument("--prefix", help="a RankLens install tree (scripts/gpu-bundle.sh: .carry/ranklens)")
    where.add_argument("--build", default=os.path.join(REPO, "build", "release"),
                       help="a RankLens build tree (default: %(default)s)")
    p.add_argument("--python", default=sys.executable, help="interpreter with torch (default: %(default)s)")
    p.add_argument("--work", default="/tmp/ranklens-gpu-test", help="logs, traces, builds (default: %(default)s)")
    p.add_argument("--json", default=os.path.join(REPO, "bench", "results", "gpu_acceptance.json"),
                   help="where the results go (default: %(default)s)")
    p.add_argument("--logs", default=None, help="also pack every log (no traces) into this .tgz")
    p.add_argument("--cases", default="", help="comma-separated case names (default: all; see the list above)")
    p.add_argument("--jobs", type=int, default=4, help="lanes of cases run at once on the GPU (default: %(default)s)")
    p.add_argument("--parallel", type=int, default=4, help="replays at once per case (default: %(default)s)")
    p.add_argument("--timeout", type=int, default=300, help="seconds per recording or rank replay (default: %(default)s)")
    p.add_argument("--megatron", default=None, help="a Megatron-LM checkout (default: .carry/frameworks' archive)")
    p.add_argument("--nccl-tests", default=None,
                   help="built nccl-tests binaries, or their sources (directory or .tgz) to build with MPI "
                        "(default: .carry/nccl-tests.tgz)")
    p.add_argument("--commit", default=os.environ.get("RANKLENS_COMMIT", ""), help="commit to name in the JSON")
    a = p.parse_args(argv)
    a.cases = [c for c in a.cases.split(",") if c]
    if a.prefix:
        a.prefix = os.path.abspath(a.prefix)
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    os.makedirs(a.work, exist_ok=True)
    acc = Acceptance(a)
    if not os.path.exists(acc.ranklens):
        print(f"error: no ranklens at {acc.ranklens}: build RankLens (scripts/setup.sh) or give --prefix", file=sys.stderr)
        return 2
    say(f"[acceptance] {acc.machine or 'no GPU'}; torch's NCCL {acc.real_nccl}; work in {a.work}")
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        for f in [pool.submit(acc.lane, names) for names in acc.LANES]:
            try:
                f.result()
            except Exception as e:  # keep every other case's result
                acc.add({"name": "lane error", "ranks": 0, "pass": False, "seconds": 0,
                         "detail": f"{type(e).__name__}: {e}"})
    wall = round(time.monotonic() - t0, 1)
    with acc.lock:
        all_pass = acc.write_json(wall)
    cases = acc.cases
    print("\n| case | ranks | result | seconds | detail |\n| --- | --- | --- | --- | --- |")
    for c in cases:
        print(f"| {c['name']} | {c['ranks']} | {'PASS' if c['pass'] else 'FAIL'} | {c['seconds']} | {c['detail']} |")
    print(f"\n{sum(c['pass'] for c in cases)} of {len(cases)} cases passed in {wall} s: "
          f"{'ALL PASS' if all_pass else 'SOME FAILED'}")
    if a.logs:
        with tarfile.open(a.logs, "w:gz") as t:
            for root, dirs, files in os.walk(a.work):
                dirs[:] = [x for x in dirs if x not in ("trace", "site", "megatron-lm", "c10d-build", "nccl-home")
                           and not re.fullmatch(r"rank\d+", x)]
                for fn in files:
                    if fn.endswith((".log", ".json")):
                        path = os.path.join(root, fn)
                        t.add(path, arcname=os.path.relpath(path, a.work))
    return 0 if all_pass else 1


if __name__ == "__main__":
    sys.exit(main())
