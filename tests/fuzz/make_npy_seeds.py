#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the fuzz_npy seeds into corpus/fuzz_npy/: .npy images as numpy.save writes them (format 1.0, 2.0, 3.0; 1-D and
2-D; C and Fortran order), by hand so that numpy is not needed. Run once; the seeds are committed."""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "fuzz_npy")


def npy(descr, shape, data, version=1, fortran=False):
    shape_text = "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"
    header = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape_text}, }}"
    size_field = 2 if version == 1 else 4
    total = 6 + 2 + size_field + len(header) + 1
    header += " " * ((64 - total % 64) % 64) + "\n"
    length = struct.pack("<H" if version == 1 else "<I", len(header))
    encoded = header.encode("latin1" if version < 3 else "utf8")
    return b"\x93NUMPY" + bytes([version, 0]) + length + encoded + data


def main():
    seeds = {
        "f4-1d-v1.npy": npy("<f4", (3,), struct.pack("<3f", 1.5, -2.0, 0.25)),
        "i8-2d-v2.npy": npy("<i8", (2, 3), struct.pack("<6q", *range(6)), version=2),
        "u1-fortran-v3.npy": npy("|u1", (2, 2), bytes([1, 2, 3, 4]), version=3, fortran=True),
        "f2-empty-v1.npy": npy("<f2", (0,), b""),
    }
    for name, image in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(image)


if __name__ == "__main__":
    main()
