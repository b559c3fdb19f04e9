# SPDX-License-Identifier: Apache-2.0
"""The model-parallel example (examples/torch/train_parallel.py) runs under torchrun on the CPU (gloo): tensor
parallel and pipeline parallel on 2 processes, with finite losses. Skipped without torch."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_DECODER = json.JSONDecoder()


def parse_result_lines(text):
    """train_gpt.py's `RESULT {json}` lines, one per rank; ranks that print at the same moment can share a line
    (`...}RESULT {...}` holds two)."""
    out, bad = [], []
    for line in text.splitlines():
        start = 0
        while (i := line.find("RESULT {", start)) >= 0:
            start = i + len("RESULT {")
            if i > 0 and line[i - 1].isalnum():
                continue
            try:
                obj, end = _DECODER.raw_decode(line, i + len("RESULT "))
            except json.JSONDecodeError as e:
                bad.append(f"{e}: {line[i:i + 200]}")
                continue
            out.append(obj)
            start = end
    return out, bad


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
    results, bad = parse_result_lines(r.stdout)
    assert not bad, bad
    assert sorted(x["rank"] for x in results) == [0, 1]
    assert all(x["all_finite"] and x["steps"] == 2 for x in results)
    if mode == "tp":  # every rank of the tensor-parallel group computes the same loss
        assert results[0]["losses"] == results[1]["losses"]


def test_result_lines_that_share_a_line():
    out, bad = parse_result_lines('RESULT {"rank": 0}RESULT {"rank": 1}\nxRESULT {"rank": 2}\nRESULT {bad\n')
    assert [x["rank"] for x in out] == [0, 1] and len(bad) == 1


def test_gpu_split_of_a_profile():
    """The profile diagnosis (train_gpt.py --profile-nccl): compute busy time is the union over streams, holds count
    as communication, the GPU is idle where nothing runs."""
    pytest.importorskip("torch")
    sys.path.insert(0, os.path.join(ROOT, "examples", "torch"))
    import train_gpt

    events = [{"ph": "X", "cat": "kernel", "name": "gemm_a", "ts": 0, "dur": 10},
              {"ph": "X", "cat": "kernel", "name": "gemm_b", "ts": 5, "dur": 10},   # overlaps gemm_a on another stream
              {"ph": "X", "cat": "kernel", "name": "ranklens_AllReduce", "ts": 12, "dur": 8},
              {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 30, "dur": 2},
              {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32", "ts": 40, "dur": 10,
               "args": {"grid": [24, 1, 1], "block": [640, 1, 1], "shared memory": 0, "registers per thread": 96}},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 100}]

    class FakeProfile:
        def export_chrome_trace(self, path):
            with open(path, "w", encoding="utf-8") as f:
                json.dump({"traceEvents": events}, f)

    import tempfile
    with tempfile.TemporaryDirectory() as d:
        summary = train_gpt.nccl_kernel_summary(FakeProfile(), os.path.join(d, "trace.json"))
    split = summary["gpu_split_us"]
    assert split["wall"] == 50
    assert split["compute_busy"] == 15 and split["compute_sum"] == 20
    assert split["communication_busy"] == 18
    assert split["copy_busy"] == 2
    assert split["idle"] == 50 - (20 + 2 + 10)  # union of everything: [0,20) [30,32) [40,50)
    assert summary["nccl_kernel_count"] == 1 and summary["nccl_kernel_total_us"] == 10
    assert list(summary["compute_kernels_by_name"]) == ["gemm_a", "gemm_b"]
    assert summary["communication_kernel_shapes"] == {
        "grid [24, 1, 1] block [640, 1, 1] shared 0 registers 96": {"count": 1, "total_us": 10.0}}
