#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Run ONE rank of an N-rank torch.distributed job alone on one GPU (structure replay).

Interim launch wrapper: the `ranklens` launcher will replace it. It prepares the minimal
"survivor" environment of the RankLens design notes (torch-survivor.md) and then runs the
training script, unmodified, in a child that hosts its own non-waiting TCPStore:

  * LD_PRELOAD=<--lib> (prepended to any existing LD_PRELOAD), so libtorch_cuda binds to the
    RankLens libnccl.so.2 instead of the wheel's copy (LD_LIBRARY_PATH cannot do this for pip
    torch: libtorch_cuda finds NCCL through DT_RPATH and torch preloads it by absolute path);
  * LOCAL_RANK=0, LOCAL_WORLD_SIZE=1 (one GPU), RANK=<r>, WORLD_SIZE=<N>;
  * MASTER_ADDR=127.0.0.1, MASTER_PORT=<a free port>, TORCHELASTIC_USE_AGENT_STORE=True,
    TORCHELASTIC_RESTART_COUNT=0: init_process_group becomes a store client of the in-process
    TCPStore(is_master=True, wait_for_workers=False) that scripts/_survivor_boot.py starts, so
    nobody waits for the N-1 absent peers;
  * TORCH_NCCL_BCAST_UNIQUEID=0 (no ncclUniqueId exchange through the store), and
    TORCH_NCCL_RANKS_PER_ROOT=N when N > 128 (no scalable-init multi_get);
  * RANKLENS_MODE=replay, RANKLENS_FIDELITY=<--fidelity> (structure), RANKLENS_REPLAY_TRACE=<--trace>,
    RANKLENS_FILL=<--fill> if given.

Then it execs `python3 scripts/_survivor_boot.py script.py args...` (same interpreter).
"""

from __future__ import annotations

import argparse
import os
import shlex
import socket
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BOOT = os.path.join(HERE, "_survivor_boot.py")
FILLS = ("clone", "keep", "zero", "poison")

# Settings that make a lone rank wait for peers that never come; they are overridden, loudly.
_HANGING_SETTINGS = {
    # name: (predicate on the current value, value to set, why)
    "TORCH_DIST_INIT_BARRIER": (lambda v: v not in ("", "0"), "0",
                                "the store-based barrier after init waits for all N ranks"),
    "TORCH_DISTRIBUTED_DEBUG": (lambda v: v.upper() == "DETAIL", "INFO",
                                "DETAIL wraps every process group in a Gloo helper that connects to all peers"),
    "TORCH_NCCL_DESYNC_DEBUG": (lambda v: v not in ("", "0"), "0",
                                "desync debugging reads every peer's trace keys from the store"),
}

EPILOG = """\
examples:
  python3 scripts/survivor.py --lib build/nccl_fake/libnccl.so.2 --rank 1 --world-size 2 \\
      -- examples/torch/train_gpt.py --parallel ddp
  python3 scripts/survivor.py --lib build/nccl_fake/libnccl.so.2 --rank 37 --world-size 64 \\
      --fill zero --check-preload -- examples/torch/train_gpt.py --parallel fsdp2 --log-all-ranks
  python3 scripts/survivor.py --lib build/nccl_fake/libnccl.so.2 --check-preload   # check only

Everything after '--' is the script and its own arguments, exactly as you would give them to
torchrun. The exit status is the script's.

