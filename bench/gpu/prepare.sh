#!/usr/bin/env bash
# Builds what bench/gpu/run.sh needs into .gpu/bin (ignored by git): the
# driver-contract suite and the launch benchmark from a debug build (asserts
# on), libtierrt.so from a release build. Only Debian's static gtest and the
# library's private jemalloc are linked in, so the binaries run on a machine
# without Debian's packages.
set -euo pipefail
cd "$(dirname "$0")/../.."
cuda=${CUDA_ROOT:-/usr/local/cuda}
[[ -f build/build.ninja ]] || meson setup build -Dcuda-root="$cuda" >/dev/null
[[ -f build-release/build.ninja ]] || meson setup build-release -Dcuda-root="$cuda" --buildtype=release >/dev/null
ninja -C build tests/driver/driver_contract_tests bench/gpu/launch_overhead >/dev/null
ninja -C build-release preload/libtierrt.so >/dev/null
rm -rf .gpu/bin && mkdir -p .gpu/bin
cp build/tests/driver/driver_contract_tests build/bench/gpu/launch_overhead \
   build-release/preload/libtierrt.so .gpu/bin/
strip .gpu/bin/*
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
du -sh .gpu/bin
