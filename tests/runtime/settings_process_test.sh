#!/usr/bin/env bash
# The settings as a program under tierrt meets them: a budget above the device
# is clamped with a warning, a zero budget and two outputs on one file are
# refused in one line, "-" is stderr for every output, %p and %r name output
# files, TIERRT_VIRTUAL_MEMINFO answers the first query, refused allocations
# say why (rate-limited), and TIERRT_LOG=debug shows spills and fetches.
# Usage: settings_process_test.sh PROBE LIBTIERRT
# TIERRT_SPILL_MODE and TIERRT_POLICY come from the caller;
# TIERRT_TEST_PRELOAD_PREFIX names a sanitizer runtime to preload first.
set -uo pipefail
probe=$(realpath "$1") lib=$2
preload=${TIERRT_TEST_PRELOAD_PREFIX:+$TIERRT_TEST_PRELOAD_PREFIX:}$lib
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
failures=0
check() {  # check DESCRIPTION EXPECTED ACTUAL
  if [[ "$2" == "$3" ]]; then echo "ok: $1"; else echo "FAIL: $1: expected '$2', got '$3'"; failures=$((failures + 1)); fi
}
# probe ARGS... with the environment given before it; stdout to out, stderr to err.
probe() { env SIMDEV_MEM="${SIMDEV_MEM:-128MiB}" LD_PRELOAD="$preload" "$@" >out 2>err; }
MiB=1048576

# A budget above the device: clamped to the device, with one warning; the
# stats then report the device's size as the budget.
probe TIERRT_DEVICE_BUDGET=99999TiB TIERRT_STATS=stats.txt "$probe" oversubscribe 4
check "a budget above the device: the job runs" "ok" "$(tail -1 out)"
check "... with one warning" "1" "$(grep -c "warn: TIERRT_DEVICE_BUDGET .* is more than the device's memory (128 MiB); using 128 MiB" err)"
check "... and the budget clamped to the device" "1" "$(grep -cE 'budgets +128.0 MiB device' stats.txt)"

# Zero budgets: refused in one line naming the variable; tierrt is off.
for var in TIERRT_DEVICE_BUDGET TIERRT_HOST_BUDGET; do
  probe "$var=0" TIERRT_STATS=- "$probe" alloc 1
  check "$var=0 is refused in one line" "1" "$(grep -c "$var=\"0\" is not accepted.*tierrt is off" err)"
  check "... and nothing else is said" "1" "$(wc -l <err)"
done

# "-" is stderr for each output; no file named "-" appears.
probe TIERRT_TRACE=- "$probe" oversubscribe 2
check "TIERRT_TRACE=- writes the trace to stderr" "1" "$(grep -c traceEvents err)"
probe TIERRT_RECORD=- "$probe" oversubscribe 2
check "TIERRT_RECORD=- writes the recording to stderr" "1" "$(grep -ac TIERRTTR err)"
probe TIERRT_STATS=- "$probe" oversubscribe 2
check "TIERRT_STATS=- writes the summary to stderr" "1" "$(grep -c 'tierrt stats' err)"
check "no file named -" "no" "$([[ -e - ]] && echo yes || echo no)"

# Two outputs on one file: refused, naming both.
probe TIERRT_TRACE=same.out TIERRT_RECORD=./same.out "$probe" oversubscribe 2
check "two outputs on one file are refused in one line" "1" \
  "$(grep -c 'TIERRT_TRACE and TIERRT_RECORD both name "same.out".*tierrt is off' err)"
check "... and neither is written" "no" "$([[ -e same.out ]] && echo yes || echo no)"

# %p and %r in output file names.
probe TIERRT_STATS=stats.%p.%r.txt "$probe" oversubscribe 2
pid=$(awk '/^pid/ {print $2}' out)
check "%p is the pid, %r is 0 without a rank" "yes" "$([[ -s stats.$pid.0.txt ]] && echo yes || echo no)"
probe RANK=3 TIERRT_TRACE=trace.%r.json TIERRT_RECORD=events.%r.%p "$probe" oversubscribe 2
pid=$(awk '/^pid/ {print $2}' out)
check "%r is RANK in the trace's name" "yes" "$([[ -s trace.3.json ]] && echo yes || echo no)"
check "... and in the recording's" "yes" "$([[ -s events.3.$pid ]] && echo yes || echo no)"
probe SLURM_PROCID=5 TIERRT_STATS=s.%r "$probe" oversubscribe 2
check "%r is SLURM_PROCID" "yes" "$([[ -s s.5 ]] && echo yes || echo no)"

# TIERRT_VIRTUAL_MEMINFO: the first cuMemGetInfo, before any allocation, is
# the budget plus the host tier.
probe TIERRT_VIRTUAL_MEMINFO=1 TIERRT_DEVICE_BUDGET=64MiB TIERRT_HOST_BUDGET=1GiB "$probe" meminfo-first
check "the first cuMemGetInfo is the virtual one" "$((64 * MiB + 1024 * MiB))" "$(tail -1 out | cut -d' ' -f2)"
probe TIERRT_DEVICE_BUDGET=64MiB "$probe" meminfo-first
check "... and the device's without TIERRT_VIRTUAL_MEMINFO" "$((128 * MiB))" "$(tail -1 out | cut -d' ' -f2)"

# A refused allocation says why, in one line at warn level, a few times only.
probe TIERRT_DEVICE_BUDGET=64MiB "$probe" alloc 200 20
check "an allocation above the budget and the device is refused" "20" "$(grep -c CUDA_ERROR_OUT_OF_MEMORY out)"
check "... said in one warn line each, the first 8 only" "8" \
  "$(grep -c 'warn: refused an allocation of 209715200 bytes (CUDA_ERROR_OUT_OF_MEMORY): it is larger than the device budget' err)"
check "... and no more refusal lines" "8" "$(grep -c 'refused an allocation' err)"
probe TIERRT_DEVICE_BUDGET=64MiB TIERRT_HOST_BUDGET=16MiB "$probe" fill 16
check "with the host tier full an allocation is refused" "1" \
  "$(grep -c 'warn: refused an allocation of 16777216 bytes .*the host tier is full' err)"

# TIERRT_LOG=debug shows spills and fetches; info does not.
probe TIERRT_DEVICE_BUDGET=32MiB TIERRT_LOG=debug "$probe" oversubscribe 4
check "debug: the job runs" "ok" "$(tail -1 out)"
check "debug: spills are logged" "yes" "$(grep -q 'debug: spilled [0-9]* bytes' err && echo yes || echo no)"
check "debug: fetches are logged" "yes" "$(grep -q 'debug: fetched [0-9]* bytes' err && echo yes || echo no)"
probe TIERRT_DEVICE_BUDGET=32MiB TIERRT_LOG=info "$probe" oversubscribe 4
check "info: no spill or fetch lines" "0" "$(grep -c 'spilled\|fetched' err)"

exit $((failures > 0))
