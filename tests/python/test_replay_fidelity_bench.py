# SPDX-License-Identifier: Apache-2.0
"""The GPU benchmarks' bookkeeping, without a GPU. bench/replay_fidelity_torch.py: every recording is replayed once
per --variant, the error is between medians over the repeats, and --budget stops starting runs yet still reports
what finished. bench/estimator_torch.py: --micro-batch-scale scales every configuration, and its replay bench gets
every option of replay_fidelity_torch.py."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import replay_fidelity_torch as rft  # noqa: E402


class FakeBench(rft.Bench):
    """Runs nothing: a recording's rank r takes 100 ms per step; a replay takes `speed[variant]` times that."""

    def __init__(self, args, speed, run_seconds=0.0):
        super().__init__(args)
        self.speed, self.run_seconds, self.started = speed, run_seconds, []

    def record(self, name, mode, payloads, train):
        self.started.append(name)
        self._spend()
        return {"results": {r: {"step_ms": [100.0] * self.args.steps} for r in range(self.args.nproc)}}, name

    def replay_all(self, name, mode, fidelity, trace, train_for_rank, variant_env=None):
        self.started.append(name)
        self._spend()
        factor = self.speed["nccl" if variant_env else "plain"]
        return {"name": name, "ranks": {r: {"result": {"step_ms": [100.0 * factor] * self.args.steps}}
                                        for r in range(self.args.nproc)}, "trace": name}

    def _spend(self):
        self.t0 -= self.run_seconds  # as if the run took that long

    def timing_of(self, rec, rep, trace, calls, rank):
        real = rft.median_after(rec["results"][rank]["step_ms"], self.args.warmup)
        replay = rft.median_after(rep["ranks"][rank]["result"]["step_ms"], self.args.warmup)
        return {"median_step_ms_real": real, "median_step_ms_replay": replay, "host_held_ms_per_step": 2.0 * rank,
                "median_step_error": (replay - real) / real, "signature_match": True, "signature": "all matched"}

    def sequence_problems(self, trace):
        return {}


@pytest.fixture
def no_trace_reading(monkeypatch):
    monkeypatch.setattr(rft.lib, "recorded_call_counts", lambda trace, python: {})


def args_for(tmp_path, *extra):
    return rft.parse_args(["--lib", "x", "--steps", "10", "--warmup", "2", "--modes", "ddp",
                           "--json", str(tmp_path / "out.json"), "--work", str(tmp_path / "work"), *extra])


def test_each_recording_is_replayed_per_variant(tmp_path, no_trace_reading):
    args = args_for(tmp_path, "--repeats", "2", "--variant", "nccl:RANKLENS_HOLD_BLOCKS=24")
    bench = FakeBench(args, {"plain": 0.995, "nccl": 1.03})
    bench.timing("ddp")
    assert bench.started == ["ddp-timing-1", "ddp-timing-1", "ddp-timing-1-nccl",
                             "ddp-timing-2", "ddp-timing-2", "ddp-timing-2-nccl"]
    checks = {(c["variant"], c["rank"]): c for c in bench.doc["checks"]}
    assert set(checks) == {("plain", 0), ("plain", 1), ("nccl", 0), ("nccl", 1)}
    assert checks[("plain", 0)]["median_step_error"] == pytest.approx(-0.005)
    assert checks[("plain", 0)]["pass"] and checks[("plain", 0)]["repeats_done"] == 2
    assert checks[("nccl", 1)]["median_step_error"] == pytest.approx(0.03)
    assert not checks[("nccl", 1)]["pass"]
    assert checks[("nccl", 1)]["variant_env"] == {"RANKLENS_HOLD_BLOCKS": "24"}
    assert checks[("plain", 1)]["host_held_ms_per_step"] == 2.0


def test_timing_of_reports_the_host_held_per_step(tmp_path, monkeypatch):
    # (replay_host_held_ns near the step-time error points at recorded launch-queue waits: docs/frameworks.md)
    bench = rft.Bench(args_for(tmp_path))
    monkeypatch.setattr(bench, "compare_steps", lambda trace, replayed, rank: {})
    monkeypatch.setattr(rft.lib, "replay_signature_ok", lambda rank, calls: (True, "all matched"))
    rec = {"results": {0: {"step_ms": [100.0] * 10}}}
    rep = {"trace": "t", "ranks": {0: {"result": {"step_ms": [104.0] * 10},
                                       "counters": {"replay_host_held_ns": 25_000_000}}}}
    t = bench.timing_of(rec, rep, "t", {}, 0)
    assert t["host_held_ms_per_step"] == pytest.approx(2.5)  # 25 ms over --steps 10
    assert t["median_step_error"] == pytest.approx(0.04)
    rep["ranks"][0]["counters"] = {}
    assert bench.timing_of(rec, rep, "t", {}, 0)["host_held_ms_per_step"] is None


