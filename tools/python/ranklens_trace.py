#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""An independent reader of RankLens traces, written from docs/trace-format.md alone.

It uses only the standard library (zlib for CRC-32, hashlib, json, struct) and the `msgpack` and `zstandard`
packages, and shares no code with the C++ reader; tests/python compares the two on the same traces. `zstandard` is
imported only when a payload blob is decoded: reading manifests and records (Call, Timing, Stage, ...) needs only
`msgpack`; `read_payload` without `zstandard` raises MissingDependency.

Library use:

    import ranklens_trace as rt
    for rank_dir in rt.rank_directories("trace"):
        reader = rt.RankReader.open(rank_dir)
        for rec in reader.records():        # every intact record of a known type, in segment order
            print(rec.segment, rec.offset, rec.name, rec.fields)
        for ref in reader.payloads():       # the effective PayloadRef of each call (last one wins)
            data = reader.read_payload(ref)  # raises PayloadError (with .problem) when a check fails
        print(reader.problems)              # Problem(file, offset, reason, truncated), in file order

Command line:

    python3 tools/python/ranklens_trace.py dump TRACE_OR_RANK_DIR [--json] [--with-reasons]

`dump --json` prints one canonical JSON document (sorted keys, no insignificant whitespace, ASCII only):

    {"ranks": [{"dir": "rank0", "indexRebuilt": bool, "directoryVersion": "1.13", "manifest": {...},
                "records": [{"segment": i, "offset": o, "type": "Call", "fields": {...}}, ...],
                "payloads": [{"commId", "op", "peer", "seq", "datatype", "count", "rawBytes", "sha256"}, ...],
                "problems": [{"file": basename, "offset": n, "truncated": bool}, ...]}]}

Ranks are ordered by rank number; records in (segment, offset) order; payloads by call identity (commId, kind,
peer, seq); problems are the directory and segment problems ordered by (file, offset) (stable), followed by the
payload problems in payload order. A payload that fails a check has "sha256": null and contributes a problem.
`reason` texts differ between implementations and are left out unless --with-reasons is given.

