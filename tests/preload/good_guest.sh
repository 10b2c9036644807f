#!/usr/bin/env bash
# libtierrt.so brings no C++ runtime into the job: it needs no libstdc++ or
# libgcc_s of the system's (both are linked in, hidden), so a job whose
# library path puts an older libstdc++.so.6 first (a Python environment's)
# still loads it.
# Usage: good_guest.sh LIBTIERRT OLD_CXX_RUNTIME_DIR
# In sanitized builds TIERRT_TEST_PRELOAD_PREFIX names the sanitizer runtime,
# which needs the system's libstdc++ itself (UBSan's): the run in front of
# the old runtime is then left out, the checks of the library's needs stay.
set -uo pipefail
lib=$1 old_dir=$2
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
echo "libtierrt.so needs: $(tr '\n' ' ' <<<"$needed")"
if grep -qE '^(libstdc\+\+|libgcc_s)' <<<"$needed"; then
  fail "libtierrt.so needs a C++ runtime library of the system's"
fi
versions=$(readelf -V "$lib" | grep -oE '(GLIBCXX|CXXABI|GCC)_[0-9.]+' | sort -u | tr '\n' ' ')
if [[ -n "$versions" ]]; then
  fail "libtierrt.so needs C++ runtime symbol versions: $versions"
else
  echo "ok: no GLIBCXX, CXXABI or GCC symbol version needed"
fi
# Nothing of the C++ runtime is exported: the job's own libstdc++ answers
# for every std:: and __cxa_ symbol.
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -E '^(_ZN?St|_ZNS|_ZSt|__cxa_|__gxx_|_Unwind_)' | head -3)
if [[ -n "$exported" ]]; then
  fail "libtierrt.so exports C++ runtime symbols: $exported"
else
  echo "ok: no C++ runtime symbol exported"
fi

if [[ -n "${TIERRT_TEST_PRELOAD_PREFIX:-}" ]]; then
  echo "skipped: the run in front of an older libstdc++ (the sanitizer runtime needs the system's)"
else
  if [[ ! -e "$old_dir/libstdc++.so.6" ]]; then
    fail "no stand-in libstdc++.so.6 in $old_dir"
  fi
  for prog in /bin/true "python3 -c print(6*7)"; do
    # shellcheck disable=SC2086
    out=$(LD_LIBRARY_PATH="$old_dir" LD_PRELOAD="$lib" $prog 2>&1)
    rc=$?
    if [[ $rc -ne 0 || ( -n "$out" && "$out" != 42 ) ]]; then
      fail "$prog in front of an older libstdc++: rc=$rc: $out"
    else
      echo "ok: $prog in front of an older libstdc++"
    fi
  done
fi
exit $((failures > 0))
