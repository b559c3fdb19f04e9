#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the libFuzzer targets of the trace format parsers (tests/fuzz: fuzz_segment, fuzz_payload, fuzz_manifest),
# of the history file with the estimator (fuzz_history), of nccl-tests output into it (fuzz_nccl_tests), of
# rlpayload's .npy reader (fuzz_npy), of the settings file (fuzz_config) and of PyTorch Flight Recorder dumps
# (fuzz_flight_recorder) with clang + ASan + UBSan in build/fuzz,
# then fuzzes each for SECONDS (default 20) on a copy of its seed corpus (tests/fuzz/corpus/<target>), all at once. Fails on any crash, leak, sanitizer report, timeout or OOM; the
# reproducer is left in build/fuzz/artifacts/ and the log in build/fuzz/logs/.
#   scripts/fuzz.sh [SECONDS]
# tests/fuzz is configured as its own CMake project: the main project declares CUDA, which the fuzz build does not
# need (and clang as CUDA host compiler is not what the toolkit expects).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
seconds=${1:-20}
[[ $seconds =~ ^[0-9]+$ ]] || { echo "usage: scripts/fuzz.sh [SECONDS]" >&2; exit 2; }
build=$root/build/fuzz
targets=(fuzz_segment fuzz_payload fuzz_manifest fuzz_history fuzz_nccl_tests fuzz_npy fuzz_config fuzz_flight_recorder)

cc=${CC:-clang}
cxx=${CXX:-clang++}
command -v "$cxx" >/dev/null || { cc=clang-14; cxx=clang++-14; }
CC=$cc CXX=$cxx cmake -S tests/fuzz -B "$build" -DRANKLENS_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null

rm -rf "$build/work" "$build/artifacts" "$build/logs"
mkdir -p "$build/work" "$build/artifacts" "$build/logs"
pids=()
for t in "${targets[@]}"; do
  cp -r "tests/fuzz/corpus/$t" "$build/work/$t"
  "$build/$t" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$t-" "$build/work/$t" >"$build/logs/$t.log" 2>&1 &
  pids+=($!)
done

failed=0
for i in "${!targets[@]}"; do
  t=${targets[$i]}
  if wait "${pids[$i]}"; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$build/logs/$t.log")
    cov=$(grep -o 'cov: [0-9]*' "$build/logs/$t.log" | tail -1 || true)
    echo "fuzz: $t ok: ${runs:-?} runs in ${seconds}s, $cov, corpus $(ls "$build/work/$t" | wc -l) inputs"
  else
    failed=1
    echo "fuzz: $t FAILED (log $build/logs/$t.log, artifacts $build/artifacts/):" >&2
    grep -E "ERROR|SUMMARY|runtime error|Test unit written|deadly signal" "$build/logs/$t.log" 2>/dev/null |
      head -20 >&2 || true
  fi
done
exit $failed