Where docs/trace-format.md is silent, this reader does what the C++ reader does (payload/src/trace_*.cc) and says
so in a comment marked "spec gap"; tests/python/test_reader.py pins each of those behaviours.
"""

import argparse
import hashlib
import json
import os
import re
import stat
import struct
import sys
import zlib
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

try:
    import msgpack
except ImportError as exc:  # pragma: no cover - exercised only on machines without the packages
    raise SystemExit(f"ranklens_trace: {exc}; install it with: python3 -m pip install msgpack zstandard "
                     "(scripts/setup.sh does)")

zstandard = None  # imported on first use by _zstandard(): only payload blobs need it


class MissingDependency(RuntimeError):
    """A package this operation needs is not installed (not a problem of the trace)."""


def _zstandard():
    global zstandard
    if zstandard is None:
        try:
            import zstandard as module
        except ImportError as exc:
            raise MissingDependency(f"ranklens_trace: decoding payload blobs needs the zstandard package ({exc}); "
                                    "install it with: python3 -m pip install zstandard. Records and manifests "
                                    "can be read without it") from None
        zstandard = module
    return zstandard

FORMAT_NAME = "ranklens-trace"
FORMAT_MAJOR = 1
FORMAT_MINOR = 13
SEGMENT_MAGIC = 0x47534C52  # "RLSG"
PAYLOAD_MAGIC = 0x59504C52  # "RLPY"
FILE_HEADER = struct.Struct("<IHHII")  # magic, major, minor, file index, reserved
FRAME_HEADER = struct.Struct("<II")    # body length, CRC-32 of the body
MANIFEST = "manifest.msgpack"
INDEX = "index.msgpack"
EDIT_JOURNAL = "edit-journal"
# The spec: readers refuse manifests over 16 MiB. Spec gap: it sets no limit on the index; this is the C++ reader's.
MANIFEST_MAX_BYTES = 16 << 20
INDEX_MAX_BYTES = 1 << 32
SEGMENT_MAX_BYTES = 1 << 32

_SEGMENT_RE = re.compile(r"^seg-([0-9]{6})\.rls$")  # exactly 6 digits: seg-1000000.rls is not a segment


class Limits(NamedTuple):
    max_record_bytes: int = 16 << 20   # a frame claiming a longer body is corrupt
    max_payload_bytes: int = 16 << 30  # a payload claiming (or producing) more is refused
    max_files: int = 1 << 20           # segment files considered per rank directory


class Problem(NamedTuple):
    file: str        # path of the damaged file
    offset: int      # byte offset of the damaged frame / blob / header
    reason: str
    truncated: bool  # the file ends inside a frame (typical of a crash), as opposed to corrupt bytes

    @property
    def name(self) -> str:
        return os.path.basename(self.file)

    def describe(self) -> str:
        return f"{self.file}: offset {self.offset}: {self.reason}"


class TraceFormatError(Exception):
    """The rank directory or its manifest is unusable (the reader refuses it as a whole)."""


class PayloadError(Exception):
    """A payload blob failed one of the checks; `problem` says where and why."""

    def __init__(self, problem: Problem):
        super().__init__(problem.describe())
        self.problem = problem


# ------------------------------------------------------------------------------------------------ record types

# (name, kind, default) per field. Kinds, as the spec lists them: msgpack integers of a width (uint64, uint32, int64,
# int32), str (UTF-8), bool, and arrays of int32. Defaults are those the spec gives in parentheses, else
# 0 / "" / false / []; `blocking` defaults to true.
_U64, _I64, _I32, _U32, _S, _B, _L = "uint64", "int64", "int32", "uint32", "str", "bool", "int32[]"
_RANGES = {_U64: (0, (1 << 64) - 1), _I64: (-(1 << 63), (1 << 63) - 1), _I32: (-(1 << 31), (1 << 31) - 1),
           _U32: (0, (1 << 32) - 1)}
RECORD_TYPES: Dict[int, Tuple[str, List[Tuple[str, str, Any]]]] = {
    1: ("CommInit", [("commId", _U64, 0), ("nranks", _I32, 0), ("rank", _I32, 0), ("parentId", _I64, -1),
                     ("color", _I64, -1), ("key", _I64, -1), ("how", _S, ""), ("name", _S, ""),
                     ("worldRanks", _L, []), ("cudaDev", _I32, 0), ("blocking", _B, True), ("timeNs", _I64, 0)]),
    2: ("CommEnd", [("commId", _U64, 0), ("how", _S, ""), ("timeNs", _I64, 0)]),
    3: ("Call", [("commId", _U64, 0), ("seq", _U64, 0), ("op", _I32, 0), ("datatype", _I32, 0), ("count", _U64, 0),
                 ("rootOrPeer", _I32, -1), ("redop", _I32, -1), ("stream", _U64, 0), ("groupId", _U64, 0),
                 ("nranks", _I32, 0), ("rank", _I32, 0), ("bytes", _U64, 0), ("timeNs", _I64, 0),
                 ("hostNs", _I64, -1)]),
    4: ("GroupEnd", [("groupId", _U64, 0), ("calls", _U32, 0), ("result", _I32, 0), ("timeNs", _I64, 0),
                     ("hostNs", _I64, -1)]),
    5: ("Stage", [("name", _S, ""), ("step", _I64, -1), ("timeNs", _I64, 0)]),
    6: ("GroupBegin", [("groupId", _U64, 0), ("timeNs", _I64, 0)]),
    7: ("Timing", [("commId", _U64, 0), ("seq", _U64, 0), ("op", _I32, 0), ("stream", _U64, 0), ("groupId", _U64, 0),
                   ("startNs", _I64, 0), ("durationNs", _I64, 0), ("captured", _B, False), ("peer", _I32, -1),
                   ("eventNs", _I64, -1), ("clock", _I32, 0), ("gapNs", _I64, -1)]),
    8: ("PayloadRef", [("commId", _U64, 0), ("seq", _U64, 0), ("op", _I32, 0), ("datatype", _I32, 0),
                       ("count", _U64, 0), ("rawBytes", _U64, 0), ("file", _U32, 0), ("offset", _U64, 0),
                       ("compressedBytes", _U64, 0), ("rawCrc32", _U32, 0), ("zstdLevel", _I32, 0),
                       ("peer", _I32, -1), ("shuffle", _I32, 0)]),
    9: ("Edit", [("commId", _U64, 0), ("seq", _U64, 0), ("tool", _S, ""), ("action", _S, ""), ("detail", _S, ""),
                 ("user", _S, ""), ("timeNs", _I64, 0), ("op", _I32, -1), ("peer", _I32, -1)]),
    10: ("CommBinding", [("commId", _U64, 0), ("recordedCommId", _U64, 0), ("rule", _S, ""), ("timeNs", _I64, 0)]),
    # 1.13: an entry of a PyTorch Flight Recorder dump that `ranklens import flight-recorder` made into the Call
    # before it (op -1: no call), in the dump's own terms; `unknown` names the Call fields the dump does not give.
    11: ("FlightRecorderEntry", [("commId", _U64, 0), ("seq", _U64, 0), ("op", _I32, -1), ("peer", _I32, -1),
                                 ("recordId", _I64, -1), ("collectiveSeqId", _I64, 0), ("p2pSeqId", _I64, 0),
                                 ("opId", _I64, 0), ("profilingName", _S, ""), ("pgName", _S, ""),
                                 ("pgDesc", _S, ""), ("state", _S, ""), ("timeCreatedNs", _I64, 0),
                                 ("durationNs", _I64, -1), ("timeoutMs", _I64, 0), ("isP2p", _B, False),
                                 ("inputSizes", _S, ""), ("outputSizes", _S, ""), ("inputDtypes", _S, ""),
                                 ("outputDtypes", _S, ""), ("frames", _S, ""), ("unknown", _S, "")]),
}
RECORD_NAMES = {code: name for code, (name, _) in RECORD_TYPES.items()}
CALL, PAYLOAD_REF = 3, 8
MAX_RECORD_TYPE = 0x7FFFFFFF

OPS = ["AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter", "AlltoAll", "Gather", "Scatter", "Send",
       "Recv"]
OP_SEND, OP_RECV = 8, 9
# ncclDataType_t -> (name, element size)
DATATYPES = {0: ("int8", 1), 1: ("uint8", 1), 2: ("int32", 4), 3: ("uint32", 4), 4: ("int64", 8), 5: ("uint64", 8),
             6: ("float16", 2), 7: ("float32", 4), 8: ("float64", 8), 9: ("bfloat16", 2), 10: ("float8e4m3", 1),
             11: ("float8e5m2", 1)}

# manifest key -> (kind, default); kinds as above plus "env" (map str -> str)
MANIFEST_KEYS: Dict[str, Tuple[str, Any]] = {
    "format": (_S, ""), "version_major": (_I32, 0), "version_minor": (_I32, 0), "rank": (_I32, -1),
    "world_size": (_I32, -1), "local_rank": (_I32, -1), "host": (_S, ""), "pid": (_I64, 0), "gpu_name": (_S, ""),
    "gpu_uuid": (_S, ""), "nccl_version": (_I32, 0), "mode": (_S, ""), "writer": (_S, ""),
    "start_time_ns": (_I64, 0), "end_time_ns": (_I64, 0), "env": ("env", {}), "closed": (_B, False),
    # The spec: "Integers are int64 except version_*, rank, world_size, local_rank, nccl_version (int32) and
    # segments, payload_files (uint32)", so the counters are int64 (the C++ Manifest holds them as uint64).
    "records_written": (_U64, 0), "records_dropped": (_U64, 0), "payloads_written": (_U64, 0),
    "payloads_dropped": (_U64, 0), "payload_raw_bytes": (_U64, 0), "payload_compressed_bytes": (_U64, 0),
    "segments": (_U32, 0), "payload_files": (_U32, 0),
    # 1.1: named counters of the writing library (record mode: payloads skipped and why, captured calls, ...).
    "counters": ("counters", {}),
    # 1.7: the host's processor and the CPUs the process may run on.
    "cpu_model": (_S, ""), "cpus": (_I32, 0),
    # 1.11: the job's ranks shared GPUs (its durations are not a lone rank's).
    "shared_gpu": (_B, False),
    # 1.13: where an imported trace came from ({"from": "flight-recorder", "file": ..., "missing": ...}).
    "imported": ("env", {}),
}


def segment_name(index: int) -> str:
    return f"seg-{index:06d}.rls"


def payload_name(index: int) -> str:
    return f"pay-{index:06d}.rlp"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_str(value: Any) -> bool:
    """A msgpack str holding valid UTF-8 (bodies are unpacked with surrogateescape, so bad bytes show as
    surrogates). The spec: "`str` = msgpack str holding UTF-8", so a str holding anything else is a field of the
    wrong type (the record is malformed), as is a msgpack bin; the C++ reader checks both the same way."""
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _kind_ok(kind: str, value: Any) -> bool:
    if kind in _RANGES:
        low, high = _RANGES[kind]
        return _is_int(value) and low <= value <= high
    if kind == _S:
        return _is_str(value)
    if kind == _B:
        return isinstance(value, bool)
    if kind == _L:
        return isinstance(value, list) and all(_kind_ok(_I32, v) for v in value)
    if kind == "env":
        return isinstance(value, dict) and all(_is_str(k) and _is_str(v) for k, v in value.items())
    if kind == "counters":
        return isinstance(value, dict) and all(_is_str(k) and _kind_ok(_U64, v) for k, v in value.items())
    raise AssertionError(kind)


def _type_name(value: Any) -> str:
    if isinstance(value, str) and not _is_str(value):
        return "str holding invalid UTF-8"
    return {bool: "bool", int: "int", str: "str", bytes: "bin", list: "array", dict: "map",
            float: "float", type(None): "nil"}.get(type(value), type(value).__name__)


def _unpack(data: bytes) -> Any:
    """One msgpack object filling `data` exactly (trailing bytes are an error)."""
    return msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=False, unicode_errors="surrogateescape")


class _RepeatedKey(ValueError):
    def __init__(self, key: Any):
        super().__init__(f"key {key!r} appears more than once")
        self.key = key


def _map_without_repeats(pairs: List[Tuple[Any, Any]]) -> Dict[Any, Any]:
    out: Dict[Any, Any] = {}
    for key, value in pairs:
        try:
            if key in out:
                raise _RepeatedKey(key)
        except TypeError:  # an unhashable key (a map or array): not a str, so no manifest
            raise ValueError(f"map key of type {_type_name(key)}") from None
        out[key] = value
    return out


def call_kind(op: int) -> int:
    """0 for collectives, 1 for Send, 2 for Recv."""
    return 1 if op == OP_SEND else 2 if op == OP_RECV else 0


def call_key(comm_id: int, op: int, peer: int, seq: int) -> Tuple[int, int, int, int]:
    """A call's identity (commId, kind, peer, seq); collectives share one sequence per communicator (peer -1)."""
    kind = call_kind(op)
    return (comm_id, kind, peer if kind else -1, seq)