def test_value_replays_the_recording_once_per_variant(tmp_path, no_trace_reading, monkeypatch):
    # pinned: the same recording replayed with payloads restored from pinned memory, judged alike, step time beside.
    args = args_for(tmp_path, "--variant", "pinned:RANKLENS_PAYLOAD_DEVICE_BYTES=0")
    bench = FakeBench(args, {"plain": 1.0, "nccl": 1.02})  # (the fake's variant speed is keyed "nccl")
    compared = []
    monkeypatch.setattr(rft.rft, "compare_params",
                        lambda a, real, rep, env=None: compared.append(rep) or [{"identical": True}] * 2)
    monkeypatch.setattr(rft.lib, "replay_signature_ok", lambda rank, calls: (True, "all matched"))
    bench.value("ddp")
    assert bench.started == ["ddp-value", "ddp-value", "ddp-value-pinned"]
    assert len(compared) == 2
    checks = {(c["variant"], c["rank"]): c for c in bench.doc["checks"]}
    assert set(checks) == {("plain", 0), ("plain", 1), ("pinned", 0), ("pinned", 1)}
    assert all(c["pass"] for c in checks.values())
    assert checks[("plain", 1)]["median_step_ms_replay"] == pytest.approx(100.0)
    assert checks[("pinned", 0)]["median_step_ms_replay"] == pytest.approx(102.0)


def test_budget_stops_starting_runs_and_keeps_what_finished(tmp_path, no_trace_reading):
    # Each run "takes" 40 s: after record 1 and its replay (80 s) another 40 s run no longer fits in 100 s.
    args = args_for(tmp_path, "--repeats", "3", "--budget", "100")
    bench = FakeBench(args, {"plain": 1.0}, run_seconds=40)
    bench.longest = 40
    bench.timing("ddp")
    assert bench.started == ["ddp-timing-1", "ddp-timing-1"]
    assert bench.doc["budget_exhausted"] is True
    for check in bench.doc["checks"]:
        assert check["repeats_done"] == 1 and check["repeats"] == 3
        assert check["median_step_error"] == 0 and check["pass"]


def test_bad_variant_is_refused(tmp_path):
    with pytest.raises(SystemExit):
        args_for(tmp_path, "--variant", "no-environment")
    with pytest.raises(SystemExit):
        args_for(tmp_path, "--variant", "plain:A=1")  # the name of the default replay


def test_estimator_configurations_scale_every_micro_batch():
    import estimator_torch as est

    history, (held_name, held), (recorded, (target_name, target)) = est.configurations(4)
    assert sorted(mb for _, _, mb in history.values()) == [16, 16, 16, 32, 32, 32]
    assert held_name not in history and held == ("ddp", 40, 24)
    assert recorded == "ddp-b25-mb32" and recorded in history  # the what-if replays a recording of the history
    assert target_name == "ddp-b100-mb32" and target == ("ddp", 100, 32)


def test_estimator_bench_builds_its_replay_bench_with_every_option(tmp_path):
    # (session 9's first GPU run of it died at once: the replay bench had gained --record-env since)
    import estimator_torch as est

    args = est.parse_args(["--lib", "x", "--json", str(tmp_path / "est.json"), "--work", str(tmp_path / "work"),
                           "--record-env", "RANKLENS_TIMING_CLOCK=kernel", "--replay-env", "RANKLENS_HOLD_FROM=start"])
    bench = est.EstimatorBench(args)
    assert bench.rf.args.record_env_map == {"RANKLENS_TIMING_CLOCK": "kernel"}
    assert bench.rf.args.replay_env == ["RANKLENS_HOLD_FROM=start"]
    assert bench.rf.args.variants == {"plain": {}} and bench.rf.args.launcher == "ranklens"
    assert bench.rf.args.json == str(tmp_path / "est.json")
    assert not bench.rf.args.sample_gpu
    assert est.EstimatorBench(est.parse_args(["--lib", "x", "--json", str(tmp_path / "e2.json"), "--work",
                                              str(tmp_path / "w2"), "--sample-gpu"])).rf.args.sample_gpu


