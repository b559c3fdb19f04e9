# SPDX-License-Identifier: Apache-2.0
"""Test helpers: a tiny trace writer written from docs/trace-format.md (so the Python reader can be tested on
hand-made and deliberately damaged traces), XXH64 and hand-built zstd frames (for payload checks zstd's own
encoder cannot produce: lying content sizes, missing checksums, bombs)."""

import os
import struct
import zlib

import msgpack
import zstandard

SEGMENT_MAGIC = 0x47534C52
PAYLOAD_MAGIC = 0x59504C52

# record type codes
COMM_INIT, COMM_END, CALL, GROUP_END, STAGE, GROUP_BEGIN, TIMING, PAYLOAD_REF, EDIT = range(1, 10)


def file_header(magic, index, major=1, minor=0):
    return struct.pack("<IHHII", magic, major, minor, index, 0)


def frame(body: bytes, crc=None) -> bytes:
    return struct.pack("<II", len(body), zlib.crc32(body) if crc is None else crc) + body


def body(type_code, record) -> bytes:
    return msgpack.packb([type_code, record], use_bin_type=True)


def manifest(rank=0, world_size=1, **overrides):
    m = {"format": "ranklens-trace", "version_major": 1, "version_minor": 0, "rank": rank, "world_size": world_size,
         "local_rank": rank, "host": "testhost", "pid": 4242, "gpu_name": "", "gpu_uuid": "", "nccl_version": 22809,
         "mode": "record", "writer": "tracegen.py", "start_time_ns": 1, "end_time_ns": 2,
         "env": {"RANK": str(rank)}, "closed": True, "records_written": 0, "records_dropped": 0,
         "payloads_written": 0, "payloads_dropped": 0, "payload_raw_bytes": 0, "payload_compressed_bytes": 0,
         "segments": 0, "payload_files": 0}
    m.update(overrides)
    return m


def call(comm, seq, op, datatype=7, count=4, peer=-1, nbytes=16, t=0, host_ns=-1):
    return [comm, seq, op, datatype, count, peer, 0 if op in (0, 2, 4) else -1, 7, 0, 2, 0, nbytes, t, host_ns]


class RankWriter:
    """Writes one rank directory. Records go to the current segment (`new_segment()` starts the next), payload
    blobs to the current payload file. `close()` writes the manifest and (optionally) the index."""

    def __init__(self, directory, rank=0, world_size=1):
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self.rank, self.world_size = rank, world_size
        self.segments = [bytearray(file_header(SEGMENT_MAGIC, 0))]
        self.pay = [bytearray(file_header(PAYLOAD_MAGIC, 0))]
        self.calls = {}     # key -> [comm, seq, op, peer, seg, off]
        self.payrefs = {}   # key -> same, last wins

    def new_segment(self):
        self.segments.append(bytearray(file_header(SEGMENT_MAGIC, len(self.segments))))

    def new_payload_file(self):
        self.pay.append(bytearray(file_header(PAYLOAD_MAGIC, len(self.pay))))

    def raw_frame(self, data: bytes):
        seg = self.segments[-1]
        loc = (len(self.segments) - 1, len(seg))
        seg += data
        return loc

    def record(self, type_code, record):
        loc = self.raw_frame(frame(body(type_code, record)))
        if type_code in (CALL, PAYLOAD_REF):
            comm, seq, op = record[0], record[1], record[2]
            i = 5 if type_code == CALL else 11
            peer = record[i] if len(record) > i else -1
            kind = 1 if op == 8 else 2 if op == 9 else 0
            key = (comm, kind, peer if kind else -1, seq)
            (self.calls if type_code == CALL else self.payrefs)[key] = [comm, seq, op, peer, loc[0], loc[1]]
        return loc

    def blob(self, blob: bytes):
        f = self.pay[-1]
        off = len(f)
        f += blob
        return len(self.pay) - 1, off

    def payload(self, comm, seq, op, data: bytes, datatype=1, peer=-1, blob=None, raw_bytes=None, raw_crc=None):
        """Stores `data` (or the given `blob`) and appends its PayloadRef; returns the reference's fields."""
        if blob is None:
            blob = zstandard.ZstdCompressor(level=3, write_checksum=True, write_content_size=True).compress(data)
        file, off = self.blob(blob)
        ref = [comm, seq, op, datatype, len(data), len(data) if raw_bytes is None else raw_bytes, file, off,
               len(blob), zlib.crc32(data) if raw_crc is None else raw_crc, 3, peer]
        self.record(PAYLOAD_REF, ref)
        return ref

    def close(self, index=True, manifest_overrides=None):
        for i, seg in enumerate(self.segments):
            with open(os.path.join(self.dir, f"seg-{i:06d}.rls"), "wb") as f:
                f.write(seg)
        for i, pay in enumerate(self.pay):
            with open(os.path.join(self.dir, f"pay-{i:06d}.rlp"), "wb") as f:
                f.write(pay)
        m = manifest(self.rank, self.world_size, segments=len(self.segments), payload_files=len(self.pay))
        m.update(manifest_overrides or {})
        write_msgpack(os.path.join(self.dir, "manifest.msgpack"), m)
        if index:
            self.write_index()

    def write_index(self, payloads=None):
        idx = {"version_major": 1, "version_minor": 0,
               "segments": [[f"seg-{i:06d}.rls", len(s)] for i, s in enumerate(self.segments)],
               "calls": list(self.calls.values()),
               "payloads": list(self.payrefs.values()) if payloads is None else payloads}
        write_msgpack(os.path.join(self.dir, "index.msgpack"), idx)

    def seg_path(self, i):
        return os.path.join(self.dir, f"seg-{i:06d}.rls")

    def pay_path(self, i):
        return os.path.join(self.dir, f"pay-{i:06d}.rlp")


