# SPDX-License-Identifier: Apache-2.0
"""Train examples/torch/train_gpt.py's GPT with DeepSpeed ZeRO stage 2 or 3: an ordinary torchrun script.

Nothing in it knows about RankLens. Launch it the usual way on real GPUs::

    torchrun --standalone --nproc-per-node 2 examples/deepspeed/train_zero.py --zero-stage 2
    torchrun --standalone --nproc-per-node 2 examples/deepspeed/train_zero.py --zero-stage 3 \\
        --d-model 768 --layers 12 --heads 12 --vocab 50304 --seq-len 1024 --micro-batch 4   # GPT-2 small

The model, its initial weights (seeded by --seed) and the synthetic batches of (rank, step) are train_gpt.py's
(imported from there, not copied). DeepSpeed's own mixed precision runs it: bf16 parameters and activations, fp32
master weights and Adam states partitioned by ZeRO. The DeepSpeed configuration is built in code
(build_ds_config): micro-batch per GPU, gradient accumulation 1, bf16, the ZeRO stage, gradient clipping, and
torch.optim.AdamW through DeepSpeed's "torch_adam" switch, so that no DeepSpeed CUDA op is compiled.

ZeRO-3: GPT.forward uses the token embedding's weight a second time, as the LM head, outside the embedding module;
it is registered as an external parameter of the model (deepspeed.zero.register_external_parameter), so ZeRO-3
gathers it for the whole forward instead of discovering it on first access.

Output: `step <i> loss <float> time_ms <float>` lines (rank 0, or every rank with --log-all-ranks) and one
`RESULT {json}` line per process, with train_gpt.py's keys (parallel is "zero2" or "zero3"). Exit code 0 only if
every loss was finite.

--save-params PATH ('{rank}' replaced) writes torch.save of {"rank", "world_size", "parallel", "steps",
"deterministic", "params": {name: CPU tensor}, "partitions"}:
  zero2: params are the module's bf16 parameters, whole (every rank holds all of them); partitions is None.
  zero3: params are this rank's bf16 partition of each parameter (param.ds_tensor: 1-D, a slice of the flattened
         parameter, zero-padded at the end on the last rank); partitions[name] = {"shape", "numel",
         "partition_numel", "start"}: the full shape and element count, and where this slice starts.
The fp32 master weights and optimizer states are not saved.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "torch"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import train_gpt  # noqa: E402  (examples/torch/train_gpt.py: model, synthetic data, step marks)

WARMUP_STEPS = train_gpt.WARMUP_STEPS


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Train train_gpt.py's GPT on synthetic tokens with DeepSpeed ZeRO-2 or ZeRO-3 (launch with "
        "torchrun; reads RANK, WORLD_SIZE and LOCAL_RANK from the environment).",
        epilog="Example: torchrun --standalone --nproc-per-node 2 %(prog)s --zero-stage 3",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--zero-stage", type=int, choices=(2, 3), default=2, help="ZeRO stage")
    p.add_argument("--steps", type=int, default=10, help="optimizer steps")
    train_gpt.add_model_arguments(p)
    p.add_argument("--log-all-ranks", action="store_true",
                   help="print step lines on every rank, prefixed '[rank r/N]' (default: rank 0 only)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cpu is for smoke tests only (with DS_ACCELERATOR=cpu and --backend gloo)")
    p.add_argument("--backend", default=None,
                   help="torch.distributed backend (default: DeepSpeed's for the accelerator, nccl on CUDA)")
    train_gpt.add_measurement_arguments(p, "write this rank's final bf16 parameters (zero2: whole; zero3: this rank's "
                                           "partitions) to PATH, '{rank}' replaced by the rank")
    args = p.parse_args(argv)
    train_gpt.check_arguments(p, args)
    return args


def build_ds_config(args: argparse.Namespace) -> dict:
    """The DeepSpeed configuration, as the JSON file would hold it."""
    return {
        "train_micro_batch_size_per_gpu": args.micro_batch,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": args.grad_clip,
        "bf16": {"enabled": True},
        "fp16": {"enabled": False},
        # Defaults otherwise (bucket sizes, ZeRO-3 prefetch and persistence thresholds, overlap_comm: off for
        # stage 2, on for stage 3).
        "zero_optimization": {"stage": args.zero_stage},
        # torch_adam: torch.optim.AdamW instead of DeepSpeed's FusedAdam, whose CUDA op would be compiled just in
        # time at start-up; ZeRO supports torch's AdamW as its basic optimizer.
        "optimizer": {"type": "AdamW",
                      "params": {"lr": args.lr, "betas": [0.9, 0.95], "eps": 1e-8,
                                 "weight_decay": args.weight_decay, "torch_adam": True}},
        "steps_per_print": 1 << 30,  # our own step lines only
        "wall_clock_breakdown": False,
    }


def local_params(engine, zero_stage: int) -> tuple[dict, dict | None]:
    """This rank's bf16 parameters as CPU tensors (ZeRO-3: its partitions, with where they lie)."""
    import deepspeed.comm as ds_dist

    params: dict = {}
    if zero_stage < 3:
        for name, value in engine.module.state_dict().items():
            params[name] = value.detach().to("cpu", copy=True)
        return params, None
    partitions: dict = {}
    for name, p in engine.module.named_parameters():
        part = p.ds_tensor
        params[name] = part.detach().to("cpu", copy=True)
        partitions[name] = {"shape": list(p.ds_shape), "numel": int(p.ds_numel),
                            "partition_numel": int(part.ds_numel),
                            # Partition r of a parameter starts at r * partition_numel (ZeRO-3's layout).
                            "start": int(part.ds_numel) * ds_dist.get_rank(group=p.ds_process_group)}
    return params, partitions


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.deterministic:
        train_gpt.set_deterministic()

    for name in ("RANK", "WORLD_SIZE"):
        train_gpt.env_int(name)  # a clear error when not launched by torchrun
    local_rank = train_gpt.env_int("LOCAL_RANK")
    device = train_gpt.pick_device(args.device, local_rank, "--device cpu with DS_ACCELERATOR=cpu --backend gloo")

    import deepspeed  # after argument parsing: --help works without DeepSpeed installed

    # DeepSpeed's usual start under torchrun: the env:// rendezvous, NCCL on CUDA (with device_id, so communicators
    # are created eagerly).
    deepspeed.init_distributed(dist_backend=args.backend)
    rank, world_size = deepspeed.comm.get_rank(), deepspeed.comm.get_world_size()
    parallel = f"zero{args.zero_stage}"

    log, prefix = train_gpt.rank_logger(rank, world_size, args.log_all_ranks)

    # Same initial weights on every rank, as in train_gpt.py.
    torch.manual_seed(args.seed)
    model = train_gpt.GPT(args.vocab, args.d_model, args.layers, args.heads, args.seq_len).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    if args.zero_stage == 3:
        deepspeed.zero.register_external_parameter(model, model.tok_emb.weight)  # the tied LM head

    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=build_ds_config(args))
    log(f"model {n_params / 1e6:.2f}M params, parallel={parallel}, world_size={world_size}, device={device}, "
        f"torch {torch.__version__}, deepspeed {deepspeed.__version__}, optimizer "
        f"{type(engine.optimizer).__name__}({type(engine.basic_optimizer).__name__})")

    mark = train_gpt.step_marker(args.mark_steps, prefix)

    losses: list[float] = []
    step_ms: list[float] = []
    for step in range(args.steps):
        mark(step)
        t0 = time.perf_counter()
        tokens = train_gpt.synthetic_batch(args, rank, step).to(device, non_blocking=True)
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        logits = engine(inputs)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1))
        engine.backward(loss)
        engine.step()
        train_gpt.finish_step(step, loss, t0, device, losses, step_ms, log)
    mark(args.steps)

    result = train_gpt.result_record(rank, world_size, parallel, losses, step_ms, n_params, device, args.steps)
    result["deepspeed"] = deepspeed.__version__
    if args.digest:
        result["digest"] = train_gpt.print_digest(local_params(engine, args.zero_stage)[0])
    print("RESULT " + json.dumps(result, allow_nan=False), flush=True)
    if args.save_params:
        path = args.save_params.format(rank=rank)
        params, partitions = local_params(engine, args.zero_stage)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        torch.save({"rank": rank, "world_size": world_size, "parallel": parallel, "steps": len(losses),
                    "deterministic": args.deterministic, "params": params, "partitions": partitions}, path)
        print(f"{prefix}saved parameters to {path}", file=sys.stderr, flush=True)

    deepspeed.comm.destroy_process_group()
    return train_gpt.exit_status(result, prefix)


if __name__ == "__main__":
    sys.exit(main())
