#!/usr/bin/env bash
# Programs that never touch CUDA behave the same under LD_PRELOAD=libtierrt.so:
# same output, same exit status, and the CUDA driver is never loaded.
# Usage: non_cuda_programs.sh LIBTIERRT
# In sanitized builds TIERRT_TEST_PRELOAD_PREFIX names the sanitizer runtime,
# which has to be preloaded ahead of libtierrt.so.
set -uo pipefail
lib=${TIERRT_TEST_PRELOAD_PREFIX:+$TIERRT_TEST_PRELOAD_PREFIX:}$1
asan_options=${ASAN_OPTIONS:-}
failures=0

compare() {  # compare DESCRIPTION COMMAND...
  local what=$1
  shift
  local plain preloaded plain_rc preloaded_rc
  plain=$("$@" 2>&1)
  plain_rc=$?
  preloaded=$(LD_PRELOAD="$lib" ASAN_OPTIONS="$asan_options" "$@" 2>&1)
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
# From here on without LeakSanitizer: preloaded with the sanitizer runtime,
# it reports what bash and python leave allocated at exit, none of it
# tierrt's (the two programs above, leak-checked, show tierrt leaves nothing
# in a program that does not use CUDA).
asan_options=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
compare "a shell pipeline" bash -c 'seq 1 2000 | sort -rn | head -3 | tr "\n" " "; exit 3'
compare "python3" python3 -c 'import json, ctypes; print(json.dumps({"sum": sum(range(10**5))})); ctypes.CDLL(None)'
# dlsym of ordinary names (and of a cu* name that is not there) still answers.
compare "python3 ctypes lookups" python3 -c '
import ctypes
libc = ctypes.CDLL(None)
print(libc.strlen(b"tierrt"), hasattr(libc, "cuNoSuchFunction"))'

# The driver is never loaded by a program that does not load it.
maps=$(LD_PRELOAD="$lib" ASAN_OPTIONS="$asan_options" python3 -c 'print(open("/proc/self/maps").read())')
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
