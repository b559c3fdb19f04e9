# SPDX-License-Identifier: Apache-2.0
# Sourced (not run) by the bench drivers that use the carried build on a GPU machine (run_launcher_acceptance.sh,
# structure_replay_frameworks.sh, frameworks_smoke.sh), from the repository root (.carry/: bin/ and lib/ from
# bench/make_carry.sh, frameworks/ from scripts/prepare_frameworks.sh).

# carry_adapter CARRY: the Python adapter where the carried launcher looks for it (../share/ranklens/python beside
# its binary); left alone when already current, so that two scripts running at once do not pull it from each other.
carry_adapter() {
  diff -rq tools/python "$1/share/ranklens/python" > /dev/null 2>&1 && return 0
  mkdir -p "$1/share/ranklens" && rm -rf "$1/share/ranklens/python" && cp -r tools/python "$1/share/ranklens/python"
}

# carry_frameworks PY SITE MLM: DeepSpeed and its dependencies installed into SITE from the carried wheels, and
# Megatron-LM unpacked into MLM, each unless already there. Non-zero status (with the step named) on failure.
carry_frameworks() {
  [[ -d $2/deepspeed ]] || "$1" -m pip install -q --no-index --no-deps --no-compile --target "$2" \
    .carry/frameworks/whl/*.whl || { echo "pip install of .carry/frameworks/whl into $2 failed" >&2; return 1; }
  [[ -f $3/pretrain_gpt.py ]] || { mkdir -p "$3" && tar xzf .carry/frameworks/megatron-lm.tgz -C "$3"; } \
    || { echo "unpacking .carry/frameworks/megatron-lm.tgz into $3 failed" >&2; return 1; }
}
