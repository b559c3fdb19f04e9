# SPDX-License-Identifier: Apache-2.0
"""The framework adapter, installed at interpreter start by tools/python/site/sitecustomize.py when the launcher set
RANKLENS_ADAPTER=1. It never imports torch itself: its work is attached to the moment the program imports a module.

* torch.distributed imported, RANKLENS_ADAPTER_STORE=1 (replay): an in-process TCPStore server on MASTER_ADDR:
  MASTER_PORT that does not wait for the absent peers (wait_for_workers=False). init_process_group, a store client
  because the launcher sets TORCHELASTIC_USE_AGENT_STORE=True, connects to it instead of waiting for rank 0.
* torch.distributed imported, in replay: a Gloo group would connect to every absent peer and wait forever. A group
  that asks for Gloo alone (init_process_group("gloo"), new_group(..., backend="gloo"), "cpu:gloo") is created on
  RankLens's stand-in backend "ranklens_gloo_standin" instead: it needs no peer and does not use the store, reports
  the group's size and this rank, and every collective, point-to-point call and barrier on it raises
  GlooInReplayError (the operation, the group, the fixes): Gloo traffic is neither recorded nor replayed, and no
  fake result is returned. A Gloo group of one rank is left to Gloo (it has no peer to wait for). The default
  backend (init_process_group without one: Gloo for CPU tensors, NCCL for CUDA) and a "device:backend" list that
  gives CPU tensors to Gloo keep only their non-Gloo part ("cuda:nccl"; a note says so; a CPU collective then fails
  with torch's "no backend for cpu" error): torch 2.11 cannot dispatch to a per-device backend written in Python.
  If the stand-in cannot be registered, a Gloo group fails at once with the reason instead.
* torch.optim imported: a global optimizer step hook marks every optimizer step in the trace
  (ranklensMarkStage("optimizer", n) in RankLens's library, when it is loaded), so traces and reports are per step.
* deepspeed.runtime.zero.utils imported, in structure replay (RANKLENS_FIDELITY=structure: no recorded payloads):
  ZeRO-3 checks that its parameter lists equal rank 0's by broadcasting rank 0's values (rank != 0 sends -1
  sentinels). Alone, nothing brings rank 0's values, so the check would stop every rank != 0. The broadcasts still
  run (the communication structure is kept); only the disagreement error is waived, with one note. At timing and
  value fidelity the recorded values arrive and the check is real.
* megatron.training.training imported, in structure replay: Megatron broadcasts its do_train/do_valid/do_test flags
  from rank 0, and only tensor-parallel rank 0 builds the data loaders. Alone, a rank != 0 receives its own zeros
  and skips training. The broadcast still runs; afterwards a flag still off is set to what rank 0 decides from the
  arguments (do_train: train_iters > 0 and not skip_train; do_valid/do_test: full_validation or eval_iters > 0).
  At timing and value fidelity the recorded flags arrive.
* RANKLENS_ADAPTER_MARKS=all: also the first forward and the first backward of each step ("forward" / "backward"
  with the number of optimizer steps so far), from a global module forward pre-hook and a wrapper of
  torch.autograd.backward. Off by default: a global module hook takes every module call off torch's fast path, a
  host cost that can show in launch-bound steps.

Everything here is best effort with a clear message: a failure never stops the user's program from starting.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.abc
import os
import sys

_state = {"store": None, "optimizer_steps": 0, "forward_marks": 0, "backward_marks": 0, "marks_failed": 0,
          "deepspeed_checks_waived": 0, "megatron_flags_set": 0, "gloo_standins": 0, "installed": False, "errors": []}
_marked_in_step = {"forward": -1, "backward": -1}  # the optimizer step whose phase was last marked


def state() -> dict:
    """What the adapter did (for tests and diagnostics)."""
    return dict(_state)


def _say(msg: str) -> None:
    print(f"[ranklens] {msg}", file=sys.stderr, flush=True)


def _count(counter: str, first_note: str) -> None:
    """Counts an adapter action in _state; says `first_note` the first time only."""
    _state[counter] += 1
    if _state[counter] == 1:
        _say(first_note)


_mark_fn = None


def _mark_stage(name: str, step: int) -> None:
    global _mark_fn
    if _mark_fn is None:
        try:
            fn = ctypes.CDLL(None).ranklensMarkStage  # RankLens's export, visible when it is preloaded
            fn.argtypes = [ctypes.c_char_p, ctypes.c_int64]
            fn.restype = ctypes.c_int
            _mark_fn = fn
        except (AttributeError, OSError):
            _mark_fn = False
    if _mark_fn and _mark_fn(name.encode(), step) != 0:
        _state["marks_failed"] += 1


def _start_store(dist) -> None:
    try:
        port = int(os.environ["MASTER_PORT"])
        world = int(os.environ["WORLD_SIZE"])
        host = os.environ.get("MASTER_ADDR", "127.0.0.1")
    except (KeyError, ValueError) as e:
        _state["errors"].append(f"store: MASTER_PORT/WORLD_SIZE missing or not integers ({e})")
        _say(f"warning: no store started: {_state['errors'][-1]}")
        return
    try:
        _state["store"] = dist.TCPStore(host, port, world_size=world, is_master=True, wait_for_workers=False)
    except Exception as e:  # DistNetworkError, RuntimeError: say what to do, let the program go on
        _state["errors"].append(f"store: {type(e).__name__}: {e}")
        _say(f"warning: cannot start the rank's store on {host}:{port} ({type(e).__name__}: {e}); "
             "init_process_group will wait for peers that do not exist. Is the port taken? ranklens replay picks "
             "a free one unless MASTER_PORT is set")


class GlooInReplayError(RuntimeError):
    pass


GLOO_STANDIN = "ranklens_gloo_standin"

# Every collective, point-to-point and barrier entry of a Python ProcessGroup, under the names torch 2.11 and 2.15
# call it by from Python (dist.all_reduce -> group.allreduce) and from C++ (the PyProcessGroup trampoline).
_GLOO_STANDIN_OPS = (
    "allreduce", "allreduce_coalesced", "reduce", "broadcast", "allgather", "_allgather_base", "all_gather_single",
    "allgather_coalesced", "allgather_into_tensor_coalesced", "all_gather_single_coalesced", "gather", "scatter",
    "reduce_scatter", "_reduce_scatter_base", "reduce_scatter_single", "reduce_scatter_tensor_coalesced",
    "reduce_scatter_single_coalesced", "alltoall", "alltoall_base", "all_to_all_single", "barrier",
    "monitored_barrier", "send", "recv", "recv_anysource", "recvAnysource", "_start_coalescing", "start_coalescing",
    "_end_coalescing", "end_coalescing")


def _gloo_standin_refusal(op: str, size: int, rank: int) -> GlooInReplayError:
    return GlooInReplayError(
        f"RankLens replay: {op} on a Gloo group of {size} ranks (this rank is {rank} in it) cannot run here: the "
        "other ranks are absent, and Gloo traffic is neither recorded nor replayed (only NCCL's is), so the group "
        "is a stand-in that knows its size and rank only. Fixes: Megatron-LM: --disable-gloo-process-groups; "
        "otherwise use NCCL and CUDA tensors for this group, or keep this code path (e.g. checkpointing) out of "
        "the replayed steps (docs/frameworks.md, 'Gloo groups in replay')")


def _register_gloo_standin(dist) -> bool:
    """Registers GLOO_STANDIN, a Python ProcessGroup (the one kind of Python backend torch 2.11 dispatches to)."""
    def refusing(op):
        def method(self, *args, **kwargs):  # noqa: ARG001 (any of torch's signatures)
            raise _gloo_standin_refusal(op, self.size(), self.rank())
        method.__name__ = op
        return method

    try:
        members = {op: refusing(op) for op in _GLOO_STANDIN_OPS}
        members["getBackendName"] = lambda self: GLOO_STANDIN

        # torch reads a group's name from its backends, and a Python group has none: keep it here (functional
        # collectives find the group by name).
        def _set_group_name(self, name):
            self._standin_group_name = name
            dist.ProcessGroup._set_group_name(self, name)

        members["_set_group_name"] = _set_group_name
        members["group_name"] = property(lambda self: self._standin_group_name)
        standin = type("GlooStandinProcessGroup", (dist.ProcessGroup,), members)

        def create(store, rank, size, timeout):  # noqa: ARG001 (the store is not used: nothing waits for peers)
            return standin(rank, size)

        # Gloo's devices, so that the group's CUDA tensors reach the refusal too; torch keeps "gloo" and "nccl" as
        # the defaults of these devices.
        dist.Backend.register_backend(GLOO_STANDIN, create, devices=["cpu", "cuda"])
    except Exception as e:  # an unknown torch: refuse Gloo groups at once rather than let them wait
        _state["errors"].append(f"gloo stand-in: {type(e).__name__}: {e}")
        _say(f"warning: cannot register the Gloo stand-in ({type(e).__name__}: {e}); a Gloo group fails at once")
        return False
    return True


def _without_gloo(backend: str):
    """The non-Gloo part of a "device:backend,..." list: "" when none, None when it is not such a list."""
    if ":" not in backend:
        return None
    pairs = [p.strip() for p in backend.split(",") if p.strip()]
    return ",".join(p for p in pairs if p.split(":", 1)[-1].strip().lower() != "gloo")


def _replay_backend(backend, group_size, standin_registered=True):
    """The backend a group gets in replay instead of the one asked for (see the top)."""
    if backend is None:  # init_process_group only: new_group without one takes the default group's
        _say("replay: init_process_group without a backend uses 'cuda:nccl' here (torch's default adds Gloo for "
             "CPU tensors, which would wait for the absent peers); CPU collectives are not available")
        return "cuda:nccl"
    if "gloo" not in str(backend).lower() or group_size == 1:  # one rank: Gloo has no peer to wait for
        return backend
    rest = _without_gloo(str(backend))
    if rest:
        _say(f"replay: backend {str(backend)!r} becomes {rest!r} here (Gloo would wait for the absent peers); CPU "
             "collectives on this group are not available")
        return rest
    if not standin_registered:
        raise GlooInReplayError(
            f"RankLens replay: backend {str(backend)!r} needs Gloo, which connects to every peer and would wait "
            "forever for the ranks that are not here, and RankLens's stand-in could not be registered (see the "
            "warning above). Use NCCL for this group (CUDA tensors), or --disable-gloo-process-groups for "
            "Megatron-LM (docs/frameworks.md)")
    _count("gloo_standins", "replay: Gloo groups are RankLens stand-ins: size and rank work, any collective on them "
           "raises GlooInReplayError (Gloo traffic is neither recorded nor replayed; docs/frameworks.md)")
    return GLOO_STANDIN


def _guard_gloo(dist) -> None:
    standin = _register_gloo_standin(dist)

    def new_group_size(ranks):
        if ranks is not None:
            return len(set(ranks))
        try:
            return dist.get_world_size()
        except Exception:  # no default group: torch's new_group says so
            return None

    def world_size(kwargs):
        size = kwargs.get("world_size", -1)
        try:
            return int(size if size != -1 else os.environ["WORLD_SIZE"])
        except (KeyError, TypeError, ValueError):
            return None

    c10d = dist.distributed_c10d
    original_init, original_new_group = c10d.init_process_group, c10d.new_group

    @functools.wraps(original_init)  # keeps the signature that frameworks inspect
    def init_process_group(backend=None, *args, **kwargs):
        return original_init(_replay_backend(backend, world_size(kwargs), standin), *args, **kwargs)

    @functools.wraps(original_new_group)
    def new_group(ranks=None, timeout=None, backend=None, *args, **kwargs):
        if backend is not None:
            ranks = None if ranks is None else list(ranks)  # counted here, read again by torch
            backend = _replay_backend(backend, new_group_size(ranks), standin)
        return original_new_group(ranks, timeout, backend, *args, **kwargs)

    # torch.distributed's names for Megatron, DeepSpeed and scripts; distributed_c10d's for new_subgroups and others.
    for module in (dist, c10d):
        module.init_process_group, module.new_group = init_process_group, new_group


def _after_distributed(module) -> None:
    if os.environ.get("RANKLENS_ADAPTER_STORE") == "1" and getattr(module, "is_available", lambda: False)():
        _start_store(module)
        _guard_gloo(module)


def _after_deepspeed_zero_utils(module) -> None:
    """Structure replay only: waive ZeRO-3's "same as rank 0" checks, keeping their broadcasts (see the top)."""
    def tolerant(original):
        @functools.wraps(original)
        def check(*args, **kwargs):
            try:
                return original(*args, **kwargs)
            except RuntimeError as e:
                if "Detected a disagreement" not in str(e):
                    raise
                _count("deepspeed_checks_waived",
                       "structure replay: DeepSpeed's check against rank 0's values is waived (rank 0's values are "
                       "not recorded in a structure replay; its broadcasts still run). Replay a recording at timing "
                       "or value fidelity for the real check (docs/frameworks.md)")
        return check

    # assert_ints_same_as_other_ranks calls assert_lst_len_same_as_other_ranks through the module: both are wrapped
    # before the ZeRO modules import them by name.
    for name in ("assert_lst_len_same_as_other_ranks", "assert_ints_same_as_other_ranks"):
        if callable(getattr(module, name, None)):
            setattr(module, name, tolerant(getattr(module, name)))


