# SPDX-License-Identifier: Apache-2.0
"""Differential test over a generated corpus of damaged and unusual traces: the C++ tools and the Python reader
(tools/python/ranklens_trace.py, written from docs/trace-format.md alone) must give the same records and the same
verdicts.

The corpus is one small trace of every record type (two segments, three payloads) and, from it: a truncation of
each segment and payload file at every offset, a one-bit flip at every byte of them, hostile sizes (frame lengths,
references claiming huge blobs, offsets past the file) and rank directories without a manifest; and the shipped
closed demo recording cut between two frames at every frame boundary. For every case:

- `trace_dump` (the C++ TraceReader) and the Python reader print the same canonical document (records, payloads
  with their SHA-256, problems, which ranks are unusable);
- `rlpayload ls --json` lists exactly the payload references the Python reader lists, and exits 1 exactly when the
  Python reader finds damage in the segments (nothing after a damaged frame is listed, and damage is never silent);
- `rlpayload verify --json` says "ok" exactly when the Python reader finds no problem, on a sample of the cases
  (verify decodes every payload; the sample keeps the test within its CI time);
- `ranklens trace summary --json` counts the calls the Python reader finds, each identity once.

Needs RANKLENS_TRACE_DUMP, RANKLENS_RLPAYLOAD and RANKLENS_CLI (CTest sets them)."""

import json
import os
import shutil
import subprocess

import pytest

import ranklens_trace as rt
import tracegen as tg
from tracegen import CALL, COMM_END, COMM_INIT, EDIT, GROUP_BEGIN, GROUP_END, STAGE, TIMING

TRACE_DUMP = os.environ.get("RANKLENS_TRACE_DUMP")
RLPAYLOAD = os.environ.get("RANKLENS_RLPAYLOAD")
CLI = os.environ.get("RANKLENS_CLI")
SCRATCH = os.environ.get("RANKLENS_PY_SCRATCH")

pytestmark = pytest.mark.skipif(not (TRACE_DUMP and RLPAYLOAD and CLI),
                                reason="RANKLENS_TRACE_DUMP / RANKLENS_RLPAYLOAD / RANKLENS_CLI not set (CTest sets "
                                       "them)")


def base_trace(directory):
    """Every record type over two segments, three payloads, a repeated Call identity; not closed, so that verify
    does not compare the (hand-written) counters."""
    w = tg.RankWriter(directory)
    w.record(COMM_INIT, [0, 2, 0, -1, -1, -1, "init", "world", [0, 1], 0, True, 10])
    w.record(STAGE, ["forward", 1, 11])
    w.record(GROUP_BEGIN, [5, 12])
    w.record(CALL, tg.call(0, 0, 0))
    w.payload(0, 0, 0, b"\x01" * 16, datatype=1)
    w.record(GROUP_END, [5, 1, 0, 13])
    w.record(TIMING, [0, 0, 0, 7, 5, 100, 20, False, -1, -1, 0, 3_000_000_000])
    w.new_segment()
    w.record(CALL, tg.call(0, 0, 9, peer=1))
    w.payload(0, 0, 9, b"\x02" * 16, datatype=1, peer=1)
    w.record(CALL, tg.call(0, 1, 3))
    w.record(CALL, tg.call(0, 1, 3, t=5))  # the same identity again: one call, the last
    w.payload(0, 1, 3, bytes(range(16)), datatype=1)
    w.record(EDIT, [0, 0, "test", "inject", "", "me", 123])
    w.record(10, [0, 1 << 40, "creation", 15])
    w.record(COMM_END, [0, "destroy", 14])
    w.close(manifest_overrides={"closed": False})
    return w