def record_key(type_code: int, fields: Dict[str, Any]) -> Tuple[int, int, int, int]:
    """The identity of the call a Call or PayloadRef record names."""
    peer = fields["rootOrPeer"] if type_code == CALL else fields["peer"]
    return call_key(fields["commId"], fields["op"], peer, fields["seq"])


def decode_record(type_code: int, record: list) -> Dict[str, Any]:
    """Fields of a known record type by name: extra trailing fields ignored, missing ones defaulted.
    Raises ValueError when a known field has the wrong msgpack type."""
    name, schema = RECORD_TYPES[type_code]
    fields: Dict[str, Any] = {}
    for i, (field, kind, default) in enumerate(schema):
        if i < len(record):
            value = record[i]
            if not _kind_ok(kind, value):
                shown = value if _is_int(value) else _type_name(value)
                raise ValueError(f"{name} field {i} ({field}) is {shown}, expected {kind}")
            fields[field] = value
        else:
            fields[field] = list(default) if isinstance(default, list) else default
    return fields


# ---------------------------------------------------------------------------------------------------- segments

class Record(NamedTuple):
    segment: int  # file index of the segment
    offset: int   # of the frame header in that file
    type: int
    fields: Optional[Dict[str, Any]]  # None for record types this reader does not know (they are skipped)

    @property
    def name(self) -> str:
        return RECORD_NAMES.get(self.type, f"type{self.type}")


def _check_file_header(data: bytes, path: str, magic: int, what: str, index: int) -> Optional[Problem]:
    """The spec's header checks, in order: a short header is a truncation at 0; magic, major version and file index
    are checked and reported at their own offsets (0, 4, 8); minor version and reserved are not checked."""
    if len(data) < FILE_HEADER.size:
        return Problem(path, 0, f"truncated {what} file header: {len(data)} of {FILE_HEADER.size} bytes", True)
    got_magic, major, minor, got_index, _reserved = FILE_HEADER.unpack_from(data, 0)
    if got_magic != magic:
        return Problem(path, 0, f"bad {what} magic 0x{got_magic:08x} (expected 0x{magic:08x})", False)
    if major != FORMAT_MAJOR:
        return Problem(path, 4, f"{what} file has format version {major}.{minor}; this reader reads "
                                f"{FORMAT_MAJOR}.x (it is {FORMAT_MAJOR}.{FORMAT_MINOR})", False)
    if got_index != index:
        return Problem(path, 8, f"{what} file header says index {got_index}, its name says {index}", False)
    return None


