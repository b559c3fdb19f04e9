# SPDX-License-Identifier: Apache-2.0
"""NCCL collectives captured in a CUDA graph: an ordinary torchrun script, for checking that RankLens records and
replays a job that launches its communication through torch.cuda.CUDAGraph.

    torchrun --nproc-per-node 2 examples/torch/graph_allreduce.py
    ranklens record --trace /tmp/g -- torchrun --nproc-per-node 2 examples/torch/graph_allreduce.py
    ranklens replay --trace /tmp/g --rank 1 -- python3 examples/torch/graph_allreduce.py

Each step is captured once and launched --launches times: a matrix product and an all-reduce of a 4 MiB buffer
(gradients; --buckets such pairs), then an all-reduce of a 16-element one (a control value, small enough that record
mode would store its payload when not captured), each buffer refilled with this rank's value + 1 before every
launch. Eager all-reduces of both sizes
come before the capture (the communicator is created outside it, as PyTorch requires) and after the last launch.

Output: `launch <i> big <float> small <float> ms <float>` (element 0 of each buffer after launch i, where a real job
gives the sum of (rank + 1) over ranks with --buckets 1, and the launch's GPU time) and one line `RESULT {json}` with rank, world_size, launches, eager_big, eager_small and
the per-launch values. Exit code 0 when every value is finite.
"""
import argparse
import json
import math
import os

import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--launches", type=int, default=5, help="graph launches (default 5)")
    parser.add_argument("--size", type=int, default=1 << 20, help="float32 elements of the large buffer")
    parser.add_argument("--matmul", type=int, default=512, help="size of the step's square matrix product (512)")
    parser.add_argument("--buckets", type=int, default=1,
                        help="all-reduces of the large buffer per step, each after a matrix product (default 1)")
    parser.add_argument("--eager", action="store_true",
                        help="run the step once, eagerly, where it would be captured, and launch nothing: the same "
                             "NCCL calls with none captured (a recording to replay the graphed program against)")
    args = parser.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rank, world = dist.get_rank(), dist.get_world_size()
    value = float(rank + 1)

    big = torch.full((args.size,), value, device="cuda")
    small = torch.full((16,), value, device="cuda")
    weight = torch.randn(args.matmul, args.matmul, device="cuda", generator=torch.Generator("cuda").manual_seed(rank))

    def step():
        for _ in range(args.buckets):
            out = weight @ weight
            dist.all_reduce(big)
        dist.all_reduce(small)
        return out

    # Eager calls first: the communicator exists before the capture, and a side stream warms up as torch asks.
    step()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    graph = None
    if args.eager:
        step()
    else:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()

    launches = []
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i in range(args.launches if graph is not None else 0):
        big.fill_(value)
        small.fill_(value)
        begin.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        launches.append({"big": big[0].item(), "small": small[0].item(), "ms": begin.elapsed_time(end)})
        print(f"launch {i} big {launches[-1]['big']} small {launches[-1]['small']} ms {launches[-1]['ms']:.3f}",
              flush=True)

    big.fill_(value)
    small.fill_(value)
    step()
    torch.cuda.synchronize()
    eager = {"eager_big": big[0].item(), "eager_small": small[0].item()}
    values = [eager["eager_big"], eager["eager_small"]] + [launch[k] for launch in launches for k in ("big", "small")]
    finite = all(math.isfinite(v) for v in values)
    print("RESULT " + json.dumps({"rank": rank, "world_size": world, "launches": launches, **eager,
                                  "all_finite": finite}), flush=True)
    del graph
    dist.destroy_process_group()
    raise SystemExit(0 if finite else 1)


if __name__ == "__main__":
    main()
