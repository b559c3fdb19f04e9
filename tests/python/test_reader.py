# SPDX-License-Identifier: Apache-2.0
"""The Python trace reader (tools/python/ranklens_trace.py) against the C++ reader, and on its own.

Cross-check (needs RANKLENS_TRACE_MAKE and RANKLENS_TRACE_DUMP, which CTest sets): trace_make writes a clean, a
truncated and a corrupted 2-rank trace with the C++ writer; `trace_dump` (C++ reader) and `ranklens_trace.py dump
--json` must print the same bytes, for those and for hand-made edge cases (EDGE_CASES; EDGE_DIVERGENCES and
TRACE_DIVERGENCES are the known differences, each with the reason, expected to fail until the C++ reader or the spec
changes). Python-only tests build traces with tracegen.py and check every rule of docs/trace-format.md."""

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import zlib

import msgpack
import pytest
import zstandard

import ranklens_trace as rt
import tracegen as tg
from tracegen import CALL, COMM_END, COMM_INIT, EDIT, GROUP_BEGIN, GROUP_END, PAYLOAD_REF, STAGE, TIMING

HERE = os.path.dirname(os.path.abspath(__file__))
READER = os.path.join(os.path.dirname(os.path.dirname(HERE)), "tools", "python", "ranklens_trace.py")
TRACE_MAKE = os.environ.get("RANKLENS_TRACE_MAKE")
TRACE_DUMP = os.environ.get("RANKLENS_TRACE_DUMP")
SCRATCH = os.environ.get("RANKLENS_PY_SCRATCH")


# ------------------------------------------------------------------------------------------------ cross-check

needs_binaries = pytest.mark.skipif(not (TRACE_MAKE and TRACE_DUMP),
                                    reason="RANKLENS_TRACE_MAKE / RANKLENS_TRACE_DUMP not set (CTest sets them)")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = os.path.join(SCRATCH, "traces") if SCRATCH else str(tmp_path_factory.mktemp("traces"))
    os.makedirs(out, exist_ok=True)
    subprocess.run([TRACE_MAKE, out], check=True, capture_output=True, text=True)
    return out


def run_cpp(path, *flags):
    res = subprocess.run([TRACE_DUMP, *flags, path], capture_output=True, text=True)
    assert res.returncode == 0, f"trace_dump {path}: {res.stderr}"
    return res.stdout


def run_py(path, *flags):
    res = subprocess.run([sys.executable, READER, "dump", path, "--json", *flags], capture_output=True, text=True)
    assert res.returncode == 0, f"ranklens_trace.py dump {path}: {res.stderr}"
    return res.stdout


def first_difference(a, b, path="$"):
    if type(a) is not type(b):
        return f"{path}: {a!r} vs {b!r}"
    if isinstance(a, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                return f"{path}.{key}: only in {'C++' if key in a else 'Python'}"
            diff = first_difference(a[key], b[key], f"{path}.{key}")
            if diff:
                return diff
        return None
    if isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b)):
            diff = first_difference(x, y, f"{path}[{i}]")
            if diff:
                return diff
        return f"{path}: {len(a)} vs {len(b)} elements" if len(a) != len(b) else None
    return None if a == b else f"{path}: C++ {a!r} vs Python {b!r}"


def assert_same(path):
    cpp, py = run_cpp(path), run_py(path)
    if cpp != py:
        diff = first_difference(json.loads(cpp), json.loads(py))
        pytest.fail(f"C++ and Python readers disagree on {path}: {diff or 'same value, different bytes'}")
    return json.loads(py)


@needs_binaries
def test_sha256_selftest():
    assert subprocess.run([TRACE_DUMP, "--selftest"]).returncode == 0


@needs_binaries
def test_clean_trace_agrees(made):
    doc = assert_same(os.path.join(made, "clean"))
    ranks = doc["ranks"]
    assert [r["dir"] for r in ranks] == ["rank0", "rank1"]
    for rank, r in enumerate(ranks):
        assert r["problems"] == [] and not r["indexRebuilt"]
        assert r["manifest"]["rank"] == rank and r["manifest"]["closed"] is True
        types = {rec["type"] for rec in r["records"]}
        assert types == set(rt.RECORD_NAMES.values()), types
        assert len({rec["segment"] for rec in r["records"]}) >= 3
        refs = [rec["fields"] for rec in r["records"] if rec["type"] == "PayloadRef"]
        assert len({ref["file"] for ref in refs}) >= 2
        assert {p["datatype"] for p in r["payloads"]} == set(range(12))
        assert all(p["sha256"] for p in r["payloads"])
        keys = {(p["commId"], rt.call_kind(p["op"]), p["peer"], p["seq"]) for p in r["payloads"]}
        other = 1 - rank
        # Collectives, Sends, Recvs from the other rank and from itself all use seq 0 on comm 0: four calls.
        assert {(0, 0, -1, 0), (0, 1, other, 0), (0, 2, other, 0), (0, 2, rank, 0)} <= keys
        assert len(keys) == len(r["payloads"])
        # Edited calls: two references each (three for the broadcast's), one effective payload.
        for comm, op, seq, n in ((0, 3, 3, 2), (0, 9, 1, 2), (1, 1, 0, 2)):
            assert sum(1 for f in refs if (f["commId"], f["op"], f["seq"]) == (comm, op, seq)) == n
    # The records with missing / extra trailing fields (rank 1) read with defaults / without the extras.
    short = [rec["fields"] for rec in ranks[1]["records"] if rec["type"] == "Call" and rec["fields"]["commId"] == 1
             and rec["fields"]["seq"] == 1][0]
    assert short["rootOrPeer"] == -1 and short["redop"] == -1 and short["count"] == 0
    stage = [rec["fields"] for rec in ranks[1]["records"] if rec["type"] == "Stage"][-1]
    assert stage == {"name": "optimizer", "step": -1, "timeNs": 0}
    # Timing and Edit name their call's peer (and Edit its op); written without them (rank 1's last ones), -1.
    for rank, r in enumerate(ranks):
        timings = [rec["fields"] for rec in r["records"] if rec["type"] == "Timing"]
        edits = [rec["fields"] for rec in r["records"] if rec["type"] == "Edit"]
        assert [(t["op"], t["peer"]) for t in timings][:3] == [(0, -1), (1, -1), (9, 1 - rank)]
        assert [(e["op"], e["peer"]) for e in edits][:2] == [(3, -1), (9, 1 - rank)]
    assert (timings[-1]["commId"], timings[-1]["peer"]) == (1, -1) and len(timings) == 4
    assert (edits[-1]["detail"], edits[-1]["op"], edits[-1]["peer"]) == ("old layout", -1, -1) and len(edits) == 3


@needs_binaries
def test_clean_trace_effective_payloads_are_the_last_references(made):
    reader = rt.RankReader.open(os.path.join(made, "clean", "rank0"))
    last = {}
    for rec in reader.records():
        if rec.type == PAYLOAD_REF:
            last[rt.record_key(PAYLOAD_REF, rec.fields)] = rec.fields
    assert reader.payloads() == [last[k] for k in sorted(last)]


@needs_binaries
def test_damaged_trace_agrees(made):
    doc = assert_same(os.path.join(made, "damaged"))
    r0, r1 = doc["ranks"]
    assert r0["indexRebuilt"] and r1["indexRebuilt"]
    assert [(p["file"], p["truncated"]) for p in r0["problems"]] == [("seg-000001.rls", True),
                                                                     (r0["problems"][1]["file"], True)]
    assert r0["problems"][1]["file"].startswith("pay-")
    assert [p["sha256"] for p in r0["payloads"]].count(None) == 1
    assert len(r1["problems"]) == 1 and r1["problems"][0]["truncated"]
    # Everything before the damage is kept: records from the segment after the cut one are there.
    assert any(rec["segment"] == 2 for rec in r0["records"])


@needs_binaries
def test_corrupt_trace_agrees(made):
    doc = assert_same(os.path.join(made, "corrupt"))
    r0, r1 = doc["ranks"]
    # Sizes unchanged, so the indexes match the segments; but rank 0's index names PayloadRefs after the damaged
    # frame of seg-000000, which are not part of the trace (docs/trace-format.md): the index is rebuilt, and the
    # payloads listed are those before the damage (or in later segments), as a scan finds them.
    assert r0["indexRebuilt"] and not r1["indexRebuilt"]
    assert [(p["file"], p["truncated"]) for p in r0["problems"]] == [("seg-000000.rls", False)]
    clean = json.loads(run_py(os.path.join(made, "clean", "rank0")))["ranks"][0]
    assert 0 < len(r0["payloads"]) < len(clean["payloads"])
    assert all(p in clean["payloads"] for p in r0["payloads"])
    assert len(r0["records"]) < len(clean["records"])
    assert [(p["file"][:4], p["truncated"]) for p in r1["problems"]] == [("pay-", False)]
    assert [p["sha256"] for p in r1["payloads"]].count(None) == 1


@needs_binaries
@pytest.mark.parametrize("which", ["clean", "damaged", "corrupt"])
def test_rank_directories_agree_alone(made, which):
    for rank in ("rank0", "rank1"):
        assert_same(os.path.join(made, which, rank))