def parse_frame(view, index: int, offset: int, path: str, limits: Limits = Limits()
                ) -> Tuple[Optional[Record], Optional[Problem], int]:
    """The frame at the start of `view` (a bytes-like object running to the end of the file), which sits at
    `offset` of segment `index`: (record, None, frame size) for an intact frame; (None, problem, frame size) for
    an intact frame holding a malformed record of a known type (reported and skipped; reading goes on); (None,
    problem, 0) for a truncated or corrupt frame (reading this segment stops)."""
    remain = len(view)
    if remain < FRAME_HEADER.size:
        return None, Problem(path, offset, f"truncated frame header: {remain} of {FRAME_HEADER.size} bytes", True), 0
    length, crc = FRAME_HEADER.unpack_from(view, 0)
    if length == 0 or length > limits.max_record_bytes:  # checked before truncation: never a truncation
        return None, Problem(path, offset, f"frame length {length} outside 1..{limits.max_record_bytes}", False), 0
    if length > remain - FRAME_HEADER.size:
        return None, Problem(path, offset, f"truncated frame: header says {length} bytes, "
                                           f"{remain - FRAME_HEADER.size} remain", True), 0
    body = view[FRAME_HEADER.size:FRAME_HEADER.size + length]
    actual = zlib.crc32(body) & 0xFFFFFFFF
    if actual != crc:
        return None, Problem(path, offset, f"CRC mismatch: header says 0x{crc:08x}, body has 0x{actual:08x}",
                             False), 0
    try:
        obj = _unpack(body)
    except Exception as exc:  # any msgpack failure: malformed, trailing bytes, bad UTF-8, too deep
        return None, Problem(path, offset, f"body is not valid msgpack ({type(exc).__name__}: {exc})", False), 0
    # The spec: exactly [type, record], type an integer 0..2^31-1 (0 is never written: an unknown type, skipped),
    # record an array (for unknown types too); anything else is corruption.
    if not (isinstance(obj, list) and len(obj) == 2 and _is_int(obj[0]) and 0 <= obj[0] <= MAX_RECORD_TYPE
            and isinstance(obj[1], list)):
        return None, Problem(path, offset, "body is not [type, record] (an array of an integer 0..2^31-1 and an "
                                           "array)", False), 0
    type_code, raw = obj
    fields = None
    if type_code in RECORD_TYPES:
        try:
            fields = decode_record(type_code, raw)
        except ValueError as exc:
            # The spec: a known record whose field has the wrong type or range is malformed: reported (file, frame
            # offset) and skipped; the frame is intact, so reading goes on.
            return None, Problem(path, offset, f"malformed record: {exc}", False), FRAME_HEADER.size + length
    return Record(index, offset, type_code, fields), None, FRAME_HEADER.size + length


def parse_segment(data: bytes, index: int, path: str, limits: Limits = Limits()
                  ) -> Tuple[List[Record], List[Problem]]:
    """Every intact record of a segment image, in order, and the problems found: malformed records (skipped),
    then at most one truncation or corruption, which stops the parse."""
    problem = _check_file_header(data, path, SEGMENT_MAGIC, "segment", index)
    if problem:
        return [], [problem]
    records: List[Record] = []
    problems: List[Problem] = []
    view = memoryview(data)
    offset = FILE_HEADER.size
    while offset < len(data):
        record, problem, size = parse_frame(view[offset:], index, offset, path, limits)
        if problem:
            problems.append(problem)
            if not size:
                break
        else:
            records.append(record)
        offset += size
    return records, problems


# ---------------------------------------------------------------------------------------------------- payloads

SHUFFLE_BLOCK_BYTES = 262144  # format 1.8: a shuffled payload's blocks (docs/trace-format.md, "Byte shuffle")


def unshuffle(data: bytes, width: int) -> bytes:
    """A shuffled payload's bytes in their own order: each block's planes interleaved again, its tail kept."""
    out = bytearray(len(data))
    for start in range(0, len(data), SHUFFLE_BLOCK_BYTES):
        block = data[start:start + SHUFFLE_BLOCK_BYTES]
        elements = len(block) // width
        for k in range(width):
            out[start + k:start + elements * width:width] = block[k * elements:(k + 1) * elements]
        out[start + elements * width:start + len(block)] = block[elements * width:]
    return bytes(out)


def decode_payload(blob: bytes, ref: Dict[str, Any], limits: Limits = Limits()) -> bytes:
    """Decompress a payload blob -- one zstd frame, or since format 1.10 one per MiB of payload, their content in
    order -- with every bound checked against the PayloadRef `ref` (and restore a shuffled payload's byte order);
    raises ValueError (MissingDependency when the zstandard package is not installed)."""
    zstandard = _zstandard()
    raw_bytes = ref["rawBytes"]
    shuffle = ref.get("shuffle", 0)
    if shuffle not in (0, 2, 4, 8):
        raise ValueError(f"byte shuffle of width {shuffle} (known: 0, 2, 4, 8; a newer writer?)")
    if raw_bytes > limits.max_payload_bytes:
        raise ValueError(f"rawBytes {raw_bytes} exceeds the payload limit of {limits.max_payload_bytes}")
    pieces, produced, rest, frames = [], 0, blob, 0
    while True:
        # The spec: a skippable frame (magic 0x184D2A50..5F) anywhere in a blob is refused (zstd would report its
        # content size as 0 and skip bytes no checksum covers).
        if len(rest) >= 4 and (int.from_bytes(rest[:4], "little") & 0xFFFFFFF0) == 0x184D2A50:
            where = f" at byte {len(blob) - len(rest)} of the blob" if frames else ""
            raise ValueError(f"skippable zstd frame{where} (refused: writers never write one)")
        try:
            params = zstandard.get_frame_parameters(rest)
        except zstandard.ZstdError as exc:
            raise ValueError(f"not a zstd frame: {exc}") from None
        declared = params.content_size
        if declared == zstandard.CONTENTSIZE_UNKNOWN or declared < 0:
            raise ValueError("zstd frame does not declare its content size")
        if declared > limits.max_payload_bytes:
            raise ValueError(f"zstd frame declares {declared} bytes, over the payload limit of "
                             f"{limits.max_payload_bytes}")
        if produced + declared > raw_bytes:
            what = "zstd frames declare" if frames else "zstd frame declares"
            raise ValueError(f"{what} {produced + declared} bytes, the reference says rawBytes {raw_bytes}")
        try:
            # zstd verifies its checksum where the frame has one (writers before format 1.9) and that the output
            # stays within the (checked) declared size. Block by block, as the C++ reader decodes: the header alone
            # first, since zstd decodes a frame it holds whole as its one-shot decoder does, which refuses frames the
            # block-by-block route accepts (an empty compressed block, an RLE block in a frame of no content).
            stream = zstandard.ZstdDecompressor().decompressobj()
            header = zstandard.frame_header_size(rest)
            pieces.append(stream.decompress(rest[:header]) + stream.decompress(rest[header:]))
            if not stream.eof:
                raise ValueError("damaged zstd frame: the blob ends before the frame's last block")
        except zstandard.ZstdError as exc:
            raise ValueError(f"zstd: {exc}") from None
        if len(pieces[-1]) != declared:
            # zstd let a frame that declared 35 bytes end after none (found by the C++ fuzz target fuzz_payload): by the declared
            # sizes the C++ reader refuses such a blob, so here too.
            raise ValueError(f"zstd frame at byte {len(blob) - len(rest)} of the blob decodes to {len(pieces[-1])} "
                             f"bytes, declares {declared}")
        produced += len(pieces[-1])
        frames += 1
        rest = stream.unused_data
        if produced >= raw_bytes or not rest:
            break
    if rest:
        raise ValueError(f"blob holds {len(rest)} unused bytes after its frame")
    out = b"".join(pieces)
    if len(out) != raw_bytes:
        raise ValueError(f"decompressed {len(out)} bytes, the reference says rawBytes {raw_bytes}")
    if shuffle:
        out = unshuffle(out, shuffle)
    crc = zlib.crc32(out) & 0xFFFFFFFF
    if crc != ref["rawCrc32"]:
        raise ValueError(f"rawCrc32 mismatch: reference says 0x{ref['rawCrc32']:08x}, bytes have 0x{crc:08x}")
    return out


