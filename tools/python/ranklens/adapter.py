# SPDX-License-Identifier: Apache-2.0
"""The framework adapter, installed at interpreter start by tools/python/site/sitecustomize.py when the launcher set
RANKLENS_ADAPTER=1. It never imports torch itself: its work is attached to the moment the program imports a module.

* torch.distributed imported, RANKLENS_ADAPTER_STORE=1 (replay): an in-process TCPStore server on MASTER_ADDR:
  MASTER_PORT that does not wait for the absent peers (wait_for_workers=False). init_process_group, a store client
  because the launcher sets TORCHELASTIC_USE_AGENT_STORE=True, connects to it instead of waiting for rank 0.
* torch.distributed imported, in replay: a Gloo group would connect to every absent peer and wait forever. The
  default backend (init_process_group without one: Gloo for CPU tensors, NCCL for CUDA) becomes "cuda:nccl" (a
  note says so; a CPU collective then fails with torch's "no backend for cpu" error); an explicit Gloo backend
  fails at once with an error that says why and what to do. Replacing Gloo by a backend that needs no peers is
  not supported yet (torch's "fake" backend changes between versions).
* torch.optim imported: a global optimizer step hook marks every optimizer step in the trace
  (ranklensMarkStage("optimizer", n) in RankLens's library, when it is loaded), so traces and reports are per step.
* deepspeed.runtime.zero.utils imported, in structure replay (RANKLENS_FIDELITY=structure: no recorded payloads):
  ZeRO-3 checks that its parameter lists equal rank 0's by broadcasting rank 0's values (rank != 0 sends -1
  sentinels). Alone, nothing brings rank 0's values, so the check would stop every rank != 0. The broadcasts still
  run (the communication structure is kept); only the disagreement error is waived, with one note. At timing and
  value fidelity the recorded values arrive and the check is real.
* RANKLENS_ADAPTER_MARKS=all: also the first forward and the first backward of each step ("forward" / "backward"
  with the number of optimizer steps so far), from a global module forward pre-hook and a wrapper of
  torch.autograd.backward. Off by default: a global module hook takes every module call off torch's fast path, a
  host cost that can show in launch-bound steps.

Everything here is best effort with a clear message: a failure never stops the user's program from starting.
"""

from __future__ import annotations

import ctypes
import importlib.abc
import os
import sys

_state = {"store": None, "optimizer_steps": 0, "forward_marks": 0, "backward_marks": 0, "marks_failed": 0,
          "deepspeed_checks_waived": 0, "installed": False, "errors": []}
_marked_in_step = {"forward": -1, "backward": -1}  # the optimizer step whose phase was last marked


def state() -> dict:
    """What the adapter did (for tests and diagnostics)."""
    return dict(_state)


def _say(msg: str) -> None:
    print(f"[ranklens] {msg}", file=sys.stderr, flush=True)


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


def _guard_gloo(dist) -> None:
    def check(backend):
        if backend is None:
            _say("replay: init_process_group without a backend uses 'cuda:nccl' here (torch's default adds Gloo "
                 "for CPU tensors, which would wait for the absent peers); CPU collectives are not available")
            return "cuda:nccl"
        if "gloo" in str(backend):
            raise GlooInReplayError(
                f"RankLens replay: backend {backend!r} needs Gloo, which connects to every peer and would wait "
                "forever for the ranks that are not here. Use NCCL for this group (CUDA tensors), or run the "
                "script with RankLens only where it uses NCCL; replaying Gloo groups is not supported yet "
                "(docs/frameworks.md)")
        return backend

    original_init, original_new_group = dist.init_process_group, dist.new_group

    def init_process_group(backend=None, *args, **kwargs):
        return original_init(check(backend), *args, **kwargs)

    def new_group(ranks=None, timeout=None, backend=None, *args, **kwargs):
        return original_new_group(ranks, timeout, check(backend) if backend is not None else None, *args, **kwargs)

    dist.init_process_group, dist.new_group = init_process_group, new_group


def _after_distributed(module) -> None:
    if os.environ.get("RANKLENS_ADAPTER_STORE") == "1" and getattr(module, "is_available", lambda: False)():
        _start_store(module)
        _guard_gloo(module)


def _after_deepspeed_zero_utils(module) -> None:
    """Structure replay only: waive ZeRO-3's "same as rank 0" checks, keeping their broadcasts (see the top)."""
    def tolerant(original):
        def check(*args, **kwargs):
            try:
                return original(*args, **kwargs)
            except RuntimeError as e:
                if "Detected a disagreement" not in str(e):
                    raise
                _state["deepspeed_checks_waived"] += 1
                if _state["deepspeed_checks_waived"] == 1:
                    _say("structure replay: DeepSpeed's check against rank 0's values is waived (rank 0's values "
                         "are not recorded in a structure replay; its broadcasts still run). Replay a recording at "
                         "timing or value fidelity for the real check (docs/frameworks.md)")
        check.__wrapped__ = original
        check.__doc__ = original.__doc__
        return check

    # assert_ints_same_as_other_ranks calls assert_lst_len_same_as_other_ranks through the module: both are wrapped
    # before the ZeRO modules import them by name.
    for name in ("assert_lst_len_same_as_other_ranks", "assert_ints_same_as_other_ranks"):
        if callable(getattr(module, name, None)):
            setattr(module, name, tolerant(getattr(module, name)))


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
    if os.environ.get("RANKLENS_ADAPTER_MARKS") == "all":
        hooks.update({"torch.nn.modules.module": _after_module, "torch.autograd": _after_autograd})
    for name, callback in list(hooks.items()):
        if name in sys.modules:  # imported before us (unusual): act now
            callback(sys.modules[name])
            del hooks[name]
    sys.meta_path.insert(0, _AfterImport(hooks))