@needs_binaries
def test_reasons_name_every_problem(made):
    path = os.path.join(made, "damaged")
    cpp, py = json.loads(run_cpp(path, "--with-reasons")), json.loads(run_py(path, "--with-reasons"))
    for doc in (cpp, py):
        for r in doc["ranks"]:
            assert all(p["reason"] for p in r["problems"])
            for p in r["problems"]:
                del p["reason"]
    assert cpp == py


# ---------------------------------------------------- edge cases: hand-made traces both readers must agree on

def _stage_trace(d, extra=None, index=True, manifest=None):
    w = tg.RankWriter(d)
    w.record(STAGE, ["a", 1, 2])
    if extra:
        extra(w)
    w.record(STAGE, ["z", 1, 2])
    w.close(index=index, manifest_overrides=manifest)
    return w


def _next_segment(w, patch_at=None, value=b""):
    w.new_segment()
    if patch_at is not None:
        w.segments[-1][patch_at:patch_at + len(value)] = value
    w.record(STAGE, ["b", 1, 2])
    w.close()


def _write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def _set_index(d, **changes):
    path = os.path.join(d, "index.msgpack")
    index = msgpack.unpackb(open(path, "rb").read())
    for key, value in changes.items():
        if value is None:
            del index[key]
        else:
            index[key] = value(index[key]) if callable(value) else value
    tg.write_msgpack(path, index)


def _older_ref_index(d):
    w = tg.RankWriter(d)
    first = w.record(PAYLOAD_REF, [0, 1, 0, 1, 3, 3, 0, 16, 0, 0, 3, -1])
    w.record(PAYLOAD_REF, [0, 1, 0, 1, 4, 4, 0, 16, 0, 0, 3, -1])
    w.close()
    w.write_index(payloads=[[0, 1, 0, -1, first[0], first[1]]])


def _raw_manifest(d, *pairs):
    """A manifest map written by hand from (key, value) pairs, so that keys may repeat."""
    _write(os.path.join(d, "manifest.msgpack"),
           bytes([0x80 | len(pairs)]) + b"".join(msgpack.packb(k) + msgpack.packb(v) for k, v in pairs))


def _manifest_with_raw(d, key, raw_value):
    """The required keys plus `key` holding the already-packed msgpack `raw_value`."""
    _write(os.path.join(d, "manifest.msgpack"), b"\x83" + msgpack.packb("format") + msgpack.packb("ranklens-trace")
           + msgpack.packb("version_major") + msgpack.packb(1) + msgpack.packb(key) + raw_value)


def _two_segment_index(d):
    w = tg.RankWriter(d)
    w.payload(0, 1, 0, b"abc")
    w.new_segment()
    w.payload(0, 2, 0, b"def")
    w.close()


def _index_at_frame_with_trailing_byte(d):
    """A PayloadRef frame whose body is followed by one byte (corruption), named by the index."""
    w = tg.RankWriter(d)
    w.record(STAGE, ["a", 1, 2])
    data = b"abc"
    blob = zstandard.ZstdCompressor(write_checksum=True).compress(data)
    file, off = w.blob(blob)
    ref = [0, 1, 0, 1, 3, 3, file, off, len(blob), zlib.crc32(data), 3, -1]
    loc = w.raw_frame(tg.frame(tg.body(PAYLOAD_REF, ref) + b"\x00"))
    w.close()
    w.write_index(payloads=[[0, 1, -1, -1, loc[0], loc[1]]])


def _index_into_bad_segment(d):
    """Segment 1 (holding a PayloadRef) gets a bad magic; sizes are unchanged, so the index is consistent."""
    w = tg.RankWriter(d)
    w.record(STAGE, ["a", 1, 2])
    w.new_segment()
    w.payload(0, 1, 0, b"abc")
    w.close()
    tg.patch(w.seg_path(1), 0, b"XXXX")


def _replace_ref(w, position, value):
    ref = w.payload(0, 1, 0, b"one" * 10)
    ref[position] = value
    w.record(PAYLOAD_REF, ref)


# 2 bytes: a raw block, an empty compressed block, an empty last raw block (no checksum).
EMPTY_COMPRESSED_BLOCK_FRAME = bytes.fromhex("28b52ffd2002" "100000") + b"\x07\x09" + bytes.fromhex("040000" "010000")


