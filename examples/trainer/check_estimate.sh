#!/usr/bin/env bash
# tierrt-run --estimate: the command runs untouched (observe mode, same
# losses as alone), its exit status is tierrt-run's, the estimate is printed
# at its end with launch times from the device (not the host's enqueue
# times), the temporary recording is removed, a --record file is kept, and
# what contradicts an estimate is refused in one line.
# Usage: check_estimate.sh TIERRT_RUN TRAINER
# TRAINER_SANITIZER_PRELOAD names a sanitizer runtime to keep first.
set -uo pipefail
tierrt_run=$(realpath "$1") trainer=$(realpath "$2")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
mkdir tmp
export TMPDIR=$dir/tmp
run() { LD_PRELOAD=${TRAINER_SANITIZER_PRELOAD:-} "$tierrt_run" "$@"; }
run_exec() { LD_PRELOAD=${TRAINER_SANITIZER_PRELOAD:-} exec "$tierrt_run" "$@"; }
failures=0
check() {  # check DESCRIPTION EXPECTED ACTUAL
  if [[ "$2" == "$3" ]]; then echo "ok: $1"; else echo "FAIL: $1: expected '$2', got '$3'"; failures=$((failures + 1)); fi
}
losses() { grep -E '^(step [0-9]+ loss|weights checksum)' "$1" | awk '{print $1, $2, $3, $4, $5}'; }

# Tensors of 2 MiB: above TIERRT_MIN_BYTES, so tierrt would tier them.
args=(layers=6 width=32 batch=16384 steps=5 kernel-us=300)
"$trainer" "${args[@]}" >alone.out 2>&1
check "the trainer alone" "0" "$?"
run --estimate --link=2,2 -- "$trainer" "${args[@]}" >estimate.out 2>estimate.err
check "status: the trainer's" "0" "$?"
check "the same losses and weights as alone" "$(losses alone.out)" "$(losses estimate.out)"
check "the estimate is printed" "1" "$(grep -c 'tierrt-run --estimate: MODELED' estimate.err)"
check "one row per budget, each held" "4" "$(grep -cE '^  (25|50|75|100)% .* held$' estimate.err)"
check "the link given" "1" "$(grep -c 'H2D 2.00 GB/s, D2H 2.00 GB/s), as --link' estimate.err)"
check "the temporary recording is removed" "" "$(ls tmp)"
# The modeled step is the device's time: the trainer's own step times
# (kernels of 0.3-0.6 ms each) are the check, not the microseconds the host
# takes to enqueue them.
measured=$(awk '/^step [0-9]+ loss/ {print $7}' estimate.out | sort -n | head -1)
modeled=$(sed -n 's/.*no offload: .*, step \([0-9.]*\) ms.*/\1/p' estimate.err)
check "the modeled step ($modeled ms) is at least half the shortest measured one ($measured ms)" "1" \
  "$(awk -v m="$modeled" -v s="$measured" 'BEGIN {print (m != "" && m >= s / 2) ? 1 : 0}')"

run --estimate --record=kept.trace -- "$trainer" "${args[@]}" >/dev/null 2>kept.err
check "--record: status 0" "0" "$?"
check "--record: the file is kept" "1" "$([[ -s kept.trace ]] && echo 1)"
check "--record: the link assumed, and said so" "1" "$(grep -c 'pcie5 .*, assumed (set --link' kept.err)"

# The command's status, signal or not; no steps, no estimate, one line.
run --estimate -- sh -c 'exit 7' 2>nosteps.err
check "status of a failing command" "7" "$?"
check "no device work, no estimate: one line" "1 1" "$(wc -l <nosteps.err) $(grep -c 'no estimate, the command made no CUDA call' nosteps.err)"
run --estimate -- "$trainer" layers=2 width=16 batch=1024 steps=3 kernel-us=0 >/dev/null 2>small.err
check "tensors too small to tier: status 0" "0" "$?"
check "... no estimate, one line" "1 1" "$(wc -l <small.err) $(grep -c 'no estimate, no block tierrt would tier' small.err)"
run --estimate -- no-such-program-here 2>missing.err
check "a command that cannot run: 127" "127" "$?"
check "... in one line" "1" "$(grep -c 'cannot run no-such-program-here' missing.err)"
check "... and no estimate" "0" "$(grep -c 'estimate' missing.err)"
run --estimate -- sh -c 'kill -TERM $$' 2>/dev/null
check "a command killed by SIGTERM: 143" "143" "$?"

# A SIGTERM to tierrt-run reaches the command, which writes its recording
# and ends; the estimate follows.
run_exec --estimate -- "$trainer" layers=6 width=32 batch=16384 steps=100000 kernel-us=300 >long.out 2>long.err &
pid=$!
for _ in $(seq 100); do grep -q '^step 3 loss' long.out 2>/dev/null && break; sleep 0.1; done
kill -TERM "$pid"
wait "$pid"
rc=$?
check "SIGTERM to tierrt-run: the trainer ends with it" "143" "$rc"
check "... and the estimate is printed from what it recorded" "1" "$(grep -c 'tierrt-run --estimate: MODELED' long.err)"

# What contradicts an estimate.
run --estimate --mode=tier -- true 2>err
check "--estimate --mode=tier: status 2" "2" "$?"
check "... one line" "1 1" "$(wc -l <err) $(grep -c 'observe mode; --mode=tier contradicts it' err)"
run --estimate --record=r.%p -- true 2>err
check "--estimate with a placeholder in --record: status 2" "2" "$?"
check "... one line" "1 1" "$(wc -l <err) $(grep -c 'cannot hold placeholders' err)"
TIERRT_LINK=fast run --estimate -- true 2>err
check "a bad TIERRT_LINK: status 2" "2" "$?"
check "... one line" "1 1" "$(wc -l <err) $(grep -c 'TIERRT_LINK' err)"
check "nothing left in TMPDIR" "" "$(ls tmp)"

if ((failures)); then echo "$failures failed"; exit 1; fi
echo "all passed"
