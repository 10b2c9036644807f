#!/usr/bin/env bash
# IPC of tierrt's memory end to end: ipc_probe's modes under
# LD_PRELOAD=libtierrt.so on simdev, each a process of its own (a second
# process is forked and exec'd by the probe where one is needed).
# Usage: ipc_test.sh PROBE LIBTIERRT
# TIERRT_SPILL_MODE and TIERRT_POLICY come from the caller;
# TIERRT_TEST_PRELOAD_PREFIX names a sanitizer runtime to preload first.
set -uo pipefail
probe=$(realpath "$1") lib=$2
preload=${TIERRT_TEST_PRELOAD_PREFIX:+$TIERRT_TEST_PRELOAD_PREFIX:}$lib
failures=0
for mode in export retain own foreign; do
  echo "== $mode"
  if ! env SIMDEV_MEM=256MiB TIERRT_DEVICE_BUDGET=32MiB TIERRT_LOG=error LD_PRELOAD="$preload" "$probe" "$mode"; then
    echo "FAIL: mode $mode"
    failures=$((failures + 1))
  fi
done
# A granule group (remap mode only: copy mode keeps large allocations whole).
if [[ ${TIERRT_SPILL_MODE:-} == remap ]]; then
  echo "== group"
  if ! env SIMDEV_MEM=256MiB TIERRT_GRANULE_BYTES=8MiB TIERRT_LOG=off LD_PRELOAD="$preload" "$probe" group; then
    echo "FAIL: mode group"
    failures=$((failures + 1))
  fi
fi
exit $((failures > 0))
