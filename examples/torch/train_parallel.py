#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The GPT of train_gpt.py under model parallelism: an ordinary torchrun script that knows nothing of RankLens.

  --parallel tp      tensor parallel over all ranks (DTensor `parallelize_module`: attention qkv and MLP fc
                     column-wise, the projections row-wise); every rank sees the same batch
  --parallel tp-dp   2-D: tensor parallel inside groups of --tp ranks, FSDP2 (`fully_shard`) across them
  --parallel pp      pipeline parallel (`torch.distributed.pipelining`, GPipe schedule over --microbatches):
                     the blocks split evenly over the ranks; the first stage embeds, the last one holds the final
                     norm and an (untied) LM head initialised from the embedding

    torchrun --nproc-per-node 2 examples/torch/train_parallel.py --parallel tp --steps 10
    torchrun --nproc-per-node 4 examples/torch/train_parallel.py --parallel tp-dp --tp 2
    torchrun --nproc-per-node 2 examples/torch/train_parallel.py --parallel pp --microbatches 4

Options shared with train_gpt.py: model size, --steps, --micro-batch (per data-parallel rank; for pp the whole
batch, split into --microbatches), --deterministic, --save-params PATH ({rank} expanded; DTensors saved as local
shards, each pp stage its own parameters), --digest (print a checksum of those parameters), --mark-steps, --log-all-ranks, --device cpu --backend gloo for a smoke
test. Output: `step <i> loss ...` lines and one `RESULT {json}` per rank (pp: the loss is known on the last stage;
other stages report null losses).
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
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_gpt import (GPT, env_int, find_mark_stage, local_state, print_digest, save_params,  # noqa: E402
                       synthetic_batch)

WARMUP_STEPS = 3


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parallel", choices=("tp", "tp-dp", "pp"), required=True)
    p.add_argument("--tp", type=int, default=2, help="tensor-parallel group size for tp-dp (default 2)")
    p.add_argument("--microbatches", type=int, default=4, help="pipeline micro-batches per step (pp; default 4)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--data", choices=("pattern", "random"), default="pattern")
    p.add_argument("--no-autocast", action="store_true", help="fp32 instead of bf16 autocast")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--backend", default="nccl")
    p.add_argument("--deterministic", action="store_true")
    p.add_argument("--save-params", default=None, metavar="PATH")
    p.add_argument("--digest", action="store_true",
                   help="print 'RANKLENS_DIGEST params sha256:<hex>', a checksum of this rank's parameters, at the end")
    p.add_argument("--mark-steps", action="store_true")
    p.add_argument("--log-all-ranks", action="store_true")
    return p.parse_args(argv)


def tensor_parallel(model: GPT, mesh) -> None:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    plan = {"attn.qkv": ColwiseParallel(), "attn.proj": RowwiseParallel(),
            "mlp.fc": ColwiseParallel(), "mlp.proj": RowwiseParallel()}
    for block in model.blocks:
        parallelize_module(block, mesh, plan)


