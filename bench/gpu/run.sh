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
#   3. what a launch naming 8 blocks costs with and without tierrt, at the
#      median (bench/gpu/launch_overhead: issue 11's launch-path figure);
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

# Kept in a file: a note made in a pipeline's subshell reaches it too.
rm -f "$out/summary.txt"
note() { echo "$1" >>"$out/summary.txt"; }

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

# Item by item as launch_hook_bench's BM_LaunchHookAdded: 8 pointer
# parameters, steps marked, each launch timed by itself (the median is the
# typical launch). Three alternations of the driver alone, the planner and
# the reactive policy, each a process of its own; what tierrt adds is its
# median less the driver's in the same alternation.
overhead() {  # live, then launch_overhead's flags
  local live=$1; shift
  local i base planner reactive
  for i in 1 2 3; do
    base=$(timeout 120 "$bin/launch_overhead" --live "$live" "$@" 2>&1 | tail -1)
    planner=$(LD_PRELOAD="$bin/libtierrt.so" TIERRT_LOG=error timeout 120 "$bin/launch_overhead" --live "$live" "$@" 2>&1 | tail -1)
    reactive=$(LD_PRELOAD="$bin/libtierrt.so" TIERRT_LOG=error TIERRT_POLICY=reactive timeout 120 \
      "$bin/launch_overhead" --live "$live" "$@" 2>&1 | tail -1)
    echo "driver:   $base"; echo "planner:  $planner"; echo "reactive: $reactive"
    local d=${base##*median_ns=} p=${planner##*median_ns=} r=${reactive##*median_ns=}
    d=${d%% *} p=${p%% *} r=${r%% *}
    if [[ $d =~ ^[0-9]+$ && $p =~ ^[0-9]+$ && $r =~ ^[0-9]+$ ]]; then
      note "launch live=$live $* median ns: driver $d | added: planner $((p - d)), reactive $((r - d))"
    else
      note "launch live=$live $*: a run failed (see launch.txt)"
    fi
  done
}
{
  for live in 100 2000 10000; do overhead $live; done
  overhead 2000 --fixed
} | tee "$out/launch.txt"

for mode in remap copy; do
  LD_PRELOAD="$bin/libtierrt.so" TIERRT_LOG=warn TIERRT_SPILL_MODE=$mode TIERRT_DEVICE_BUDGET=128MiB \
    TIERRT_STATS="$out/stats-thrash-$mode.txt" timeout 120 "$bin/launch_overhead" --live 400 --batches 2 \
    >"$out/thrash-$mode.log" 2>&1
  note "over budget ($mode, 400 MiB of blocks on 128 MiB): rc=$? $(tail -1 "$out/thrash-$mode.log")"
  grep -E 'spilled|fetched|copies' "$out/stats-thrash-$mode.txt" | sed 's/^/    /'
done

(cd "$out" && tar czf logs.tar.gz --remove-files ./*.log ./*.xml ./stats-*.txt ./launch.txt 2>/dev/null)
echo "== summary"
cat "$out/summary.txt"
