#!/usr/bin/env bash
# Two devices in one process under LD_PRELOAD=libtierrt.so on simdev: an
# engine per device, a spilled block of device 0 read and written by a
# kernel of device 1 through peer access, a cross-device copy of a spilled
# block, each engine's outputs in a file of its own.
# Usage: multi_device_test.sh PROBE LIBTIERRT
# TIERRT_SPILL_MODE comes from the caller; TIERRT_TEST_PRELOAD_PREFIX names
# a sanitizer runtime to preload first.
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

env SIMDEV_DEVICES=2 SIMDEV_MEM=256MiB SIMDEV_REPORT_FAULTS=1 TIERRT_POLICY=reactive TIERRT_LOG=info \
  TIERRT_STATS=stats.txt LD_PRELOAD="$preload" "$probe" >out 2>err
rc=$?
cat out
check "the probe's checks pass" "0" "$rc"
check "no kernel faulted" "0" "$(grep -c 'faulted' err)"
check "an engine started on each device" "2" "$(grep -c 'info: started on device [01]' err)"
check "the first engine's stats file keeps its name" "yes" "$([[ -s stats.txt ]] && echo yes || echo no)"
check "the second engine's stats go to a file of their own" "yes" "$([[ -s stats.dev1.txt ]] && echo yes || echo no)"

# %d names each engine's file.
env SIMDEV_DEVICES=2 SIMDEV_MEM=256MiB TIERRT_POLICY=reactive TIERRT_STATS=stats.%d LD_PRELOAD="$preload" "$probe" \
  >out.d 2>err.d
check "%d: the probe's checks pass" "0" "$?"
check "%d: one stats file per device" "stats.0 stats.1" "$(ls stats.? | tr '\n' ' ' | sed 's/ $//')"

if [[ $failures -ne 0 ]]; then
  echo "--- stderr"
  cat err
fi
exit $((failures != 0))
