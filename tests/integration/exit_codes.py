#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""One reading of a trace, one answer: every command that reads a trace (rlpayload ls, show, export, verify, diff;
ranklens trace summary, timeline, compare, export flight-recorder) exits 0 on an intact rank and 1 on the same rank
damaged or left unfinished in each way the spec names, and says so on stderr. A command that exits 0 on damage is
a silent wrong answer.

Cases, each a copy of rank 0 of the shipped demo recording: a frame's CRC flipped halfway, the segment cut at a frame
boundary (the closed manifest counts the records it lost), a malformed Stage record appended, an interrupted in-place
edit (its journal left).

usage: exit_codes.py RANKLENS RLPAYLOAD TRACE WORKDIR
"""
import os
import shutil
import struct
import subprocess
import sys
import zlib


def frames(seg: bytes):
    """Offsets of the frames of a segment: a 16-byte header, then u32 body length, u32 CRC-32, body."""
    out, at = [], 16
    while at + 8 <= len(seg):
        out.append(at)
        at += 8 + struct.unpack_from("<I", seg, at)[0]
    return out


def damage(rank: str, how: str) -> None:
    seg_path = os.path.join(rank, "seg-000000.rls")
    seg = bytearray(open(seg_path, "rb").read())
    at = frames(seg)
    if how == "crc":
        seg[at[len(at) // 2] + 4] ^= 0xFF
    elif how == "cut":
        seg = seg[:at[len(at) // 2]]
    elif how == "malformed":
        # [type 5 (Stage), [name, step, timeNs]] with the step a str: well framed, wrong type.
        body = b"\x92\x05\x93\xa4step\xa3one\x02"
        seg += struct.pack("<II", len(body), zlib.crc32(body)) + body
    elif how == "journal":
        with open(os.path.join(rank, "edit-journal"), "w") as f:
            f.write(f"segment seg-000000.rls {len(seg)}\npayload pay-000009.rlp\ncall AllReduce comm 0 seq 1\n")
    open(seg_path, "wb").write(seg)


def main() -> int:
    ranklens, rlpayload, trace, work = sys.argv[1:5]
    intact = os.path.join(work, "intact")
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(os.path.join(trace, "rank0"), os.path.join(intact, "rank0"))
    failures = []
    for case in ("intact", "crc", "cut", "malformed", "journal"):
        t = os.path.join(work, case)
        if case != "intact":
            shutil.copytree(os.path.join(intact, "rank0"), os.path.join(t, "rank0"))
            damage(os.path.join(t, "rank0"), case)
        out = os.path.join(work, case + "-out")
        os.makedirs(out, exist_ok=True)
        commands = [
            [rlpayload, "ls", t],
            [rlpayload, "show", t, "-c", "0", "-s", "0"],
            [rlpayload, "export", t, "-c", "0", "-s", "0", "-o", os.path.join(out, "x.npy")],
            [rlpayload, "verify", t],
            [rlpayload, "diff", intact, t],
            [ranklens, "trace", "summary", t],
            [ranklens, "timeline", t, "-o", os.path.join(out, "timeline.json")],
            [ranklens, "compare", intact, t],
            [ranklens, "export", "flight-recorder", t, "-o", os.path.join(out, "fr")],
        ]
        want = 0 if case == "intact" else 1
        for cmd in commands:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            name = " ".join(os.path.basename(c) if i == 0 else c for i, c in enumerate(cmd[:3]))
            # verify's report is its standard output; every other command says damage on stderr.
            said = want == 0 or (proc.stdout if cmd[1] == "verify" else proc.stderr).strip() != ""
            if proc.returncode != want or not said:
                failures.append(f"{case}: {name}: exit {proc.returncode}, want {want}; stderr: "
                                f"{proc.stderr.strip()[:300]!r}")
            else:
                print(f"{case:10} exit {proc.returncode}  {name}")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