def _after_megatron_training(module) -> None:
    """Structure replay only: the data flags rank 0 would broadcast (see the top)."""
    original = getattr(module, "build_train_valid_test_data_iterators", None)
    get_args = getattr(module, "get_args", None)
    if not callable(original) or not callable(get_args):
        _say("warning: megatron.training.training has no build_train_valid_test_data_iterators/get_args: a rank "
             "that is not tensor-parallel rank 0 may skip training in this structure replay")
        return

    @functools.wraps(original)
    def build_train_valid_test_data_iterators(*args, **kwargs):
        result = original(*args, **kwargs)  # Megatron's own broadcast of rank 0's flags runs here
        a = get_args()
        wanted = {"do_train": bool((getattr(a, "train_iters", 0) or 0) > 0 and not getattr(a, "skip_train", False)),
                  "do_valid": bool(getattr(a, "full_validation", False) or (getattr(a, "eval_iters", 0) or 0) > 0)}
        wanted["do_test"] = wanted["do_valid"]
        changed = [name for name, value in wanted.items() if value and not getattr(a, name, False)]
        for name in changed:
            setattr(a, name, True)
        if changed:
            _state["megatron_flags_set"] += 1
            _say(f"structure replay: Megatron's {', '.join(changed)} set as rank 0 would broadcast them (its "
                 "flags are not recorded in a structure replay; docs/frameworks.md)")
        return result

    module.build_train_valid_test_data_iterators = build_train_valid_test_data_iterators


