#!/usr/bin/env bash
# tierrt-run: flags become variables, LD_PRELOAD is prepended, presets keep
# what the user set, exit status passes through, bad input is refused.
# Usage: tierrt_run_test.sh TIERRT_RUN LIBTIERRT PROBE
# In sanitized builds TIERRT_TEST_PRELOAD_PREFIX names the sanitizer runtime,
# which has to be preloaded ahead of libtierrt.so: tierrt-run is given it in
# LD_PRELOAD and has to keep it first.
set -uo pipefail
tierrt_run=$1 lib=$2 probe=$3
prefix=${TIERRT_TEST_PRELOAD_PREFIX:+$TIERRT_TEST_PRELOAD_PREFIX:}
run() { LD_PRELOAD=${LD_PRELOAD-${TIERRT_TEST_PRELOAD_PREFIX:-}} "$tierrt_run" "$@"; }
failures=0
check() {  # check DESCRIPTION EXPECTED ACTUAL
  if [[ "$2" == "$3" ]]; then echo "ok: $1"; else echo "FAIL: $1: expected '$2', got '$3'"; failures=$((failures + 1)); fi
}

out=$(run --budget 90% --host-budget 64GiB --mode observe --stats --trace /tmp/x.json -- \
  sh -c 'echo "$LD_PRELOAD|$TIERRT_DEVICE_BUDGET|$TIERRT_HOST_BUDGET|$TIERRT_MODE|$TIERRT_STATS|$TIERRT_TRACE"')
check "flags become variables" "$prefix$lib|90%|64GiB|observe|-|/tmp/x.json" "$out"

out=$(LD_PRELOAD=$prefix/lib/other.so run -- sh -c 'echo "$LD_PRELOAD"')
check "LD_PRELOAD is prepended, not replaced" "$prefix$lib:/lib/other.so" "$out"
out=$(LD_PRELOAD=$prefix/opt/libasan.so.8:/lib/other.so run -- sh -c 'echo "$LD_PRELOAD"')
check "a sanitizer runtime stays first" "$prefix/opt/libasan.so.8:$lib:/lib/other.so" "$out"

out=$(run --stats=/tmp/s.txt -- sh -c 'echo "$TIERRT_STATS"')
check "--stats=FILE" "/tmp/s.txt" "$out"

out=$(run --framework torch -- sh -c 'echo "$PYTORCH_NO_CUDA_MEMORY_CACHING"')
check "torch preset" "1" "$out"
out=$(run --framework jax -- sh -c 'echo "$XLA_PYTHON_CLIENT_ALLOCATOR $XLA_PYTHON_CLIENT_PREALLOCATE"')
check "jax preset" "platform false" "$out"
out=$(XLA_PYTHON_CLIENT_PREALLOCATE=true run --framework jax -- sh -c 'echo "$XLA_PYTHON_CLIENT_PREALLOCATE"')
check "a preset keeps what the user set" "true" "$out"

run -- sh -c 'exit 7'
check "exit status passes through" "7" "$?"
run --budget lots -- true 2>/tmp/tierrt-run-err.$$
rc=$?
check "a bad size is refused with status 2" "2" "$rc"
check "... in one line naming the flag" "1" "$(grep -c -- '--budget="lots"' /tmp/tierrt-run-err.$$)"
rm -f /tmp/tierrt-run-err.$$
run --mode sideways -- true 2>/dev/null
check "a bad mode is refused" "2" "$?"
run 2>/dev/null
check "no command is refused" "2" "$?"
run -- /no/such/program 2>/dev/null
check "a command that cannot run gives 127" "127" "$?"
run --help >/dev/null
check "--help succeeds" "0" "$?"
check "--help names every flag" "6" "$(run --help | grep -cE -- '^ +--(budget|host-budget|mode|stats|trace|framework)[ =]')"

# End to end: the probe oversubscribes simdev under tierrt-run and the
# summary lands in the stats file.
stats=$(mktemp)
run --stats="$stats" -- "$probe" direct >/dev/null
check "a CUDA program runs under tierrt-run" "0" "$?"
check "its stats summary is written" "1" "$(grep -c 'spilled' "$stats")"
rm -f "$stats"
exit $((failures > 0))
