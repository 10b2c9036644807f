#!/usr/bin/env bash
# Granule groups under LD_PRELOAD=libtierrt.so on simdev (remap mode, the
# planner, a modeled link of 16 GB/s each way). Each probe runs untiered
# (a budget of the whole device) to find its peak, then under a device
# budget of half that peak twice: tiered per block and per granule group.
# Every run must check every word it wrote (the probe exits 0); granule
# groups must lower the peak device memory by at least 40% against per-block
# tiering, and the report must count the moves their fences covered. Step
# times are reported (median of the later steps), not asserted: on a shared
# CPU they are not a property of the code alone. They are set against the
# untiered run and against granule groups with the whole device's budget,
# which isolates what moving costs from what mapping per granule costs.
# Then a pool sized from cuMemGetInfo with TIERRT_VIRTUAL_MEMINFO=1, larger
# than the device, runs the caching probe.
# The granule runs are recorded, and tierrt-replay replays each recording at
# granule level: its tierrt policy holds the run's budget (members start on
# the host where the device has no room, as in the run) and moves memory.
# Usage: granule_groups_test.sh XLA_PROBE CACHING_PROBE LIBTIERRT TIERRT_REPLAY
# TIERRT_TEST_PRELOAD_PREFIX names a sanitizer runtime to preload first.
set -uo pipefail
xla=$(realpath "$1") caching=$(realpath "$2") lib=$(realpath "$3") replay=$(realpath "$4")
preload=${TIERRT_TEST_PRELOAD_PREFIX:+$TIERRT_TEST_PRELOAD_PREFIX:}$lib
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
failures=0
check() {  # check DESCRIPTION EXPECTED ACTUAL
  if [[ "$2" == "$3" ]]; then echo "ok: $1"; else echo "FAIL: $1: expected '$2', got '$3'"; failures=$((failures + 1)); fi
}
field() {  # field NAME LINE: the value of NAME=... in the probe's last line
  sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<"$2"
}
run() {  # run NAME PROBE [VAR=VALUE...]: runs it, checks it; its last line is in NAME.line
  local name=$1 probe=$2
  shift 2
  env SIMDEV_MEM=512MiB SIMDEV_H2D_GBPS=16 SIMDEV_D2H_GBPS=16 SIMDEV_REPORT_FAULTS=1 TIERRT_SPILL_MODE=remap \
    TIERRT_POLICY=planner TIERRT_LOG=warn "$@" LD_PRELOAD="$preload" "$probe" 10 >"$name.out" 2>"$name.err"
  check "$name: every word read back as written" "0" "$?"
  check "$name: no kernel faulted" "0" "$(grep -c 'faulted' "$name.err")"
  tail -n 1 "$name.out" >"$name.line"
}