EDGE_CASES = {
    "frame length over the limit at the end": lambda d: _stage_trace(
        d, lambda w: w.raw_frame(tg.struct.pack("<II", 0x7FFFFFFF, 0) + b"xx")),
    "frame length zero": lambda d: _stage_trace(d, lambda w: w.raw_frame(tg.frame(b""))),
    "record type 0": lambda d: _stage_trace(d, lambda w: w.raw_frame(tg.frame(msgpack.packb([0, []])))),
    "record type negative": lambda d: _stage_trace(d, lambda w: w.raw_frame(tg.frame(msgpack.packb([-1, []])))),
    "record type 2^31": lambda d: _stage_trace(d, lambda w: w.raw_frame(tg.frame(msgpack.packb([1 << 31, []])))),
    "body of three elements": lambda d: _stage_trace(
        d, lambda w: w.raw_frame(tg.frame(msgpack.packb([5, ["x", 1, 2], 0])))),
    "body with trailing bytes": lambda d: _stage_trace(
        d, lambda w: w.raw_frame(tg.frame(msgpack.packb([5, ["x", 1, 2]]) + b"\x00"))),
    "unknown type whose record is not an array": lambda d: _stage_trace(
        d, lambda w: w.raw_frame(tg.frame(msgpack.packb([77, "x"])))),
    "field of the wrong type": lambda d: _stage_trace(d, lambda w: w.record(STAGE, [5, 1, 2])),
    "bool for int": lambda d: _stage_trace(d, lambda w: w.record(STAGE, ["x", True, 2])),
    "int for bool": lambda d: _stage_trace(d, lambda w: w.record(TIMING, [0, 0, 0, 0, 0, 0, 0, 1])),
    "negative uint64": lambda d: _stage_trace(d, lambda w: w.record(COMM_END, [-1, "x", 2])),
    "int32 out of range": lambda d: _stage_trace(d, lambda w: w.record(CALL, [0, 0, 1 << 40])),
    "malformed Call while indexing": lambda d: _stage_trace(
        d, lambda w: w.raw_frame(tg.frame(tg.body(CALL, [0, "x", 0]))), index=False),
    "empty segment file": lambda d: _write(_stage_trace(d).seg_path(1), b""),
    "short segment header": lambda d: _write(_stage_trace(d).seg_path(1), tg.file_header(tg.SEGMENT_MAGIC, 1)[:10]),
    "segment of major version 2": lambda d: _next_segment(_stage_trace(d), 4, b"\x02\x00"),
    "segment of minor version 9": lambda d: _next_segment(_stage_trace(d), 6, b"\x09\x00"),
    "segment reserved field set": lambda d: _next_segment(_stage_trace(d), 12, b"\x01"),
    "segment index not its name's": lambda d: _next_segment(_stage_trace(d), 8, b"\x05"),
    "segment gap": lambda d: (lambda w: (w.new_segment(), _next_segment(w), os.remove(w.seg_path(1))))(
        _stage_trace(d)),
    "no seg-000000": lambda d: (lambda w: (_next_segment(w), os.remove(w.seg_path(0))))(_stage_trace(d)),
    "seg name of 7 digits": lambda d: _write(os.path.join(_stage_trace(d).dir, "seg-0000001.rls"),
                                             tg.file_header(tg.SEGMENT_MAGIC, 1)),
    "a directory named like a segment": lambda d: (_stage_trace(d), os.makedirs(os.path.join(d, "seg-000001.rls"))),
    "manifest of a newer minor version": lambda d: _stage_trace(d, manifest={"version_minor": 9, "zzz": [1]}),
    "manifest with only format and version": lambda d: (
        _stage_trace(d), tg.write_msgpack(os.path.join(d, "manifest.msgpack"),
                                          {"format": "ranklens-trace", "version_major": 1})),
    "manifest of another format": lambda d: _stage_trace(d, manifest={"format": "x"}),
    "manifest key of the wrong type": lambda d: _stage_trace(d, manifest={"rank": "zero"}),
    "manifest of major version 2": lambda d: _stage_trace(d, manifest={"version_major": 2}),
    "collective references with peers": lambda d: _stage_trace(
        d, lambda w: (w.payload(0, 1, 0, b"one", peer=-1), w.payload(0, 1, 4, b"two", peer=3))),
    "P2P identities": lambda d: _stage_trace(d, lambda w: (
        w.payload(0, 0, 9, b"r1", peer=1), w.payload(0, 0, 9, b"r2", peer=2), w.payload(0, 0, 8, b"s1", peer=1),
        w.payload(0, 0, 0, b"c"), w.payload(0, 0, 9, b"r1 edited", peer=1))),
    "duplicate Call records": lambda d: _stage_trace(
        d, lambda w: (w.record(CALL, tg.call(0, 0, 9, peer=1)), w.record(CALL, tg.call(0, 0, 9, peer=1, t=5)))),
    "payload without content size": lambda d: _stage_trace(
        d, lambda w: w.payload(0, 1, 0, b"one" * 10, blob=tg.zstd_frame(b"one" * 10, declared=-1))),
    "payload with bytes after its frame": lambda d: _stage_trace(
        d, lambda w: w.payload(0, 1, 0, b"one" * 10, blob=tg.zstd_frame(b"one" * 10) + b"\0\0")),
    "payload of two frames": lambda d: _stage_trace(
        d, lambda w: w.payload(0, 1, 0, b"one" * 10, blob=tg.zstd_frame(b"one" * 10) + tg.zstd_frame(b"x"))),
    "payload offset inside the header": lambda d: _stage_trace(d, lambda w: _replace_ref(w, 7, 4)),
    "payload offset past the end": lambda d: _stage_trace(d, lambda w: _replace_ref(w, 7, 100000)),
    "payload compressedBytes past the end": lambda d: _stage_trace(d, lambda w: _replace_ref(w, 8, 100000)),
    "payload file missing": lambda d: _stage_trace(d, lambda w: _replace_ref(w, 6, 7)),
    "payload file bad magic": lambda d: tg.patch(
        _stage_trace(d, lambda w: w.payload(0, 1, 0, b"one")).pay_path(0), 0, b"XXXX"),
    "payload file major version 2": lambda d: tg.patch(
        _stage_trace(d, lambda w: w.payload(0, 1, 0, b"one")).pay_path(0), 4, b"\x02"),
    "payload file index not its name's": lambda d: tg.patch(
        _stage_trace(d, lambda w: w.payload(0, 1, 0, b"one")).pay_path(0), 8, b"\x03"),
    "payload file shorter than its header": lambda d: tg.truncate(
        _stage_trace(d, lambda w: w.payload(0, 1, 0, b"one")).pay_path(0), 9),
    "payload count not matching rawBytes": lambda d: _stage_trace(
        d, lambda w: w.payload(0, 1, 0, b"one" * 10, datatype=7)),
    "empty payload": lambda d: _stage_trace(d, lambda w: w.payload(0, 1, 0, b"")),
    "payload rawCrc32 wrong": lambda d: _stage_trace(d, lambda w: w.payload(0, 1, 0, b"abc", raw_crc=5)),
    "payload declared size not rawBytes": lambda d: _stage_trace(d, lambda w: w.payload(0, 1, 0, b"abc", raw_bytes=4)),
    "payload produces more than declared": lambda d: _stage_trace(
        d, lambda w: w.payload(0, 1, 0, b"a" * 99, blob=tg.zstd_frame(b"a" * 100, declared=99))),
    "payload bomb": lambda d: _stage_trace(
        d, lambda w: w.payload(0, 1, 0, b"", blob=tg.rle_bomb_frame(32 << 30), raw_bytes=32 << 30)),
    "payload bomb, small rawBytes": lambda d: _stage_trace(
        d, lambda w: w.payload(0, 1, 0, b"", blob=tg.rle_bomb_frame(32 << 30), raw_bytes=3)),
    "payload zstd checksum wrong": lambda d: _stage_trace(d, lambda w: w.payload(
        0, 1, 0, b"q" * 50, blob=tg.zstd_frame(b"q" * 50)[:-1] + b"\x00")),
    "index naming an older reference": _older_ref_index,
    "index of major version 2": lambda d: (_stage_trace(d), _set_index(d, version_major=2)),
    "index garbage": lambda d: _write(os.path.join(_stage_trace(d).dir, "index.msgpack"), b"\xc1"),
    "index missing": lambda d: _stage_trace(d, index=False),
    "index without calls": lambda d: (_stage_trace(d), _set_index(d, calls=None)),
    "index entries longer": lambda d: (_stage_trace(d, lambda w: w.record(CALL, tg.call(0, 0, 0))),
                                       _set_index(d, calls=lambda calls: [e + [9] for e in calls])),
    "index listing a segment twice": lambda d: (_stage_trace(d), _set_index(d, segments=lambda s: s + s)),
    "segment added after the index": lambda d: _write(os.path.join(_stage_trace(d).dir, "seg-000001.rls"),
                                                      tg.file_header(tg.SEGMENT_MAGIC, 1)),
    "seg name of 7 digits above 999999": lambda d: _write(os.path.join(_stage_trace(d).dir, "seg-1000000.rls"),
                                                          tg.file_header(tg.SEGMENT_MAGIC, 1000000)),
    # Formerly known divergences, resolved by the C++ reader (required manifest keys, checksum flag, index entries
    # checked against the records they name).
    "manifest without format": lambda d: (
        _stage_trace(d), tg.write_msgpack(os.path.join(d, "manifest.msgpack"), {"version_major": 1})),
    "manifest without version_major": lambda d: (
        _stage_trace(d), tg.write_msgpack(os.path.join(d, "manifest.msgpack"), {"format": "ranklens-trace"})),
    "manifest with a key that is not a str": lambda d: (_stage_trace(d), _raw_manifest(
        d, ("format", "ranklens-trace"), ("version_major", 1), (5, 1))),
    "payload frame without zstd checksum": lambda d: _stage_trace(
        d, lambda w: w.payload(0, 1, 0, b"one" * 10, blob=tg.zstd_frame(b"one" * 10, checksum=False))),
    # zstd's one-shot decoder refuses an empty compressed block that its block-by-block route accepts: both readers
    # decode block by block (found by the C++ fuzz target).
    "payload frame with an empty compressed block": lambda d: _stage_trace(
        d, lambda w: w.payload(0, 1, 0, b"\x07\x09", blob=EMPTY_COMPRESSED_BLOCK_FRAME)),
    "index entry naming no record": lambda d: (
        _stage_trace(d, lambda w: w.payload(0, 1, 0, b"abc")), _set_index(d, payloads=[[0, 1, 0, -1, 0, 17]])),
    "index entry naming another call": lambda d: (
        _stage_trace(d, lambda w: w.record(PAYLOAD_REF, [0, 1, 0, 1, 3, 3, 0, 16, 0, 0, 3, -1])),
        _set_index(d, payloads=[[0, 2, 0, -1, 0, 31]])),
    # Index entries are checked when a lookup uses them: a dump lists payloads (every payloads entry) but looks up
    # no call, so a bad calls entry is never checked and the index counts as used.
    "calls entry naming no record": lambda d: (
        _stage_trace(d, lambda w: w.record(CALL, tg.call(0, 0, 0))), _set_index(d, calls=[[0, 0, -1, -1, 0, 17]])),
    "calls entry past its segment's end": lambda d: (
        _stage_trace(d, lambda w: w.record(CALL, tg.call(0, 0, 0))), _set_index(d, calls=[[0, 0, -1, -1, 0, 9999]])),
    "calls entry naming segment 5": lambda d: (
        _stage_trace(d, lambda w: w.record(CALL, tg.call(0, 0, 0))), _set_index(d, calls=[[0, 0, -1, -1, 5, 17]])),
    "calls entry with a negative commId": lambda d: (
        _stage_trace(d, lambda w: w.record(CALL, tg.call(0, 0, 0))), _set_index(d, calls=[[-1, 0, -1, -1, 0, 17]])),
    "calls entry with op out of int32": lambda d: (
        _stage_trace(d, lambda w: w.record(CALL, tg.call(0, 0, 0))),
        _set_index(d, calls=lambda calls: [e[:2] + [1 << 40] + e[3:] for e in calls])),
    "payloads entry with op out of int32": lambda d: (
        _stage_trace(d, lambda w: w.payload(0, 1, 0, b"abc")),
        _set_index(d, payloads=lambda entries: [e[:2] + [1 << 40] + e[3:] for e in entries])),
    "index version_major true": lambda d: (_stage_trace(d), _set_index(d, version_major=True)),
}

# Where the C++ reader does not do what docs/trace-format.md says ("C++ deviates"), or where the spec leaves the
# outcome open and the readers differ ("spec gap"); these flip to failures ("XPASS strict") when the C++ side or the
# spec (and with it the Python reader) changes, which is the signal to move the entry to EDGE_CASES. None now: the
# spec decides every case both readers were seen to differ on (its changelog, 1.12).
EDGE_DIVERGENCES = {}


def _skippable_frame(data=b"note"):
    return tg.struct.pack("<II", 0x184D2A53, len(data)) + data


def _damage_before_last_ref(d):
    """Two payloads in one segment with a Stage record between them, and a current index; then the CRC of the
    Stage's frame is damaged in place (same size, so the index still matches the segment list, and both of its
    entries lead to intact PayloadRef frames)."""
    w = tg.RankWriter(d)
    w.payload(0, 1, 0, b"one" * 10)
    w.record(STAGE, ["between", 1, 2])
    w.payload(0, 3, 0, b"three" * 10)
    w.close()
    seg = w.seg_path(0)
    records, _ = rt.parse_segment(open(seg, "rb").read(), 0, seg)
    offset = next(r.offset for r in records if r.type == STAGE)
    data = bytearray(open(seg, "rb").read())
    data[offset + 4] ^= 0xFF  # the frame's CRC
    _write(seg, bytes(data))
    return w


def _tail(d, tail):
    w = _stage_trace(d)
    with open(w.seg_path(0), "ab") as f:
        f.write(tail)


