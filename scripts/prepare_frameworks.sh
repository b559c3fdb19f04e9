#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Prepares DeepSpeed and Megatron-LM for the GPU machines, which cannot download anything. Nothing of their code
# enters the repository: everything goes to .carry/frameworks/ (keep .carry/ in .git/info/exclude).
#   .carry/frameworks/whl/             deepspeed 0.19.x built here as a pure-Python wheel (DS_BUILD_OPS=0: ops are
#                                      JIT-built where used) and the Python packages it needs that the GPU image
#                                      lacks (hjson, pydantic, pydantic-core, annotated-types, typing-inspection,
#                                      and typing-extensions, which pydantic wants newer than the image may hold)
#   .carry/frameworks/megatron-lm.tgz  Megatron-LM at tag core_v0.19.0: megatron/ (megatron.core included),
#                                      pretrain_gpt.py, gpt_builders.py, model_provider.py
# Needs network (pip, and git unless MEGATRON_LM_GIT names a clone or mirror of NVIDIA/Megatron-LM).
# On the GPU machine (carry [".carry"]):
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/frameworks/whl/*.whl &&
#   export PYTHONPATH=/tmp/site && mkdir -p /tmp/mlm && tar xzf .carry/frameworks/megatron-lm.tgz -C /tmp/mlm
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/.carry/frameworks"
DEEPSPEED_VERSION="${DEEPSPEED_VERSION:-0.19.8}"
MEGATRON_TAG="${MEGATRON_TAG:-core_v0.19.0}"
PY_TARGET=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
grep -qx '/.carry/' "$ROOT/.git/info/exclude" 2>/dev/null || echo '/.carry/' >> "$ROOT/.git/info/exclude"
rm -rf "$OUT" && mkdir -p "$OUT/whl" "$OUT/build"

echo "prepare_frameworks: deepspeed $DEEPSPEED_VERSION (pure-Python wheel)"
# Building the wheel needs setuptools' bdist_wheel (the `wheel` package), which a fresh Debian Python lacks.
python3 -c "import wheel" 2>/dev/null || python3 -m pip install -q wheel 2>/dev/null ||
  python3 -m pip install -q --break-system-packages wheel
python3 -m pip download -q --no-deps --no-binary=:all: -d "$OUT/build" "deepspeed==$DEEPSPEED_VERSION"
DS_BUILD_OPS=0 python3 -m pip wheel -q --no-deps --no-build-isolation -w "$OUT/whl" "$OUT/build"/deepspeed-*.tar.gz

echo "prepare_frameworks: the packages deepspeed needs that the GPU image lacks"
python3 -m pip download -q --no-deps "${PY_TARGET[@]}" -d "$OUT/whl" \
  hjson "pydantic>=2,<3" pydantic-core annotated-types typing-inspection typing-extensions
# pydantic pins one pydantic-core version: keep the pair consistent.
want="$(unzip -p "$OUT"/whl/pydantic-2*.whl '*/METADATA' | sed -n 's/^Requires-Dist: pydantic-core==\([0-9.]*\).*/\1/p')"
if [[ -n "$want" ]] && ! ls "$OUT"/whl/pydantic_core-"$want"-* >/dev/null 2>&1; then
  rm -f "$OUT"/whl/pydantic_core-*
  python3 -m pip download -q --no-deps "${PY_TARGET[@]}" -d "$OUT/whl" "pydantic-core==$want"
fi

echo "prepare_frameworks: Megatron-LM $MEGATRON_TAG"
src="${MEGATRON_LM_GIT:-}"
if [[ -z "$src" ]]; then
  src="$OUT/build/Megatron-LM"
  if ! git clone -q --depth 1 --branch "$MEGATRON_TAG" https://github.com/NVIDIA/Megatron-LM "$src"; then
    echo "prepare_frameworks: cannot clone Megatron-LM from github.com; DeepSpeed's wheels are ready in $OUT/whl." \
         "For Megatron, set MEGATRON_LM_GIT to a clone or mirror of NVIDIA/Megatron-LM holding tag $MEGATRON_TAG" >&2
    rm -rf "$OUT/build"
    exit 1
  fi
fi
git -C "$src" archive --format=tar.gz -o "$OUT/megatron-lm.tgz" "$MEGATRON_TAG" \
  megatron pretrain_gpt.py gpt_builders.py model_provider.py
rm -rf "$OUT/build"
du -sh "$OUT"/whl "$OUT"/megatron-lm.tgz
ls "$OUT/whl"
