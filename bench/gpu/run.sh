#!/usr/bin/env bash
# Every check that needs a GPU, in one run (a GPU is lent only now and then,
# and briefly). Build here first with bench/gpu/prepare.sh, which puts the
# binaries in .gpu/; then run this on the GPU machine from the repository
# root, with $OUT a folder for the logs (default: .gpu/out).
#
#   1. the driver-contract suite against NVIDIA's driver: every behaviour
#      simdev models, checked against the real thing;
#   2. the same suite under tierrt (the suite is a correct program: tierrt
#      must not change its results), at default settings and with a small
#      device budget in each spill mode, so that blocks really move;
#   3. what a launch costs with and without tierrt (bench/gpu/launch_overhead);
#   4. the same program with more live blocks than the device budget, in each
#      spill mode: blocks spill and come back on every launch, and every
#      write must survive.
# Prints a short table last; the logs are in $OUT/logs.tar.gz.
set -u
cd "$(dirname "$0")/../.."
bin=$PWD/.gpu/bin
out=${OUT:-$PWD/.gpu/out}
mkdir -p "$out"

cuda_dir=${CUDA_LIB_DIR:-}
[[ -n $cuda_dir ]] || cuda_dir=$(dirname "$(ldconfig -p | awk '/libcuda\.so\.1 .*x86-64/ {print $NF; exit}')")
[[ -f $cuda_dir/libcuda.so.1 ]] || cuda_dir=/usr/local/nvidia/lib64
export LD_LIBRARY_PATH=$cuda_dir
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"

summary=()
note() { summary+=("$1"); }

contract() {  # name, then environment assignments; extra gtest args in FILTER
  local name=$1; shift
  env "$@" timeout 300 "$bin/driver_contract_tests" --gtest_brief=1 ${FILTER:+--gtest_filter=$FILTER} \
    --gtest_output="xml:$out/contract-$name.xml" >"$out/contract-$name.log" 2>&1
  local rc=$?
  local failed
  failed=$(grep -c '^\[  FAILED  \] [A-Za-z]*\.' "$out/contract-$name.log")
  note "contract $name: rc=$rc failed=$failed"
  grep '^\[  FAILED  \] [A-Za-z]*\.' "$out/contract-$name.log" | sed 's/^/    /' | head -30
}

contract native
preload=(LD_PRELOAD="$bin/libtierrt.so" TIERRT_LOG=warn)
contract tierrt-default "${preload[@]}" TIERRT_STATS="$out/stats-default.txt"
FILTER='-*OutOfMemory*:*BeyondCapacity*' contract tierrt-remap-256MiB "${preload[@]}" \
  TIERRT_STATS="$out/stats-remap.txt" TIERRT_SPILL_MODE=remap TIERRT_DEVICE_BUDGET=256MiB
FILTER='-*OutOfMemory*:*BeyondCapacity*' contract tierrt-copy-256MiB "${preload[@]}" \
  TIERRT_STATS="$out/stats-copy.txt" TIERRT_SPILL_MODE=copy TIERRT_DEVICE_BUDGET=256MiB

for live in 100 2000 10000; do
  base=$(timeout 60 "$bin/launch_overhead" --live $live 2>&1 | tail -1)
  planner=$(LD_PRELOAD="$bin/libtierrt.so" TIERRT_LOG=error timeout 60 "$bin/launch_overhead" --live $live 2>&1 | tail -1)
  reactive=$(LD_PRELOAD="$bin/libtierrt.so" TIERRT_LOG=error TIERRT_POLICY=reactive timeout 60 \
    "$bin/launch_overhead" --live $live 2>&1 | tail -1)
  echo "driver:   $base" ; echo "planner:  $planner"; echo "reactive: $reactive"
  note "launch live=$live ns/launch: driver ${base##*ns_per_launch=} | tierrt planner ${planner##*ns_per_launch=} | reactive ${reactive##*ns_per_launch=}"
done | tee "$out/launch.txt"

for mode in remap copy; do
  LD_PRELOAD="$bin/libtierrt.so" TIERRT_LOG=warn TIERRT_SPILL_MODE=$mode TIERRT_DEVICE_BUDGET=128MiB \
    TIERRT_STATS="$out/stats-thrash-$mode.txt" timeout 120 "$bin/launch_overhead" --live 400 --batches 2 \
    >"$out/thrash-$mode.log" 2>&1
  note "over budget ($mode, 400 MiB of blocks on 128 MiB): rc=$? $(tail -1 "$out/thrash-$mode.log")"
  grep -E 'spilled|fetched|copies' "$out/stats-thrash-$mode.txt" | sed 's/^/    /'
done

(cd "$out" && tar czf logs.tar.gz --remove-files ./*.log ./*.xml ./stats-*.txt ./launch.txt 2>/dev/null)
echo "== summary"
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
