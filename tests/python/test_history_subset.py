# SPDX-License-Identifier: Apache-2.0
"""tests/fuzz/history_subset.py: the runs left keep their samples, renumbered; the others are gone."""
import os
import sys

import msgpack
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "fuzz"))

import history_subset  # noqa: E402


def sample(run, transfer_us):
    return [0, 7, 1 << 20, 2, False, "", False, transfer_us * 1000, run, transfer_us * 1000, 0.5, False, 0]


def test_dropped_runs_lose_their_samples_and_the_rest_are_renumbered(tmp_path):
    runs = ["/t/a/rank0", "/t/a-run2/rank0", "/t/b/rank0", "/t/b-run2/rank0"]
    src = tmp_path / "in.hist"
    src.write_bytes(msgpack.packb({"format": "ranklens-history", "version": 4, "runs": runs,
                                   "samples": [sample(r, 100 + r) for r in (0, 1, 2, 3, 2)]}))
    out = tmp_path / "out.hist"
    history_subset.main([str(src), str(out), "--drop=-run2/"])
    h = msgpack.unpackb(out.read_bytes(), raw=False)
    assert h["runs"] == ["/t/a/rank0", "/t/b/rank0"]
    assert [(s[8], s[9]) for s in h["samples"]] == [(0, 100_000), (1, 102_000), (1, 102_000)]
    assert h["version"] == 4


def test_dropping_every_run_is_refused(tmp_path):
    src = tmp_path / "in.hist"
    src.write_bytes(msgpack.packb({"format": "ranklens-history", "version": 4, "runs": ["/t/a/rank0"],
                                   "samples": [sample(0, 100)]}))
    with pytest.raises(SystemExit, match="leaves no run"):
        history_subset.main([str(src), str(tmp_path / "out.hist"), "--drop=/t/"])


def test_max_samples_keeps_the_first_ones_of_each_run(tmp_path):
    src = tmp_path / "in.hist"
    src.write_bytes(msgpack.packb({"format": "ranklens-history", "version": 4, "runs": ["/t/a/rank0", "/t/b/rank0"],
                                   "samples": [sample(r, 100 * (r + 1) + i) for r in (0, 1) for i in range(5)]}))
    out = tmp_path / "out.hist"
    history_subset.main([str(src), str(out), "--max-samples", "2"])
    kept = [(s[8], s[9]) for s in msgpack.unpackb(out.read_bytes(), raw=False)["samples"]]
    assert kept == [(0, 100_000), (0, 101_000), (1, 200_000), (1, 201_000)]


def test_nothing_to_leave_out_is_an_error(tmp_path):
    with pytest.raises(SystemExit):
        history_subset.main([str(tmp_path / "in.hist"), str(tmp_path / "out.hist")])


def test_drop_phases_forgets_every_phase(tmp_path):
    src = tmp_path / "in.hist"
    src.write_bytes(msgpack.packb({"format": "ranklens-history", "version": 4, "runs": ["/t/a/rank0"],
                                   "samples": [sample(0, 100), sample(0, 101)]}))
    out = tmp_path / "out.hist"
    history_subset.main([str(src), str(out), "--drop-phases"])
    h = msgpack.unpackb(out.read_bytes(), raw=False)
    assert [s[10] for s in h["samples"]] == [-1.0, -1.0] and [s[12] for s in h["samples"]] == [0, 0]