# Cases the spec's changelog 1.12 decides (issue 37, items 1-10); each gave another answer on the tools before it.
DECIDED_CASES = {
    # 1: nothing after a damaged frame, even through a current index.
    "payload reference after a damaged frame, index current": _damage_before_last_ref,
    # 2: gapNs int64, recordedCommId uint64.
    "Timing gapNs of 3e9": lambda d: _stage_trace(
        d, lambda w: w.record(TIMING, [0, 0, 0, 0, 0, 0, 5, False, -1, -1, 0, 3_000_000_000])),
    "Timing gapNs of 2^63": lambda d: _stage_trace(
        d, lambda w: w.record(TIMING, [0, 0, 0, 0, 0, 0, 5, False, -1, -1, 0, 1 << 63])),
    "CommBinding recordedCommId of 2^63": lambda d: _stage_trace(
        d, lambda w: w.record(10, [1, 1 << 63, "creation", 7])),
    "CommBinding recordedCommId of -1": lambda d: _stage_trace(d, lambda w: w.record(10, [1, -1, "creation", 7])),
    # 3: a 4-7 byte tail is a truncation whatever its length field says.
    "tail of 4 bytes reading as length 0": lambda d: _tail(d, b"\0\0\0\0"),
    "tail of 6 bytes reading as a length over the limit": lambda d: _tail(d, b"\xff\xff\xff\x7f\0\0"),
    "tail of 7 bytes": lambda d: _tail(d, b"\x05\0\0\0\1\2\3"),
    # 4: skippable zstd frames are refused.
    "payload starting with a skippable frame": lambda d: _stage_trace(
        d, lambda w: w.payload(0, 1, 0, b"one" * 10, blob=_skippable_frame() + tg.zstd_frame(b"one" * 10))),
    "payload with a skippable frame after its frame": lambda d: _stage_trace(
        d, lambda w: w.payload(0, 1, 0, b"one" * 10, blob=tg.zstd_frame(b"one" * 10) + _skippable_frame())),
    "payload with a skippable frame between frames": lambda d: _stage_trace(
        d, lambda w: w.payload(0, 1, 0, b"one" * 10, blob=tg.zstd_frame(b"one" * 5) + _skippable_frame()
                               + tg.zstd_frame(b"one" * 5))),
    # 5: repeated keys, bin for str, invalid UTF-8: refused.
    "str holding invalid UTF-8": lambda d: _stage_trace(
        d, lambda w: w.raw_frame(tg.frame(b"\x92\x05\x93\xa2\xff\xfe\x01\x02"))),
    "str holding a UTF-8 surrogate": lambda d: _stage_trace(
        d, lambda w: w.raw_frame(tg.frame(b"\x92\x05\x93\xa3\xed\xa0\x80\x01\x02"))),
    "str holding an overlong UTF-8 form": lambda d: _stage_trace(
        d, lambda w: w.raw_frame(tg.frame(b"\x92\x05\x93\xa2\xc0\xaf\x01\x02"))),
    "str holding 4-byte UTF-8": lambda d: _stage_trace(d, lambda w: w.record(STAGE, ["step \U0001F600", 1, 2])),
    "Edit str holding invalid UTF-8": lambda d: _stage_trace(d, lambda w: w.raw_frame(tg.frame(
        b"\x92\x09\x96\x00\x00\xa1x\xa1y\xa1z\xa1\xff"))),
    "manifest str holding invalid UTF-8": lambda d: (_stage_trace(d), _manifest_with_raw(d, "host", b"\xa2\xff\xfe")),
    "manifest env value holding invalid UTF-8": lambda d: (
        _stage_trace(d), _manifest_with_raw(d, "env", b"\x81\xa1A\xa1\xff")),
    "manifest unknown key holding invalid UTF-8": lambda d: (
        _stage_trace(d), _manifest_with_raw(d, "zzz", b"\xa2\xff\xfe")),
    "bin for str": lambda d: _stage_trace(
        d, lambda w: w.raw_frame(tg.frame(msgpack.packb([5, [b"bin", 1, 2]], use_bin_type=True)))),
    "bin for str in a field beyond those listed": lambda d: _stage_trace(
        d, lambda w: w.raw_frame(tg.frame(msgpack.packb([5, ["x", 1, 2, b"future"]], use_bin_type=True)))),
    "manifest bin for str": lambda d: (_stage_trace(d), _manifest_with_raw(d, "host", b"\xc4\x01a")),
    "manifest key repeated": lambda d: (_stage_trace(d), _raw_manifest(
        d, ("format", "ranklens-trace"), ("version_major", 1), ("rank", 0), ("rank", 1))),
    "manifest key repeated with one value": lambda d: (_stage_trace(d), _raw_manifest(
        d, ("format", "ranklens-trace"), ("version_major", 1), ("host", "h"), ("host", "h"))),
    "manifest env key repeated": lambda d: (_stage_trace(d), _manifest_with_raw(
        d, "env", b"\x82\xa1A\xa11\xa1A\xa12")),
    # 7: a repeated Call identity is one call (the dump lists records; the index keeps the last).
    "duplicate Call records, P2P": lambda d: _stage_trace(
        d, lambda w: (w.record(CALL, tg.call(0, 0, 9, peer=1)), w.record(CALL, tg.call(0, 0, 9, peer=1, t=5)))),
    # 10: an empty payload; worldRanks of [] and -1; durationNs below -1; another format.
    "empty payload of one frame declaring 0": lambda d: _stage_trace(d, lambda w: w.payload(0, 1, 0, b"")),
    "worldRanks empty and with -1": lambda d: _stage_trace(d, lambda w: (
        w.record(COMM_INIT, [0, 2, 0, -1, -1, -1, "init", "", [], 0, True, 1]),
        w.record(COMM_INIT, [1, 2, 0, 0, 0, 0, "split", "", [3, -1], 0, True, 2]))),
    "Timing durationNs of -5": lambda d: _stage_trace(
        d, lambda w: w.record(TIMING, [0, 0, 0, 0, 0, 0, -5, False])),
}
EDGE_CASES.update(DECIDED_CASES)


# Former divergences, resolved in the C++ reader and the spec (uint64 counters, index entry checks): they must agree.
EDGE_CASES.update({
    "manifest counter negative": lambda d: _stage_trace(d, manifest={"records_written": -1}),
    "manifest counter 2^63": lambda d: _stage_trace(d, manifest={"payload_raw_bytes": 1 << 63}),
    "index entry shorter than six elements": lambda d: (
        _stage_trace(d, lambda w: w.record(CALL, tg.call(0, 0, 0))), _set_index(d, calls=[[0, 0, -1]])),
    "index listing segments out of order": lambda d: (
        _two_segment_index(d), _set_index(d, segments=lambda listed: listed[::-1])),
    "index entry naming a frame with a trailing byte": _index_at_frame_with_trailing_byte,
    "index entry into a segment with a bad header": _index_into_bad_segment,
})


def _dump_both(build, tmp_path):
    d = str(tmp_path / "rank0")
    build(d)
    cpp = subprocess.run([TRACE_DUMP, d], capture_output=True, text=True)
    py = subprocess.run([sys.executable, READER, "dump", d, "--json"], capture_output=True, text=True)
    return cpp, py


@needs_binaries
@pytest.mark.parametrize("name", list(EDGE_CASES))
def test_edge_case_agrees(tmp_path, name):
    cpp, py = _dump_both(EDGE_CASES[name], tmp_path)
    assert cpp.returncode == py.returncode, (cpp.stderr, py.stderr)
    if cpp.stdout != py.stdout:
        pytest.fail(f"{name}: {first_difference(json.loads(cpp.stdout), json.loads(py.stdout))}")


@needs_binaries
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(reason=r, strict=True))
                                  for n, (_, r) in EDGE_DIVERGENCES.items()])
def test_edge_case_known_divergence(tmp_path, name):
    cpp, py = _dump_both(EDGE_DIVERGENCES[name][0], tmp_path)
    assert cpp.returncode == py.returncode and cpp.stdout == py.stdout


def _types(doc):
    return [r["type"] for r in doc["ranks"][0]["records"]]


def _refused(cpp, py):
    return cpp.returncode != 0 and py.returncode != 0


# What each decided case must give (both readers; test_edge_case_agrees checks they give the same). Before the
# spec decided them the tools answered otherwise: payloads after the damage listed, skippable frames skipped, bin
# and invalid UTF-8 kept, repeated manifest keys resolved, recordedCommId read as int64.
DECIDED_OUTCOMES = {
    "payload reference after a damaged frame, index current": lambda doc: (
        [p["seq"] for p in doc["ranks"][0]["payloads"]] == [1] and len(doc["ranks"][0]["problems"]) == 1),
    "Timing gapNs of 3e9": lambda doc: "Timing" in _types(doc) and not doc["ranks"][0]["problems"],
    "Timing gapNs of 2^63": lambda doc: "Timing" not in _types(doc) and len(doc["ranks"][0]["problems"]) == 1,
    "CommBinding recordedCommId of 2^63": lambda doc: (
        "CommBinding" in _types(doc) and not doc["ranks"][0]["problems"]),
    "CommBinding recordedCommId of -1": lambda doc: (
        "CommBinding" not in _types(doc) and len(doc["ranks"][0]["problems"]) == 1),
    "tail of 4 bytes reading as length 0": lambda doc: doc["ranks"][0]["problems"][0]["truncated"],
    "tail of 6 bytes reading as a length over the limit": lambda doc: doc["ranks"][0]["problems"][0]["truncated"],
    "payload starting with a skippable frame": lambda doc: doc["ranks"][0]["payloads"][0]["sha256"] is None,
    "payload with a skippable frame after its frame": lambda doc: doc["ranks"][0]["payloads"][0]["sha256"] is None,
    "payload with a skippable frame between frames": lambda doc: doc["ranks"][0]["payloads"][0]["sha256"] is None,
    "str holding invalid UTF-8": lambda doc: _types(doc) == ["Stage", "Stage"],
    "str holding a UTF-8 surrogate": lambda doc: _types(doc) == ["Stage", "Stage"],
    "str holding an overlong UTF-8 form": lambda doc: _types(doc) == ["Stage", "Stage"],
    "str holding 4-byte UTF-8": lambda doc: _types(doc) == ["Stage"] * 3,
    "Edit str holding invalid UTF-8": lambda doc: _types(doc) == ["Stage", "Stage"],
    "bin for str": lambda doc: _types(doc) == ["Stage", "Stage"] and len(doc["ranks"][0]["problems"]) == 1,
    "bin for str in a field beyond those listed": lambda doc: _types(doc) == ["Stage"] * 3,
    "manifest unknown key holding invalid UTF-8": lambda doc: doc["ranks"][0]["manifest"]["format"] != "",
    "duplicate Call records, P2P": lambda doc: _types(doc).count("Call") == 2,
    "empty payload of one frame declaring 0": lambda doc: doc["ranks"][0]["payloads"][0]["sha256"] == (
        hashlib.sha256(b"").hexdigest()),
    "Timing durationNs of -5": lambda doc: "Timing" in _types(doc),
}
REFUSED_MANIFESTS = ["manifest str holding invalid UTF-8", "manifest env value holding invalid UTF-8",
                     "manifest bin for str", "manifest key repeated", "manifest key repeated with one value",
                     "manifest env key repeated"]


