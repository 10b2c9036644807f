#!/usr/bin/env bash
# `meson install` into a DESTDIR puts the library, the header, tierrt.pc, the
# tools, the Python module and the docs in place; a C program builds against
# the installed tierrt.pc and runs; the installed tierrt-run finds the
# installed library. Then a configuration with -Dtests=disabled
# -Dbench=disabled has only the library and the tools (and simdev) as targets
# and needs neither GoogleTest nor Google Benchmark.
# Usage: install_test.sh MESON BUILD_ROOT SOURCE_ROOT CUDA_ROOT
# Skipped (77) without pkg-config or a C compiler.
set -uo pipefail
meson=$1 build=$2 source=$3 cuda_root=$4
command -v pkg-config >/dev/null || { echo "pkg-config not found: skipped"; exit 77; }
cc=$(command -v cc || command -v gcc) || { echo "no C compiler: skipped"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
check() {  # check DESCRIPTION EXPECTED ACTUAL
  if [[ "$2" == "$3" ]]; then echo "ok: $1"; else echo "FAIL: $1: expected '$2', got '$3'"; failures=$((failures + 1)); fi
}
found() { find "$dir/dest" "$@" | head -1; }

"$meson" install -C "$build" --no-rebuild --quiet --destdir "$dir/dest" >"$dir/install.log" 2>&1
check "meson install --destdir succeeds" "0" "$?"
lib=$(found -name libtierrt.so)
pc=$(found -name tierrt.pc)
for what in "libtierrt.so:$lib" "tierrt.pc:$pc" "include/tierrt/tierrt.h:$(found -path '*/include/tierrt/tierrt.h')" \
            "bin/tierrt-run:$(found -path '*/bin/tierrt-run')" "bin/tierrt-replay:$(found -path '*/bin/tierrt-replay')" \
            "tierrt.py:$(found -name tierrt.py)" "doc/tierrt/design.md:$(found -path '*/doc/tierrt/design.md')" \
            "doc/tierrt/README.md:$(found -path '*/doc/tierrt/README.md')"; do
  check "installs ${what%%:*}" "yes" "$([[ -n "${what#*:}" ]] && echo yes || echo no)"
done

# A program against the installed tierrt.pc; the sysroot makes pkg-config's
# paths point into the DESTDIR.
cat >"$dir/hello.c" <<'C'
#include <stdio.h>
#include <tierrt/tierrt.h>
int main(void) {
  tierrt_stats s = {.struct_size = sizeof s};
  printf("%s %d\n", tierrt_version(), tierrt_get_stats(&s));  /* -1: no CUDA here, so tierrt is not running */
  return 0;
}
C
export PKG_CONFIG_PATH=$(dirname "$pc") PKG_CONFIG_SYSROOT_DIR=$dir/dest
# shellcheck disable=SC2046
"$cc" -o "$dir/hello" "$dir/hello.c" $(pkg-config --cflags --libs tierrt) >"$dir/cc.log" 2>&1
check "a C program builds against tierrt.pc" "0" "$?"
check "... and runs against the installed library" "0.1.0 -1" "$(LD_LIBRARY_PATH=$(dirname "$lib") "$dir/hello")"

check "the installed tierrt-run finds the installed library" "LD_PRELOAD=$lib" \
  "$(env -u LD_PRELOAD "$(found -path '*/bin/tierrt-run')" --print-env | head -1)"

# Only the library and the tools without tests and benchmarks.
"$meson" setup "$dir/lean" "$source" -Dcuda-root="$cuda_root" -Dtests=disabled -Dbench=disabled >"$dir/setup.log" 2>&1
check "configures with -Dtests=disabled -Dbench=disabled" "0" "$?"
targets=$("$meson" introspect "$dir/lean" --targets | python3 -c 'import json,sys; print(" ".join(sorted(t["name"] for t in json.load(sys.stdin))))')
check "... builds libtierrt and the tools" "yes yes yes" \
  "$([[ " $targets " == *" tierrt "* ]] && echo yes) $([[ " $targets " == *" tierrt-run "* ]] && echo yes) $([[ " $targets " == *" tierrt-replay "* ]] && echo yes)"
check "... and no test or benchmark" "" "$(tr ' ' '\n' <<<"$targets" | grep -E '_tests$|_bench$|probe' | paste -sd' ')"
deps=$("$meson" introspect "$dir/lean" --dependencies | python3 -c 'import json,sys; print(" ".join(d["name"] for d in json.load(sys.stdin)))')
check "... and looks for neither GoogleTest nor Google Benchmark" "" "$(tr ' ' '\n' <<<"$deps" | grep -E '^(gtest|gmock|benchmark)$' | paste -sd' ')"
[[ $failures -gt 0 ]] && tail -5 "$dir/install.log" "$dir/setup.log" "$dir/cc.log" 2>/dev/null
exit $((failures > 0))