def test_estimator_replays_keep_replay_env_and_add_each_variant(tmp_path):
    # (until session 10 the held-out and what-if replays dropped --replay-env: each replaced the replay bench's list)
    import estimator_torch as est

    args = est.parse_args(["--lib", "x", "--json", str(tmp_path / "est.json"), "--work", str(tmp_path / "work"),
                           "--replay-env", "RANKLENS_HOLD_FROM=start", "--variant", "shape:RANKLENS_HOLD_BLOCKS=24"])
    bench = est.EstimatorBench(args)
    seen = []

    def fake_replay_all(name, mode, fidelity, trace, train_for_rank, variant_env=None):
        seen.append((name, dict(x.split("=", 1) for x in bench.rf.args.replay_env), variant_env))
        return {"ranks": {r: {"rc": 0, "result": {"step_ms": [10.0] * 30}, "counters": {}} for r in range(2)}}

    bench.rf.replay_all = fake_replay_all
    bench.real["ddp-b40-mb6"] = [{0: 10.0, 1: 10.0}]
    bench.traces["ddp-b40-mb6"] = "t"
    bench.record = lambda name, cfg, run_name=None: "t"
    bench.args.targets = "transfer"
    bench.part_heldout()
    assert [n for n, _, _ in seen] == ["ddp-b40-mb6-estimated-transfer", "ddp-b40-mb6-estimated-transfer-shape"]
    for _, replay_env, _ in seen:
        assert replay_env == {"RANKLENS_HOLD_FROM": "start"}
    assert seen[0][2]["RANKLENS_ESTIMATE_TARGET"] == "transfer" and "RANKLENS_HOLD_BLOCKS" not in seen[0][2]
    assert seen[1][2]["RANKLENS_HOLD_BLOCKS"] == "24" and seen[1][2]["RANKLENS_TIMING"] == "estimated"
    checks = [c["check"] for c in bench.doc["checks"]]
    assert checks == ["estimated_timing[transfer]"] * 2 + ["estimated_timing[transfer, shape]"] * 2
    assert all(c["pass"] for c in bench.doc["checks"])


def test_estimator_history_repeats_record_every_configuration_again_and_score_one_run_each_too(tmp_path):
    import estimator_torch as est

    args = est.parse_args(["--lib", "x", "--json", str(tmp_path / "est.json"), "--work", str(tmp_path / "work"),
                           "--history-repeats", "2"])
    bench = est.EstimatorBench(args)
    recorded, built = [], []

    def fake_record(name, cfg, run_name=None):
        recorded.append(run_name)
        trace = f"/traces/{run_name}"
        bench.traces.setdefault(name, trace)
        bench.all_traces.setdefault(name, []).append(trace)
        return trace

    def fake_build_and_eval(path, traces, suffix):
        built.append((suffix, traces))
        median = 0.02 if suffix == "" else 0.09
        return {"runs": len(traces), "leave_one_run_out": {"all": {"median": median, "p90": 0.1, "count": 5}}}

    bench.record = fake_record
    bench.build_and_eval = fake_build_and_eval
    bench.part_history()
    names = list(bench.configs)
    assert recorded == names + [f"{n}-run2" for n in names]  # all configurations, then all again
    assert built[0] == ("", [t for n in names for t in (f"/traces/{n}", f"/traces/{n}-run2")])
    assert built[1] == ("-first-runs", [f"/traces/{n}" for n in names])
    check = bench.doc["checks"][0]
    assert check["check"] == "leave_one_run_out" and check["pass"] and check["runs_per_configuration"] == 2
    assert bench.doc["estimate_eval_one_run_per_configuration"]["leave_one_run_out"]["all"]["median"] == 0.09
    with pytest.raises(SystemExit):
        est.parse_args(["--lib", "x", "--history-repeats", "0"])


def test_estimator_clock_text():
    import estimator_torch as est

    g = {"sm_mhz_median": 1860.0, "power_w_median": 650.0}
    assert est.clock_text([], None) == ""
    assert est.clock_text([g], dict(g, sm_mhz_median=1965.0)) == \
        "; SM MHz real 1860, replay 1965; W real 650, replay 650"


def test_megatron_args_reach_the_recording_and_the_replay(tmp_path):
    args = args_for(tmp_path, "--modes", "megatron-tp2", "--megatron-arg=--gloo")
    for one_rank in (False, True):
        argv = rft.job_argv(args, "megatron-tp2", ["--steps", "3"], one_rank)
        assert argv[:3] == ["bash", rft.MEGATRON, args.megatron] and "--gloo" in argv
        assert argv.index("--gloo") < argv.index("--steps") and ("--one-rank" in argv) == one_rank


