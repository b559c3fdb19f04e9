#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the synthetic Flight Recorder dumps the CPU tests read (tests/data/flight_recorder/synthetic/).

They are plain Python dicts with the keys and value types torch 2.11's Flight Recorder writes (version "2.10"),
pickled by Python's pickle module (protocol 2, as torch's C++ pickler writes, and protocol 4), plus the JSON
variant, a dump in the exact shape torch's C++ pickler gives typed lists (GLOBAL torch.jit._pickle build_intlist +
REDUCE), and damaged and hostile files built byte by byte (nothing here is ever unpickled by the tests).

    python3 tests/data/flight_recorder/make_synthetic.py        # rewrites synthetic/ in place
"""

from __future__ import annotations

import json
import os
import pickle
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "synthetic")
T0 = 1_764_000_000_000_000_000  # time_created_ns of the first entry (realtime ns)


def frames(*names):
    """A Python stack as torch records it, innermost first."""
    out = [{"name": "all_reduce", "filename": "/usr/lib/python3/torch/distributed/distributed_c10d.py", "line": 2950},
           {"name": "wrapper", "filename": "/usr/lib/python3/torch/distributed/c10d_logger.py", "line": 81}]
    for k, n in enumerate(names):
        out.append({"name": n, "filename": "/work/train.py", "line": 40 + k})
    return out


class Entries:
    def __init__(self):
        self.entries = []
        self.record_id = 0
        self.coll = {}  # pg -> collective_seq_id
        self.p2p = {}   # pg -> p2p_seq_id
        self.op_id = {}

    def add(self, pg, desc, name, ins, outs, dtype="Float", state="completed", duration=0.25, p2p=False,
            stack=("train_step", "main"), coalesced_with_previous=False, same_p2p_seq=False):
        if p2p:
            if not same_p2p_seq:
                self.p2p[pg] = self.p2p.get(pg, 0) + 1
        elif not coalesced_with_previous:
            self.coll[pg] = self.coll.get(pg, 0) + 1
        self.op_id[pg] = self.op_id.get(pg, 0) + 1
        e = {
            "record_id": self.record_id,
            "pg_id": int(pg),
            "process_group": (pg, desc),
            "thread_name": "pt_main_thread",
            "thread_id": "140000000000000",
            "collective_seq_id": self.coll.get(pg, 0),
            "p2p_seq_id": self.p2p.get(pg, 0),
            "op_id": self.op_id[pg],
            "profiling_name": name,
            "time_created_ns": T0 + 1_000_000 * self.record_id,
            "input_sizes": ins,
            "input_dtypes": [dtype] * len(ins),
            "output_sizes": outs,
            "output_dtypes": [dtype] * len(outs),
            "state": state,
            "time_discovered_started_ns": None if state == "scheduled" else T0 + 1_000_000 * self.record_id + 5000,
            "time_discovered_completed_ns": T0 + 1_000_000 * self.record_id + 300_000 if state == "completed" else None,
            "retired": state == "completed",
            "timeout_ms": 20000,
            "is_p2p": p2p,
            "frames": frames(*stack),
        }
        if state == "completed" and duration is not None:
            e["duration_ms"] = duration
        self.entries.append(e)
        self.record_id += 1


def dump(world, rank, entries, pg_status):
    ranks = "[" + ", ".join(str(r) for r in range(world)) + "]"
    return {
        "version": "2.10",
        "comm_lib_version": "2.27.3",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": ranks},
                      "1": {"name": "1", "desc": "tp", "ranks": ranks}},
        "pg_status": pg_status,
        "entries": entries,
    }


def every_kind(rank, world, skip_last_all_reduce=False, desync=None):
    """A step of every entry kind on two process groups; the last world all-reduce is left started (hang)."""
    peer = (rank + 1) % world
    src = (rank - 1) % world
    e = Entries()
    e.add("0", "default_pg", "nccl:broadcast", [[1024]], [[1024]], stack=("init_weights", "main"))
    e.add("0", "default_pg", "nccl:all_reduce", [[1024]], [[1024]])
    e.add("1", "tp", "nccl:_all_gather_base", [[256]], [[256 * world]], duration=0.5)
    e.add("0", "default_pg", "nccl:reduce_scatter_tensor_coalesced", [[512], [512]], [[512 // world], [512 // world]])
    e.add("0", "default_pg", "nccl:all_to_all", [[64 * world]], [[64 * world]], dtype="BFloat16")
    e.add("0", "default_pg", "nccl:reduce", [[128]], [[128]], dtype="Double")
    e.add("0", "default_pg", "nccl:gather", [[32]], [[32]] * world, dtype="Long")
    e.add("0", "default_pg", "nccl:scatter", [[32]] * world, [[32]], dtype="Int")
    e.add("0", "default_pg", "nccl:send %d->%d" % (rank, peer), [[256]], [[256]], p2p=True, duration=None)
    e.add("0", "default_pg", "nccl:recv %d<-%d" % (rank, src), [[256]], [[256]], p2p=True, duration=None)
    e.add("0", "default_pg", "nccl:coalesced", [], [], p2p=True, duration=None)
    e.add("0", "default_pg", "nccl:all_reduce_barrier", [[1]], [[1]], dtype="Float")
    for step in range(3):
        size = [[2048]] if desync == "size" and step == 1 else [[1024]]
        dtype = "BFloat16" if desync == "dtype" and step == 1 else "Float"
        name = "nccl:broadcast" if desync == "op" and step == 1 else "nccl:all_reduce"
        last = step == 2
        if skip_last_all_reduce and last:
            break
        state = "started" if last else "completed"
        e.add("0", "default_pg", name, size, size, dtype=dtype, state=state,
              stack=("optimizer_step", "train_step", "main"))
    # A tp all-gather enqueued after the hung all-reduce never started.
    e.add("1", "tp", "nccl:_all_gather_base", [[256]], [[256 * world]], state="scheduled",
          stack=("gather_params", "main"))
    status = {"0": {"last_enqueued_collective": e.coll["0"], "last_started_collective": e.coll["0"],
                    "last_completed_collective": e.coll["0"] - 1},
              "1": {"last_enqueued_collective": e.coll["1"], "last_started_collective": e.coll["1"] - 1,
                    "last_completed_collective": e.coll["1"] - 1}}
    return e.entries, status


def interleaved(rank, world, culprit, at_step=3, steps=6):
    """examples/torch/fr_hang.py --mode hang as it really hangs: each step an all-reduce on the world group and an
    all-gather on "tp"; the culprit skips the all-reduce of step at_step. Its next all-reduce carries the sequence
    number the others' skipped one has, so the world group alone sees every rank call it; the ranks deadlock there
    (the others in that all-reduce, the culprit in the tp all-gather behind it on their stream)."""
    e = Entries()
    state = "completed"
    e.add("0", "default_pg", "nccl:broadcast", [[1024]], [[1024]], stack=("main",))
    for step in range(steps):
        if not (rank == culprit and step == at_step):
            if rank != culprit and step == at_step:
                state = "started"
            e.add("0", "default_pg", "nccl:all_reduce", [[1024]], [[1024]], state=state, duration=None,
                  stack=("train_step", "main"))
            if state == "started":
                state = "scheduled"
        if rank == culprit and step == at_step:
            state = "started"
        e.add("1", "tp", "nccl:_all_gather_base", [[256]], [[256 * world]], state=state, duration=None,
              stack=("gather_params", "main"))
        if state == "started":
            state = "scheduled"
        # A ring batch_isend_irecv as torch 2.11 records it: the send and the receive stay "scheduled" for good and
        # share one p2p_seq_id with the nccl:coalesced entry after them, which holds the group's state.
        peer, src = (rank + 1) % world, (rank - 1) % world
        e.add("0", "default_pg", "nccl:send %d->%d" % (rank, peer), [[256]], [[256]], p2p=True, state="scheduled",
              duration=None, stack=("main",))
        e.add("0", "default_pg", "nccl:recv %d<-%d" % (rank, src), [[256]], [[256]], p2p=True, state="scheduled",
              duration=None, stack=("main",), same_p2p_seq=True)
        e.add("0", "default_pg", "nccl:coalesced", [], [], state=state, duration=None, stack=("main",),
              coalesced_with_previous=True)
        e.entries[-1]["p2p_seq_id"] = e.p2p["0"]
    status = {pg: {"last_enqueued_collective": n, "last_started_collective": n, "last_completed_collective": n - 1}
              for pg, n in e.coll.items()}
    return e.entries, status


def write(path, data: bytes):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def c10_style_pickle() -> bytes:
    """The bytes torch's C++ pickler writes for {"version": "2.10", "entries": [], "sizes": build_intlist([4, 8])}:
    protocol 2, BINPUT after containers, and a typed int list behind GLOBAL torch.jit._pickle build_intlist +
    REDUCE (an IntList IValue)."""
    b = bytearray(b"\x80\x02")                  # PROTO 2
    b += b"}q\x00("                             # EMPTY_DICT, BINPUT 0, MARK
    b += b"X\x07\x00\x00\x00version"            # BINUNICODE
    b += b"X\x04\x00\x00\x002.10"
    b += b"X\x07\x00\x00\x00entries"
    b += b"]q\x01"                              # EMPTY_LIST, BINPUT 1
    b += b"X\x05\x00\x00\x00sizes"
    b += b"ctorch.jit._pickle\nbuild_intlist\n"  # GLOBAL (an allowed torch list helper)
    b += b"q\x02(]q\x03(K\x04K\x08etR"           # BINPUT, MARK, EMPTY_LIST, MARK, ints, APPENDS, TUPLE, REDUCE
    b += b"u."                                  # SETITEMS, STOP
    return bytes(b)


def hostile():
    """Files that must be refused without running anything."""
    out = {}
    # os.system("touch /tmp/ranklens-pwned") the classic way: GLOBAL + REDUCE.
    out["global_os_system.pkl"] = b"\x80\x02cos\nsystem\nq\x00X\x19\x00\x00\x00touch /tmp/ranklens-pwned\x85R."
    # The same through STACK_GLOBAL (protocol 4).
    out["stack_global.pkl"] = (b"\x80\x04\x8c\x08builtins\x8c\x04eval\x93\x8c\x0b__import__()\x85R.")
    # An object built with BUILD / NEWOBJ / INST / PERSID.
    out["build.pkl"] = b"\x80\x02}q\x00}b."
    out["newobj.pkl"] = b"\x80\x02ctorch.jit._pickle\nbuild_intlist\n)\x81."
    out["inst.pkl"] = b"(ios\nsystem\nS'id'\n."
    out["persid.pkl"] = b"Pfoo\n."
    # A torch helper name that is not a list builder.
    out["torch_other_global.pkl"] = b"\x80\x02ctorch.jit._pickle\nbuild_tensor_from_id\n(K\x00tR."
    # Damaged: truncated, an unknown opcode, a memo read before store, too-large integer, self-referencing list.
    good = pickle.dumps(dump(2, 0, *every_kind(0, 2)), protocol=2)
    out["truncated.pkl"] = good[: len(good) // 2]
    out["unknown_opcode.pkl"] = b"\x80\x02\xff."
    out["memo_missing.pkl"] = b"\x80\x02h\x07."
    out["huge_long.pkl"] = b"\x80\x02\x8a\x10" + b"\x01" * 16 + b"."
    out["cycle.pkl"] = b"\x80\x02]q\x00h\x00a."   # l = []; l.append(l)
    out["two_values.pkl"] = b"\x80\x02K\x01K\x02."
    out["empty.pkl"] = b""
    # Well-formed pickles that are not dumps.
    out["not_a_dict.pkl"] = pickle.dumps([1, 2, 3], protocol=2)
    out["version_3.pkl"] = pickle.dumps({"version": "3.0", "entries": []}, protocol=2)
    out["no_version.pkl"] = pickle.dumps({"entries": []}, protocol=2)
    bad_state = dump(2, 0, *every_kind(0, 2))
    bad_state["entries"][1]["state"] = "exploded"
    out["bad_state.pkl"] = pickle.dumps(bad_state, protocol=2)
    bad_sizes = dump(2, 0, *every_kind(0, 2))
    bad_sizes["entries"][2]["input_sizes"] = "[[256]]"
    out["bad_sizes.pkl"] = pickle.dumps(bad_sizes, protocol=2)
    out["bad_json.json"] = b'{"version": "2.10", "entries": [ {"state": '
    return out


def main():
    for world, tag in ((2, "hang-2"), (4, "hang-4")):
        for rank in range(world):
            entries, status = every_kind(rank, world, skip_last_all_reduce=(rank == world - 1))
            write(os.path.join(OUT, tag, "rank_%d" % rank), pickle.dumps(dump(world, rank, entries, status), protocol=2))
    for world in (2, 4):
        for rank in range(world):
            entries, status = interleaved(rank, world, culprit=world - 1)
            write(os.path.join(OUT, "hang_interleaved-%d" % world, "rank_%d" % rank),
                  pickle.dumps(dump(world, rank, entries, status), protocol=2))
    for variant in ("size", "dtype", "op"):
        for rank in range(2):
            entries, status = every_kind(rank, 2, desync=variant if rank == 1 else None)
            write(os.path.join(OUT, "desync_%s-2" % variant, "rank_%d" % rank),
                  pickle.dumps(dump(2, rank, entries, status), protocol=4))
    # The JSON variant of hang-2 rank 0 as torch's _dump_nccl_trace_json writes it: no frames, pg_status values and
    # ranks as strings, 0 for times not discovered, the process group as a list.
    entries, status = every_kind(0, 2)
    js = dump(2, 0, entries, {k: {kk: str(vv) for kk, vv in v.items()} for k, v in status.items()})
    for e in js["entries"]:
        del e["frames"]
        e["process_group"] = list(e["process_group"])
        for key in ("time_discovered_started_ns", "time_discovered_completed_ns"):
            if e[key] is None:
                e[key] = 0
    write(os.path.join(OUT, "json", "rank_0.json"), json.dumps(js).encode())
    write(os.path.join(OUT, "c10_style", "rank_0"), c10_style_pickle())
    # For the replay test (tests/replay/fr_replay_scenario.cc): three all-reduces of 256 floats on the world group;
    # rank 0's third is left started, rank 1 never made it.
    for rank in range(2):
        e = Entries()
        for k in range(3 if rank == 0 else 2):
            e.add("0", "default_pg", "nccl:all_reduce", [[256]], [[256]], state="started" if k == 2 else "completed",
                  stack=("train_step", "main"))
        status = {"0": {"last_enqueued_collective": e.coll["0"], "last_started_collective": e.coll["0"],
                        "last_completed_collective": 2}}
        d = dump(2, rank, e.entries, status)
        del d["pg_config"]["1"]
        write(os.path.join(OUT, "replay-2", "rank_%d" % rank), pickle.dumps(d, protocol=2))
    # For the split replay test: the same two all-reduces on the world group, then one on a second group "tp" of
    # both ranks (torch makes its communicator by splitting the world's): rank 0's is left started, rank 1 never
    # made it. The replay's ncclCommSplit finds the child in the import.
    for rank in range(2):
        e = Entries()
        for k in range(2):
            e.add("0", "default_pg", "nccl:all_reduce", [[256]], [[256]], stack=("train_step", "main"))
        if rank == 0:
            e.add("1", "tp", "nccl:all_reduce", [[256]], [[256]], state="started", stack=("tp_step", "main"))
        status = {"0": {"last_enqueued_collective": 2, "last_started_collective": 2, "last_completed_collective": 2},
                  "1": {"last_enqueued_collective": e.coll.get("1", 0), "last_started_collective": e.coll.get("1", 0),
                        "last_completed_collective": 0}}
        write(os.path.join(OUT, "replay-split-2", "rank_%d" % rank),
              pickle.dumps(dump(2, rank, e.entries, status), protocol=2))
    for name, data in hostile().items():
        write(os.path.join(OUT, "hostile", name), data)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