def _mutations(rank_dir):
    """(name, function of a copied rank directory) for every case of the corpus."""
    cases = []
    for name in sorted(os.listdir(rank_dir)):
        if not (name.startswith("seg-") or name.startswith("pay-")):
            continue
        size = os.path.getsize(os.path.join(rank_dir, name))
        for cut in range(size):
            cases.append((f"{name} cut at {cut}", lambda d, n=name, c=cut: tg.truncate(os.path.join(d, n), c)))
        for at in range(size):
            def flip(d, n=name, a=at):
                path = os.path.join(d, n)
                data = bytearray(open(path, "rb").read())
                data[a] ^= 1 << (a % 8)
                open(path, "wb").write(bytes(data))
            cases.append((f"{name} bit {at % 8} of byte {at} flipped", flip))
    records, _ = rt.parse_segment(open(os.path.join(rank_dir, "seg-000000.rls"), "rb").read(), 0, "seg")
    hostile = {"length 2^32-1": (0, b"\xff\xff\xff\xff"), "length 2^24+1": (0, b"\x01\x00\x00\x01"),
               "length 0": (0, b"\x00\x00\x00\x00")}
    for rec in records[:3]:
        for what, (at, value) in hostile.items():
            cases.append((f"frame at {rec.offset}: {what}",
                          lambda d, o=rec.offset + at, v=value: tg.patch(os.path.join(d, "seg-000000.rls"), o, v)))
    return cases


def _hostile_refs():
    """References claiming what no file holds (appended to a copy of the base trace's last segment)."""
    def ref(**fields):
        base = dict(comm=0, seq=9, op=0, datatype=1, count=3, raw=3, file=0, offset=16, compressed=12, crc=0,
                    level=3, peer=-1, shuffle=0)
        base.update(fields)
        return [base[k] for k in ("comm", "seq", "op", "datatype", "count", "raw", "file", "offset", "compressed",
                                  "crc", "level", "peer", "shuffle")]
    return {
        "ref compressedBytes 2^63": ref(compressed=1 << 63),
        "ref rawBytes 2^40": ref(raw=1 << 40),
        "ref offset 2^64-1": ref(offset=(1 << 64) - 1),
        "ref file 2^32-1": ref(file=(1 << 32) - 1),
        "ref shuffle 3": ref(shuffle=3),
        "ref count 2^62": ref(count=1 << 62),
    }


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = os.path.join(SCRATCH, "corpus") if SCRATCH else str(tmp_path_factory.mktemp("corpus"))
    shutil.rmtree(root, ignore_errors=True)
    base = os.path.join(root, "base", "rank0")
    base_trace(base)
    cases = []
    for i, (name, mutate) in enumerate(_mutations(base)):
        trace = os.path.join(root, f"c{i}")
        shutil.copytree(os.path.dirname(base), trace)
        mutate(os.path.join(trace, "rank0"))
        cases.append((name, trace))
    for i, (name, record) in enumerate(_hostile_refs().items()):
        trace = os.path.join(root, f"h{i}")
        shutil.copytree(os.path.dirname(base), trace)
        seg = os.path.join(trace, "rank0", "seg-000001.rls")
        with open(seg, "ab") as f:
            f.write(tg.frame(tg.body(8, record)))
        os.remove(os.path.join(trace, "rank0", "index.msgpack"))
        cases.append((name, trace))
    # A rank directory without a manifest, before and after a usable one: reported in rank order, never skipped.
    for i, missing in enumerate(("rank1", "rank2")):
        trace = os.path.join(root, f"m{i}")
        shutil.copytree(os.path.dirname(base), trace)
        if missing == "rank2":
            os.rename(os.path.join(trace, "rank0"), os.path.join(trace, "rank3"))
        os.makedirs(os.path.join(trace, missing))
        cases.append((f"{missing} without a manifest", trace))
    # A closed recording cut exactly between two frames at every boundary (only the manifest's records_written shows
    # the loss), and intact: the shipped demo recording.
    shipped = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples",
                           "traces", "anomaly-2ranks")
    boundaries = [r.offset for r in rt.RankReader.open(os.path.join(shipped, "rank0")).all_records()]
    for cut in [None] + boundaries:
        trace = os.path.join(root, f"cut{cut}")
        shutil.copytree(shipped, trace)
        if cut is not None:
            os.truncate(os.path.join(trace, "rank0", "seg-000000.rls"), cut)
        cases.append((f"closed trace cut at {cut}", trace))
    return cases


