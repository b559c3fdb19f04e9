#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The test command (CI runs exactly this through .ci/run): set up and build, fuzz the trace format parsers, the
# history file, the .npy reader and the settings file briefly (libFuzzer, 15 s each), run every test that needs no
# GPU on the release build, then the unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer. GPU tests
# (label gpu) skip themselves without a GPU; on a GPU machine run `ctest --preset gpu`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh release asan-ubsan
scripts/fuzz.sh 15
ctest --preset release -j "$(nproc)"
ctest --preset asan-ubsan -j "$(nproc)" -L unit
