#!/usr/bin/env bash
# Builds the trampoline test (this folder's sources and the AArch64
# trampoline) with the AArch64 cross compiler and runs it under qemu's
# user-mode emulation, once plain and once with branch protection (BTI and
# pointer authentication), so the AArch64 trampoline is tested on any host.
# Exits 77 (skipped) when the cross compiler or qemu is missing.
# Usage: run_cross.sh SOURCE_DIR TRAMPOLINE.S OUTPUT_DIR
set -euo pipefail
src=$1
trampoline=$2
out=$3
cc=${AARCH64_CC:-aarch64-linux-gnu-gcc}
readelf=${AARCH64_READELF:-aarch64-linux-gnu-readelf}
qemu=${QEMU_AARCH64:-qemu-aarch64}
sysroot=${AARCH64_SYSROOT:-/usr/aarch64-linux-gnu}

skip() { echo "skipped: $1"; exit 77; }
command -v "$cc" >/dev/null || skip "no $cc (package gcc-aarch64-linux-gnu)"
command -v "$qemu" >/dev/null || skip "no $qemu (package qemu-user)"
[[ -e $sysroot/lib/ld-linux-aarch64.so.1 ]] || skip "no AArch64 C library in $sysroot (package libc6-dev-arm64-cross)"

for variant in plain branch-protection; do
  dir=$out/$variant
  mkdir -p "$dir"
  flags=(-std=c11 -O2 -g -fPIC -Wall -Wextra -Werror)
  tramp_flags=()
  if [[ $variant != plain ]]; then
    flags+=(-mbranch-protection=standard)
    # The C library's start files may carry no BTI marking. Linked without
    # them, the trampoline library is marked (and its pages guarded) exactly
    # when its own inputs are; it needs nothing from them.
    tramp_flags+=(-nostartfiles)
  fi
  # '$ORIGIN' is for the dynamic linker: the libraries sit next to the program.
  # shellcheck disable=SC2016
  rpath='-Wl,-rpath,$ORIGIN'
  "$cc" "${flags[@]}" -shared -Wl,-soname,libtt_libc.so -o "$dir/libtt_libc.so" "$src/libc_dl.c" -ldl
  "$cc" "${flags[@]}" "${tramp_flags[@]}" -shared -Wl,-soname,libtt_tramp.so "$rpath" -o "$dir/libtt_tramp.so" \
    "$trampoline" "$src/stub.c" -ldl
  for n in 1 2 3; do
    "$cc" "${flags[@]}" -shared -DLAYER=$n -Wl,-soname,libtt_layer$n.so \
      -Wl,--version-script="$src/layer.map" -o "$dir/libtt_layer$n.so" "$src/layer.c" -ldl
  done
  "$cc" "${flags[@]}" -o "$dir/tt_rtld_next" "$src/main.c" -L"$dir" \
    -ltt_layer1 -ltt_layer2 -ltt_layer3 "$rpath" -ldl

  if [[ $variant != plain ]] && command -v "$readelf" >/dev/null; then
    # Without the trampoline's property note the library would lose its BTI
    # marking, its pages would not be guarded and this run would prove nothing
    # about its landing pads or about the register its last branch goes through.
    notes=$("$readelf" -n "$dir/libtt_tramp.so")
    [[ $notes == *'AArch64 feature: BTI'* ]] || { echo "libtt_tramp.so is not marked BTI-compatible"; exit 1; }
  fi
  echo "== $variant"
  "$qemu" -cpu max -L "$sysroot" -E LD_PRELOAD="$dir/libtt_tramp.so" "$dir/tt_rtld_next"
done