# ------------------------------------------------------------------------------------------------------ manifest

def parse_manifest(data: bytes) -> Dict[str, Any]:
    """The manifest's known keys (missing ones defaulted, unknown ones ignored); raises TraceFormatError."""
    try:
        # The spec: a key that appears twice makes the map no manifest (refused, naming the key), rather than a
        # reader keeping the first or the last value.
        obj = msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=False, unicode_errors="surrogateescape",
                              object_pairs_hook=_map_without_repeats)
    except _RepeatedKey as exc:
        raise TraceFormatError(f"manifest key {exc.key!r}: repeated") from None
    except Exception as exc:
        raise TraceFormatError(f"manifest is not valid msgpack ({type(exc).__name__}: {exc})") from None
    if not isinstance(obj, dict):
        raise TraceFormatError(f"manifest is a msgpack {_type_name(obj)}, expected a map")
    # The spec: "A msgpack map with string keys"; a map with a key of another type is not a manifest (as in C++).
    for key in obj:
        if not _is_str(key):
            raise TraceFormatError(f"manifest has a key of type {_type_name(key)}, expected str")
    for key in ("format", "version_major"):
        if key not in obj:
            raise TraceFormatError(f"manifest has no '{key}'")
    out: Dict[str, Any] = {}
    for key, (kind, default) in MANIFEST_KEYS.items():
        if key in obj:
            if not _kind_ok(kind, obj[key]):
                shown = obj[key] if _is_int(obj[key]) else _type_name(obj[key])
                raise TraceFormatError(f"manifest key '{key}': is {shown}, expected {kind}")
            out[key] = obj[key]
        else:
            out[key] = dict(default) if isinstance(default, dict) else default
    if out["format"] != FORMAT_NAME:
        raise TraceFormatError(f"manifest key 'format': {out['format']!r}, expected {FORMAT_NAME!r} (not a RankLens "
                               f"trace manifest)")
    if out["version_major"] != FORMAT_MAJOR:
        raise TraceFormatError(f"manifest key 'version_major': trace format version "
                               f"{out['version_major']}.{out['version_minor']} is not "
                               f"supported by this reader (version {FORMAT_MAJOR}.{FORMAT_MINOR}, reads "
                               f"{FORMAT_MAJOR}.x)")
    return out


# -------------------------------------------------------------------------------------------------- rank reader