def test_gpu_sampler_keeps_busy_samples_per_gpu(tmp_path):
    import record_bench_lib as lib

    fake = tmp_path / "fake-smi"
    fake.write_text("#!/bin/sh\n"
                    "printf '0, 1980, 650.5, 99\\n1, 1860, 690.0, 98\\n0, 1905, 640.0, 97\\n'\n"
                    "printf '1, 1785, 688.0, 95\\n0, 210, 80.0, 0\\n1, [N/A], [N/A], [N/A]\\n'\n"
                    "exec sleep 30\n")
    fake.chmod(0o755)
    with lib.GpuSampler(True, program=str(fake)) as gpu:
        import time
        time.sleep(0.5)  # the fake prints at once, then waits to be stopped
    summary = gpu.summary()
    assert summary["0"] == {"samples": 2, "sm_mhz_median": 1942.5, "sm_mhz_min": 1905.0, "power_w_median": 645.25}
    assert summary["1"]["samples"] == 2 and summary["1"]["sm_mhz_min"] == 1785.0
    with lib.GpuSampler(False, program=str(fake)) as off:
        pass
    assert off.summary() == {}


def test_gpu_text_sets_real_and_replayed_clocks_side_by_side():
    runs = [{"gpu": {"real": {"sm_mhz_median": 1890, "power_w_median": 688},
                     "replay": {"sm_mhz_median": 1950, "power_w_median": 660}}},
            {"gpu": {"real": {"sm_mhz_median": 1905, "power_w_median": 686}, "replay": None}}]
    assert rft.gpu_text(runs) == "; SM MHz real 1890/1905, replay 1950/-; W real 688/686, replay 660/-"
    assert rft.gpu_text([{"gpu": {"real": None, "replay": None}}]) == ""


def test_result_lines_of_two_ranks_printed_at_once_are_both_read():
    import record_bench_lib as lib
    text = ('step 29 loss 1.0\nRESULT {"rank": 0, "median_step_ms": 105.7}RESULT {"rank": 1, "median_step_ms": 105.8}\n'
            'noise RESULT {"rank": 2}\nXRESULT {"rank": 9}\nRESULT {broken\n')
    results, bad = lib.parse_result_lines(text)
    assert [r["rank"] for r in results] == [0, 1, 2]
    assert len(bad) == 1 and "broken" in bad[0]


def test_run_spread_is_range_over_median():
    assert rft.spread([100.0]) is None
    assert rft.spread([]) is None
    assert abs(rft.spread([95.0, 100.0, 105.0]) - 0.10) < 1e-12


def test_replay_call_host_time_pairs_each_call_with_its_hold(tmp_path, capsys):
    """bench/replay_call_host_time.py: in-library time is a call's hold stamp less its call stamp, the program's time
    is from one hold to the next call, per op and size class; calls before --skip are left out."""
    import tracegen as tg
    import replay_call_host_time as rcht

    w = tg.RankWriter(str(tmp_path / "rank0"))
    t = 1_000_000
    for seq in range(12):
        small = seq % 2 == 0
        nbytes = 4096 if small else 65536
        w.record(3, tg.call(0, seq, 3, count=nbytes, nbytes=nbytes, t=t))  # AllGather
        inside = 250_000 if small else 30_000
        # Timing: commId, seq, op, stream, groupId, startNs, durationNs, captured, peer, eventNs, clock, gapNs
        w.record(7, [0, seq, 3, 7, 0, t + inside, 20_000, False, -1, -1, 0, -1])
        t += inside + 80_000
    w.close(manifest_overrides={"mode": "replay"})
    assert rcht.main([str(tmp_path), "--skip", "2"]) == 0
    out = capsys.readouterr().out
    rows = {tuple(line.split()[:3]): line for line in out.splitlines() if line.strip().startswith("AllGather")}
    assert set(rows) == {("AllGather", "<=8KiB", "5"), ("AllGather", ">8KiB", "5")}, out
    assert "250.0 us" in rows[("AllGather", "<=8KiB", "5")] and "80.0 us" in rows[("AllGather", "<=8KiB", "5")], out
    assert "30.0 us" in rows[("AllGather", ">8KiB", "5")], out
    # The replay bench's CHECK line takes the median over the calls after the first tenth from trace_stats.
    import record_bench_lib as lib
    stats = lib.trace_stats(str(tmp_path))
    assert stats["ranks"][0]["replay_call_host_us"]["median"] == 30.0  # 6 of the 11 calls after the first are large
    assert stats["ranks"][0]["replay_call_host_us"]["p90"] == 250.0
    assert rcht.main([str(tmp_path / "nothing")]) == 2
    # --recording: the recorded host time of the same rank's calls beside (hostNs; the first --skip left out).
    r = tg.RankWriter(str(tmp_path / "rec" / "rank0"))
    for seq in range(12):
        nbytes = 4096 if seq % 2 == 0 else 65536
        r.record(3, tg.call(0, seq, 3, count=nbytes, nbytes=nbytes, t=seq * 1000, host_ns=14_000 if seq % 2 == 0 else 9_000))
    r.close()
    assert rcht.main([str(tmp_path / "rank0"), "--skip", "2", "--recording", str(tmp_path / "rec")]) == 0
    out = capsys.readouterr().out
    rows = {tuple(line.split()[:2]): line for line in out.splitlines() if line.strip().startswith("AllGather")}
    assert "recorded median" in out and rows[("AllGather", "<=8KiB")].rstrip().endswith("14.0 us  14.0 us"), out
    assert rows[("AllGather", ">8KiB")].rstrip().endswith("9.0 us   9.0 us"), out
    assert rcht.main([str(tmp_path / "rank0"), "--recording", str(tmp_path / "missing")]) == 2


