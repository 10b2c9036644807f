#!/usr/bin/env bash
# Programs that never touch CUDA behave the same under LD_PRELOAD=libtierrt.so:
# same output, same exit status, and the CUDA driver is never loaded.
# Usage: non_cuda_programs.sh LIBTIERRT
set -uo pipefail
lib=$1
failures=0

compare() {  # compare DESCRIPTION COMMAND...
  local what=$1
  shift
  local plain preloaded plain_rc preloaded_rc
  plain=$("$@" 2>&1)
  plain_rc=$?
  preloaded=$(LD_PRELOAD="$lib" "$@" 2>&1)
  preloaded_rc=$?
  if [[ "$plain" != "$preloaded" || $plain_rc -ne $preloaded_rc ]]; then
    echo "FAIL: $what: without tierrt rc=$plain_rc '$plain', with tierrt rc=$preloaded_rc '$preloaded'"
    failures=$((failures + 1))
  else
    echo "ok: $what (rc=$plain_rc)"
  fi
}

compare "/bin/true" /bin/true
compare "/bin/false" /bin/false
compare "a shell pipeline" bash -c 'seq 1 2000 | sort -rn | head -3 | tr "\n" " "; exit 3'
compare "python3" python3 -c 'import json, ctypes; print(json.dumps({"sum": sum(range(10**5))})); ctypes.CDLL(None)'
# dlsym of ordinary names (and of a cu* name that is not there) still answers.
compare "python3 ctypes lookups" python3 -c '
import ctypes
libc = ctypes.CDLL(None)
print(libc.strlen(b"tierrt"), hasattr(libc, "cuNoSuchFunction"))'

# The driver is never loaded by a program that does not load it.
maps=$(LD_PRELOAD="$lib" python3 -c 'print(open("/proc/self/maps").read())')
if grep -q libcuda <<<"$maps"; then
  echo "FAIL: libcuda was loaded into a program that never uses CUDA"
  failures=$((failures + 1))
else
  echo "ok: libcuda never loaded"
fi
if ! grep -q libtierrt <<<"$maps"; then
  echo "FAIL: libtierrt.so was not preloaded at all (the test proves nothing)"
  failures=$((failures + 1))
fi
exit $((failures > 0))
