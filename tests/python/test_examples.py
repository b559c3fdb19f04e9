# SPDX-License-Identifier: Apache-2.0
"""The model-parallel example (examples/torch/train_parallel.py) runs under torchrun on the CPU (gloo): tensor
parallel and pipeline parallel on 2 processes, with finite losses. Skipped without torch."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = ["--device", "cpu", "--backend", "gloo", "--steps", "2", "--no-autocast", "--d-model", "64", "--layers", "2",
        "--heads", "4", "--seq-len", "32", "--vocab", "256", "--micro-batch", "4", "--microbatches", "2",
        "--log-all-ranks"]


@pytest.mark.parametrize("mode", ["tp", "pp"])
def test_train_parallel_on_cpu(mode):
    pytest.importorskip("torch")
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                        os.path.join(ROOT, "examples", "torch", "train_parallel.py"), "--parallel", mode, *TINY],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    results = [json.loads(line.split("RESULT ", 1)[1]) for line in r.stdout.splitlines() if "RESULT " in line]
    assert sorted(x["rank"] for x in results) == [0, 1]
    assert all(x["all_finite"] and x["steps"] == 2 for x in results)
    if mode == "tp":  # every rank of the tensor-parallel group computes the same loss
        assert results[0]["losses"] == results[1]["losses"]
