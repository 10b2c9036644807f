#!/usr/bin/env bash
# TIERRT_RECORD and TIERRT_TRACE: a run leaves an event stream tierrt-replay
# reads back and a Chrome trace that parses, both naming what happened.
# Usage: record_and_trace.sh PROBE TIERRT_REPLAY LIBTIERRT
# Only the probe runs with libtierrt.so preloaded, behind
# TIERRT_TEST_PRELOAD_PREFIX (the sanitizer runtime, in sanitized builds).
set -euo pipefail
probe=$1 replay=$2
preload=${TIERRT_TEST_PRELOAD_PREFIX:+$TIERRT_TEST_PRELOAD_PREFIX:}$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# A training loop (steps marked) is recorded and traced.
LD_PRELOAD=$preload TIERRT_RECORD="$dir/run.trace" TIERRT_TRACE="$dir/run.json" "$probe" direct training >/dev/null
python3 - "$dir/run.json" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
counters = [e for e in events if e.get("ph") == "C"]
allocs = [e for e in events if e.get("name") == "alloc"]
frees = [e for e in events if e.get("name") == "free"]
assert counters and allocs and frees, "trace lacks counters, allocs or frees"
assert max(c["args"]["host"] for c in counters) > 0, "the trace never shows memory on the host tier"
print(f"trace: {len(counters)} residency samples, {len(allocs)} allocs, {len(frees)} frees")
PY
out=$("$replay" replay --trace "$dir/run.trace" --policies none)
grep -q "(recorded)" <<<"$out" || { echo "tierrt-replay did not read the recording"; exit 1; }
echo "record: replayed by tierrt-replay"
# A run with no training step in it: tierrt-replay says so in one line and
# reports no figures, rather than model a "step" that is not one.
LD_PRELOAD=$preload TIERRT_RECORD="$dir/nostep.trace" "$probe" direct oversubscribe >/dev/null
if "$replay" replay --trace "$dir/nostep.trace" --policies none >"$dir/nostep.out" 2>"$dir/nostep.err"; then
  echo "a recording without a training step was modeled as one:"; cat "$dir/nostep.out"; exit 1
fi
grep -q "no training step found" "$dir/nostep.err" && [[ $(wc -l <"$dir/nostep.err") -eq 1 ]] ||
  { echo "no step: not the one-line refusal:"; cat "$dir/nostep.err"; exit 1; }
echo "no step: $(cat "$dir/nostep.err")"
# A truncated recording is refused with one line, not replayed.
head -c 40 "$dir/run.trace" >"$dir/cut.trace"
if "$replay" replay --trace "$dir/cut.trace" --policies none 2>"$dir/err"; then
  echo "a truncated recording was accepted"; exit 1
fi
[[ $(wc -l <"$dir/err") -eq 1 ]] || { echo "the refusal is not one line:"; cat "$dir/err"; exit 1; }
echo "truncated recording refused: $(cat "$dir/err")"