for probe in xla caching; do
  exe=$xla
  [[ $probe == caching ]] && exe=$caching
  run "$probe-untiered" "$exe" TIERRT_DEVICE_BUDGET=512MiB
  untiered=$(cat "$probe-untiered.line")
  peak=$(field peak_device_mib "$untiered")
  budget=$(awk -v p="$peak" 'BEGIN { printf "%d", p / 2 }')MiB
  run "$probe-per-block" "$exe" TIERRT_DEVICE_BUDGET="$budget"
  run "$probe-granule" "$exe" TIERRT_DEVICE_BUDGET="$budget" TIERRT_GRANULE_BYTES=64MiB \
    TIERRT_STATS="$probe-granule.json" TIERRT_RECORD="$probe-granule.trace"
  # Granule groups with the whole device: what mapping an allocation per
  # granule costs before anything moves (on simdev, pages faulted in at each
  # new mapping: 4 KiB ones where Linux gives shared memory no 2 MiB pages,
  # which a GPU's 2 MiB pages do not cost).
  run "$probe-granule-untiered" "$exe" TIERRT_DEVICE_BUDGET=512MiB TIERRT_GRANULE_BYTES=64MiB
  per_block=$(cat "$probe-per-block.line") grouped=$(cat "$probe-granule.line")
  grouped_untiered=$(cat "$probe-granule-untiered.line")
  echo "$probe untiered:  $untiered"
  echo "$probe per block: $per_block (budget $budget)"
  echo "$probe granule:   $grouped (budget $budget)"
  block_peak=$(field peak_device_mib "$per_block") group_peak=$(field peak_device_mib "$grouped")
  check "$probe: tierrt tracked the run" "yes" "$(awk -v p="$peak" 'BEGIN { print (p > 0 ? "yes" : "no") }')"
  check "$probe: granule groups moved memory" "yes" \
    "$(awk -v m="$(field spilled_mib "$grouped")" 'BEGIN { print (m > 0 ? "yes" : "no") }')"
  check "$probe: granule groups lower the peak by at least 40% against per-block tiering" "yes" \
    "$(awk -v b="$block_peak" -v g="$group_peak" 'BEGIN { print (g > 0 && g <= 0.6 * b ? "yes" : "no") }')"
  # The report counts the groups' fences: every member move raised one.
  fences=$(python3 -c 'import json, sys; g = json.load(open(sys.argv[1]))["granule_groups"]
print("yes" if g["fenced_moves"] > 0 and g["fence_waits"] >= 0 and g["live"] == 0 else "no", g)' "$probe-granule.json")
  check "$probe: the report counts the granule moves fenced" "yes" "${fences%% *}"
  # The planner moves granules itself: those the step allocates (XLA's) and
  # those of a pool from before the step (the caching allocator's segment).
  planned=$(python3 -c 'import json, sys; p = json.load(open(sys.argv[1]))["planner"]
print("yes" if p and p["spills"] > 0 and p["prefetches"] > 0 else "no", p)' "$probe-granule.json")
  check "$probe: the planner spilled and prefetched granules" "yes" "${planned%% *}"
  echo "$probe granule groups in the report: ${fences#* }"
  gib=$(awk -v b="${budget%MiB}" 'BEGIN { printf "%.6f", b / 1024 }')
  "$replay" replay --trace "$probe-granule.trace" --budget-gib "$gib" --policies none,tierrt >"$probe-replay.out" \
    2>"$probe-replay.err"
  check "$probe: tierrt-replay replays the granule recording" "0" "$?"
  row=$(awk '$1 == "tierrt"' "$probe-replay.out")
  echo "$probe replayed at granule level: $row"
  check "$probe: replayed, tierrt holds the budget" "held" "$(awk '{ print $NF }' <<<"$row")"
  check "$probe: replayed, tierrt moves memory" "yes" "$(awk '{ print ($6 > 0 ? "yes" : "no") }' <<<"$row")"
  awk -v u="$(field step_ms "$untiered")" -v b="$(field step_ms "$per_block")" -v g="$(field step_ms "$grouped")" \
    -v gu="$(field step_ms "$grouped_untiered")" \
    'BEGIN { printf "%s step time: per block %.2fx, granule %.2fx of untiered; granule %.2fx of granule groups untiered\n",
             "'"$probe"'", b / u, g / u, g / gu }'
done

# A pool sized from cuMemGetInfo with virtual meminfo: the device's budget
# plus a host tier of the device's size, about twice the device.
pool=$(env SIMDEV_MEM=256MiB SIMDEV_REPORT_FAULTS=1 TIERRT_SPILL_MODE=remap TIERRT_LOG=warn TIERRT_VIRTUAL_MEMINFO=1 \
  TIERRT_HOST_BUDGET=256MiB TIERRT_GRANULE_BYTES=64MiB LD_PRELOAD="$preload" "$caching" 6 12 8 2000 meminfo \
  2>pool.err)
check "a pool larger than the device: every word read back as written" "0" "$?"
check "a pool larger than the device: no kernel faulted" "0" "$(grep -c 'faulted' pool.err)"
echo "$pool"
check "the pool is larger than the device" "yes" \
  "$(sed -n 's/^pool: \([0-9.]*\) MiB on a device of \([0-9.]*\) MiB/\1 \2/p' <<<"$pool" |
     awk '{ print ($1 > $2 ? "yes" : "no") }')"

if [[ $failures -ne 0 ]]; then
  for f in *.err; do echo "--- $f"; tail -n 20 "$f"; done
fi
exit $((failures != 0))
