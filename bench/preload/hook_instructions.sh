#!/bin/bash
# Instructions per hooked launch, by part of the launch path, counted by
# valgrind's callgrind in launch_hook_bench: a figure the machine's speed
# does not move. On a shared or virtual machine the time of the same launch
# may double from one second to the next (whatever else the host runs), so a
# change to the launch path that saves 5% shows here at once and in
# `added_ns` only over many runs.
#
#   bench/preload/hook_instructions.sh [BENCH] [POLICY...]
#
# BENCH: a launch_hook_bench built for release (default:
# build-bench/bench/preload/launch_hook_bench). POLICY: reactive, planner
# (default: both). Under the reactive policy it counts BM_HookWorkOnly/100
# (the hook's work on 8 blocks of 100 live ones, no driver launch) and
# BM_HookWorkOnlyWithScalars/100 (the same 8 pointers, then 256 bytes of
# sizes and strides, as PyTorch's elementwise kernels take); under the
# planner BM_HookWorkOnlyOnWeights/100 (the 8 blocks found persistent, once
# its device clock samples every 256th launch, as in a job past its first
# steps). A use event's or a clock sample's record, rare at the machine's
# speed, is counted with the launch that made it; under valgrind's
# slowdown the use-event window is set to a second, so that it does not
# pass at every launch.
set -euo pipefail

bench=${1:-build-bench/bench/preload/launch_hook_bench}
shift || true
policies=("$@")
[ ${#policies[@]} -gt 0 ] || policies=(reactive planner)

command -v valgrind >/dev/null || { echo "hook_instructions: valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
command -v callgrind_annotate >/dev/null || { echo "hook_instructions: callgrind_annotate is not installed (it comes with valgrind)" >&2; exit 2; }
[ -x "$bench" ] || { echo "hook_instructions: no launch_hook_bench at '$bench' (build one: README, 'What tierrt costs on your machine')" >&2; exit 2; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

runs=()
for policy in "${policies[@]}"; do
  case $policy in
    reactive) runs+=("reactive HookWorkOnly/100$ 8-pointers" "reactive HookWorkOnlyWithScalars/100$ +256B-numbers") ;;
    planner) runs+=("planner HookWorkOnlyOnWeights/100$ on-weights") ;;
    *) echo "hook_instructions: unknown policy '$policy' (reactive or planner)" >&2; exit 2 ;;
  esac
done

for run in "${runs[@]}"; do
  read -r policy filter label <<< "$run"
  # valgrind cannot reserve simdev's default 256 GiB of address space.
  if ! SIMDEV_VA=8GiB SIMDEV_MEM=4GiB TIERRT_POLICY=$policy TIERRT_USE_EVENT_WINDOW_US=1000000 \
      valgrind --tool=callgrind --callgrind-out-file="$out/$label" '--toggle-collect=*hooked_launch<*' \
      "$bench" --benchmark_filter="$filter" --benchmark_min_time=0.05 > "$out/$label.log" 2>&1; then
    echo "hook_instructions: the $policy run of $filter failed:" >&2
    tail -5 "$out/$label.log" >&2
    exit 1
  fi
  callgrind_annotate --tree=calling --inclusive=yes "$out/$label" | python3 -c '
import re, sys
policy = sys.argv[1] + " " + sys.argv[2]
lines = sys.stdin.read().split("\n")
def node(pattern):  # the line of a function in the tree, its callees after it
    found = [i for i, l in enumerate(lines) if re.search(r"\*  \S+:cudaError_enum " + pattern, l)]
    return found[0] if found else None
top = node(r".*hooked_launch<")
if top is None:
    sys.exit("hook_instructions: no hooked launch was counted (%s)" % policy)
total = int(lines[top].split()[0].replace(",", ""))
# Engine::launch, where the compiler kept it a function of its own.
launch = node(r"tierrt::Engine::launch<.*run_launches")
parts, launches = [], None
for l in lines[(launch if launch is not None else top) + 1:]:
    if not l.strip():
        break
    m = re.match(r"\s*([\d,]+).*>\s+\S+?:(?:tierrt::)?(?:\w+::)*(\w+)\(.*\(([\d,]+)x\)", l)
    if m:
        calls = int(m.group(3).replace(",", ""))
        launches = launches or calls  # each part is called once per launch
        parts.append((m.group(2), int(m.group(1).replace(",", ""))))
if not launches:
    sys.exit("hook_instructions: no part of the launch path was counted (%s)" % policy)
print("%-25s %5.0f instructions per launch (%d launches): %s" % (
    policy, total / launches, launches, ", ".join("%s %.0f" % (n, c / launches) for n, c in parts)))
' "$policy" "$label"
done
