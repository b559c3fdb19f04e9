#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Fails unless RankLens's libnccl.so.2 exports exactly the real NCCL's nccl*/pnccl* symbols, the ranklens*
functions and plugin tables of api/ranklens_api.def, nothing else, and carries the SONAME libnccl.so.2."""
import re
import subprocess
import sys


def dynamic_symbols(lib):
  out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True, capture_output=True, text=True).stdout
  return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def main(ours, real, ranklens_def, nccl_def):
  ours_syms, real_syms = dynamic_symbols(ours), dynamic_symbols(real)
  adapter_text = open(ranklens_def).read()
  adapter = set(re.findall(r"^RANKLENS_API\([^,]+,\s*(\w+)", adapter_text, re.M))
  tables = set(re.findall(r"^RANKLENS_PLUGIN_TABLE\((\w+),", adapter_text, re.M))
  listed = set()
  for m in re.finditer(r"^NCCL_FAKE_API\([^,]+,\s*(\w+),.*,\s*([01])\)\s*$", open(nccl_def).read(), re.M):
    listed.add(m.group(1))
    if m.group(2) == "1":
      listed.add("p" + m.group(1))
  failures = []
  if listed != real_syms:
    failures.append(f"API list vs real NCCL: missing {sorted(real_syms - listed)}, extra {sorted(listed - real_syms)}")
  if tables & real_syms:
    failures.append(f"plugin tables the real NCCL exports itself: {sorted(tables & real_syms)}")
  expected = real_syms | adapter | tables
  if ours_syms != expected:
    failures.append(f"exports vs expected: missing {sorted(expected - ours_syms)}, extra {sorted(ours_syms - expected)}")
  soname = subprocess.run(["readelf", "-d", ours], check=True, capture_output=True, text=True).stdout
  if "Library soname: [libnccl.so.2]" not in soname:
    failures.append("SONAME is not libnccl.so.2")
  for f in failures:
    print("FAIL:", f)
  n_nccl = len([s for s in real_syms if s.startswith("nccl")])
  n_pnccl = len([s for s in real_syms if s.startswith("pnccl")])
  print(f"real NCCL: {n_nccl} nccl* + {n_pnccl} pnccl*; ours: {len(ours_syms)} symbols incl. {len(adapter)} ranklens* and {len(tables)} plugin table(s)")
  return 1 if failures else 0


if __name__ == "__main__":
  if len(sys.argv) != 5:
    sys.exit("usage: check_exports.py OURS.so REAL.so ranklens_api.def nccl_api.def")
  sys.exit(main(*sys.argv[1:]))
