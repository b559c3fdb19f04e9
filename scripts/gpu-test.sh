#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The GPU acceptance run, on a machine with ONE GPU (or more) and PyTorch: real multi-rank jobs whose ranks share the
# GPU are recorded, and every rank is replayed alone at value fidelity; nccl-tests runs through the recorder with 2, 4
# and 8 MPI ranks. tests/gpu/acceptance.py lists the cases and verdicts. Prints a table, writes
# bench/results/gpu_acceptance.json; exit 0 when every case passed.
#   scripts/gpu-test.sh                      with this checkout's build (made by scripts/setup.sh if missing)
#   scripts/gpu-test.sh --prefix DIR         with a RankLens install tree (scripts/gpu-bundle.sh makes .carry/ranklens
#                                            for machines that cannot build or download)
#   scripts/gpu-test.sh --cases ddp-2,nccl-tests-2 --work /tmp/w ...   (tests/gpu/acceptance.py --help)
# PY: the interpreter with torch (default: /opt/torch/.venv/bin/python if present, else python3).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-/opt/torch/.venv/bin/python}
[[ -x $PY ]] || PY=$(command -v python3)
if ! "$PY" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  echo "gpu-test: $PY has no torch with a usable GPU; set PY to the interpreter of one" >&2
  exit 2
fi
if [[ " $* " != *" --prefix "* && ! -x build/release/tools/ranklens ]]; then
  scripts/setup.sh release
fi
# The commit a bundle was made from names what runs; else this checkout's.
if [[ " $* " == *" --prefix "* && -f .carry/COMMIT ]]; then
  commit=$(cat .carry/COMMIT)
else
  commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
fi
exec env RANKLENS_COMMIT="${RANKLENS_COMMIT:-$commit}" "$PY" tests/gpu/acceptance.py --python "$PY" "$@"
