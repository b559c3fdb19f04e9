#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The anomaly case: a NaN that a peer put into an all-reduce, reproduced on the rank that received it.

examples/torch/anomaly_577.py (DDP, 577 FP32 parameters, SGD) on 2 GPUs with the recorder (payloads: small, which
holds every 2.3 KB gradient all-reduce):
  real-nan    rank 1 sets the first element of its gradient bucket to NaN before the all-reduce of step --nan-step;
  real-clean  no NaN.
Then rank 0 alone on one GPU at value fidelity, running the same script and arguments (rank 0 never injects):
  replay-nan    from the real-nan recording          must equal real-nan's rank 0;
  replay-inject from the clean recording into which `rlpayload inject --nan 0` put the NaN at that step's
                all-reduce                             must equal real-nan's rank 0;
  replay-clean  from the clean recording               must equal real-clean's rank 0.
"Equal": the final gradients and parameters have NaN at the same positions and every other value bit-identical.

Example (2-GPU machine): RANKLENS_COMMIT=<sha> /opt/torch/.venv/bin/python bench/replay_anomaly_torch.py \\
    --lib .carry/lib/libnccl.so.2 --rlpayload .carry/bin/rlpayload --json $OUT/replay_anomaly_torch.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import record_bench_lib as lib  # noqa: E402
from replay_fidelity_torch import clean_env, results_of  # noqa: E402

REPO = lib.REPO
SCRIPT = "examples/torch/anomaly_577.py"

