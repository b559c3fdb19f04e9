#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fails when a C++/CUDA source file differs from what clang-format makes of it with the repository's .clang-format.
# Only clang-format 14 (Debian 12's, what scripts/setup.sh installs) is trusted: other versions format some
# constructs differently, so with another one the check is skipped (exit 77). To fix: clang-format -i FILE...
#   scripts/check-format.sh [--fix]
set -uo pipefail
cd "$(dirname "$0")/.."
cf=$(command -v clang-format-14 || command -v clang-format || true)
[[ -n $cf ]] || { echo "check-format: no clang-format (scripts/setup.sh installs it); skipped"; exit 77; }
"$cf" --version | grep -q 'version 14\.' || { echo "check-format: $("$cf" --version) is not version 14; skipped"; exit 77; }
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | grep -v '^tests/data/')
if [[ ${1:-} == --fix ]]; then
  "$cf" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$cf" --dry-run --Werror "$f" > /dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "check-format: ${#bad[@]} file(s) differ from clang-format's layout: ${bad[*]}"
  echo "check-format: run scripts/check-format.sh --fix (or clang-format -i FILE)"
  exit 1
fi
echo "check-format: ${#files[@]} files follow .clang-format"