@needs_binaries
@pytest.mark.parametrize("name", list(DECIDED_OUTCOMES) + REFUSED_MANIFESTS)
def test_decided_case_outcome(tmp_path, name):
    cpp, py = _dump_both(DECIDED_CASES[name], tmp_path)
    if name in REFUSED_MANIFESTS:
        assert _refused(cpp, py), (cpp.stdout, py.stdout)
        assert "manifest.msgpack: key '" in cpp.stderr and "manifest.msgpack: key '" in py.stderr  # names the key
        assert json.loads(cpp.stdout)["ranks"][0]["unusable"] and json.loads(py.stdout)["ranks"][0]["unusable"]
        return
    assert cpp.returncode == 0 and py.returncode == 0, (cpp.stderr, py.stderr)
    for doc in (json.loads(cpp.stdout), json.loads(py.stdout)):
        assert DECIDED_OUTCOMES[name](doc), doc


def _dump_trace_both(path):
    cpp = subprocess.run([TRACE_DUMP, path], capture_output=True, text=True)
    py = subprocess.run([sys.executable, READER, "dump", path, "--json"], capture_output=True, text=True)
    return cpp, py


@needs_binaries
@pytest.mark.parametrize("what", ["missing", "file"])
def test_path_that_is_not_a_trace_is_refused_by_both(tmp_path, what):
    path = str(tmp_path / "x")
    if what == "file":
        _write(path, b"")
    cpp, py = _dump_trace_both(path)
    assert cpp.returncode == 2 and py.returncode == 2, (cpp.stdout, py.stdout)


@needs_binaries
def test_rank_directory_order_agrees(tmp_path):
    for name in ("rank10", "rank2", "ranklens-pid77", "rank01", "rank0", "b"):
        tg.RankWriter(str(tmp_path / name)).close()
    os.makedirs(tmp_path / "rank3")  # no manifest: reported in its place (docs/trace-format.md), never skipped
    os.makedirs(tmp_path / "c")  # not named rank<R> and no manifest: not a rank directory
    cpp, py = _dump_trace_both(str(tmp_path))
    assert cpp.returncode == 1 and py.returncode == 1 and cpp.stdout == py.stdout, (cpp.stderr, py.stderr)
    ranks = json.loads(py.stdout)["ranks"]
    # rank01 is not read (a padded number: beside rank1/ which one holds rank 1 would be a guess).
    assert [r["dir"] for r in ranks] == ["rank0", "rank2", "rank3", "rank10", "b", "ranklens-pid77"]
    assert [r.get("unusable", False) for r in ranks] == [False, False, True, False, False, False]
    assert "rank3/manifest.msgpack" in cpp.stderr and "rank3/manifest.msgpack" in py.stderr


@needs_binaries
def test_ten_digit_rank_directory_order_agrees(tmp_path):
    for name in ("rank1000000000", "rank2", "a", "rank2147483648"):
        tg.RankWriter(str(tmp_path / name)).close()
    cpp, py = _dump_trace_both(str(tmp_path))
    assert [r["dir"] for r in json.loads(py.stdout)["ranks"]] == ["rank2", "rank1000000000", "a", "rank2147483648"]
    assert cpp.returncode == 0 and cpp.stdout == py.stdout


@needs_binaries
def test_oversized_index_and_segment_agree(tmp_path):
    """The spec's size limits: an index larger than its segments can need is rebuilt unread; a segment over 4 GiB
    (sparse here) is refused at offset 0 unread. Both readers give the same records and the same verdicts."""
    sample_trace(str(tmp_path / "rank0")).close()
    sample_trace(str(tmp_path / "rank1"), rank=1).close()
    segments = sum(os.path.getsize(tmp_path / "rank0" / n) for n in os.listdir(tmp_path / "rank0")
                   if n.startswith("seg-"))
    # A well-formed index with one more key, padded past the limit: usable but for its size.
    index_path = tmp_path / "rank0" / "index.msgpack"
    with open(index_path, "rb") as f:
        index = msgpack.unpackb(f.read(), strict_map_key=False)
    index["padding"] = "x" * (8 * segments + (1 << 20))
    with open(index_path, "wb") as f:
        f.write(msgpack.packb(index))
    os.truncate(tmp_path / "rank1" / "seg-000001.rls", (1 << 32) + 1)
    cpp, py = _dump_trace_both(str(tmp_path))
    assert cpp.returncode == py.returncode == 0 and cpp.stdout == py.stdout, (cpp.stderr, py.stderr)
    rank0, rank1 = json.loads(py.stdout)["ranks"]
    assert rank0["indexRebuilt"] and not rank0["problems"]
    assert rank1["problems"] == [{"file": "seg-000001.rls", "offset": 0, "truncated": False}]


@needs_binaries
def test_directory_version_of_a_mixed_trace_agrees(tmp_path):
    """The spec: a rank directory's version is the highest minor of its manifest and of its files' headers (an edit
    by a later tool adds files of its own version). Both readers compute the same; a foreign header says nothing."""
    sample_trace(str(tmp_path / "rank0")).close()
    pay = tmp_path / "rank0" / "pay-000000.rlp"
    data = bytearray(pay.read_bytes())
    struct.pack_into("<H", data, 6, 40)  # minor 40 in a payload file's header
    pay.write_bytes(bytes(data))
    (tmp_path / "rank0" / "seg-000099.rls").write_bytes(b"\0" * 16)  # not a segment header: no version
    cpp, py = _dump_trace_both(str(tmp_path))
    assert cpp.stdout == py.stdout, (cpp.stderr, py.stderr)
    assert json.loads(py.stdout)["ranks"][0]["directoryVersion"] == "1.40"


# ------------------------------------------------------------------------------------------------ Python only

def sample_trace(directory, rank=0):
    """A small trace of every record type over two segments, with payloads; returns the writer."""
    w = tg.RankWriter(directory, rank=rank)
    w.record(COMM_INIT, [0, 2, rank, -1, -1, -1, "init", "world", [0, 1], 0, True, 10])
    w.record(STAGE, ["forward", 1, 11])
    w.record(GROUP_BEGIN, [5, 12])
    w.record(CALL, tg.call(0, 0, 0))
    w.payload(0, 0, 0, b"\x01" * 16, datatype=7)
    w.record(GROUP_END, [5, 1, 0, 13])
    w.record(TIMING, [0, 0, 0, 7, 5, 100, 20, False])
    w.new_segment()
    w.record(CALL, tg.call(0, 0, 9, peer=1))
    w.payload(0, 0, 9, b"\x02" * 16, datatype=7, peer=1)
    w.record(CALL, tg.call(0, 1, 3))
    w.payload(0, 1, 3, bytes(range(16)), datatype=1)
    w.record(EDIT, [0, 0, "test", "inject", "", "me", 123])
    w.record(COMM_END, [0, "destroy", 14])
    return w


def open_rank(directory, **limits):
    return rt.RankReader.open(str(directory), rt.Limits(**limits))


def test_reads_every_record_type(tmp_path):
    sample_trace(tmp_path).close()
    reader = open_rank(tmp_path)
    assert reader.problems == [] and not reader.index_rebuilt
    names = [r.name for r in reader.records()]
    assert names == ["CommInit", "Stage", "GroupBegin", "Call", "PayloadRef", "GroupEnd", "Timing", "Call",
                     "PayloadRef", "Call", "PayloadRef", "Edit", "CommEnd"]
    first = next(reader.records())
    assert (first.segment, first.offset) == (0, 16)
    assert first.fields["worldRanks"] == [0, 1] and first.fields["blocking"] is True
    assert [reader.read_payload(p) for p in reader.payloads()] == [b"\x01" * 16, bytes(range(16)), b"\x02" * 16]
    assert reader.call(0, 9, 1, 0)["op"] == 9 and reader.call(0, 8, 1, 0) is None


