#!/bin/bash
# side by side: before (125bb2e) and after (44e1e15), interleaved, 3 runs per variant and configuration
out=/tmp/ab.jsonl; : > $out
for cfg in "--fidelity structure --gap-us 40" "--fidelity timing --gap-us 40" "--fidelity timing --payloads --gap-us 0" "--fidelity timing --payloads --gap-us 40" "--fidelity value --payloads --gap-us 40"; do
  for run in 1 2 3; do
    for v in before after; do
      /tmp/rho.$v $cfg --json /tmp/r.json > /dev/null && python3 -c "import json,sys; d=json.load(open('/tmp/r.json')); d['variant']='$v'; d['run']=$run; print(json.dumps(d))" >> $out
    done
  done
done
for run in 1 2 3; do for v in before after; do /tmp/pc.$v --json 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); d['variant']='$v'; d['run']=$run; d['bench']='prefetcher_contention'; print(json.dumps(d))" >> $out; done; done
