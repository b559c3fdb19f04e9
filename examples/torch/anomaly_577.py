#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A NaN that arrives from a peer: DDP over a 577-parameter FP32 model with plain SGD (torchrun, one GPU per rank).

With --nan-rank R --nan-step S, rank R sets the first element of its gradient bucket to NaN just before DDP's
all-reduce of step S (a DDP communication hook), so every rank receives a NaN in its reduced gradient. Run alone
under RankLens's value replay, a rank that never injects anything receives the recorded NaN instead.

After the last step each rank saves {"grads", "params", "losses"} (torch.save) to --save (with {rank} expanded).
    torchrun --nproc-per-node 2 examples/torch/anomaly_577.py --nan-rank 1 --nan-step 4 --save /tmp/a-{rank}.pt
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP


def model_577() -> nn.Module:
    # 16*32 + 32 + 32*1 + 1 = 577 parameters.
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--nan-rank", type=int, default=-1, help="rank that poisons its gradient bucket (-1: none)")
    p.add_argument("--nan-step", type=int, default=-1, help="step at which it does")
    p.add_argument("--save", default=None, help="path for the final grads/params/losses ({rank} expanded)")
    p.add_argument("--lr", type=float, default=0.1)
    args = p.parse_args()

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local)
    torch.cuda.set_device(device)
    torch.manual_seed(1234)  # same initial weights everywhere (DDP broadcasts rank 0's anyway)
    model = DDP(model_577().to(device), device_ids=[local])
    assert sum(p.numel() for p in model.parameters()) == 577
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    state = {"step": 0}

    def hook(process_state, bucket):
        if rank == args.nan_rank and process_state["step"] == args.nan_step:
            bucket.buffer()[0] = float("nan")
        return default_hooks.allreduce_hook(None, bucket)

    model.register_comm_hook(state, hook)
    gen = torch.Generator().manual_seed(100 + rank)  # each rank its own data
    losses = []
    for step in range(args.steps):
        state["step"] = step
        x = torch.randn(64, 16, generator=gen).to(device)
        y = torch.randn(64, 1, generator=gen).to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    torch.cuda.synchronize()
    grads = {n: p.grad.detach().cpu().clone() for n, p in model.module.named_parameters()}
    params = {n: p.detach().cpu().clone() for n, p in model.module.named_parameters()}
    if args.save:
        torch.save({"grads": grads, "params": params, "losses": losses}, args.save.format(rank=rank))
    nan_params = sum(int(torch.isnan(t).sum()) for t in params.values())
    print("RESULT " + json.dumps({"rank": rank, "world_size": world, "steps": args.steps, "losses":
                                  [None if v != v else v for v in losses], "nan_params": nan_params}), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
