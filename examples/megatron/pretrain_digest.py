#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs Megatron-LM's pretrain_gpt.py unchanged and, when training ends, prints this rank's parameter checksum:

    RANKLENS_DIGEST params sha256:<hex>
    RESULT {"rank": <rank>, "digest": "params sha256:<hex>"}

Megatron saves a checkpoint from data-parallel rank 0 only, so a checkpoint cannot show that every rank of a
replay ended with the recorded run's parameters; the digest can (`ranklens replay --ranks` shows it per rank).
Nothing of the training changes: the wrapper wraps megatron.training.training.train, which pretrain() calls, and
hashes the model chunks' parameters after it returns.

    python3 pretrain_digest.py MEGATRON_DIR/pretrain_gpt.py [pretrain_gpt.py arguments...]
(examples/megatron/run_gpt.sh --digest runs it so, under torchrun or alone.)
"""

import os
import runpy
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch"))


def main() -> None:
    if len(sys.argv) < 2 or not sys.argv[1].endswith(".py"):
        raise SystemExit("usage: pretrain_digest.py MEGATRON_DIR/pretrain_gpt.py [arguments...]")
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    import megatron.training.training as training
    from train_gpt import print_digest

    train = training.train

    def train_then_digest(forward_step_func, model, *args, **kwargs):
        result = train(forward_step_func, model, *args, **kwargs)
        chunks = model if isinstance(model, (list, tuple)) else [model]
        params = {f"chunk{i}.{name}": p for i, chunk in enumerate(chunks) for name, p in chunk.named_parameters()}
        digest = print_digest(params)
        import json
        import torch.distributed as dist
        print("RESULT " + json.dumps({"rank": dist.get_rank() if dist.is_initialized() else 0, "digest": digest}),
              flush=True)
        return result

    training.train = train_then_digest
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