def test_an_existing_recording_is_replayed_without_recording(tmp_path, no_trace_reading, monkeypatch):
    # (session 12 had only a 1-GPU machine: it replayed a recording made on 2 GPUs in session 11)
    recording = tmp_path / "rec"
    recording.mkdir()
    monkeypatch.setattr(rft, "results_of", lambda log: {r: {"step_ms": [100.0] * 10} for r in range(2)})
    args = args_for(tmp_path, "--checks", "timing", "--recording", str(recording), "--recorded-log", "rec.log",
                    "--repeats", "2", "--variant", "nccl:lib=old/libnccl.so.2")
    bench = FakeBench(args, {"plain": 1.0, "nccl": 1.1})
    bench.record = lambda *a: pytest.fail("--recording must not record")
    read = []
    monkeypatch.setattr(rft.lib, "recorded_call_counts", lambda trace, python: read.append(trace) or {})
    bench.timing("ddp")
    assert read == [str(recording)]  # read once, however many repeats
    assert bench.started == ["ddp-timing-1", "ddp-timing-1-nccl", "ddp-timing-2", "ddp-timing-2-nccl"]
    checks = {(c["variant"], c["rank"]): c for c in bench.doc["checks"]}
    assert checks[("plain", 1)]["median_step_error"] == 0 and checks[("plain", 1)]["repeats_done"] == 2
    assert checks[("nccl", 0)]["median_step_error"] == pytest.approx(0.1)


def test_recording_option_is_checked(tmp_path):
    for extra in (["--recording", str(tmp_path)],  # --checks defaults to timing,value
                  ["--checks", "timing", "--modes", "ddp,fsdp2", "--recording", str(tmp_path)],
                  ["--checks", "timing", "--recording", str(tmp_path / "missing")],
                  ["--recorded-log", "x.log"]):
        with pytest.raises(SystemExit):
            args_for(tmp_path, *extra)


def test_replays_take_one_gpu_each_and_a_variant_may_change_the_library(tmp_path, monkeypatch):
    # Two replays on one GPU would slow each other down: with one GPU, ranks replay one after another.
    import subprocess
    import threading
    import time

    args = args_for(tmp_path, "--checks", "timing")
    bench = rft.Bench(args)
    running, most, argvs, lock = [0], [0], [], threading.Lock()

    def fake_run_logged(argv, env, log_path, timeout, unset=()):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            argvs.append((argv, env))
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return {"rc": 0, "wall_s": 0.05, "command_line": " ".join(argv)}

    monkeypatch.setattr(rft.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout="1\n", stderr=""))
    monkeypatch.setattr(rft.lib, "run_logged", fake_run_logged)
    monkeypatch.setattr(rft.lib, "trace_stats_any", lambda *a, **k: {})
    run = bench.replay_all("x", "ddp", "timing", "t", lambda r: [], {"lib": "old/libnccl.so.2", "RANKLENS_A": "1"})
    assert most[0] == 1 and len(argvs) == 2
    for argv, env in argvs:
        assert argv[argv.index("--lib") + 1] == os.path.abspath("old/libnccl.so.2")
        assert env["RANKLENS_A"] == "1" and "lib" not in env and env["CUDA_VISIBLE_DEVICES"] == "0"
    assert run["lib"] == os.path.abspath("old/libnccl.so.2") and run["variant_env"] == {"RANKLENS_A": "1"}
