#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One rank of a huge TP x DP world, replayed at structure fidelity without a recording or a groups table: the bundled
# nccl_minitrain (tp=2) as its last rank in worlds of 16,384 and 131,072 ranks, the layout given as a mesh
# (`ranklens replay --mesh dp=-1,tp=2 --mesh-colors tp=0-<D-1>,dp=<D>-`). Measures each replay's wall time and peak
# resident memory (GNU time's maximum RSS: the largest process of the tree, ranklens or the program), the median of
# --repeats runs, on the host device (no GPU needed). Writes bench/results/structure_replay_mesh.json.
#
# Usage: bench/structure_replay_mesh.sh [--build DIR] [--worlds 16384,131072] [--steps 3] [--repeats 9] [--out FILE]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build/release
worlds=16384,131072
steps=3
repeats=9
out=$root/bench/results/structure_replay_mesh.json
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --worlds) worlds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--worlds N,N] [--steps N] [--repeats N] [--out FILE]" >&2; exit 64 ;;
  esac
done
ranklens=$build/tools/ranklens
minitrain=$build/examples/nccl_minitrain
for f in "$ranklens" "$minitrain" /usr/bin/time; do
  [ -x "$f" ] || { echo "error: $f is missing: build the release preset (targets nccl ranklens nccl_minitrain)" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

commit=${RANKLENS_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
device="host device (no GPU), ${cpu:-unknown CPU}, $(nproc) cores"
date=$(date -u +%Y-%m-%dT%H:%MZ)

rows=()
for world in ${worlds//,/ }; do
  dp=$((world / 2))
  rank=$((world - 1))
  cmd=("$ranklens" replay --rank "$rank" --world-size "$world" --device host --no-events -q
       --mesh "dp=-1,tp=2" --mesh-colors "tp=0-$((dp - 1)),dp=$dp-" -- "$minitrain" --steps "$steps")
  shown="ranklens replay --rank $rank --world-size $world --device host --no-events -q --mesh dp=-1,tp=2 --mesh-colors tp=0-$((dp - 1)),dp=$dp- -- nccl_minitrain --steps $steps"
  secs=() rss=()
  for ((i = 0; i < repeats; i++)); do
    if ! /usr/bin/time -f '%e %M' -o "$work/time" "${cmd[@]}" > "$work/out" 2>&1; then
      cat "$work/out" >&2
      echo "error: the replay of rank $rank of $world failed" >&2
      exit 1
    fi
    grep -q "minitrain: rank $rank of $world: tp 2 (rank 1, color $((rank / 2))), dp $dp (rank $((dp - 1)), color $((dp + 1)))" "$work/out" || {
      cat "$work/out" >&2; echo "error: unexpected communicator layout" >&2; exit 1; }
    read -r s k < "$work/time"
    secs+=("$s") rss+=("$k")
  done
  med_s=$(printf '%s\n' "${secs[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  med_kib=$(printf '%s\n' "${rss[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  echo "world $world, rank $rank: ${med_s} s, peak RSS $((med_kib / 1024)) MiB (median of $repeats; runs: ${secs[*]} s)"
  rows+=("{\"world_size\": $world, \"rank\": $rank, \"mesh\": \"dp=-1,tp=2\", \"dp\": $dp, \"tp\": 2, \"steps\": $steps, \"seconds_median\": $med_s, \"peak_rss_kib_median\": $med_kib, \"seconds\": [$(IFS=,; echo "${secs[*]}")], \"peak_rss_kib\": [$(IFS=,; echo "${rss[*]}")], \"command\": \"$shown\"}")
done

mkdir -p "$(dirname "$out")"
{
  echo "{"
  echo "  \"benchmark\": \"structure_replay_mesh\","
  echo "  \"commit\": \"$commit\","
  echo "  \"device\": \"$device\","
  echo "  \"date\": \"$date\","
  echo "  \"command\": \"bench/structure_replay_mesh.sh --worlds $worlds --steps $steps --repeats $repeats\","
  echo "  \"what\": \"wall time and peak RSS of one structure replay of nccl_minitrain's last rank, layout from a mesh (no groups table), median of repeats\","
  echo "  \"results\": ["
  for i in "${!rows[@]}"; do echo "    ${rows[$i]}$([ "$i" -lt $((${#rows[@]} - 1)) ] && echo ,)"; done
  echo "  ]"
  echo "}"
} > "$out"
python3 -m json.tool "$out" > /dev/null
echo "wrote $out"
