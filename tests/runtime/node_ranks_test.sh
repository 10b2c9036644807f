#!/usr/bin/env bash
# A node of ranks sharing TIERRT_NODE_HOST_BUDGET end to end: eight ranks
# under LD_PRELOAD=libtierrt.so on simdev spill against one ledger while a
# checker samples it and never sees the budget passed, every rank's bytes
# intact; log lines and output names carry the rank; a rank killed with
# SIGKILL while its blocks are spilled gives its share back to the next; a
# malformed rank variable is ignored with one warning.
# Usage: node_ranks_test.sh PROBE WATCH LIBTIERRT
# TIERRT_SPILL_MODE and TIERRT_POLICY come from the caller;
# TIERRT_TEST_PRELOAD_PREFIX names a sanitizer runtime to preload first.
set -uo pipefail
probe=$(realpath "$1") watch=$(realpath "$2") lib=$3
preload=${TIERRT_TEST_PRELOAD_PREFIX:+$TIERRT_TEST_PRELOAD_PREFIX:}$lib
dir=$(mktemp -d)
key=test-$$-${TIERRT_SPILL_MODE:-auto}-${TIERRT_POLICY:-planner}
name=/tierrt-node-$(id -u)-$key
trap 'rm -f "/dev/shm$name"; rm -rf "$dir"' EXIT
cd "$dir" || exit 1
failures=0
check() {  # check DESCRIPTION EXPECTED ACTUAL
  if [[ "$2" == "$3" ]]; then echo "ok: $1"; else echo "FAIL: $1: expected '$2', got '$3'"; failures=$((failures + 1)); fi
}
MiB=1048576
budget=$((96 * MiB))
# A rank: 128 MiB device, 32 MiB device budget, 6 blocks of 16 MiB: each
# would spill 64 MiB, eight 512 MiB, and the node has 96 MiB.
rank() {  # rank R ARGS...
  local r=$1
  shift
  env SIMDEV_MEM=128MiB TIERRT_DEVICE_BUDGET=32MiB TIERRT_NODE_HOST_BUDGET=$((budget / MiB))MiB \
    TIERRT_NODE_KEY="$key" RANK=$((r + 8)) LOCAL_RANK="$r" TIERRT_LOG=info TIERRT_LOG_FILE="log.%r.%l.%h" \
    TIERRT_STATS="stats.%r.%l" LD_PRELOAD="$preload" "$probe" "$@"
}
host=$(hostname | cut -d. -f1 | tr / _)

"$watch" "$name" "$budget" stop >watch.out &
watcher=$!
for _ in $(seq 100); do grep -q ready watch.out && break; sleep 0.05; done
for r in $(seq 0 7); do rank "$r" 6 >"out.$r" 2>"err.$r" & done
wait $(jobs -p | grep -v "^$watcher\$")
touch stop
wait "$watcher"
for r in $(seq 0 7); do
  check "rank $r: every byte as written" "ok" "$(head -1 "out.$r")"
done
read -r _ most _ samples _ seen < <(grep ^max watch.out)
check "the checker sampled the ledger" "yes" "$([[ ${samples:-0} -gt 0 ]] && echo yes || echo no)"
check "the ledger's budget is the node budget" "$budget" "${seen:-}"
check "the ranks never held more than the node budget together" "yes" \
  "$([[ -n ${most:-} && $most -le $budget ]] && echo yes || echo no)"
check "... and did spill against it" "yes" "$([[ ${most:-0} -gt 0 ]] && echo yes || echo no)"
refused=$(cat stats.*.* | grep -c "over the device budget")
check "some ranks found the host tier full" "yes" "$([[ $refused -gt 0 ]] && echo yes || echo no)"
check "each rank's log is named by %r, %l and %h" "8" "$(ls log.*.*."$host" | wc -l)"
check "... and its lines carry the rank" "yes" "$(grep -q "^tierrt\[[0-9]* r11/l3\] info: started" "log.11.3.$host" && echo yes || echo no)"

# A malformed rank variable: one warning, the next launcher's rank used.
env SIMDEV_MEM=128MiB RANK=two SLURM_PROCID=5 LD_PRELOAD="$preload" "$probe" 3 >out.bad 2>err.bad
check "a malformed RANK: the job runs" "ok" "$(head -1 out.bad)"
check "... with one warning naming it" "1" "$(grep -c 'warn: RANK="two" is not accepted' err.bad)"
check "... and SLURM_PROCID in the prefix" "1" "$(grep -c '^tierrt\[[0-9]* r5\] warn: RANK=' err.bad)"

# A rank holding the whole node budget is killed: the next one spills.
budget=$((64 * MiB))
rm -f "/dev/shm$name" stop stats.* log.*
"$watch" "$name" "$budget" stop >watch.out &
watcher=$!
for _ in $(seq 100); do grep -q ready watch.out && break; sleep 0.05; done
coproc holder { rank 0 8 hold 2>err.hold; }
read -r line <&"${holder[0]}"
check "the holding rank's bytes are intact" "ok" "$line"
read -r line pid <&"${holder[0]}"
check "... and it holds" "holding" "$line"
kill -KILL "$pid"
wait "$holder_PID" 2>/dev/null
rank 1 6 >out.next 2>err.next
check "the next rank's bytes are intact" "ok" "$(head -1 out.next)"
peak=$(awk '/host tier/ {print $(NF-3)}' stats.9.1)
# It spills four blocks: all 64 MiB, so none of the dead rank's share was kept.
check "... and it spilled into the dead rank's whole share" "yes" "$(awk -v p="${peak:-0}" 'BEGIN {print (p > 48 ? "yes" : "no")}')"
touch stop
wait "$watcher"
read -r _ most _ _ _ _ < <(grep ^max watch.out)
check "the ledger was never passed" "yes" "$([[ -n ${most:-} && $most -le $budget ]] && echo yes || echo no)"

[[ $failures -eq 0 ]] || { echo "$failures failed"; exit 1; }