What to expect (structure fidelity, no recording): communicators are virtual (rank r of N) and
every collective behaves as if all peers were clones of this rank (--fill clone, the library
default). Control flow that symmetric protocols steer (DDP's parameter check, all_gather_object)
therefore works; rank-0-authoritative data (broadcast_object_list on a non-source rank) does not.
Gloo process groups, TORCH_DISTRIBUTED_DEBUG=DETAIL and monitored_barrier still need all peers.

This is an interim tool; the `ranklens` launcher will take its place.
"""


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(
        prog="survivor.py",
        usage="%(prog)s --lib PATH --rank R --world-size N [--fill {clone,keep,zero,poison}] "
              "[--check-preload] -- script.py [args ...]",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--lib", required=True, metavar="PATH",
                   help="the RankLens libnccl.so.2 to preload (e.g. build/nccl_fake/libnccl.so.2)")
    p.add_argument("--rank", type=int, default=None, metavar="R", help="global rank to run, 0 <= R < N")
    p.add_argument("--world-size", type=int, default=None, metavar="N", help="world size of the original job")
    p.add_argument("--fill", choices=FILLS, default=None,
                   help="what collectives write into receive buffers without a recorded payload "
                        "(sets RANKLENS_FILL; default: the library's, clone)")
    p.add_argument("--trace", default=None, metavar="DIR",
                   help="replay this recorded trace (a rank directory or the trace root; sets RANKLENS_REPLAY_TRACE)")
    p.add_argument("--fidelity", choices=("structure", "timing", "value"), default="structure",
                   help="structure (default), timing (hold recorded durations; needs --trace) or value "
                        "(also restore recorded payloads)")
    p.add_argument("--port", type=int, default=0,
                   help="MASTER_PORT for the in-process store (default: pick a free one)")
    p.add_argument("--check-preload", action="store_true",
                   help="after `import torch`, verify that the mapped libnccl.so.2 is --lib and that NCCL "
                        "symbols resolve to it; print the mapped libnccl files and versions; fail if not. "
                        "Without a script: only check, then exit")
    p.add_argument("--dry-run", action="store_true", help="print the environment changes and the command, do not run")
    p.add_argument("--quiet", action="store_true", help="do not print the launch banner to stderr")

    if "--" in argv:
        cut = argv.index("--")
        own, child = argv[:cut], argv[cut + 1:]
        args = p.parse_args(own)
    else:
        args, extra = p.parse_known_args(argv)
        if extra:
            p.error(f"unrecognized arguments: {shlex.join(extra)}; put the script and its arguments after '--', "
                    f"e.g. `... --world-size N -- {extra[0]} ...`")
        child = []

    if not child and not args.check_preload:
        p.error("no script given: put the script and its arguments after '--', "
                "e.g. `-- examples/torch/train_gpt.py --parallel ddp`")
    if child:
        if args.rank is None or args.world_size is None:
            p.error("--rank and --world-size are required to run a script")
    else:
        # check-only: a 1-rank world is enough to import torch.
        args.rank = 0 if args.rank is None else args.rank
        args.world_size = 1 if args.world_size is None else args.world_size
    if args.world_size < 1:
        p.error(f"--world-size must be at least 1, got {args.world_size}")
    if not 0 <= args.rank < args.world_size:
        p.error(f"--rank {args.rank} is outside [0, {args.world_size}): ranks of a {args.world_size}-rank job "
                f"are numbered 0..{args.world_size - 1}")
    if not 0 <= args.port < 65536:
        p.error(f"--port must be in [0, 65535], got {args.port}")
    if args.fidelity != "structure" and not args.trace:
        p.error(f"--fidelity {args.fidelity} replays a recording: give --trace DIR")
    return args, child


def check_lib(path: str) -> str:
    """Absolute path of --lib, or exit with a message saying what is wrong."""
    lib = os.path.abspath(path)
    if not os.path.isfile(lib):
        hint = " (build it first: cmake --build build)" if lib.endswith("libnccl.so.2") else ""
        sys.exit(f"survivor.py: error: --lib {path}: no such file{hint}")
    try:
        with open(lib, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        sys.exit(f"survivor.py: error: --lib {path}: cannot read it: {e.strerror}")
    if magic != b"\x7fELF":
        sys.exit(f"survivor.py: error: --lib {path}: not an ELF shared library; point --lib at the built libnccl.so.2")
    if " " in lib or ":" in lib:
        sys.exit(f"survivor.py: error: --lib {lib}: LD_PRELOAD cannot carry a path with a space or ':'; "
                 "copy or link the library to a plain path")
    return lib


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_env(base: dict[str, str], lib: str, rank: int, world_size: int, port: int,
              fill: str | None, check_preload: bool) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """Returns (child env, the variables set, warnings)."""
    env = dict(base)
    warnings: list[str] = []
    changes: dict[str, str] = {
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "TORCH_NCCL_BCAST_UNIQUEID": "0",
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCHELASTIC_RESTART_COUNT": "0",
        "RANKLENS_MODE": "replay",
        "RANKLENS_FIDELITY": "structure",
        # For scripts/_survivor_boot.py only; outside RANKLENS_* so the library does not flag them as typos.
        "SURVIVOR_BOOT_LIB": lib,
        "SURVIVOR_BOOT_CHECK_PRELOAD": "1" if check_preload else "0",
    }
    if world_size > 128:
        changes["TORCH_NCCL_RANKS_PER_ROOT"] = str(world_size)
    if fill is not None:
        changes["RANKLENS_FILL"] = fill
    elif "RANKLENS_FILL" in env:
        warnings.append(f"RANKLENS_FILL={env['RANKLENS_FILL']} is inherited from the environment (no --fill given)")
    old_preload = env.get("LD_PRELOAD", "").strip()
    kept = [p for p in old_preload.replace(":", " ").split() if os.path.realpath(p) != os.path.realpath(lib)]
    changes["LD_PRELOAD"] = ":".join([lib, *kept])
    for name, (bad, value, why) in _HANGING_SETTINGS.items():
        cur = env.get(name)
        if cur is not None and bad(cur):
            warnings.append(f"{name}={cur} overridden to {value}: {why}")
            changes[name] = value
    env.update(changes)
    return env, changes, warnings


def main(argv: list[str] | None = None) -> int:
    args, child = parse_args(sys.argv[1:] if argv is None else argv)
    lib = check_lib(args.lib)
    if child:
        script = child[0]
        if script == "-m":
            if len(child) < 2:
                sys.exit("survivor.py: error: '-m' needs a module name after it")
        elif not os.path.isfile(script):
            sys.exit(f"survivor.py: error: script {script}: no such file (give the path of the training script "
                     "after '--')")
    if not os.path.isfile(BOOT):
        sys.exit(f"survivor.py: error: {BOOT} is missing; it must sit next to survivor.py")
    port = args.port or free_port()
    env, changes, warnings = build_env(dict(os.environ), lib, args.rank, args.world_size, port, args.fill,
                                       args.check_preload)
    changes["RANKLENS_FIDELITY"] = env["RANKLENS_FIDELITY"] = args.fidelity
    if args.trace:
        changes["RANKLENS_REPLAY_TRACE"] = env["RANKLENS_REPLAY_TRACE"] = os.path.abspath(args.trace)
    cmd = [sys.executable, BOOT, *child]

    for w in warnings:
        print(f"[survivor] warning: {w}", file=sys.stderr, flush=True)
    if args.dry_run:
        for k in sorted(changes):
            print(f"{k}={shlex.quote(changes[k])}")
        print(shlex.join(cmd))
        return 0
    if not args.quiet:
        what = shlex.join(child) if child else "(preload check only)"
        print(f"[survivor] rank {args.rank} of {args.world_size} on one GPU, lib {lib}, store 127.0.0.1:{port}, "
              f"fill {changes.get('RANKLENS_FILL', 'library default')}: {what}", file=sys.stderr, flush=True)
    try:
        os.execve(sys.executable, cmd, env)
    except OSError as e:
        sys.exit(f"survivor.py: error: cannot exec {sys.executable}: {e.strerror}")
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
