# SPDX-License-Identifier: Apache-2.0
# Makes tools/python (the reader) and this directory (tracegen) importable, and fails early, with the install
# command, when the reader's packages are missing.
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(ROOT, "tools", "python"), HERE]

try:
    import msgpack  # noqa: F401
    import zstandard  # noqa: F401
except ImportError as exc:  # pragma: no cover
    raise SystemExit(f"tests/python: {exc}: scripts/setup.sh installs the reader's packages "
                     "(python3 -m pip install pytest msgpack zstandard)")
