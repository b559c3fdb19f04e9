# SPDX-License-Identifier: Apache-2.0
"""Two branches and one asynchronous all-reduce: where the wait goes decides what overlaps.

An ordinary torch.distributed script (nothing in it knows about RankLens). Each step:

  A   a chain of --a-iters bf16 matmuls on (--a-tokens x --a-size) activations, then a weight-gradient-like
      product gA = h^T @ dY of --grad-mib MiB (shape a_size x cols);
      work = dist.all_reduce(gA, async_op=True)      (runs on ProcessGroupNCCL's own stream)
  B   a chain of --b-iters bf16 matmuls on a (--b-size x --b-size) matrix; B never reads gA.

--wait early   work.wait() before B:  step ~ A + all-reduce + B
--wait late    B first, then work.wait(): step ~ A + max(all-reduce, B)

Each step ends with torch.cuda.synchronize() and is timed with time.perf_counter(). With RankLens's libnccl.so.2
loaded (LD_PRELOAD) and exporting ranklensMarkStage, step i is marked ranklensMarkStage("step", i) at its start and
ranklensMarkStage("step", steps) after the last one; otherwise nothing is marked. Inputs and weights come from a
torch.Generator seeded with --seed (the same on every rank and in every run).

Launch (2 GPUs):
    torchrun --standalone --nproc-per-node 2 examples/torch/overlap_branches.py --wait early
    torchrun --standalone --nproc-per-node 2 examples/torch/overlap_branches.py --wait late
One rank alone on one GPU through RankLens:
    ranklens replay --rank 0 --fidelity timing --trace TRACE_OF_THE_EARLY_RUN \\
        -- python3 examples/torch/overlap_branches.py --wait late
Smoke test without a GPU:
    torchrun --standalone --nproc-per-node 2 examples/torch/overlap_branches.py --device cpu --backend gloo \\
        --a-size 64 --a-tokens 32 --grad-mib 0.0625 --b-size 64 --steps 4 --warmup 1

Output: with --log-all-ranks one `[rank r/N] step <i> time_ms <float>` line per step per rank (otherwise rank 0
only), then one line per process `RESULT {json}`: rank, world_size, wait, steps, warmup, step_ms (every step),
median_step_ms (steps after --warmup), on CUDA the per-step phases measured with CUDA events on the compute stream
(a_ms: branch A up to the all-reduce launch; b_ms: branch B; exposed_wait_ms: what work.wait() added to the
compute stream: early between A and B, late after B) and their medians, the sizes, and gA's checksum after the
last step.

The default sizes aim at A ~ 2 ms, all-reduce ~ 1.5 ms and B ~ 1.5 ms on 2x H200 over NVLink (512 MiB of bf16
gradients; not measured yet: the medians of exposed_wait_ms under --wait early and b_ms tell how to retune
--grad-mib and --b-size / --b-iters).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_gpt import env_int, find_mark_stage  # noqa: E402  (same environment and step-marker lookup)

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--wait", choices=("early", "late"), default="early",
                   help="work.wait() for A's all-reduce before (early) or after (late) branch B")
    p.add_argument("--steps", type=int, default=25, help="steps, warm-up included (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=5, help="steps left out of median_step_ms (default: %(default)s)")
    p.add_argument("--a-size", type=int, default=8192, help="width of branch A (default: %(default)s)")
    p.add_argument("--a-tokens", type=int, default=2048, help="rows of branch A's activations (default: %(default)s)")
    p.add_argument("--a-iters", type=int, default=1,
                   help="matmuls (a-tokens x a-size) @ (a-size x a-size) before gA (default: %(default)s)")
    p.add_argument("--grad-mib", type=float, default=512.0,
                   help="size of gA, the all-reduced tensor, in MiB (default: %(default)s); gA is a-size x cols")
    p.add_argument("--b-size", type=int, default=8192, help="branch B's square matrices (default: %(default)s)")
    p.add_argument("--b-iters", type=int, default=1, help="matmuls in branch B (default: %(default)s)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16", help="dtype of everything (default: bf16)")
    p.add_argument("--seed", type=int, default=1234, help="seed of the inputs and weights (default: %(default)s)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cpu is for smoke tests only (use --backend gloo and small sizes)")
    p.add_argument("--backend", default="nccl", help="torch.distributed backend (default: %(default)s)")
    p.add_argument("--log-all-ranks", action="store_true",
                   help="print step lines on every rank, prefixed '[rank r/N]' (default: rank 0 only)")
    args = p.parse_args(argv)
    for name in ("steps", "a_size", "a_tokens", "b_size", "b_iters"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    for name in ("warmup", "a_iters"):
        if getattr(args, name) < 0:
            p.error(f"--{name.replace('_', '-')} must not be negative, got {getattr(args, name)}")
    elem = torch.tensor([], dtype=DTYPES[args.dtype]).element_size()
    args.grad_cols = int(round(args.grad_mib * 2**20 / (elem * args.a_size)))
    if args.grad_cols <= 0:
        p.error(f"--grad-mib {args.grad_mib} is less than one column of {args.a_size} elements")
    return args


def randn(shape: tuple[int, ...], gen: torch.Generator, dtype: torch.dtype, device: torch.device,
          scale: float = 1.0) -> torch.Tensor:
    """Seeded normal values, drawn on the CPU (same values on every device), scaled, then moved."""
    return (torch.randn(shape, generator=gen, dtype=torch.float32) * scale).to(device=device, dtype=dtype)


def checksum(x: torch.Tensor | None) -> float | None:
    """Sum in fp32 (None when absent or not finite)."""
    if x is None:
        return None
    v = float(x.sum(dtype=torch.float32))
    return v if math.isfinite(v) else None


def emit(line: str) -> None:
    """One line to stdout in a single write(2), so that lines of the ranks sharing a log never interleave (print
    may issue the text and its newline as two writes, e.g. under PYTHONUNBUFFERED)."""
    sys.stdout.flush()
    data = (line + "\n").encode()
    while data:
        data = data[os.write(sys.stdout.fileno(), data):]


def median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank, world_size, local_rank = env_int("RANK"), env_int("WORLD_SIZE"), env_int("LOCAL_RANK")
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("error: CUDA is not available (use --device cpu --backend gloo for a smoke test)")
        if local_rank >= torch.cuda.device_count():
            raise SystemExit(f"error: LOCAL_RANK={local_rank} but only {torch.cuda.device_count()} GPU(s) visible")
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    cuda = device.type == "cuda"

    # No device_id: the communicator is created lazily at the first all-reduce (as in train_gpt.py).
    dist.init_process_group(args.backend)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    log_here = rank == 0 or args.log_all_ranks
    prefix = f"[rank {rank}/{world_size}] " if args.log_all_ranks else ""

    def log(msg: str) -> None:
        if log_here:
            emit(prefix + msg)

    dtype = DTYPES[args.dtype]
    gen = torch.Generator().manual_seed(args.seed)
    a, t, cols, b = args.a_size, args.a_tokens, args.grad_cols, args.b_size
    x_a = randn((t, a), gen, dtype, device)
    w_a = [randn((a, a), gen, dtype, device, a ** -0.5) for _ in range(args.a_iters)]
    dy = randn((t, cols), gen, dtype, device, t ** -0.5)
    x_b = randn((b, b), gen, dtype, device)
    w_b = [randn((b, b), gen, dtype, device, b ** -0.5) for _ in range(min(args.b_iters, 4))]
    grad_bytes = a * cols * torch.tensor([], dtype=dtype).element_size()
    flops_a = 2 * t * a * a * args.a_iters + 2 * a * t * cols
    flops_b = 2 * b * b * b * args.b_iters
    log(f"overlap_branches: wait={args.wait}, world_size={world_size}, device={device}, dtype={args.dtype}, "
        f"gA {a}x{cols} ({grad_bytes / 2**20:.1f} MiB), A {flops_a / 1e12:.3f} TFLOP, B {flops_b / 1e12:.3f} TFLOP, "
        f"torch {torch.__version__}")

    mark_stage, mark_where = find_mark_stage()
    mark_failures = 0

    def mark(step_index: int) -> None:
        nonlocal mark_failures
        if mark_stage is not None and mark_stage(b"step", step_index) != 0:
            mark_failures += 1

    def branch_a() -> torch.Tensor:
        h = x_a
        for w in w_a:
            h = h @ w
        return h.t() @ dy  # (a x cols): the "gradient" of a (a x cols) weight

    def branch_b() -> torch.Tensor:
        h = x_b
        for i in range(args.b_iters):
            h = h @ w_b[i % len(w_b)]
        return h

    if cuda:
        events = [[torch.cuda.Event(enable_timing=True) for _ in range(5)] for _ in range(args.steps)]
    step_ms: list[float] = []
    g_a = out_b = None
    for step in range(args.steps):
        mark(step)
        ev = events[step] if cuda else None
        t0 = time.perf_counter()
        if ev:
            ev[0].record()
        g_a = branch_a()
        if ev:
            ev[1].record()
        work = dist.all_reduce(g_a, async_op=True)
        if args.wait == "early":
            work.wait()
        if ev:
            ev[2].record()
        out_b = branch_b()
        if ev:
            ev[3].record()
        if args.wait == "late":
            work.wait()
        if ev:
            ev[4].record()
        if cuda:
            torch.cuda.synchronize(device)
        dt_ms = (time.perf_counter() - t0) * 1e3
        step_ms.append(dt_ms)
        log(f"step {step} time_ms {dt_ms:.3f}")
    mark(args.steps)

    phases: dict[str, list[float]] = {}
    if cuda:
        a_ms = [e[0].elapsed_time(e[1]) for e in events]
        b_ms = [e[2].elapsed_time(e[3]) for e in events]
        wait_ms = [e[1].elapsed_time(e[2]) if args.wait == "early" else e[3].elapsed_time(e[4]) for e in events]
        phases = {"a_ms": a_ms, "b_ms": b_ms, "exposed_wait_ms": wait_ms}
    w = args.warmup
    result = {
        "rank": rank,
        "world_size": world_size,
        "wait": args.wait,
        "steps": len(step_ms),
        "warmup": w,
        "step_ms": [round(v, 4) for v in step_ms],
        "median_step_ms": median_or_none(step_ms[w:]),
        **{k: [round(v, 4) for v in vals] for k, vals in phases.items()},
        **{"median_" + k: median_or_none(vals[w:]) for k, vals in phases.items()},
        "sizes": {"a_size": a, "a_tokens": t, "a_iters": args.a_iters, "grad_cols": cols,
                  "grad_mib": grad_bytes / 2**20, "b_size": b, "b_iters": args.b_iters, "dtype": args.dtype},
        "tflop_a": flops_a / 1e12,
        "tflop_b": flops_b / 1e12,
        "ga_checksum": checksum(g_a),
        "b_checksum": checksum(out_b),
        "mark_stage": mark_where,
        "mark_failures": mark_failures,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
    }
    emit("RESULT " + json.dumps(result, allow_nan=False))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
