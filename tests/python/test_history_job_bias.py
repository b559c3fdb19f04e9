# SPDX-License-Identifier: Apache-2.0
"""bench/history_job_bias.py: a job whose transfers are all slower than its neighbours' shows as a signed bias."""
import os
import sys

import msgpack
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import history_job_bias as hjb  # noqa: E402


def sample(run, transfer_us, phase, op=0, size=1 << 20):
    return [op, 7, size, 2, False, "", False, transfer_us * 1000, run, transfer_us * 1000, phase, False]


def write(tmp_path, samples, runs):
    path = tmp_path / "h.hist"
    path.write_bytes(msgpack.packb({"format": "ranklens-history", "version": 3, "runs": runs, "samples": samples}))
    return str(path)


def test_a_slow_job_shows_as_a_signed_bias(tmp_path, capsys):
    runs = ["/t/a/rank0", "/t/b/rank0", "/t/c/rank0"]
    samples = [sample(0, 100, 0.2), sample(1, 100, 0.2), sample(2, 125, 0.2)] * 4  # job c is 25% slower
    path = write(tmp_path, samples, runs)
    result = hjb.analyse(hjb.load(path), 0.1)
    assert result["jobs"]["/t/c"]["AllReduce"]["median_signed_error"] == pytest.approx(-0.2)  # 100 vs 125
    assert result["jobs"]["/t/a"]["AllReduce"]["median_signed_error"] == pytest.approx(0.125)  # median(100, 125)
    assert hjb.main([path]) == 0
    assert "median |error|" in capsys.readouterr().out


def test_the_step_phase_narrows_the_neighbours(tmp_path):
    # The same size is slow early in the step and fast late, in every job: the phase neighbourhood removes the error.
    runs = ["/t/a/rank0", "/t/b/rank0"]
    samples = [sample(r, 300 if early else 100, 0.1 if early else 0.9) for r in (0, 1) for early in (1, 0)] * 3
    result = hjb.analyse(hjb.load(write(tmp_path, samples, runs)), 0.1)
    assert result["median_abs_error"] > 0.5 and result["median_abs_error_phase"] == 0


def test_not_a_history_is_refused(tmp_path, capsys):
    path = tmp_path / "x.hist"
    path.write_bytes(msgpack.packb({"format": "other"}))
    assert hjb.main([str(path)]) == 2
    assert "not a RankLens history" in capsys.readouterr().err


def test_the_same_occurrence_in_the_step_narrows_the_neighbours(tmp_path):
    # Two all-reduces of one size per step, the first beside compute (300 us), the second alone (100 us), in every
    # job: the k-th one of the step in the other jobs is the right neighbour. Version 3: derived from the phases.
    runs = ["/t/a/rank0", "/t/b/rank0", "/t/c/rank0"]
    samples = [sample(r, 300 if first else 100, (0.2 if first else 0.4) + 0.01 * step)
               for r in (0, 1, 2) for step in range(3) for first in (1, 0)]
    result = hjb.analyse(hjb.load(write(tmp_path, samples, runs)), 0.01)
    assert result["median_abs_error"] > 0.5 and result["median_abs_error_occurrence"] == 0
    # Version 4 stores it: a stored occurrence wins over the phases (all at one phase here).
    stored = [s[:10] + [0.5, False, i % 2] for i, s in enumerate(samples)]
    path = tmp_path / "v4.hist"
    path.write_bytes(msgpack.packb({"format": "ranklens-history", "version": 4, "runs": runs, "samples": stored}))
    result = hjb.analyse(hjb.load(str(path)), 0.01)
    assert result["median_abs_error_phase"] > 0.5 and result["median_abs_error_occurrence"] == 0