def test_bad_crc_is_corruption_and_later_segments_are_read(tmp_path):
    w = sample_trace(tmp_path)
    w.close()
    # The third frame of segment 0 (GroupBegin): flip a body byte.
    records = open_rank(tmp_path).all_records()
    offset = records[2].offset
    data = bytearray(open(w.seg_path(0), "rb").read())
    data[offset + 8 + 1] ^= 0x40
    open(w.seg_path(0), "wb").write(data)
    reader = open_rank(tmp_path)
    assert [(p.name, p.offset, p.truncated) for p in reader.problems] == [("seg-000000.rls", offset, False)]
    assert "CRC" in reader.problems[0].reason
    names = [r.name for r in reader.records()]
    assert names[:2] == ["CommInit", "Stage"] and "GroupEnd" not in names and names[-1] == "CommEnd"
    # Same sizes: the index matches the segment list, but the PayloadRef it names follows the damage in segment 0,
    # so it is not part of the trace (docs/trace-format.md): the lookup finds nothing and the index is rebuilt.
    assert not reader.index_rebuilt
    assert reader.payload(0, 0, -1, 0) is None and reader.index_rebuilt
    os.remove(os.path.join(str(tmp_path), "index.msgpack"))
    reader = open_rank(tmp_path)
    assert reader.index_rebuilt and reader.payload(0, 0, -1, 0) is None


@pytest.mark.parametrize("cut", [3, 8, 9, -1])
def test_truncation_keeps_every_frame_before_it(tmp_path, cut):
    w = sample_trace(tmp_path)
    w.close()
    last = open_rank(tmp_path).all_records()[-1]
    size = os.path.getsize(w.seg_path(1))
    keep = last.offset + cut if cut >= 0 else size - 1
    tg.truncate(w.seg_path(1), keep)
    reader = open_rank(tmp_path)
    assert [(p.name, p.offset, p.truncated) for p in reader.problems] == [("seg-000001.rls", last.offset, True)]
    assert reader.problems[0].describe().startswith(f"{w.seg_path(1)}: offset {last.offset}: truncated")
    assert [r.name for r in reader.records()][-1] == "Edit"
    assert reader.index_rebuilt


def test_truncated_file_header(tmp_path):
    w = sample_trace(tmp_path)
    w.close()
    tg.truncate(w.seg_path(1), 10)
    reader = open_rank(tmp_path)
    assert [(p.name, p.offset, p.truncated) for p in reader.problems] == [("seg-000001.rls", 0, True)]


def test_bad_magic(tmp_path):
    w = sample_trace(tmp_path)
    w.close()
    tg.patch(w.seg_path(0), 0, b"XLSG")
    reader = open_rank(tmp_path)
    assert [(p.name, p.offset, p.truncated) for p in reader.problems] == [("seg-000000.rls", 0, False)]
    assert "magic" in reader.problems[0].reason
    assert all(r.segment == 1 for r in reader.records())


def test_segment_index_must_match_its_name(tmp_path):
    w = sample_trace(tmp_path)
    w.close()
    tg.patch(w.seg_path(1), 8, (7).to_bytes(4, "little"))
    assert [(p.name, p.offset) for p in open_rank(tmp_path).problems] == [("seg-000001.rls", 8)]


def test_major_version_2_is_refused_naming_both_versions(tmp_path):
    w = sample_trace(tmp_path)
    w.close(manifest_overrides={"version_major": 2, "version_minor": 3})
    with pytest.raises(rt.TraceFormatError) as err:
        open_rank(tmp_path)
    assert "2.3" in str(err.value) and f"1.{rt.FORMAT_MINOR}" in str(err.value)
    res = subprocess.run([sys.executable, READER, "dump", str(tmp_path)], capture_output=True, text=True)
    assert res.returncode == 2 and "2.3" in res.stderr
    # A segment of major version 2 inside a 1.x directory: that segment is refused, the rest read.
    w.close()
    tg.patch(w.seg_path(1), 4, (2).to_bytes(2, "little"))
    reader = open_rank(tmp_path)
    assert [(p.name, p.offset) for p in reader.problems] == [("seg-000001.rls", 4)]  # at the version field
    assert "2.0" in reader.problems[0].reason and f"1.{rt.FORMAT_MINOR}" in reader.problems[0].reason


def test_newer_minor_version_reads(tmp_path):
    w = tg.RankWriter(str(tmp_path))
    w.record(CALL, tg.call(0, 0, 0) + ["extra", {"x": 1}, [1, 2]])   # unknown trailing fields: ignored
    w.record(77, ["a record type from 1.7", 1])                       # unknown type: skipped
    w.record(COMM_INIT, [3, 2, 1])                                    # missing trailing fields: defaults
    w.record(PAYLOAD_REF, [0, 9, 0, 1, 0, 0, 0, 16, 9, 0])            # peer missing: -1
    w.close(manifest_overrides={"version_minor": 7, "new_key": [1, 2], "another": {"a": b"\x00"}})
    reader = open_rank(tmp_path)
    assert reader.problems == []
    assert reader.manifest["version_minor"] == 7 and "new_key" not in reader.manifest
    recs = list(reader.records())
    assert [r.name for r in recs] == ["Call", "CommInit", "PayloadRef"]
    assert recs[0].fields == dict(zip([f for f, _, _ in rt.RECORD_TYPES[CALL][1]], tg.call(0, 0, 0)))
    assert recs[1].fields == {"commId": 3, "nranks": 2, "rank": 1, "parentId": -1, "color": -1, "key": -1,
                              "how": "", "name": "", "worldRanks": [], "cudaDev": 0, "blocking": True, "timeNs": 0}
    assert recs[2].fields["peer"] == -1 and recs[2].fields["rawCrc32"] == 0
    assert len(reader.all_records()) == 4


def test_frame_length_over_the_limit_is_corruption(tmp_path):
    w = tg.RankWriter(str(tmp_path))
    w.record(STAGE, ["a", 1, 2])
    loc = w.raw_frame(tg.struct.pack("<II", 0xFFFFFFF0, 0) + b"xx")
    w.close()
    reader = open_rank(tmp_path)
    assert [(p.offset, p.truncated) for p in reader.problems] == [(loc[1], False)]
    assert [r.name for r in reader.records()] == ["Stage"]
    # The limit is the reader's: a smaller one refuses an ordinary frame.
    reader = open_rank(tmp_path, max_record_bytes=4)
    assert [(p.offset, p.truncated) for p in reader.problems] == [(16, False)]


@pytest.mark.parametrize("bad", [b"", msgpack.packb([3]), msgpack.packb({"a": 1}), msgpack.packb([-3, []]),
                                 msgpack.packb([1 << 31, []]), msgpack.packb([3, 5]), msgpack.packb([True, []]),
                                 msgpack.packb(["3", []]), msgpack.packb([3, []]) + b"\x00", b"\xc1",
                                 msgpack.packb([77, "record of an unknown type, not an array"]),
                                 msgpack.packb([3, [], 4])])
def test_body_not_type_record_is_corruption(tmp_path, bad):
    w = tg.RankWriter(str(tmp_path))
    w.record(STAGE, ["a", 1, 2])
    loc = w.raw_frame(tg.frame(bad))
    w.record(STAGE, ["b", 1, 2])
    w.close()
    reader = open_rank(tmp_path)
    assert [(p.offset, p.truncated) for p in reader.problems] == [(loc[1], False)]
    assert [r.fields["name"] for r in reader.records()] == ["a"]


@pytest.mark.parametrize("record", [[0, 1, 0, ["a"]],              # Call: seq is an array
                                    [0, 2, 0, 0, 0, -1, 0, -5],      # Call: stream (uint64) negative
                                    [0, 2, 1 << 31],                 # Call: op (int32) out of range
                                    [0, 2, True],                    # Call: op is a bool
                                    [0, 2, 0, 0, 0, -1, 0, 0, 0, 0, 0, b"bytes"],  # Call: bytes is bin
                                    b"\xa2\xff\xfe"])                # invalid UTF-8 (see below)
def test_malformed_record_is_reported_and_skipped(tmp_path, record):
    w = tg.RankWriter(str(tmp_path))
    w.record(STAGE, ["a", 1, 2])
    if isinstance(record, bytes):  # [Stage, [<str holding invalid UTF-8>]]
        loc = w.raw_frame(tg.frame(b"\x92\x05\x91" + record))
    else:
        loc = w.raw_frame(tg.frame(msgpack.packb([CALL, record], use_bin_type=True)))
    w.record(STAGE, ["b", 1, 2])
    w.close(index=False)
    reader = open_rank(tmp_path)
    assert [(p.offset, p.truncated) for p in reader.problems] == [(loc[1], False)]
    assert "malformed" in reader.problems[0].reason
    assert [r.fields["name"] for r in reader.records()] == ["a", "b"]


def test_record_type_zero_is_an_unknown_type(tmp_path):
    w = tg.RankWriter(str(tmp_path))
    w.raw_frame(tg.frame(msgpack.packb([0, []])))
    w.raw_frame(tg.frame(msgpack.packb([(1 << 31) - 1, ["x"]])))
    w.record(STAGE, ["b", 1, 2])
    w.close()
    reader = open_rank(tmp_path)
    assert reader.problems == [] and [r.type for r in reader.all_records()] == [0, (1 << 31) - 1, STAGE]