def _python_doc(trace):
    doc = rt.dump_trace(trace)
    return rt.canonical_json(doc), doc


def _segment_damage(rank):
    return [p for p in rank.get("problems", []) if p["file"].startswith("seg-")]


def test_corpus_is_large(corpus):
    assert len(corpus) > 1000


def test_cpp_and_python_readers_agree_on_every_case(corpus):
    disagree = []
    for name, trace in corpus:
        cpp = subprocess.run([TRACE_DUMP, trace], capture_output=True, text=True)
        text, doc = _python_doc(trace)
        unusable = any(r.get("unusable") for r in doc["ranks"])
        if cpp.returncode != (1 if unusable else 0) or cpp.stdout.strip() != text:
            disagree.append(name)
    assert not disagree, f"{len(disagree)} of {len(corpus)} cases differ, e.g. {disagree[:10]}"


def test_rlpayload_ls_lists_what_python_reads_and_says_damage(corpus):
    wrong = []
    for name, trace in corpus:
        _, doc = _python_doc(trace)
        res = subprocess.run([RLPAYLOAD, "ls", "--json", trace], capture_output=True, text=True)
        listed = sorted((p["comm"], p["op"], p["peer"] if p["op"] in ("Send", "Recv") else -1, p["seq"])
                        for p in json.loads(res.stdout)["payloads"]) if res.stdout else None
        expected = sorted((p["commId"], rt.OPS[p["op"]] if 0 <= p["op"] < len(rt.OPS) else f"op{p['op']}",
                           p["peer"], p["seq"]) for r in doc["ranks"] for p in r.get("payloads", []))
        damaged = any(_segment_damage(r) or r.get("unusable") for r in doc["ranks"])
        if listed != expected or (res.returncode != 0) != damaged:
            wrong.append((name, res.returncode, damaged))
    assert not wrong, f"{len(wrong)} of {len(corpus)} cases, e.g. {wrong[:10]}"


def test_rlpayload_verify_verdict_agrees(corpus):
    wrong = []
    for name, trace in corpus[::23] + [c for c in corpus if not c[0].startswith(("seg-", "pay-"))]:
        _, doc = _python_doc(trace)
        res = subprocess.run([RLPAYLOAD, "verify", "--json", trace], capture_output=True, text=True)
        ok = json.loads(res.stdout)["ok"] if res.stdout else None
        clean = not any(r.get("problems") or r.get("unusable") for r in doc["ranks"])
        if ok != clean or (res.returncode == 0) != clean:
            wrong.append((name, ok, clean))
    assert not wrong, f"{len(wrong)} cases, e.g. {wrong[:10]}"


def test_trace_summary_counts_each_call_once(corpus):
    wrong = []
    for name, trace in corpus[::17]:
        _, doc = _python_doc(trace)
        if any(r.get("unusable") for r in doc["ranks"]):
            continue
        res = subprocess.run([CLI, "trace", "summary", "--json", trace], capture_output=True, text=True)
        if not res.stdout:
            wrong.append((name, "no output", res.stderr[-200:]))
            continue
        counted = [r["calls"] for r in json.loads(res.stdout)]
        expected = [len({rt.record_key(CALL, rec["fields"]) for rec in r["records"] if rec["type"] == "Call"})
                    for r in doc["ranks"]]
        if counted != expected:
            wrong.append((name, counted, expected))
    assert not wrong, f"{len(wrong)} cases, e.g. {wrong[:10]}"


def test_base_trace_is_read_whole(corpus):
    _, doc = _python_doc(os.path.join(os.path.dirname(corpus[0][1]), "base"))
    (rank,) = doc["ranks"]
    assert rank["problems"] == [] and len(rank["payloads"]) == 3
    assert all(p["sha256"] for p in rank["payloads"])