def _read_file(path: str) -> bytes:
    """The bytes of a regular file. The spec refuses a FIFO or other non-regular file in place of a trace file
    without blocking: opening with O_NONBLOCK and checking the opened file (not the name, which could change in
    between) keeps a FIFO with no writer from hanging the reader."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, "not a regular file")
        return f.read()


# An index entry: [commId, seq, op, peer, segment, offset], extra trailing elements ignored; the widths are the
# spec's (index.msgpack): an entry outside them makes the whole index unusable (rebuilt).
_INDEX_ENTRY = (_U64, _U64, _I32, _I32, _U32, _U64)


def _is_index_entry(entry: Any) -> bool:
    return (isinstance(entry, list) and len(entry) >= len(_INDEX_ENTRY)
            and all(_kind_ok(kind, v) for kind, v in zip(_INDEX_ENTRY, entry)))


class RankReader:
    """One rank directory: manifest, segments, index (used when consistent, else rebuilt), payload access."""

    def __init__(self, rank_dir: str, limits: Limits):
        self.directory = rank_dir
        self.limits = limits
        self.manifest: Dict[str, Any] = {}
        self.segments: List[Tuple[int, str, int]] = []  # (index, name, size)
        self.problems: List[Problem] = []
        self.index_rebuilt = False
        self.index_note = ""  # why the index was rebuilt
        self._records: List[Record] = []
        self._by_location: Dict[Tuple[int, int], Record] = {}
        self._calls: Dict[Tuple[int, int, int, int], Tuple[int, int]] = {}
        self._payloads: Dict[Tuple[int, int, int, int], Tuple[int, int]] = {}

    # -- opening
    @classmethod
    def open(cls, rank_dir: str, limits: Limits = Limits()) -> "RankReader":
        reader = cls(rank_dir, limits)
        if not os.path.isdir(rank_dir):
            raise TraceFormatError(f"{rank_dir}: not a directory")
        manifest_path = os.path.join(rank_dir, MANIFEST)
        try:
            size = os.path.getsize(manifest_path)
            if size > MANIFEST_MAX_BYTES:
                raise TraceFormatError(f"{manifest_path}: {size} bytes, over the limit of {MANIFEST_MAX_BYTES}")
            data = _read_file(manifest_path)
        except OSError as exc:
            raise TraceFormatError(f"{manifest_path}: cannot read the manifest: {exc.strerror}") from None
        try:
            reader.manifest = parse_manifest(data)
        except TraceFormatError as exc:
            # The spec: a problem of one key names the key; one of the whole map is at its start.
            text = str(exc)
            where = f"key {text[len('manifest key '):]}" if text.startswith("manifest key ") else f"offset 0: {text}"
            raise TraceFormatError(f"{manifest_path}: {where}") from None
        reader._list_segments()
        reader._scan()
        reader._load_index()
        return reader

    def _list_segments(self) -> None:
        # The spec: segments are read from seg-000000 up to the first missing index; the gap is reported (at the
        # missing name, offset 0) and later segments are not read; no seg-000000 at all is reported the same way.
        # Spec gap: the spec does not say what "files per rank directory" limits; like the C++ reader, at most
        # max_files directory entries are looked at and the rest ignored (C++ counts "." and ".." among them).
        found: Dict[int, str] = {}
        with os.scandir(self.directory) as entries:
            for count, entry in enumerate(entries, 1):
                if count > self.limits.max_files:
                    break
                m = _SEGMENT_RE.match(entry.name)
                if m and entry.name == segment_name(int(m.group(1))):
                    found[int(m.group(1))] = entry.name
        for expected, index in enumerate(sorted(found)):
            if index != expected:
                self.problems.append(Problem(os.path.join(self.directory, segment_name(expected)), 0,
                                             f"segment missing (next present: {found[index]}); later segments "
                                             f"are not read", False))
                break
            path = os.path.join(self.directory, found[index])
            self.segments.append((index, found[index], os.stat(path).st_size))
        if not self.segments:
            self.problems.append(Problem(os.path.join(self.directory, segment_name(0)), 0, "no segment file",
                                         False))

    def _scan(self) -> None:
        for index, name, _size in self.segments:
            path = os.path.join(self.directory, name)
            try:
                st = os.stat(path)
                if not stat.S_ISREG(st.st_mode):
                    raise OSError(0, "not a regular file")
                if st.st_size > SEGMENT_MAX_BYTES:  # the spec's limit: a sparse or damaged file, refused unread
                    raise OSError(0, f"{st.st_size} bytes exceeds the limit of {SEGMENT_MAX_BYTES}")
                data = _read_file(path)
            except OSError as exc:
                self.problems.append(Problem(path, 0, f"cannot read: {exc.strerror}", False))
                continue
            records, problems = parse_segment(data, index, path, self.limits)
            self._records.extend(records)
            self.problems.extend(problems)
        # The spec: a closed trace whose segments parse clean but hold fewer records than records_written was cut
        # between two records; said at the end of the last segment (more than counted is an edit's appended records).
        written = self.manifest.get("records_written", 0)
        if not self.problems and self.manifest.get("closed") and self.segments and len(self._records) < written:
            index, name, size = self.segments[-1]
            self.problems.append(Problem(
                os.path.join(self.directory, name), size,
                f"the segments end between two records after {len(self._records)} records, but the closed manifest "
                f"counts {written}: the trace was cut (a copy or disk that stopped short); the records after this "
                f"point are lost, those before it are read", False))
        self._by_location = {(r.segment, r.offset): r for r in self._records}

    def _record_at(self, segment: int, offset: int) -> Optional[Record]:
        """The well-formed record whose frame starts at `offset` of segment `segment`, else None. The spec: a record
        after the first truncated or corrupt frame of its segment is not part of the trace, even when its own frame
        is intact and the index names it; the scan made when the reader opened stops there, so only the records it
        found count (a malformed record is not one either)."""
        return self._by_location.get((segment, offset))

    def _rebuild(self, why: str) -> None:
        """The index from the scan (done when the reader opened): the last Call / PayloadRef of each call."""
        self.index_rebuilt, self.index_note = True, why
        self._calls, self._payloads = {}, {}
        for rec in self._records:  # segment order: the last PayloadRef of a call wins
            if rec.type in (CALL, PAYLOAD_REF):
                target = self._calls if rec.type == CALL else self._payloads
                target[record_key(rec.type, rec.fields)] = (rec.segment, rec.offset)

    def _load_index(self) -> None:
        path = os.path.join(self.directory, INDEX)
        if not os.path.exists(path):
            return self._rebuild("no index")
        try:
            # The spec: an index larger than its segments can need (8 bytes per segment byte, plus 1 MiB) is not
            # the writer's; it is rebuilt without being read.
            limit = min(INDEX_MAX_BYTES, 8 * sum(size for _, _, size in self.segments) + (1 << 20))
            if os.path.getsize(path) > limit:
                return self._rebuild("index too large")
            index = _unpack(_read_file(path))
        except Exception as exc:
            return self._rebuild(f"index unreadable ({type(exc).__name__}: {exc})")
        # Spec gap: the spec does not say what makes an index unusable as a whole. Like the C++ reader: anything but
        # a map with str keys, an int version_major of 1, segments / calls / payloads of the documented shapes
        # (entries in the ranges above, naming a listed segment and an offset below its size) is rebuilt at once.
        if not (isinstance(index, dict) and all(isinstance(k, str) for k in index)
                and _is_int(index.get("version_major")) and index["version_major"] == FORMAT_MAJOR):
            return self._rebuild("index is not a version 1.x map")
        listed = index.get("segments")
        if not (isinstance(listed, list) and all(isinstance(s, list) and len(s) >= 2 and isinstance(s[0], str)
                                                 and _is_int(s[1]) for s in listed)):
            return self._rebuild("index segment list malformed")
        actual = {name: size for _, name, size in self.segments}
        if len(listed) != len(actual) or {s[0]: s[1] for s in listed} != actual:
            return self._rebuild("segments changed since the index was written")
        calls, payloads = index.get("calls"), index.get("payloads")
        sizes = [size for _, _, size in self.segments]
        if not (isinstance(calls, list) and isinstance(payloads, list)
                and all(_is_index_entry(e) and e[4] < len(sizes) and e[5] < sizes[e[4]] for e in calls + payloads)):
            return self._rebuild("index call lists malformed")
        # The spec: an entry is trusted only if it leads to an intact, well-formed record of the right type and
        # identity before its segment's first damaged frame, and the first one that does not makes the reader
        # rebuild. Entries are checked when a lookup uses them (payloads() uses every payloads entry; calls
        # entries are checked only by call()). A later entry for the same call replaces an earlier one.
        for entries, target in ((calls, self._calls), (payloads, self._payloads)):
            for comm, seq, op, peer, segment, offset in (e[:6] for e in entries):
                target[call_key(comm, op, peer, seq)] = (segment, offset)

    def _entry_ok(self, loc: Tuple[int, int], want: int, key: Tuple[int, int, int, int]) -> bool:
        """Whether an index entry leads to an intact record of type `want` naming call `key`."""
        rec = self._record_at(*loc)
        return rec is not None and rec.type == want and record_key(rec.type, rec.fields) == key

    def _lookup(self, want: int, key: Tuple[int, int, int, int]) -> Optional[Dict[str, Any]]:
        for _ in range(2):
            loc = (self._calls if want == CALL else self._payloads).get(key)
            if loc is None:
                return None  # a usable index lists every call
            if self._entry_ok(loc, want, key):
                return dict(self._by_location[loc].fields)
            if self.index_rebuilt:
                return None
            self._rebuild(f"index entry {list(key)} -> {list(loc)} does not name a matching "
                          f"{RECORD_NAMES[want]} record")
        return None

    # -- access
    def records(self) -> Iterator[Record]:
        """Every intact record of a known type, in segment order (unknown types are skipped)."""
        return (r for r in self._records if r.fields is not None)

    def all_records(self) -> List[Record]:
        """Every intact record including those of unknown types (fields None)."""
        return list(self._records)

    def call(self, comm_id: int, op: int, peer: int, seq: int) -> Optional[Dict[str, Any]]:
        """The last Call record of a call (checks its index entry, rebuilding the index once if it is bad)."""
        return self._lookup(CALL, call_key(comm_id, op, peer, seq))

    def payload(self, comm_id: int, op: int, peer: int, seq: int) -> Optional[Dict[str, Any]]:
        """The effective PayloadRef of a call (checks its index entry, rebuilding the index once if it is bad)."""
        return self._lookup(PAYLOAD_REF, call_key(comm_id, op, peer, seq))

    def payloads(self) -> List[Dict[str, Any]]:
        """The effective PayloadRef of each call, in (commId, kind, peer, seq) order. Uses (so checks) every
        payloads entry of the index; the first bad one makes the reader rebuild the index and list from that."""
        if not self.index_rebuilt:
            for key in sorted(self._payloads):
                if not self._entry_ok(self._payloads[key], PAYLOAD_REF, key):
                    self._rebuild(f"index entry {list(key)} -> {list(self._payloads[key])} does not name a "
                                  f"matching PayloadRef record")
                    break
        return [dict(self._by_location[self._payloads[k]].fields) for k in sorted(self._payloads)]

    def read_payload(self, ref: Dict[str, Any]) -> bytes:
        """The decoded bytes of a PayloadRef; raises PayloadError after every check the format lists."""
        path = os.path.join(self.directory, payload_name(ref["file"]))
        offset, length = ref["offset"], ref["compressedBytes"]

        # The spec: every payload problem is reported at the reference's `offset`, whatever failed; it is a
        # truncation only when the blob starts inside the file and runs past its end.
        def fail(reason: str, truncated: bool = False) -> PayloadError:
            return PayloadError(Problem(path, offset, reason, truncated))

        try:
            with open(path, "rb") as f:
                header = f.read(FILE_HEADER.size)
                size = os.fstat(f.fileno()).st_size if len(header) == FILE_HEADER.size else 0
                reason = None
                problem = _check_file_header(header, path, PAYLOAD_MAGIC, "payload", ref["file"])
                if problem:
                    reason = problem.reason
                elif offset < FILE_HEADER.size or offset > size or length > size - offset:
                    reason = f"blob of {length} bytes at offset {offset} lies outside the file ({size} bytes)"
                elif length > self.limits.max_payload_bytes + (1 << 20):  # the spec: payload limit + 1 MiB
                    reason = f"compressedBytes {length} over the payload limit"
                if reason:
                    raise fail(reason, truncated=offset <= size and length > size - offset)
                f.seek(offset)
                blob = f.read(length)
        except OSError as exc:
            raise fail(f"cannot read payload file: {exc.strerror}") from None
        if len(blob) != length:
            raise fail(f"short read: {len(blob)} of {length} bytes")
        try:
            return decode_payload(blob, ref, self.limits)
        except ValueError as exc:
            raise fail(str(exc)) from None


def rank_directories(trace_dir: str) -> List[str]:
    """The rank directories of a trace: the directory itself if it has a manifest, else its rank<R>/ children
    (R a global rank: decimal without padding, at most 2^31-1) ordered by R, then any other child holding a
    manifest (e.g. ranklens-pid<P>) by name. A padded name (rank01) is neither: which of rank1/ and rank01/ holds
    rank 1 would be a guess."""
    if os.path.exists(os.path.join(trace_dir, MANIFEST)):
        return [trace_dir]
    ranks = []
    try:
        names = os.listdir(trace_dir)
    except OSError as exc:
        raise TraceFormatError(f"{trace_dir}: {exc.strerror}") from None
    for name in names:
        path = os.path.join(trace_dir, name)
        if re.fullmatch(r"rank0[0-9]+", name):
            print(f"ranklens_trace: warning: {path}: a rank directory with a padded number is not read (rename it "
                  f"rank{int(name[4:])}/)", file=sys.stderr)
            continue
        m = re.fullmatch(r"rank(0|[1-9][0-9]{0,9})", name)
        rank = int(m.group(1)) if m else -1
        # The spec: a rank<R> directory is a rank directory with or without a manifest (one without is reported
        # when it is opened, in rank order); any other child only when it holds a manifest.
        numbered = 0 <= rank <= 0x7FFFFFFF and os.path.isdir(path)
        if not numbered and not os.path.exists(os.path.join(path, MANIFEST)):
            continue
        ranks.append((0, rank, name, path) if 0 <= rank <= 0x7FFFFFFF else (1, 0, name, path))
    return [path for *_, path in sorted(ranks)]


# ------------------------------------------------------------------------------------------------------- dump

def _problem_json(problem: Problem, with_reasons: bool) -> Dict[str, Any]:
    out = {"file": problem.name, "offset": problem.offset, "truncated": problem.truncated}
    if with_reasons:
        out["reason"] = problem.reason
    return out


def directory_version_minor(rank_dir: str, manifest: Dict[str, Any]) -> int:
    """The spec's version of a rank directory: the highest minor version of its manifest and of every segment and
    payload file header of major version 1 (headers of another kind or major say nothing of it)."""
    minor = manifest.get("version_minor", 0)
    for name in os.listdir(rank_dir):
        m = re.fullmatch(r"(seg|pay)-([0-9]{6})\.(rls|rlp)", name)
        if not m or (m.group(1) == "seg") != (m.group(3) == "rls"):
            continue
        try:
            fd = os.open(os.path.join(rank_dir, name), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    continue
                header = f.read(FILE_HEADER.size)
        except OSError:
            continue
        if len(header) < FILE_HEADER.size:
            continue
        magic, major, file_minor, _index, _reserved = FILE_HEADER.unpack_from(header, 0)
        if magic == (SEGMENT_MAGIC if m.group(1) == "seg" else PAYLOAD_MAGIC) and major == FORMAT_MAJOR:
            minor = max(minor, file_minor)
    return minor


def dump_rank(rank_dir: str, limits: Limits = Limits(), with_reasons: bool = False) -> Dict[str, Any]:
    reader = RankReader.open(rank_dir, limits)
    if os.path.exists(os.path.join(rank_dir, EDIT_JOURNAL)):  # the spec: an interrupted edit, not damage
        print(f"ranklens_trace: warning: {os.path.join(rank_dir, EDIT_JOURNAL)}: interrupted edit (an in-place "
              f"rlpayload inject was stopped): rlpayload verify says how to roll it back", file=sys.stderr)
    records = [{"segment": r.segment, "offset": r.offset, "type": r.name, "fields": r.fields}
               for r in reader.records()]
    payloads, payload_problems = [], []
    for ref in reader.payloads():
        comm, kind, peer, seq = record_key(PAYLOAD_REF, ref)
        entry = {"commId": comm, "op": ref["op"], "peer": peer, "seq": seq, "datatype": ref["datatype"],
                 "count": ref["count"], "rawBytes": ref["rawBytes"], "sha256": None}
        try:
            entry["sha256"] = hashlib.sha256(reader.read_payload(ref)).hexdigest()
        except PayloadError as exc:
            payload_problems.append(exc.problem)
        payloads.append(entry)
    return {"dir": os.path.basename(os.path.normpath(rank_dir)), "indexRebuilt": reader.index_rebuilt,
            "directoryVersion": f"{FORMAT_MAJOR}.{directory_version_minor(rank_dir, reader.manifest)}",
            "manifest": reader.manifest, "records": records, "payloads": payloads,
            "problems": [_problem_json(p, with_reasons)
                         for p in sorted(reader.problems, key=lambda p: (p.name, p.offset)) + payload_problems]}


def dump_trace(trace_dir: str, limits: Limits = Limits(), with_reasons: bool = False) -> Dict[str, Any]:
    """Every rank in order. The spec: a rank directory whose manifest is missing or unusable is reported in its
    place ({"dir", "unusable": true}) and the other ranks are still read."""
    ranks = []
    for d in rank_directories(trace_dir):
        try:
            ranks.append(dump_rank(d, limits, with_reasons))
        except TraceFormatError as exc:
            entry = {"dir": os.path.basename(os.path.normpath(d)), "unusable": True}
            if with_reasons:
                entry["reason"] = str(exc)
            print(f"ranklens_trace: {exc}", file=sys.stderr)
            ranks.append(entry)
    return {"ranks": ranks}


def canonical_json(doc: Any) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def _print_text(trace_dir: str, limits: Limits, out) -> int:
    problems = 0
    for rank_dir in rank_directories(trace_dir):
        reader = RankReader.open(rank_dir, limits)
        m = reader.manifest
        refs = reader.payloads()  # first: listing them checks the index entries (and may rebuild the index)
        print(f"== {rank_dir}: rank {m['rank']}/{m['world_size']} host {m['host']!r} pid {m['pid']} mode "
              f"{m['mode']!r} format {m['version_major']}.{m['version_minor']} writer {m['writer']!r} "
              f"closed {m['closed']}", file=out)
        print(f"   segments: {', '.join(f'{n} ({s} bytes)' for _, n, s in reader.segments) or 'none'}; index "
              f"{'rebuilt: ' + reader.index_note if reader.index_rebuilt else 'used'}", file=out)
        for rec in reader.all_records():
            body = ("(unknown type, skipped)" if rec.fields is None else
                    " ".join(f"{k}={v!r}" for k, v in rec.fields.items()))
            print(f"   {rec.segment}:{rec.offset} {rec.name} {body}", file=out)
        issues = list(reader.problems)
        for ref in refs:
            comm, kind, peer, seq = record_key(PAYLOAD_REF, ref)
            op = OPS[ref["op"]] if 0 <= ref["op"] < len(OPS) else f"op{ref['op']}"
            dtype = DATATYPES.get(ref["datatype"], (f"type{ref['datatype']}", 0))[0]
            try:
                digest = hashlib.sha256(reader.read_payload(ref)).hexdigest()
            except PayloadError as exc:
                issues.append(exc.problem)
                digest = "UNREADABLE"
            print(f"   payload comm {comm} {op} peer {peer} seq {seq}: {ref['count']} x {dtype} = {ref['rawBytes']} "
                  f"bytes in {payload_name(ref['file'])}@{ref['offset']} sha256 {digest}", file=out)
        for p in issues:
            print(f"   problem{' (truncated)' if p.truncated else ''}: {p.describe()}", file=out)
        problems += len(issues)
    return problems


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="ranklens_trace.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("dump", help="print a trace (or one rank directory) and every problem found")
    p.add_argument("trace", metavar="TRACE_OR_RANK_DIR")
    p.add_argument("--json", action="store_true", help="one canonical JSON document")
    p.add_argument("--with-reasons", action="store_true", help="include problem reasons in the JSON")
    p.add_argument("--max-record-bytes", type=int, default=Limits().max_record_bytes)
    p.add_argument("--max-payload-bytes", type=int, default=Limits().max_payload_bytes)
    p.add_argument("--max-files", type=int, default=Limits().max_files)
    args = parser.parse_args(argv)
    limits = Limits(args.max_record_bytes, args.max_payload_bytes, args.max_files)
    try:
        if args.json:
            doc = dump_trace(args.trace, limits, args.with_reasons)
            sys.stdout.write(canonical_json(doc) + "\n")
            if any(rank.get("unusable") for rank in doc["ranks"]):
                return 1
        else:
            _print_text(args.trace, limits, sys.stdout)
    except TraceFormatError as exc:
        print(f"ranklens_trace: {exc}", file=sys.stderr)
        return 2
    except MissingDependency as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
