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
