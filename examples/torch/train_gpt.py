# SPDX-License-Identifier: Apache-2.0
"""Train a small GPT-style decoder with DDP or FSDP2: an ordinary torchrun script.

This is the workload RankLens runs "as is": nothing in it knows about RankLens. Launch it the
usual way on real GPUs::

    torchrun --nproc-per-node 2 examples/torch/train_gpt.py --parallel ddp
    torchrun --nproc-per-node 2 examples/torch/train_gpt.py --parallel fsdp2

or run one rank of it alone on one GPU with the RankLens library::

    ranklens replay --rank 37 --world-size 64 \\
        -- python3 examples/torch/train_gpt.py --parallel fsdp2 --log-all-ranks

The model is a pre-LayerNorm decoder (token + learned position embedding, causal self-attention
through F.scaled_dot_product_attention, GELU MLP, LM head tied to the token embedding), trained
with AdamW under bf16 autocast on synthetic tokens. The batch of (rank, step) comes from a
torch.Generator seeded by (seed, rank, step), so every run of the same command sees the same data
and, on the same machine, produces the same losses.

Output: one `step <i> loss <float> time_ms <float>` line per step (rank 0 only, or every rank
with --log-all-ranks, then prefixed `[rank r/N]`), and at the end one line per process
`RESULT {json}` with rank, world_size, parallel, steps, final_loss, all_finite and
median_step_ms (steps after the first 3), and with --digest the digest. Exit code 0 only if every loss was finite.

Options for measurements (none changes the output above; all are off by default):
  --deterministic      torch.use_deterministic_algorithms(True), cuDNN deterministic (sets
                       CUBLAS_WORKSPACE_CONFIG=:4096:8 unless already set), for bit-identical reruns
  --save-params PATH   at the end, this rank's parameters (state_dict on the CPU; FSDP2: the local shards) to
                       PATH, `{rank}` replaced by the rank (torch.save of {"rank", "world_size", "parallel",
                       "steps", "params": {name: tensor}})
  --digest             at the end, print `RANKLENS_DIGEST params sha256:<hex>`: a checksum of this rank's parameters
                       (the tensors --save-params writes), which `ranklens replay --ranks` shows per rank
  --mark-steps         call ranklensMarkStage("step", i) (C ABI, exported by RankLens's libnccl.so.2) at the start
                       of every step i and ranklensMarkStage("step", steps) after the last one, when the symbol is
                       loaded; otherwise nothing
  --profile-nccl PATH  profile steps --profile-steps START:STOP (default 5:15, STOP excluded) with torch.profiler
                       (CUDA activity) and write to PATH (`{rank}` replaced) a JSON document with the total and count
                       of the kernels whose name starts with "nccl", the profiled step range and their step times;
                       implies --mark-steps
"""

from __future__ import annotations

import argparse
import ctypes
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

WARMUP_STEPS = 3  # steps left out of median_step_ms (allocator warm-up, lazy communicator init, autotuning)


