#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A small NCCL job that hangs (or desyncs) on purpose so PyTorch's Flight Recorder dumps it.

Every step does, in this order: an all-reduce on the world group (the "gradient"), an all-gather on a second
process group ("tp", every rank) and, with --p2p, a ring send/recv on the world group. Step 0 starts with a
broadcast, so a dump holds broadcast, all_reduce, all_gather and send/recv entries of two process groups.

  --mode hang    rank --culprit skips the world all-reduce of step --at-step. Its later all-reduces pair with
                 the others' earlier ones (same shape), so the others are left one all-reduce short at the end:
                 their last all-reduce never completes, the watchdog times out after --timeout seconds and, with
                 TORCH_NCCL_DUMP_ON_TIMEOUT=1, every rank writes its Flight Recorder buffer.
  --mode desync  rank --culprit calls a different all-reduce at step --at-step (--desync size: twice the
                 elements; dtype: bfloat16 instead of float32; op: a broadcast instead of the all-reduce).
  --mode none    a clean run.

Besides the watchdog's dump (TORCH_NCCL_DEBUG_INFO_TEMP_FILE / TORCH_FR_DUMP_TEMP_FILE prefix + rank), each rank
writes its buffer itself through torch's Python API when it has waited --self-dump-after seconds for its calls
or when they all completed: a pickle to --dump-dir/pickle/rank_<R> and the JSON variant to
--dump-dir/json/rank_<R>.json (a desync that completes with wrong values still leaves dumps).

Run it on one GPU with RankLens's shared-GPU launcher (tests/data/flight_recorder/make_dumps.sh does this):
    TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_NCCL_ENABLE_TIMING=1 \\
    TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/tmp/fr/rank_ \\
    ranklens run --share-gpu -- torchrun --standalone --nproc-per-node 2 examples/torch/fr_hang.py --mode hang
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist


def log(rank: int, what: str, **kv) -> None:
    # One JSON line per event so make_dumps.sh's logs say what each rank did (the expected diagnosis).
    print("FR_HANG " + json.dumps({"rank": rank, "event": what, **kv}, sort_keys=True), flush=True)


def dump_api():
    """torch's functions that return this process's Flight Recorder buffer, as (pickle bytes, JSON text) callables:
    _dump_nccl_trace / _dump_nccl_trace_json (torch 2.x with NCCL), else the backend-generic _dump_fr_trace /
    _dump_fr_trace_json of newer torch, asked for the NCCL backend's buffer (their default is gloo's)."""
    c10d = getattr(torch._C, "_distributed_c10d", None)
    if c10d is None:
        return None, None

    def call(fn, **kwargs):
        def dump():
            try:
                return fn(**kwargs)
            except TypeError:  # keyword names differ across versions; the positional order does not
                return fn(*[v for k, v in kwargs.items() if k != "backend"])
        return dump

    pick = js = None
    if hasattr(c10d, "_dump_nccl_trace"):
        pick = call(c10d._dump_nccl_trace, includeCollectives=True, includeStackTraces=True, onlyActive=False)
    elif hasattr(c10d, "_dump_fr_trace"):
        pick = call(c10d._dump_fr_trace, includeCollectives=True, includeStackTraces=True, onlyActive=False,
                    backend="nccl")
    if hasattr(c10d, "_dump_nccl_trace_json"):
        js = call(c10d._dump_nccl_trace_json, includeCollectives=True, onlyActive=False)
    elif hasattr(c10d, "_dump_fr_trace_json"):
        js = call(c10d._dump_fr_trace_json, includeCollectives=True, onlyActive=False, backend="nccl")
    return pick, js