def payload_reader(tmp_path, blob, data, raw_bytes=None, raw_crc=None, **limits):
    w = tg.RankWriter(str(tmp_path))
    w.record(CALL, tg.call(0, 0, 0, datatype=1, count=len(data)))
    w.payload(0, 0, 0, data, blob=blob, raw_bytes=raw_bytes, raw_crc=raw_crc)
    w.close()
    reader = open_rank(tmp_path, **limits)
    (ref,) = reader.payloads()
    return reader, ref


def payload_problem(reader, ref):
    with pytest.raises(rt.PayloadError) as err:
        reader.read_payload(ref)
    return err.value.problem


def test_payload_hand_made_frame_reads(tmp_path):
    data = os.urandom(1000)
    reader, ref = payload_reader(tmp_path, tg.zstd_frame(data), data)
    assert reader.read_payload(ref) == data


def test_payload_of_a_frame_per_block_reads(tmp_path):
    # Format 1.10: a payload compressed straight out of the recorder's staging is one zstd frame per MiB; any size
    # of frame reads.
    data = os.urandom(2 * 262144 + 1000)
    blob = b"".join(tg.zstd_frame(data[i:i + 262144]) for i in range(0, len(data), 262144))
    reader, ref = payload_reader(tmp_path, blob, data)
    assert reader.read_payload(ref) == data
    # Frames that declare more than the reference, in all; frames left over once the payload is whole; a blob that
    # ends a frame short.
    reader, ref = payload_reader(tmp_path / "b", blob, data, raw_bytes=2 * 262144 + 500)
    assert "zstd frames declare 525288 bytes" in payload_problem(reader, ref).reason
    reader, ref = payload_reader(tmp_path / "c", blob + bytes(5), data)
    assert "5 unused bytes after its frame" in payload_problem(reader, ref).reason
    reader, ref = payload_reader(tmp_path / "d", blob, data, raw_bytes=2 * 262144)
    assert "unused bytes after its frame" in payload_problem(reader, ref).reason
    reader, ref = payload_reader(tmp_path / "e", blob, data, raw_bytes=len(data) + 1)
    assert "decompressed" in payload_problem(reader, ref).reason


def test_payload_frame_that_decodes_to_less_than_it_declares(tmp_path):
    # Found by fuzz_payload: a 15-byte frame that declares 35 bytes and ends after none. Followed by a
    # frame of the whole payload, the sizes produced add up and the CRC matches, but the declared ones (35 + 64) do
    # not: refused, as by the C++ reader.
    lying = bytes.fromhex("28b52ffd2023000000000000010000")
    data = os.urandom(64)
    reader, ref = payload_reader(tmp_path, lying + tg.zstd_frame(data), data)
    assert "zstd frame at byte 0 of the blob decodes to 0 bytes, declares 35" in payload_problem(reader, ref).reason


def test_payload_declared_size_mismatch(tmp_path):
    data = b"x" * 100
    # The frame declares 100 bytes, the reference 99.
    reader, ref = payload_reader(tmp_path, None, data, raw_bytes=99)
    problem = payload_problem(reader, ref)
    assert problem.name == "pay-000000.rlp" and problem.offset == 16 and not problem.truncated
    assert "declares 100" in problem.reason
    # The frame declares 50 bytes (and the reference says 50) but produces 100.
    reader, ref = payload_reader(tmp_path / "b", tg.zstd_frame(data, declared=50), data, raw_bytes=50)
    assert "zstd" in payload_problem(reader, ref).reason


def test_payload_produces_less_than_declared(tmp_path):
    data = b"y" * 100
    reader, ref = payload_reader(tmp_path, tg.zstd_frame(data, declared=200), data, raw_bytes=200)
    assert "zstd" in payload_problem(reader, ref).reason


def test_payload_bomb_guard(tmp_path):
    bomb = tg.rle_bomb_frame(32 << 30)  # 32 GiB declared, 20 bytes on disk
    reader, ref = payload_reader(tmp_path, bomb, b"", raw_bytes=32 << 30)
    assert "limit" in payload_problem(reader, ref).reason
    reader, ref = payload_reader(tmp_path / "b", bomb, b"", raw_bytes=1000)
    assert "limit" in payload_problem(reader, ref).reason  # the declared size alone is refused
    data = bytes(4096)
    reader, ref = payload_reader(tmp_path / "c", None, data, max_payload_bytes=4095)
    assert "limit" in payload_problem(reader, ref).reason
    reader, ref = payload_reader(tmp_path / "d", None, data, max_payload_bytes=4096)
    assert reader.read_payload(ref) == data


def test_payload_without_content_size_is_refused_without_checksum_read(tmp_path):
    data = b"z" * 64
    reader, ref = payload_reader(tmp_path, tg.zstd_frame(data, declared=-1), data)
    assert "content size" in payload_problem(reader, ref).reason
    # Writers leave zstd's content checksum out since format 1.9: rawCrc32 checks the bytes.
    reader, ref = payload_reader(tmp_path / "b", tg.zstd_frame(data, checksum=False), data)
    assert reader.read_payload(ref) == data
    reader, ref = payload_reader(tmp_path / "c", tg.zstd_frame(data, checksum=False), data,
                                 raw_crc=zlib.crc32(data) ^ 1)
    assert "rawCrc32" in payload_problem(reader, ref).reason


def test_payload_frame_with_an_empty_compressed_block_reads(tmp_path):
    reader, ref = payload_reader(tmp_path, EMPTY_COMPRESSED_BLOCK_FRAME, b"\x07\x09")
    assert reader.read_payload(ref) == b"\x07\x09"
    # Cut short inside it, and followed by a stray byte: refused.
    reader, ref = payload_reader(tmp_path / "b", EMPTY_COMPRESSED_BLOCK_FRAME[:-3], b"\x07\x09")
    assert "damaged zstd frame" in payload_problem(reader, ref).reason
    reader, ref = payload_reader(tmp_path / "c", EMPTY_COMPRESSED_BLOCK_FRAME + b"\x00", b"\x07\x09")
    assert "unused" in payload_problem(reader, ref).reason


def test_payload_zstd_checksum(tmp_path):
    data = b"w" * 64
    frame = bytearray(tg.zstd_frame(data))
    frame[-1] ^= 1
    reader, ref = payload_reader(tmp_path, bytes(frame), data)
    assert "zstd" in payload_problem(reader, ref).reason


def test_payload_raw_crc32(tmp_path):
    data = b"v" * 64
    reader, ref = payload_reader(tmp_path, None, data, raw_crc=zlib.crc32(data) ^ 1)
    assert "rawCrc32" in payload_problem(reader, ref).reason


def test_payload_frame_must_lie_inside_the_file(tmp_path):
    data = os.urandom(300)
    reader, ref = payload_reader(tmp_path, None, data)
    bad = dict(ref, compressedBytes=ref["compressedBytes"] - 1)  # the reference cuts the frame short
    assert "zstd" in payload_problem(reader, bad).reason
    bad = dict(ref, offset=4)
    assert not payload_problem(reader, bad).truncated
    bad = dict(ref, offset=ref["offset"] + 10000)  # starts past the end: outside the file, not a truncation
    problem = payload_problem(reader, bad)
    assert not problem.truncated and problem.offset == bad["offset"]
    tg.truncate(os.path.join(str(tmp_path), "pay-000000.rlp"), ref["offset"] + 5)
    problem = payload_problem(reader, ref)
    assert problem.truncated and problem.offset == ref["offset"]


def test_payload_frame_must_fill_the_reference(tmp_path):
    data = os.urandom(300)
    w = tg.RankWriter(str(tmp_path))
    blob = zstandard.ZstdCompressor(write_checksum=True).compress(data)
    w.payload(0, 0, 0, data, blob=blob + b"\x00\x00\x00")  # three stray bytes inside compressedBytes
    w.close()
    reader = open_rank(tmp_path)
    assert "unused" in payload_problem(reader, reader.payloads()[0]).reason


def test_payload_file_header_and_missing_file(tmp_path):
    data = os.urandom(30)
    reader, ref = payload_reader(tmp_path, None, data)
    tg.patch(os.path.join(str(tmp_path), "pay-000000.rlp"), 4, b"\x02\x00")
    problem = payload_problem(reader, ref)
    assert "version 2.0" in problem.reason and problem.offset == ref["offset"]  # payload problems: at the blob
    tg.patch(os.path.join(str(tmp_path), "pay-000000.rlp"), 0, b"RLSG\x01\x00")
    assert "magic" in payload_problem(reader, ref).reason
    problem = payload_problem(reader, dict(ref, file=3))
    assert "cannot read" in problem.reason and problem.name == "pay-000003.rlp" and problem.offset == ref["offset"]


def test_last_payload_reference_wins_and_call_identity(tmp_path):
    w = tg.RankWriter(str(tmp_path))
    w.payload(0, 5, 0, b"old")
    w.payload(0, 5, 8, b"send", peer=1)       # Send seq 5 to 1: another call
    w.payload(0, 5, 9, b"recv1", peer=1)      # Recv seq 5 from 1: another call
    w.payload(0, 5, 9, b"recv2", peer=2)      # Recv seq 5 from 2: another call
    w.new_segment()
    w.payload(0, 5, 3, b"new", peer=4)        # collectives share a sequence and ignore peer: replaces "old"
    w.payload(1, 5, 0, b"comm1")              # another communicator
    w.payload(0, 5, 9, b"recv1-edited", peer=1)
    w.close(index=False)
    reader = open_rank(tmp_path)
    assert reader.index_rebuilt
    got = {rt.record_key(PAYLOAD_REF, p): reader.read_payload(p) for p in reader.payloads()}
    assert got == {(0, 0, -1, 5): b"new", (0, 1, 1, 5): b"send", (0, 2, 1, 5): b"recv1-edited",
                   (0, 2, 2, 5): b"recv2", (1, 0, -1, 5): b"comm1"}
    assert list(got) == sorted(got)  # (commId, kind, peer, seq) order
    assert reader.payload(0, 2, 7, 5)["op"] == 3


