#!/usr/bin/env bash
# tierrt-run's options: each becomes its variable, output options never take
# the command (or `--`) as their file, --version and --print-env need no
# command, a bad library is one line and status 2, the library beside an
# installed tool is found first, and %p / %r in file names reach the runtime.
# Usage: tierrt_run_options_test.sh TIERRT_RUN LIBTIERRT SETTINGS_PROBE
# TIERRT_TEST_PRELOAD_PREFIX names a sanitizer runtime to keep first.
set -uo pipefail
tierrt_run=$(realpath "$1") lib=$(realpath "$2") probe=$(realpath "$3")
prefix=${TIERRT_TEST_PRELOAD_PREFIX:+$TIERRT_TEST_PRELOAD_PREFIX:}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
run() { LD_PRELOAD=${TIERRT_TEST_PRELOAD_PREFIX:-} "$tierrt_run" "$@"; }
failures=0
check() {  # check DESCRIPTION EXPECTED ACTUAL
  if [[ "$2" == "$3" ]]; then echo "ok: $1"; else echo "FAIL: $1: expected '$2', got '$3'"; failures=$((failures + 1)); fi
}
var() { local v=$1; shift; run --print-env "$@" | sed -n "s/^$v=//p"; }

# Each option sets its variable, in both forms.
check "--budget" "60GiB" "$(var TIERRT_DEVICE_BUDGET --budget 60GiB)"
check "--budget=" "90%" "$(var TIERRT_DEVICE_BUDGET --budget=90%)"
check "--host-budget" "64GiB" "$(var TIERRT_HOST_BUDGET --host-budget 64GiB)"
check "--mode" "observe" "$(var TIERRT_MODE --mode observe)"
check "--policy" "reactive" "$(var TIERRT_POLICY --policy reactive)"
check "--policy=" "planner" "$(var TIERRT_POLICY --policy=planner)"
check "--spill-mode" "copy" "$(var TIERRT_SPILL_MODE --spill-mode copy)"
check "--spill-mode=" "remap" "$(var TIERRT_SPILL_MODE --spill-mode=remap)"
check "--min-bytes" "4MiB" "$(var TIERRT_MIN_BYTES --min-bytes 4MiB)"
check "--log" "debug" "$(var TIERRT_LOG --log debug)"
check "--log=" "info" "$(var TIERRT_LOG --log=info)"
check "--stats alone is stderr" "-" "$(var TIERRT_STATS --stats)"
check "--stats=FILE" "s.txt" "$(var TIERRT_STATS --stats=s.txt)"
check "--trace=FILE" "t.json" "$(var TIERRT_TRACE --trace=t.json)"
check "--record=FILE" "r.events" "$(var TIERRT_RECORD --record=r.events)"
check "--record=- is stderr" "-" "$(var TIERRT_RECORD --record=-)"
check "a later value wins" "copy" "$(var TIERRT_SPILL_MODE --spill-mode remap --spill-mode copy)"
check "%p and %r pass through to the runtime" "s.%p.%r" "$(var TIERRT_STATS --stats=s.%p.%r)"
check "--link" "c2c" "$(var TIERRT_LINK --link c2c)"
check "--link=" "100,80" "$(var TIERRT_LINK --link=100,80)"
check "--estimate: observe mode" "observe" "$(var TIERRT_MODE --estimate)"
for bad in "--link fast" "--policy magic" "--spill-mode managed" "--min-bytes 50%" "--log verbose" "--budget lots" "--nonsense"; do
  # shellcheck disable=SC2086
  run $bad -- true 2>err
  rc=$?
  check "$bad: status 2" "2" "$rc"
  check "$bad: one line naming the option" "1 1" "$(wc -l <err) $(grep -c -- "${bad%% *}" err)"
done