def self_dump(rank: int, dump_dir: str, why: str) -> None:
    if not dump_dir:
        return
    pick, js = dump_api()
    os.makedirs(os.path.join(dump_dir, "pickle"), exist_ok=True)
    os.makedirs(os.path.join(dump_dir, "json"), exist_ok=True)
    wrote = []
    if pick is not None:
        try:
            data = pick()
            path = os.path.join(dump_dir, "pickle", f"rank_{rank}")
            with open(path, "wb") as f:
                f.write(data if isinstance(data, (bytes, bytearray)) else bytes(data))
            wrote.append(path)
        except Exception as e:  # noqa: BLE001 - a dump that fails must not hide the other one
            log(rank, "self_dump_failed", kind="pickle", error=repr(e))
    if js is not None:
        try:
            text = js()
            path = os.path.join(dump_dir, "json", f"rank_{rank}.json")
            with open(path, "w") as f:
                f.write(text if isinstance(text, str) else text.decode())
            wrote.append(path)
        except Exception as e:  # noqa: BLE001
            log(rank, "self_dump_failed", kind="json", error=repr(e))
    log(rank, "self_dump", why=why, files=wrote, pickle_api=pick is not None, json_api=js is not None)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["hang", "desync", "none"], default="hang")
    p.add_argument("--desync", choices=["size", "dtype", "op"], default="size", help="what --mode desync changes")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--at-step", type=int, default=3, help="the step at which the culprit skips or differs")
    p.add_argument("--culprit", type=int, default=-1, help="the rank that skips or differs (default: the last)")
    p.add_argument("--numel", type=int, default=1024, help="elements of the all-reduced tensor")
    p.add_argument("--timeout", type=float, default=20.0, help="process-group timeout in seconds (watchdog)")
    p.add_argument("--p2p", action=argparse.BooleanOptionalAction, default=True, help="a ring send/recv each step")
    p.add_argument("--dump-dir", default=os.environ.get("FR_HANG_DUMP_DIR", ""),
                   help="where each rank writes its own pickle and JSON dumps (empty: none)")
    p.add_argument("--self-dump-after", type=float, default=-1.0,
                   help="seconds to wait for the calls before dumping from Python (default: half of --timeout)")
    p.add_argument("--linger", type=float, default=-1.0,
                   help="seconds to keep waiting after that for the watchdog (default: 2 x --timeout + 20)")
    args = p.parse_args()

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    culprit = args.culprit if args.culprit >= 0 else world - 1
    self_dump_after = args.self_dump_after if args.self_dump_after >= 0 else args.timeout / 2
    linger = args.linger if args.linger >= 0 else 2 * args.timeout + 20

    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    timeout = datetime.timedelta(seconds=args.timeout)
    dist.init_process_group("nccl", timeout=timeout, device_id=device)
    tp = dist.new_group(list(range(world)), timeout=timeout, group_desc="tp")
    log(rank, "start", world=world, culprit=culprit, mode=args.mode, desync=args.desync, at_step=args.at_step,
        torch=torch.__version__, nccl=".".join(map(str, torch.cuda.nccl.version())))

    works = []
    grad = torch.ones(args.numel, device=device)
    if rank == 0:
        grad.mul_(2.0)
    works.append(dist.broadcast(grad, src=0, async_op=True))
    shard = torch.full((args.numel // 4,), float(rank), device=device)
    gathered = torch.empty(shard.numel() * world, device=device)
    for step in range(args.steps):
        grad.add_(1.0)
        me = rank == culprit and step == args.at_step
        if me and args.mode == "hang":
            log(rank, "skip", step=step, op="all_reduce", group="default_pg")
        elif me and args.mode == "desync":
            if args.desync == "size":
                other = torch.ones(2 * args.numel, device=device)
                works.append(dist.all_reduce(other, async_op=True))
            elif args.desync == "dtype":
                other = torch.ones(args.numel, device=device, dtype=torch.bfloat16)
                works.append(dist.all_reduce(other, async_op=True))
            else:
                works.append(dist.broadcast(grad, src=0, async_op=True))
            log(rank, "desync", step=step, change=args.desync, group="default_pg")
        else:
            works.append(dist.all_reduce(grad, async_op=True))
        works.append(dist.all_gather_into_tensor(gathered, shard, group=tp, async_op=True))
        if args.p2p and world > 1:
            send = torch.full((256,), float(rank * 100 + step), device=device)
            recv = torch.empty(256, device=device)
            ops = [dist.P2POp(dist.isend, send, (rank + 1) % world),
                   dist.P2POp(dist.irecv, recv, (rank - 1) % world)]
            works.extend(dist.batch_isend_irecv(ops))

    # Wait by polling: the Python thread stays free (no blocking CUDA call), so it can dump when stuck.
    start = time.monotonic()
    dumped = False
    while True:
        done = all(w.is_completed() for w in works)
        waited = time.monotonic() - start
        if done:
            log(rank, "completed", calls=len(works), waited_s=round(waited, 3))
            if not dumped:
                self_dump(rank, args.dump_dir, "completed")
            break
        if not dumped and waited >= self_dump_after:
            pending = sum(1 for w in works if not w.is_completed())
            log(rank, "stuck", pending=pending, waited_s=round(waited, 3))
            self_dump(rank, args.dump_dir, "stuck")
            dumped = True
        if waited >= self_dump_after + linger:
            # The watchdog should have aborted this process by now; leave rather than hang the launcher.
            log(rank, "gave_up", waited_s=round(waited, 3))
            os._exit(3)
        time.sleep(0.05)

    # The culprit of a hang completes everything; it stays until the others' watchdogs have dumped and aborted
    # (torchrun then ends it), because TORCH_NCCL_DUMP_ON_TIMEOUT asks every live rank for its dump. Leaving
    # without destroy_process_group: a peer may still be stuck.
    if args.mode != "none":
        time.sleep(linger)
        log(rank, "left", waited_s=round(time.monotonic() - start, 3))
        os._exit(0)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
