#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# How well the cluster's nccl-tests output predicts a training job's collectives: imports an nccl-tests log into a
# history (`ranklens history import-nccl-tests`), then estimates every recorded call of each given history from it
# (`estimate eval --against`), and checks that adding the import to a recorded history leaves that history's own
# leave-one-job-out errors as they were (recorded calls come first). No GPU: the inputs are committed files.
#   bench/estimate_from_nccl_tests.sh --ranklens BIN --log NCCL_TESTS_LOG --out DIR HISTORY...
# Writes DIR/nccl-tests.hist, DIR/against-<history>.{txt,json}, DIR/lojo-<history>-{alone,with-nccl-tests}.txt and
# DIR/summary.json (commit, date, machine, command, medians).
set -euo pipefail
usage() { sed -n '3,9p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
ranklens="" log="" out=""
histories=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --ranklens) ranklens=$2; shift 2 ;;
    --log) log=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) usage ;;
    -*) echo "unknown option $1" >&2; usage ;;
    *) histories+=("$1"); shift ;;
  esac
done
[[ -n $ranklens && -n $log && -n $out && ${#histories[@]} -gt 0 ]] || usage
command=("$0" --ranklens "$ranklens" --log "$log" --out "$out" "${histories[@]}")
mkdir -p "$out"
rm -f "$out/nccl-tests.hist"
"$ranklens" history import-nccl-tests "$log" -o "$out/nccl-tests.hist" 2>"$out/import.log"
cat "$out/import.log"

rows=()
for h in "${histories[@]}"; do
  name=$(basename "$h" .hist)
  if ! "$ranklens" estimate eval --history "$out/nccl-tests.hist" --against "$h" --json "$out/against-$name.json" \
       >"$out/against-$name.txt" 2>&1; then
    echo "$name: not judged ($(tail -1 "$out/against-$name.txt"))"
    rm -f "$out/against-$name.json"
    continue
  fi
  cp "$h" "$out/mixed.hist"
  "$ranklens" history import-nccl-tests "$log" -o "$out/mixed.hist" --append 2>/dev/null >/dev/null
  "$ranklens" estimate eval --history "$h" --json "$out/lojo-alone.json" >"$out/lojo-$name-alone.txt"
  "$ranklens" estimate eval --history "$out/mixed.hist" --json "$out/lojo-mixed.json" >"$out/lojo-$name-with-nccl-tests.txt"
  rows+=("$(python3 - "$out" "$name" <<'EOF'
import json, sys
out, name = sys.argv[1], sys.argv[2]
against = json.load(open(f"{out}/against-{name}.json"))
alone = json.load(open(f"{out}/lojo-alone.json"))
mixed = json.load(open(f"{out}/lojo-mixed.json"))
row = lambda d, key: d.get(key, {}).get("all", {}).get("median")
print(json.dumps({"history": name, "samples": against["against_samples"],
                  "median_from_nccl_tests": against["errors"]["all"]["median"],
                  "p90_from_nccl_tests": against["errors"]["all"]["p90"],
                  "per_class_from_nccl_tests": {k: v["median"] for k, v in against["errors"].items()
                                                if not k.startswith("all")},
                  "lojo_median_alone": row(alone, "leave_one_run_out"),
                  "lojo_median_with_nccl_tests": row(mixed, "leave_one_run_out")}))
EOF
)")
  echo "$name: $(tail -n +1 <<<"${rows[-1]}" | cut -c1-200)"
done
rm -f "$out/mixed.hist" "$out/lojo-alone.json" "$out/lojo-mixed.json"
python3 - "$out/summary.json" "$(git rev-parse --short HEAD)" "$(date -u +%Y-%m-%dT%H:%MZ)" "$(uname -n), $(nproc) CPUs, no GPU" \
  "${command[*]}" "${rows[@]}" <<'EOF'
import json, sys
path, commit, date, machine, command, *rows = sys.argv[1:]
json.dump({"commit": commit, "date": date, "machine": machine, "command": command,
           "results": [json.loads(r) for r in rows]}, open(path, "w"), indent=2)
EOF
echo "wrote $out/summary.json"