# Output options never take the command, nor `--`, as their file.
check "--stats PROG runs PROG" "-" "$(run --stats sh -c 'echo "$TIERRT_STATS"')"
check "--stats FILE -- PROG takes FILE" "s.txt" "$(run --stats s.txt -- sh -c 'echo "$TIERRT_STATS"')"
check "--stats -- PROG is stderr" "-" "$(run --stats -- sh -c 'echo "$TIERRT_STATS"')"
check "--stats - -- PROG is stderr" "-" "$(run --stats - -- sh -c 'echo "$TIERRT_STATS"')"
check "--trace FILE -- PROG takes FILE" "t.json" "$(run --trace t.json -- sh -c 'echo "$TIERRT_TRACE"')"
check "--trace=FILE PROG runs PROG" "t.json" "$(run --trace=t.json sh -c 'echo "$TIERRT_TRACE"')"
check "PROG's own options stay PROG's" "x --stats y" "$(run --stats=s sh -c 'echo "$0 $1 $2"' x --stats y)"
for opt in --trace --record; do
  run "$opt" -- touch ran 2>err
  rc=$?
  check "$opt -- PROG is refused" "2" "$rc"
  check "... in one line asking for $opt=FILE" "1" "$(grep -c -- "$opt needs a value: $opt=FILE" err)"
  check "... no file named -- and PROG not run" "no no" "$([[ -e -- ]] && echo yes || echo no) $([[ -e ran ]] && echo yes || echo no)"
  run "$opt" touch ran 2>/dev/null
  check "$opt PROG is refused, not run" "2 no" "$? $([[ -e ran ]] && echo yes || echo no)"
done

# --version and --print-env need no command.
check "--version" "tierrt-run 0.1.0" "$(run --version)"
run --version >/dev/null
check "--version succeeds" "0" "$?"
out=$(run --print-env --budget 1GiB --trace='a b.json' --framework torch)
check "--print-env succeeds" "0" "$?"
check "--print-env: LD_PRELOAD first" "LD_PRELOAD=$prefix$lib" "$(head -1 <<<"$out")"
check "--print-env: the variables, quoted for a shell" \
  "TIERRT_DEVICE_BUDGET=1GiB|TIERRT_TRACE='a b.json'|PYTORCH_NO_CUDA_MEMORY_CACHING=1" "$(tail -n +2 <<<"$out" | paste -sd'|')"
run --print-env -- touch ran >/dev/null
check "--print-env runs nothing" "no" "$([[ -e ran ]] && echo yes || echo no)"
check "--help names the new options" "7" \
  "$(run --help | grep -cE -- '^ +--(policy|spill-mode|min-bytes|log|record|print-env|version)[ =]')"

# A bad library: one line, status 2, the command not run.
for bad in /no/such/libtierrt.so /etc/hostname "$(ldconfig -p | awk '/libm\.so\.6 / {print $NF; exit}')"; do
  TIERRT_LIBRARY=$bad run -- touch ran 2>err
  rc=$?
  check "TIERRT_LIBRARY=$bad: status 2" "2" "$rc"
  check "... one line naming it" "1 1" "$(wc -l <err) $(grep -c "^tierrt-run: TIERRT_LIBRARY=$bad: " err)"
  check "... the command not run" "no" "$([[ -e ran ]] && echo yes || echo no)"
done
check "not tierrt: says which symbols are missing" "1" "$(grep -c 'is not libtierrt.so (it does not export tierrt_version' err)"

# Installed: the library beside the tool comes first, TIERRT_LIBRARY before it.
mkdir -p inst/bin inst/lib/x86_64-linux-gnu other
cp "$tierrt_run" inst/bin/
cp "$lib" inst/lib/x86_64-linux-gnu/libtierrt.so
cp "$lib" other/libtierrt.so
check "an installed tool finds the library beside it" "LD_PRELOAD=$prefix$dir/inst/lib/x86_64-linux-gnu/libtierrt.so" \
  "$(LD_PRELOAD=${TIERRT_TEST_PRELOAD_PREFIX:-} inst/bin/tierrt-run --print-env | head -1)"
check "TIERRT_LIBRARY comes first" "LD_PRELOAD=$prefix$dir/other/libtierrt.so" \
  "$(TIERRT_LIBRARY=$dir/other/libtierrt.so LD_PRELOAD=${TIERRT_TEST_PRELOAD_PREFIX:-} inst/bin/tierrt-run --print-env | head -1)"

# %p and %r reach the runtime, which expands them when it writes.
run --stats=stats.%p.%r.txt --spill-mode copy --policy reactive --budget 32MiB -- "$probe" oversubscribe 4 >out
pid=$(awk '/^pid/ {print $2}' out)
check "a job under tierrt-run runs" "ok" "$(tail -1 out)"
check "its stats land in stats.PID.0.txt" "1" "$(grep -c 'tierrt stats' "stats.$pid.0.txt" 2>/dev/null)"
RANK=2 run --stats=r%r.txt -- "$probe" oversubscribe 2 >/dev/null
check "... and in r2.txt with RANK=2" "1" "$(grep -c 'tierrt stats' r2.txt 2>/dev/null)"

exit $((failures > 0))
