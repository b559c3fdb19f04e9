#!/bin/bash
# Session 18, call I (nvidia-h200-x2, if lent): the payload copy kernel with one thread driving both GPUs, as
# nccl-tests -g 2 does (the kernel is launched with the call's device current): bench/record_nccl_tests.sh with its
# defaults (-b 8 -e 64M -f 4 -g 2 -c 1 -n 5 -w 2, payloads small), real NCCL against the recorder, all 9 tests.
set -u
cd "$(dirname "$0")/../../.."
source bench/carry_setup.sh; carry_env; carry_real_nccl
mkdir -p "$OUT/nccl_tests_2gpu_small"
RANKLENS_COMMIT=$C bench/record_nccl_tests.sh --real-nccl "$REAL" --python "$PY" --payloads small --timeout 60 \
  --budget 400 --out "$OUT/nccl_tests_2gpu_small" --work /tmp/rnt2 > /dev/null 2>&1
echo "rc=$?"
grep -E "^\[.*\] [a-z_]+ \[(real|record)\]: rc" "$OUT/nccl_tests_2gpu_small/record_nccl_tests.log" | sed 's/^/  /'
"$PY" - "$OUT/nccl_tests_2gpu_small/record_nccl_tests.json" <<'PY'
import json, sys
for t in json.load(open(sys.argv[1]))["tests"]:
    c = t["record"]["trace"]["counters"] if isinstance(t.get("record"), dict) and "trace" in t["record"] else {}
    print(t["test"], "real", t["pass_real"], "record", t["pass_record"], "payloads", t.get("payload_refs"),
          "copy failures", c.get("payload_copy_failures"))
PY