# ----------------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------------
class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"--d-model {d_model} is not divisible by --heads {n_heads}")
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        qkv = self.qkv(x)
        # Under tensor parallelism qkv holds this rank's heads only (a column shard): sizes come from the tensor.
        c = qkv.shape[-1] // 3
        heads = c // self.head_dim
        q, k, v = qkv.split(c, dim=2)
        # (B, T, C) -> (B, H, T, C/H)
        q = q.view(b, t, heads, self.head_dim).transpose(1, 2)
        k = k.view(b, t, heads, self.head_dim).transpose(1, 2)
        v = v.view(b, t, heads, self.head_dim).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, d_model: int, n_layers: int, n_heads: int, seq_len: int) -> None:
        super().__init__()
        self.seq_len = seq_len
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.apply(self._init_weights)
        # GPT-2 style scaled init of the residual projections.
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layers))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        if t > self.seq_len:
            raise ValueError(f"sequence of {t} tokens is longer than the model's --seq-len {self.seq_len}")
        pos = torch.arange(t, device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        # LM head tied to the token embedding (one parameter, used twice).
        return F.linear(x, self.tok_emb.weight)


# ----------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------
def batch_seed(seed: int, rank: int, step: int) -> int:
    """A distinct, reproducible 63-bit seed per (seed, rank, step)."""
    h = 0x9E3779B97F4A7C15
    for v in (seed, rank, step):
        h = ((h ^ (v & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 31
    return h & 0x7FFFFFFFFFFFFFFF


def synthetic_batch(args: argparse.Namespace, rank: int, step: int) -> torch.Tensor:
    """(micro_batch, seq_len + 1) int64 tokens on the CPU, deterministic in (seed, rank, step).

    'pattern' (default): each row is an arithmetic progression modulo the vocabulary with a random
    start and a random stride in [1, 16], so the model has something to learn and the loss falls.
    'random': uniformly random tokens (loss stays near ln(vocab)).
    """
    g = torch.Generator(device="cpu")
    g.manual_seed(batch_seed(args.seed, rank, step))
    shape = (args.micro_batch, args.seq_len + 1)
    if args.data == "random":
        return torch.randint(0, args.vocab, shape, generator=g, dtype=torch.long)
    start = torch.randint(0, args.vocab, (args.micro_batch, 1), generator=g, dtype=torch.long)
    stride = torch.randint(1, 17, (args.micro_batch, 1), generator=g, dtype=torch.long)
    pos = torch.arange(args.seq_len + 1, dtype=torch.long).unsqueeze(0)
    return (start + stride * pos) % args.vocab


# ----------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Train a small GPT-style decoder on synthetic tokens with DDP or FSDP2 "
        "(launch with torchrun; reads RANK, WORLD_SIZE and LOCAL_RANK from the environment).",
        epilog="Example: torchrun --nproc-per-node 2 %(prog)s --parallel ddp --steps 20",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--parallel", choices=("ddp", "fsdp2", "none"), default="ddp",
                   help="data-parallel wrapper; 'none' runs one process without torch.distributed")
    p.add_argument("--steps", type=int, default=20, help="optimizer steps")
    add_model_arguments(p)
    p.add_argument("--bucket-mb", type=float, default=25.0,
                   help="DDP gradient bucket size in MiB (DistributedDataParallel bucket_cap_mb)")
    p.add_argument("--no-autocast", action="store_true", help="train in fp32 instead of bf16 autocast")
    p.add_argument("--log-all-ranks", action="store_true",
                   help="print step lines on every rank, prefixed '[rank r/N]' (default: rank 0 only)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cpu is for smoke tests only (use --backend gloo with it)")
    p.add_argument("--backend", default="nccl", help="torch.distributed backend")
    p.add_argument("--reduce-loss", action="store_true",
                   help="all-reduce the loss across ranks after each backward pass and log the mean, as training "
                        "loops do: a 4-byte all-reduce, a control-sized payload right after the gradients'")
    m = add_measurement_arguments(p, "write this rank's final parameters (CPU state_dict; FSDP2: local shards) to "
                                     "PATH, '{rank}' replaced by the rank")
    m.add_argument("--profile-nccl", metavar="PATH", default=None,
                   help="profile --profile-steps with torch.profiler and write the NCCL kernel time to PATH "
                        "(JSON, '{rank}' replaced by the rank); implies --mark-steps")
    m.add_argument("--profile-steps", metavar="START:STOP", default="5:15",
                   help="steps profiled by --profile-nccl, STOP excluded")
    args = p.parse_args(argv)
    check_arguments(p, args, ("save_params", "profile_nccl"))
    try:
        start, stop = (int(v) for v in args.profile_steps.split(":"))
    except ValueError:
        p.error(f"--profile-steps {args.profile_steps!r}: want START:STOP (integers)")
    if not 0 <= start < stop:
        p.error(f"--profile-steps {args.profile_steps!r}: want 0 <= START < STOP")
    args.profile_window = (start, stop)
    if args.profile_nccl:
        args.mark_steps = True
        if stop > args.steps:
            p.error(f"--profile-steps {args.profile_steps} needs --steps >= {stop} (got {args.steps})")
    return args


# ---- command-line pieces shared with the other launch scripts (examples/deepspeed/train_zero.py)

def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """Model size, data and optimizer (GPT-2 small: --d-model 768 --layers 12 --heads 12 --vocab 50304
    --seq-len 1024)."""
    p.add_argument("--vocab", type=int, default=8192, help="vocabulary size")
    p.add_argument("--d-model", type=int, default=512, help="model width")
    p.add_argument("--layers", type=int, default=6, help="transformer blocks")
    p.add_argument("--heads", type=int, default=8, help="attention heads")
    p.add_argument("--seq-len", type=int, default=256, help="tokens per sequence")
    p.add_argument("--micro-batch", type=int, default=8, help="sequences per rank per step")
    p.add_argument("--lr", type=float, default=3e-4, help="AdamW learning rate")
    p.add_argument("--weight-decay", type=float, default=0.1, help="AdamW weight decay")
    p.add_argument("--grad-clip", type=float, default=1.0, help="max gradient norm; 0 disables clipping")
    p.add_argument("--seed", type=int, default=1234, help="seed for the initial weights and the data")
    p.add_argument("--data", choices=("pattern", "random"), default="pattern", help="synthetic data kind")


def add_measurement_arguments(p: argparse.ArgumentParser, save_help: str):
    m = p.add_argument_group("measurement options (off by default; they do not change the output above)")
    m.add_argument("--deterministic", action="store_true",
                   help="deterministic algorithms (torch.use_deterministic_algorithms, cuDNN deterministic; sets "
                        "CUBLAS_WORKSPACE_CONFIG=:4096:8 if unset)")
    m.add_argument("--save-params", metavar="PATH", default=None, help=save_help)
    m.add_argument("--digest", action="store_true",
                   help="print 'RANKLENS_DIGEST params sha256:<hex>', a checksum of this rank's parameters, at the end")
    m.add_argument("--mark-steps", action="store_true",
                   help="call ranklensMarkStage(\"step\", i) at the start of each step when RankLens's library "
                        "is loaded")
    return m


def check_arguments(p: argparse.ArgumentParser, args, path_options=("save_params",)) -> None:
    for name in ("steps", "vocab", "d_model", "layers", "heads", "seq_len", "micro_batch"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.d_model % args.heads != 0:
        p.error(f"--d-model {args.d_model} must be divisible by --heads {args.heads}")
    for name in path_options:
        path = getattr(args, name)
        if path is not None:
            try:
                path.format(rank=0)
            except (KeyError, IndexError, ValueError) as e:
                p.error(f"--{name.replace('_', '-')} {path!r}: only '{{rank}}' may appear in braces ({e})")


def env_int(name: str) -> int:
    value = os.environ.get(name)
    if value is None:
        raise SystemExit(
            f"error: environment variable {name} is not set. Launch with torchrun "
            f"(torchrun --nproc-per-node 2 {sys.argv[0]} ...) or pass --parallel none for one process."
        )
    try:
        return int(value)
    except ValueError:
        raise SystemExit(f"error: environment variable {name}={value!r} is not an integer") from None


def find_mark_stage():
    """RankLens's `int ranklensMarkStage(const char* name, int64_t step)`, if its library is loaded (LD_PRELOAD puts
    it in the global scope; otherwise look in every mapped libnccl*). Returns (function or None, where found)."""
    candidates: list[str | None] = [None]
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                path = line.split(None, 5)[-1].strip() if len(line.split(None, 5)) == 6 else ""
                if "libnccl" in os.path.basename(path) and path not in candidates:
                    candidates.append(path)
    except OSError:
        pass
    for where in candidates:
        try:
            lib = ctypes.CDLL(where)
        except OSError:
            continue
        fn = getattr(lib, "ranklensMarkStage", None)
        if fn is not None:
            fn.argtypes = [ctypes.c_char_p, ctypes.c_int64]
            fn.restype = ctypes.c_int
            return fn, where or "global scope"
    return None, None


def local_state(model: nn.Module) -> dict:
    """This rank's parameters and buffers as CPU tensors (DTensors: the local shard)."""
    params = {}
    for name, value in model.state_dict().items():
        if hasattr(value, "to_local"):
            value = value.to_local()
        params[name] = value.detach().to("cpu", copy=True)
    return params


def save_params(model: nn.Module, path: str, meta: dict) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    torch.save({**meta, "params": local_state(model)}, path)


def params_digest(params: dict) -> str:
    """SHA-256 over every tensor's name, dtype, shape and bytes, in name order: equal digests, equal parameters."""
    import hashlib
    h = hashlib.sha256()
    for name in sorted(params):
        t = params[name].detach().to("cpu").contiguous()
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return "params sha256:" + h.hexdigest()[:32]


def print_digest(params: dict) -> str:
    """Prints the RANKLENS_DIGEST line and returns the digest (RESULT lines carry it with the rank)."""
    digest = params_digest(params)
    print("RANKLENS_DIGEST " + digest, flush=True)
    return digest


def merged_length(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end) intervals."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def is_communication_kernel(name: str) -> bool:
    """NCCL's kernels in a real run, RankLens's holds (ranklens_AllReduce, ...) in a replay."""
    return name.startswith("nccl") or name.startswith("ranklens_")


def nccl_kernel_summary(prof, scratch_path: str) -> dict:
    """Kernel totals from the profiler's Chrome trace (its format is stable across torch versions), and the split
    that tells a replay's step time from the real one's: compute kernels (busy time, union over streams),
    communication kernels (NCCL's, or the replay's holds), copies, and the time the GPU ran nothing."""
    prof.export_chrome_trace(scratch_path)
    try:
        with open(scratch_path, encoding="utf-8") as f:
            events = json.load(f).get("traceEvents", [])
    finally:
        try:
            os.remove(scratch_path)
        except OSError:
            pass
    total = count = all_total = all_count = 0.0
    by_name: dict[str, list[float]] = {}
    compute_by_name: dict[str, list[float]] = {}
    shapes: dict[str, list[float]] = {}  # launch shape of the communication kernels: grid x block, shared memory
    spans: dict[str, list[tuple[float, float]]] = {"compute": [], "communication": [], "copy": []}
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        dur = float(e.get("dur", 0.0))
        start = float(e.get("ts", 0.0))
        name = str(e.get("name", ""))
        if e.get("cat") != "kernel":
            spans["copy"].append((start, start + dur))
            continue
        all_total += dur
        all_count += 1
        if is_communication_kernel(name):
            spans["communication"].append((start, start + dur))
            if name.startswith("nccl"):
                total += dur
                count += 1
            args = e.get("args") or {}
            if "grid" in args:
                shape = shapes.setdefault(f"grid {args.get('grid')} block {args.get('block')} shared "
                                          f"{args.get('shared memory')} registers {args.get('registers per thread')}",
                                          [0, 0.0])
                shape[0] += 1
                shape[1] += dur
            entry = by_name.setdefault(name.split("(")[0], [0, 0.0])
        else:
            spans["compute"].append((start, start + dur))
            entry = compute_by_name.setdefault(name.split("(")[0][:80], [0, 0.0])
        entry[0] += 1
        entry[1] += dur
    every = [iv for v in spans.values() for iv in v]
    wall = (max(b for _, b in every) - min(a for a, _ in every)) if every else 0.0

    def top(table: dict[str, list[float]], n: int) -> dict:
        return {k: {"count": v[0], "total_us": round(v[1], 1)}
                for k, v in sorted(table.items(), key=lambda kv: -kv[1][1])[:n]}

    return {"nccl_kernel_total_us": total, "nccl_kernel_count": int(count), "all_kernel_total_us": all_total,
            "all_kernel_count": int(all_count),
            "nccl_kernels_by_name": top(by_name, 30),
            "gpu_split_us": {"wall": round(wall, 1),
                             "compute_busy": round(merged_length(spans["compute"]), 1),
                             "compute_sum": round(sum(b - a for a, b in spans["compute"]), 1),
                             "communication_busy": round(merged_length(spans["communication"]), 1),
                             "copy_busy": round(merged_length(spans["copy"]), 1),
                             "idle": round(wall - merged_length(every), 1)},
            "compute_kernels_by_name": top(compute_by_name, 15),
            "communication_kernel_shapes": top(shapes, 5)}


# ---- pieces shared with the other launch scripts (examples/deepspeed/train_zero.py)

def set_deterministic() -> None:
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before cuBLAS is first used
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def pick_device(kind: str, local_rank: int, cpu_hint: str) -> torch.device:
    """cuda:LOCAL_RANK with clear errors, or the CPU (smoke tests; `cpu_hint` says how)."""
    if kind != "cuda":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SystemExit(f"error: CUDA is not available; run on a GPU machine (or {cpu_hint} for a smoke test)")
    if local_rank >= torch.cuda.device_count():
        raise SystemExit(f"error: LOCAL_RANK={local_rank} but only {torch.cuda.device_count()} GPU(s) are "
                         "visible; launch fewer processes per node")
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def rank_logger(rank: int, world_size: int, all_ranks: bool):
    """(log, prefix): log prints on rank 0, or on every rank prefixed '[rank r/N]'."""
    prefix = f"[rank {rank}/{world_size}] " if all_ranks else ""

    def log(msg: str) -> None:
        if rank == 0 or all_ranks:
            print(prefix + msg, flush=True)

    return log, prefix


def step_marker(enabled: bool, prefix: str):
    """mark(step): ranklensMarkStage("step", step) when asked for and RankLens's library is loaded; mark.failures
    counts failed marks, mark.where says where the function was found."""
    mark_stage, where = find_mark_stage() if enabled else (None, None)
    if enabled and mark_stage is None:
        print(f"{prefix}warning: --mark-steps: ranklensMarkStage is not loaded (RankLens's library not in use); "
              "no step marks", file=sys.stderr, flush=True)

    def mark(step_index: int) -> None:
        if mark_stage is not None and mark_stage(b"step", step_index) != 0:
            mark.failures += 1

    mark.failures = 0
    mark.where = where
    return mark


def finish_step(step: int, loss, t0: float, device, losses: list, step_ms: list, log) -> float:
    """Ends a timed step (shared with examples/deepspeed): waits for its kernels, keeps and logs its loss and time."""
    loss_value = loss.item()  # waits for this step's kernels
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dt_ms = (time.perf_counter() - t0) * 1e3
    losses.append(loss_value)
    step_ms.append(dt_ms)
    log(f"step {step} loss {loss_value:.6f} time_ms {dt_ms:.3f}")
    return loss_value


def result_record(rank: int, world_size: int, parallel: str, losses: list[float], step_ms: list[float],
                  n_params: int, device: torch.device, steps_requested: int) -> dict:
    """The RESULT line's fields (the benchmarks parse them)."""
    timed = step_ms[WARMUP_STEPS:] if len(step_ms) > WARMUP_STEPS else step_ms
    return {
        "rank": rank,
        "world_size": world_size,
        "parallel": parallel,
        "steps": len(losses),
        "steps_requested": steps_requested,
        "final_loss": losses[-1] if losses and math.isfinite(losses[-1]) else None,
        "all_finite": all(math.isfinite(v) for v in losses),
        "median_step_ms": statistics.median(timed) if timed else None,
        "nonfinite_steps": [i for i, v in enumerate(losses) if not math.isfinite(v)],
        "losses": [v if math.isfinite(v) else None for v in losses],
        "step_ms": [round(v, 3) for v in step_ms],
        "params": n_params,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
    }


def exit_status(result: dict, prefix: str) -> int:
    """0 when every loss was finite; else 1, with the steps that were not."""
    if result["all_finite"]:
        return 0
    print(f"{prefix}error: non-finite loss at step(s) {result['nonfinite_steps']}", file=sys.stderr, flush=True)
    return 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.deterministic:
        set_deterministic()
    distributed = args.parallel != "none"

    if distributed:
        rank, world_size, local_rank = env_int("RANK"), env_int("WORLD_SIZE"), env_int("LOCAL_RANK")
    else:
        rank, world_size, local_rank = 0, 1, 0

    device = pick_device(args.device, local_rank, "--device cpu --backend gloo")

    if distributed:
        # No device_id: communicators are created lazily at the first collective.
        dist.init_process_group(args.backend)
        rank, world_size = dist.get_rank(), dist.get_world_size()

    log, prefix = rank_logger(rank, world_size, args.log_all_ranks)

    # Same initial weights on every rank (DDP would broadcast rank 0's anyway; FSDP2 shards them).
    torch.manual_seed(args.seed)
    model = GPT(args.vocab, args.d_model, args.layers, args.heads, args.seq_len).to(device)
    n_params = sum(p.numel() for p in model.parameters())

    if args.parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None, bucket_cap_mb=args.bucket_mb)
    elif args.parallel == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)

    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95),
                                  weight_decay=args.weight_decay)
    use_autocast = not args.no_autocast

    log(f"model {n_params / 1e6:.2f}M params, parallel={args.parallel}, world_size={world_size}, "
        f"device={device}, torch {torch.__version__}")

    mark = step_marker(args.mark_steps, prefix)

    prof = None
    prof_range: tuple[int, int] | None = None
    p_start, p_stop = args.profile_window

    losses: list[float] = []
    step_ms: list[float] = []
    for step in range(args.steps):
        if args.profile_nccl and step == p_start:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            activity = torch.profiler.ProfilerActivity.CUDA if device.type == "cuda" else \
                torch.profiler.ProfilerActivity.CPU
            prof = torch.profiler.profile(activities=[activity])
            prof.start()
        mark(step)
        t0 = time.perf_counter()
        tokens = synthetic_batch(args, rank, step).to(device, non_blocking=True)
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_autocast):
            logits = model(inputs)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1))
        loss.backward()
        if args.reduce_loss and dist.is_initialized():
            loss = loss.detach().clone()
            dist.all_reduce(loss)
            loss /= world_size
        if args.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        optimizer.step()
        finish_step(step, loss, t0, device, losses, step_ms, log)
        if prof is not None and prof_range is None and step == p_stop - 1:
            prof.stop()
            prof_range = (p_start, p_stop)
    mark(args.steps)

    result = result_record(rank, world_size, args.parallel, losses, step_ms, n_params, device, args.steps)
    if args.digest:
        result["digest"] = print_digest(local_state(model))
    print("RESULT " + json.dumps(result, allow_nan=False), flush=True)
    if args.save_params:
        path = args.save_params.format(rank=rank)
        save_params(model, path, {"rank": rank, "world_size": world_size, "parallel": args.parallel,
                                  "steps": len(losses), "deterministic": args.deterministic})
        print(f"{prefix}saved parameters to {path}", file=sys.stderr, flush=True)
    if args.profile_nccl:
        path = args.profile_nccl.format(rank=rank)
        report = {"rank": rank, "world_size": world_size, "parallel": args.parallel,
                  "profile_steps_requested": list(args.profile_window),
                  "profile_steps": list(prof_range) if prof_range else None,
                  "activity": "cuda" if device.type == "cuda" else "cpu",
                  "mark_stage": mark.where, "mark_failures": mark.failures,
                  "torch": torch.__version__}
        if prof is not None and prof_range is not None:
            report.update(nccl_kernel_summary(prof, path + ".chrome.tmp.json"))
            report["step_ms"] = [round(v, 3) for v in step_ms[p_start:p_stop]]
            report["profiled_wall_ms"] = round(sum(step_ms[p_start:p_stop]), 3)
        else:
            report["error"] = f"steps {p_start}..{p_stop - 1} were not all run"
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
        print(f"{prefix}wrote NCCL kernel profile to {path}", file=sys.stderr, flush=True)

    if distributed:
        dist.destroy_process_group()
    return exit_status(result, prefix)


if __name__ == "__main__":
    sys.exit(main())