def write_msgpack(path, obj):
    with open(path, "wb") as f:
        f.write(msgpack.packb(obj, use_bin_type=True))


def patch(path, offset, data: bytes):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def truncate(path, size):
    with open(path, "r+b") as f:
        f.truncate(size)


# ------------------------------------------------------------------------------------------------ zstd by hand

_M = (1 << 64) - 1
_P1, _P2, _P3, _P4, _P5 = (11400714785074694791, 14029467366897019727, 1609587929392839161, 9650029242287828579,
                          2870177450012600261)


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc, lane):
    return (_rotl((acc + lane * _P2) & _M, 31) * _P1) & _M


def xxh64(data: bytes, seed=0) -> int:
    n, i = len(data), 0
    u64 = lambda j: int.from_bytes(data[j:j + 8], "little")  # noqa: E731
    if n >= 32:
        v = [(seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed & _M, (seed - _P1) & _M]
        while i + 32 <= n:
            v = [_round(v[k], u64(i + 8 * k)) for k in range(4)]
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M
        for lane in v:
            h = ((h ^ _round(0, lane)) * _P1 + _P4) & _M
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while i + 8 <= n:
        h = (_rotl(h ^ _round(0, u64(i)), 27) * _P1 + _P4) & _M
        i += 8
    if i + 4 <= n:
        h = (_rotl(h ^ ((int.from_bytes(data[i:i + 4], "little") * _P1) & _M), 23) * _P2 + _P3) & _M
        i += 4
    while i < n:
        h = (_rotl(h ^ ((data[i] * _P5) & _M), 11) * _P1) & _M
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M
    h ^= h >> 29
    h = (h * _P3) & _M
    return h ^ (h >> 32)


def zstd_frame(content: bytes, declared=None, checksum=True, blocks=None) -> bytes:
    """A zstd frame of raw blocks holding `content`, declaring `declared` bytes (default: the real size; None via
    declared=-1: no content size field). `blocks` overrides the block data (for frames that produce more)."""
    declared = len(content) if declared is None else declared
    if declared < 0:   # no content size: FCS flag 0, not single segment, window descriptor present
        out = struct.pack("<IB", 0xFD2FB528, (0x04 if checksum else 0)) + bytes([0x58])  # window 2^(10+11)
    else:
        out = struct.pack("<IBQ", 0xFD2FB528, 0xC0 | 0x20 | (0x04 if checksum else 0), declared)
    data = content if blocks is None else blocks
    chunks = [data[i:i + 65536] for i in range(0, len(data), 65536)] or [b""]
    for k, chunk in enumerate(chunks):
        last = 1 if k == len(chunks) - 1 else 0
        out += (last | (0 << 1) | (len(chunk) << 3)).to_bytes(3, "little") + chunk
    if checksum:
        out += struct.pack("<I", xxh64(data) & 0xFFFFFFFF)
    return out


def rle_bomb_frame(declared: int) -> bytes:
    """A frame header declaring `declared` bytes followed by one RLE block: tiny on disk, huge if decompressed."""
    return struct.pack("<IBQ", 0xFD2FB528, 0xC0 | 0x20 | 0x04, declared) + \
        (1 | (1 << 1) | (1 << 17 << 3)).to_bytes(3, "little") + b"\x00"
