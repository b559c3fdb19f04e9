# SPDX-License-Identifier: Apache-2.0
"""bench/record_overhead_torch.py's arms: which variables each run gets (no GPU needed)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import record_overhead_torch as rot  # noqa: E402


def args_for(tmp_path, *extra):
    return rot.parse_args(["--lib", "lib/libnccl.so.2", "--json", str(tmp_path / "r.json"), *extra])


def test_kernel_arm_is_timing_only_with_the_kernel_clock(tmp_path, monkeypatch):
    monkeypatch.setenv("RANKLENS_TIMING_CLOCK", "events")  # the caller's own knobs never reach a run
    args = args_for(tmp_path, "--arms", "baseline,timing,kernel", "--recorder-env", "RANKLENS_TIMING_CLOCK=events")
    env, unset = rot.arm_env(args, "kernel", "/t")
    assert env["RANKLENS_PAYLOADS"] == "none" and env["RANKLENS_TIMING_CLOCK"] == "kernel"
    assert env["RANKLENS_MODE"] == "record" and env["LD_PRELOAD"].endswith("lib/libnccl.so.2")
    env, unset = rot.arm_env(args, "timing", "/t")
    assert env["RANKLENS_TIMING_CLOCK"] == "events"  # --recorder-env, untouched by the kernel arm
    env, unset = rot.arm_env(args, "baseline", None)
    assert "RANKLENS_MODE" not in env and "RANKLENS_TIMING_CLOCK" in unset


def test_unknown_arm_is_refused(tmp_path):
    with pytest.raises(SystemExit):
        args_for(tmp_path, "--arms", "baseline,kernel,nope")


def test_alternate_arm_records_every_other_block_and_marks_steps(tmp_path):
    args = args_for(tmp_path, "--arms", "alternate", "--alternate-steps", "4", "--steps", "40")
    env, _ = rot.arm_env(args, "alternate", "/t")
    assert env["RANKLENS_RECORD_ALTERNATE_STEPS"] == "4" and env["RANKLENS_PAYLOADS"] == "none"
    assert "RANKLENS_RECORD_ALTERNATE_STEPS" not in rot.arm_env(args, "timing", "/t")[0]
    with pytest.raises(SystemExit):  # fewer than 4 blocks
        args_for(tmp_path, "--arms", "alternate", "--alternate-steps", "10", "--steps", "30")


def test_alternate_blocks_compare_recorded_blocks_with_their_unrecorded_neighbours():
    # blocks of 2: [warm-up] [unrec 10] [rec 11] [unrec 12] [rec 13.2] [unrec 12]; a linear drift of 1 ms per block
    steps = [50, 50, 10, 10, 11, 11, 12, 12, 13.2, 13.2, 12, 12, 99]  # the last, incomplete block is dropped
    a = rot.alternate_blocks(steps, 2, warmup=0)
    assert a["recorded_steps"] == 4 and a["unrecorded_steps"] == 6
    assert a["neighbour_ratios"] == [1.0, 1.1]  # 11 / mean(10, 12); 13.2 / mean(12, 12)
    assert a["neighbour_ratio"] == pytest.approx(1.05)
    assert a["ratio_of_medians"] == pytest.approx(12.1 / 12)


def test_alternate_blocks_of_one_step_leave_the_warm_up_steps_out():
    steps = [600, 300, 90, 10, 11, 10, 12, 10]  # steps 0-2 warm-up; then u 10, R 11, u 10, R 12, u 10
    a = rot.alternate_blocks(steps, 1)
    assert a["unrecorded_steps"] == 3 and a["recorded_steps"] == 2
    assert a["neighbour_ratios"] == [1.1, 1.2]