# argv: a b -> prints SAME {json}: per tensor group, NaN positions equal and the other values bit-identical.
SAME = r"""
import json, sys, torch
a, b = (torch.load(p, map_location="cpu") for p in sys.argv[1:3])
out = {"equal": True, "nan_a": 0, "nan_b": 0, "finite_equal": True, "nan_positions_equal": True, "detail": []}
for group in ("grads", "params"):
    for name in a[group]:
        x, y = a[group][name], b[group][name]
        nx, ny = torch.isnan(x), torch.isnan(y)
        out["nan_a"] += int(nx.sum()); out["nan_b"] += int(ny.sum())
        same_nan = torch.equal(nx, ny)
        same_rest = torch.equal(x[~nx], y[~ny]) if same_nan else False
        if not (same_nan and same_rest):
            out["equal"] = False
            out["detail"].append({"tensor": f"{group}.{name}", "nan_positions_equal": same_nan,
                                  "finite_equal": same_rest})
        out["nan_positions_equal"] &= same_nan
        out["finite_equal"] &= same_rest
print("SAME " + json.dumps(out))
"""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", required=True, help="RankLens libnccl.so.2")
    p.add_argument("--rlpayload", required=True, help="the rlpayload binary")
    p.add_argument("--ranklens", default=os.path.join(REPO, "build", "release", "tools", "ranklens"),
                   help="the ranklens launcher that replays a rank (default: %(default)s)")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--nan-step", type=int, default=4)
    p.add_argument("--json", default=os.path.join(REPO, "bench", "results", "replay", "replay_anomaly_torch.json"))
    p.add_argument("--work", default="/tmp/ranklens-replay-anomaly")
    p.add_argument("--timeout", type=float, default=180)
    a = p.parse_args(argv)
    a.lib, a.json, a.rlpayload = os.path.abspath(a.lib), os.path.abspath(a.json), os.path.abspath(a.rlpayload)
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    log = lib.CombinedLog(os.path.splitext(a.json)[0] + ".log")
    doc = {**lib.provenance(), "runs": [], "checks": []}
    train = ["--steps", str(a.steps)]

    def run(name, argv, env):
        env_set, unset = clean_env(env)
        log_path = os.path.join(a.work, name + ".log")
        res = lib.run_logged(argv, env_set, log_path, a.timeout, unset)
        doc["runs"].append({"name": name, "command": res["command_line"], "rc": res["rc"], "wall_s": res["wall_s"],
                            "results": results_of(log_path)})
        log.say(f"{name}: rc {res['rc']}, {res['wall_s']:.0f} s")
        log.append_file(name, log_path, max_lines=60)
        return res["rc"] == 0

    def record(name, extra):
        trace = os.path.join(a.work, name)
        ok = run(name, [a.python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", SCRIPT,
                        *train, *extra, "--save", os.path.join(a.work, name + "-{rank}.pt")],
                 {"LD_PRELOAD": a.lib, "RANKLENS_MODE": "record", "RANKLENS_TRACE_DIR": trace})
        return trace if ok else None

    def replay(name, trace, extra):
        return run(name, [a.ranklens, "replay", "--lib", a.lib, "--rank", "0", "--fidelity", "value", "--trace", trace,
                          "--no-events", "--quiet", "--", a.python, SCRIPT, *train, *extra, "--save",
                          os.path.join(a.work, name + "-{rank}.pt")], {"CUDA_VISIBLE_DEVICES": "0"})

    nan_args = ["--nan-rank", "1", "--nan-step", str(a.nan_step)]
    t_nan = record("real-nan", nan_args)
    t_clean = record("real-clean", [])
    t_inject = None
    if t_clean:
        # The gradient all-reduce of step --nan-step: the (nan_step+1)-th 577-element AllReduce of communicator 0.
        stats = lib.trace_stats(t_clean, keep_records=True)
        rank0 = next((r for r in stats["ranks"] if r.get("dir") == "rank0"), None)
        seqs = sorted(c["seq"] for c in (rank0 or {}).get("_calls", [])
                      if c["commId"] == 0 and c["op"] == 0 and c["count"] == 577)
        doc["gradient_allreduce_seqs"] = seqs
        if len(seqs) > a.nan_step:
            t_inject = os.path.join(a.work, "clean-injected")
            cmd = [a.rlpayload, "inject", t_clean, "-r", "0", "-c", "0", "-s", str(seqs[a.nan_step]), "-t",
                   "AllReduce", "--nan", "0", "-o", t_inject]
            r = subprocess.run(cmd, capture_output=True, text=True)
            doc["inject"] = {"command": " ".join(cmd), "rc": r.returncode, "output": (r.stdout + r.stderr)[-2000:]}
            log.say(f"inject: rc {r.returncode}: {(r.stdout + r.stderr).strip()[-300:]}")
            if r.returncode != 0:
                t_inject = None
    cases = [("replay-nan", t_nan, nan_args, "real-nan"), ("replay-inject", t_inject, nan_args, "real-nan"),
             ("replay-clean", t_clean, [], "real-clean")]
    for name, trace, extra, truth in cases:
        check = {"check": name, "against": truth + " rank 0", "pass": False}
        if trace and replay(name, trace, extra):
            r = subprocess.run([a.python, "-c", SAME, os.path.join(a.work, truth + "-0.pt"),
                                os.path.join(a.work, name + "-0.pt")], capture_output=True, text=True)
            line = next((x for x in r.stdout.splitlines() if x.startswith("SAME ")), None)
            same = json.loads(line[5:]) if line else {"error": r.stderr[-1500:]}
            check.update(same)
            # The NaN cases must actually carry NaNs, or they prove nothing.
            check["pass"] = bool(same.get("equal")) and (truth == "real-clean" or same.get("nan_a", 0) > 0)
        log.say(f"CHECK {name} vs {truth}: {'PASS' if check['pass'] else 'FAIL'} "
                f"{ {k: check.get(k) for k in ('nan_a', 'nan_b', 'nan_positions_equal', 'finite_equal')} }")
        doc["checks"].append(check)
        lib.write_json(a.json, doc)
    doc["all_pass"] = all(c["pass"] for c in doc["checks"])
    lib.write_json(a.json, doc)
    return 0 if doc["all_pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