class PipelineStageModule(nn.Module):
    """Blocks [lo, hi) of the GPT; the first stage embeds tokens, the last applies the norm and the LM head."""

    def __init__(self, gpt: GPT, lo: int, hi: int, first: bool, last: bool):
        super().__init__()
        self.first, self.last = first, last
        if first:
            self.tok_emb, self.pos_emb = gpt.tok_emb, gpt.pos_emb
        self.blocks = nn.ModuleList(gpt.blocks[lo:hi])
        if last:
            self.ln_f = gpt.ln_f
            self.head = nn.Linear(gpt.tok_emb.embedding_dim, gpt.tok_emb.num_embeddings, bias=False)
            with torch.no_grad():
                self.head.weight.copy_(gpt.tok_emb.weight)  # untied: the stages hold separate copies

    def forward(self, x):
        if self.first:
            pos = torch.arange(x.shape[1], device=x.device)
            x = self.tok_emb(x) + self.pos_emb(pos)
        for block in self.blocks:
            x = block(x)
        if self.last:
            x = self.head(self.ln_f(x))
        return x


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    local_rank = env_int("LOCAL_RANK")
    if args.device == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    log_here = rank == 0 or args.log_all_ranks
    prefix = f"[rank {rank}/{world}] " if args.log_all_ranks else ""

    def log(msg):
        if log_here:
            print(prefix + msg, flush=True)

    torch.manual_seed(args.seed)
    gpt = GPT(args.vocab, args.d_model, args.layers, args.heads, args.seq_len).to(device)
    n_params = sum(p.numel() for p in gpt.parameters())
    autocast = not args.no_autocast
    from torch.distributed.device_mesh import init_device_mesh

    data_rank = 0  # which data-parallel replica's batches this rank sees
    schedule = None
    if args.parallel == "tp":
        mesh = init_device_mesh(device.type, (world,), mesh_dim_names=("tp",))
        tensor_parallel(gpt, mesh)
        model = gpt
    elif args.parallel == "tp-dp":
        if world % args.tp:
            raise SystemExit(f"error: world size {world} is not a multiple of --tp {args.tp}")
        mesh = init_device_mesh(device.type, (world // args.tp, args.tp), mesh_dim_names=("dp", "tp"))
        tensor_parallel(gpt, mesh["tp"])
        from torch.distributed.fsdp import fully_shard

        for block in gpt.blocks:
            fully_shard(block, mesh=mesh["dp"])
        fully_shard(gpt, mesh=mesh["dp"])
        model = gpt
        data_rank = mesh["dp"].get_local_rank()
    else:
        from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

        per = math.ceil(args.layers / world)
        lo, hi = min(rank * per, args.layers), min((rank + 1) * per, args.layers)
        model = PipelineStageModule(gpt, lo, hi, rank == 0, rank == world - 1).to(device)
        del gpt
        stage = PipelineStage(model, rank, world, device)

        def loss_fn(logits, targets):
            return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1))

        schedule = ScheduleGPipe(stage, n_microbatches=args.microbatches, loss_fn=loss_fn)

    # foreach=False under TP: the tensor-parallel blocks' parameters are DTensors and the rest plain tensors, and
    # torch 2.11's multi-tensor AdamW refuses the mix ("got mixed torch.Tensor and DTensor").
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1,
                                  foreach=False if args.parallel == "tp" else None)
    log(f"model {n_params / 1e6:.2f}M params, parallel={args.parallel}, world_size={world}, device={device}, "
        f"torch {torch.__version__}")
    mark_stage, _ = find_mark_stage() if args.mark_steps else (None, None)

    losses, step_ms = [], []
    for step in range(args.steps):
        if mark_stage is not None:
            mark_stage(b"step", step)
        t0 = time.perf_counter()
        tokens = synthetic_batch(args, data_rank, step).to(device)
        inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=autocast):
            if schedule is None:
                logits = model(inputs)
                loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1))
            else:
                stage_losses = []
                if rank == 0:
                    schedule.step(inputs)
                elif rank == world - 1:
                    schedule.step(target=targets, losses=stage_losses)
                else:
                    schedule.step()
                loss = torch.stack(stage_losses).mean() if stage_losses else None
        if schedule is None:
            loss.backward()
        optimizer.step()
        value = loss.item() if loss is not None else None
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        step_ms.append((time.perf_counter() - t0) * 1e3)
        losses.append(value)
        log(f"step {step} loss {value if value is None else f'{value:.6f}'} time_ms {step_ms[-1]:.3f}")
    if mark_stage is not None:
        mark_stage(b"step", args.steps)

    finite = all(v is None or math.isfinite(v) for v in losses)
    timed = step_ms[WARMUP_STEPS:] if len(step_ms) > WARMUP_STEPS else step_ms
    digest = print_digest(local_state(model)) if args.digest else None
    print("RESULT " + json.dumps({
        "rank": rank, "world_size": world, "parallel": args.parallel, "steps": len(losses), "all_finite": finite,
        "final_loss": losses[-1] if losses else None, "losses": losses, "step_ms": [round(v, 3) for v in step_ms],
        "median_step_ms": statistics.median(timed) if timed else None, "params": n_params,
        "torch": torch.__version__, **({"digest": digest} if digest else {})}), flush=True)
    if args.save_params:
        save_params(model, args.save_params.format(rank=rank),
                    {"rank": rank, "world_size": world, "parallel": args.parallel, "steps": args.steps})
    dist.destroy_process_group()
    return 0 if finite else 1


if __name__ == "__main__":
    sys.exit(main())