def test_index_is_used_when_consistent_and_rebuilt_otherwise(tmp_path):
    w = tg.RankWriter(str(tmp_path))
    first = w.record(PAYLOAD_REF, [0, 1, 0, 1, 3, 3, 0, 16, 0, 0, 3, -1])
    w.record(PAYLOAD_REF, [0, 1, 0, 1, 4, 4, 0, 16, 0, 0, 3, -1])
    w.close()
    # An index naming the first reference: consistent with the segments, so it is what the reader uses.
    w.write_index(payloads=[[0, 1, 0, -1, first[0], first[1]]])
    reader = open_rank(tmp_path)
    assert not reader.index_rebuilt and reader.payloads()[0]["count"] == 3
    # Another segment file: the index no longer describes the directory.
    with open(os.path.join(str(tmp_path), "seg-000001.rls"), "wb") as f:
        f.write(tg.file_header(tg.SEGMENT_MAGIC, 1))
    reader = open_rank(tmp_path)
    assert reader.index_rebuilt and reader.payloads()[0]["count"] == 4
    os.remove(os.path.join(str(tmp_path), "seg-000001.rls"))
    # An index entry that does not name a matching record: rebuilt when a lookup uses it (listing the payloads
    # uses every payloads entry). A damaged index, a missing one: rebuilt at once.
    w.write_index(payloads=[[0, 1, 0, -1, 0, 17]])
    reader = open_rank(tmp_path)
    assert not reader.index_rebuilt
    assert reader.payloads()[0]["count"] == 4 and reader.index_rebuilt
    open(os.path.join(str(tmp_path), "index.msgpack"), "wb").write(b"\xc1garbage")
    assert open_rank(tmp_path).index_rebuilt
    os.remove(os.path.join(str(tmp_path), "index.msgpack"))
    reader = open_rank(tmp_path)
    assert reader.index_rebuilt and reader.problems == []


def test_index_entries_are_checked_when_used(tmp_path):
    w = tg.RankWriter(str(tmp_path))
    w.record(CALL, tg.call(0, 0, 0))
    w.record(CALL, tg.call(0, 1, 0))
    w.payload(0, 1, 0, b"abc")
    w.close()
    good = dict((tuple(e[:4]), e) for e in w.calls.values())
    # The calls entry of seq 1 points at the Call of seq 0: another call.
    bad = [good[(0, 0, 0, -1)], good[(0, 1, 0, -1)][:4] + good[(0, 0, 0, -1)][4:]]
    w.write_index(payloads=list(w.payrefs.values()))
    _set_index(str(tmp_path), calls=bad)
    reader = open_rank(tmp_path)
    assert [p["seq"] for p in reader.payloads()] == [1] and not reader.index_rebuilt  # calls entries not used
    assert reader.call(0, 0, -1, 0)["seq"] == 0 and not reader.index_rebuilt          # a good entry
    assert reader.call(0, 0, -1, 1)["seq"] == 1 and reader.index_rebuilt               # the bad one: rebuilt once
    assert "does not name a matching Call" in reader.index_note
    assert reader.call(0, 0, -1, 2) is None
    # Entries that cannot be entries (past their segment, out of range) make the index unusable at once.
    _set_index(str(tmp_path), calls=[[0, 0, -1, -1, 0, 1 << 20]])
    assert open_rank(tmp_path).index_rebuilt
    _set_index(str(tmp_path), calls=[[0, 0, 1 << 31, -1, 0, 16]])
    assert open_rank(tmp_path).index_rebuilt


def test_segment_gap_is_reported(tmp_path):
    w = sample_trace(tmp_path)
    w.new_segment()
    w.record(STAGE, ["late", 1, 2])
    w.close()
    os.remove(w.seg_path(1))
    reader = open_rank(tmp_path)
    # Reading stops at the gap: seg-000002 is not read.
    assert [(p.name, p.offset) for p in reader.problems] == [("seg-000001.rls", 0)]
    assert {r.segment for r in reader.records()} == {0} and reader.index_rebuilt
    os.remove(w.seg_path(0))
    assert [(p.name, p.offset) for p in open_rank(tmp_path).problems] == [("seg-000000.rls", 0)] * 2
    os.remove(w.seg_path(2))
    assert [p.reason for p in open_rank(tmp_path).problems] == ["no segment file"]


def test_unusable_manifest(tmp_path):
    w = sample_trace(tmp_path)
    w.close()
    m = os.path.join(str(tmp_path), "manifest.msgpack")
    for content in (b"", b"\x93\x01\x02\x03", msgpack.packb({"format": "other", "version_major": 1}),
                    msgpack.packb({"format": "ranklens-trace", "version_major": 1, "rank": "zero"})):
        open(m, "wb").write(content)
        with pytest.raises(rt.TraceFormatError):
            open_rank(tmp_path)
    os.remove(m)
    with pytest.raises(rt.TraceFormatError):
        open_rank(tmp_path)


def test_manifest_keys_and_widths(tmp_path):
    sample_trace(tmp_path).close()
    m = os.path.join(str(tmp_path), "manifest.msgpack")
    required = {"format": "ranklens-trace", "version_major": 1}
    for refused in ({"format": "ranklens-trace"}, {"version_major": 1}, dict(required, version_major=True),
                    dict(required, records_written=-1),
                    dict(required, segments=-1), dict(required, rank=1 << 31)):
        tg.write_msgpack(m, refused)
        with pytest.raises(rt.TraceFormatError):
            open_rank(tmp_path)
    _raw_manifest(str(tmp_path), ("format", "ranklens-trace"), ("version_major", 1), (7, 1))  # a key not a str
    with pytest.raises(rt.TraceFormatError):
        open_rank(tmp_path)
    # Counters are uint64; only format and version_major are required, the rest defaults.
    tg.write_msgpack(m, dict(required, records_written=1 << 63, payload_raw_bytes=(1 << 64) - 1))
    manifest = open_rank(tmp_path).manifest
    assert manifest["records_written"] == 1 << 63 and manifest["payload_raw_bytes"] == (1 << 64) - 1
    assert manifest["rank"] == manifest["world_size"] == manifest["local_rank"] == -1 and manifest["env"] == {}


def test_rank_directories(tmp_path):
    for r in (10, 2, 0):
        sample_trace(tmp_path / f"rank{r}", rank=r).close()
    os.makedirs(tmp_path / "rank01")
    os.makedirs(tmp_path / "notes")
    assert [os.path.basename(d) for d in rt.rank_directories(str(tmp_path))] == ["rank0", "rank2", "rank10"]
    # Any global rank (int32) is in rank order; larger numbers are other directories, listed by name; a padded
    # number is not read at all.
    for name in ("rank2147483647", "rank2147483648", "rank007", "ranklens-pid9"):
        sample_trace(tmp_path / name).close()
    assert [os.path.basename(d) for d in rt.rank_directories(str(tmp_path))] == [
        "rank0", "rank2", "rank10", "rank2147483647", "rank2147483648", "ranklens-pid9"]
    assert rt.rank_directories(str(tmp_path / "rank2")) == [str(tmp_path / "rank2")]


def test_cli_dump(tmp_path):
    w = sample_trace(tmp_path / "rank0")
    w.close()
    tg.truncate(w.seg_path(1), os.path.getsize(w.seg_path(1)) - 2)
    doc = json.loads(run_py(str(tmp_path)))
    (rank,) = doc["ranks"]
    assert rank["dir"] == "rank0" and rank["indexRebuilt"]
    assert rank["problems"] == [{"file": "seg-000001.rls", "offset": rank["problems"][0]["offset"],
                                 "truncated": True}]
    assert sorted(rank["manifest"]) == sorted(rt.MANIFEST_KEYS)
    assert [(p["commId"], p["op"], p["peer"], p["seq"]) for p in rank["payloads"]] == [(0, 0, -1, 0), (0, 3, -1, 1),
                                                                                        (0, 9, 1, 0)]
    assert rank["payloads"][0]["sha256"] == hashlib.sha256(b"\x01" * 16).hexdigest()
    text = run_py_text(str(tmp_path))
    assert "truncated" in text and "payload comm 0 Recv peer 1 seq 0" in text
    # Canonical: sorted keys, no whitespace, ASCII, one line.
    out = run_py(str(tmp_path))
    assert out == rt.canonical_json(json.loads(out)) + "\n" and out.isascii() and out.count("\n") == 1
    assert "reason" in run_py(str(tmp_path), "--with-reasons")


def run_py_text(path):
    res = subprocess.run([sys.executable, READER, "dump", path], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_copying_a_rank_keeps_it_readable(tmp_path):
    sample_trace(tmp_path / "a" / "rank0").close()
    shutil.copytree(tmp_path / "a" / "rank0", tmp_path / "b" / "rank3")
    doc = rt.dump_trace(str(tmp_path / "b"))
    assert doc["ranks"][0]["dir"] == "rank3" and not doc["ranks"][0]["indexRebuilt"]