def _mark_phase_once(phase: str) -> None:
    step = _state["optimizer_steps"]
    if _marked_in_step[phase] != step:
        _marked_in_step[phase] = step
        _state[phase + "_marks"] += 1
        _mark_stage(phase, step)


def _after_module(module) -> None:  # torch.nn.modules.module
    def pre_hook(mod, args):  # noqa: ARG001 (torch's hook signature)
        _mark_phase_once("forward")

    module.register_module_forward_pre_hook(pre_hook)


def _after_autograd(module) -> None:  # torch.autograd
    original = module.backward

    def backward(*args, **kwargs):
        _mark_phase_once("backward")
        return original(*args, **kwargs)

    backward.__wrapped__ = original
    backward.__doc__ = original.__doc__
    module.backward = backward


def _after_optimizer(module) -> None:
    register = getattr(module, "register_optimizer_step_post_hook", None)
    if register is None:
        return

    def hook(optimizer, args, kwargs):  # noqa: ARG001 (torch's hook signature)
        _state["optimizer_steps"] += 1
        _mark_stage("optimizer", _state["optimizer_steps"])

    register(hook)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a callback right after a given module has been executed (loaded by the finders that follow)."""

    def __init__(self, hooks):
        self.hooks = dict(hooks)

    def find_spec(self, fullname, path, target=None):
        callback = self.hooks.get(fullname)
        if callback is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module):
            original(module)
            if self.hooks.pop(fullname, None) is not None:
                try:
                    callback(module)
                except Exception as e:  # never break the user's import
                    _state["errors"].append(f"{fullname}: {type(e).__name__}: {e}")
                    _say(f"warning: adapter hook for {fullname} failed: {type(e).__name__}: {e}")

        loader.exec_module = exec_module
        return spec


def install() -> None:
    if _state["installed"]:
        return
    _state["installed"] = True
    hooks = {"torch.distributed": _after_distributed, "torch.optim.optimizer": _after_optimizer}
    if os.environ.get("RANKLENS_MODE") == "replay" and os.environ.get("RANKLENS_FIDELITY", "structure") == "structure":
        hooks["deepspeed.runtime.zero.utils"] = _after_deepspeed_zero_utils
        hooks["megatron.training.training"] = _after_megatron_training
    if os.environ.get("RANKLENS_ADAPTER_MARKS") == "all":
        hooks.update({"torch.nn.modules.module": _after_module, "torch.autograd": _after_autograd})
    for name, callback in list(hooks.items()):
        if name in sys.modules:  # imported before us (unusual): act now
            callback(sys.modules[name])
            del hooks[name]
    sys.meta_path.insert(0, _AfterImport(hooks))
