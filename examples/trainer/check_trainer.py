#!/usr/bin/env python3
"""The demo's claims about the trainer, as a test.

  check_trainer.py oom TRAINER SMALL LARGE [ARGS...]
      On a device of LARGE bytes the trainer holds more than SMALL at its
      peak; on a device of SMALL bytes, without tierrt, it stops with an
      out-of-memory error.
  check_trainer.py tiered TRAINER TIERRT_RUN SMALL LARGE [ARGS...]
      Under tierrt-run on a device of SMALL bytes the trainer completes,
      tierrt spilled and fetched, and every step's loss and the final
      weights are bit-identical to a run without tierrt on LARGE bytes.

ARGS go to the trainer. The spill mode, policy and simdev settings come
from the environment (TIERRT_*, SIMDEV_*, LD_LIBRARY_PATH), and in a
sanitized build the sanitizer's runtime from TRAINER_SANITIZER_PRELOAD.
"""
import os
import re
import subprocess
import sys

OUT_OF_MEMORY_EXIT = 3  # examples/trainer/device_memory.h
TIMEOUT_S = 120


def run(cmd, device_bytes, tierrt):
    env = dict(os.environ, SIMDEV_MEM=str(device_bytes))
    # A sanitized build's runtime goes first in the programs' LD_PRELOAD
    # (tierrt-run keeps it there), not in this script's own.
    env.pop("TRAINER_SANITIZER_PRELOAD", None)
    env["LD_PRELOAD"] = os.environ.get("TRAINER_SANITIZER_PRELOAD", "")
    if not tierrt:
        for name in [n for n in env if n.startswith("TIERRT_")]:
            del env[name]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    print(f"$ SIMDEV_MEM={device_bytes} {' '.join(cmd)}\n{p.stdout}{p.stderr}(exit {p.returncode})\n")
    return p


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def results(out):
    """Each step's loss (value and bits) and the weights' checksum."""
    steps = re.findall(r"^step (\d+) loss (\S+) (0x[0-9a-f]{8}) ", out, re.M)
    checksum = re.findall(r"^weights checksum ([0-9a-f]{16})$", out, re.M)
    if not steps or len(checksum) != 1:
        fail("the trainer's output lacks its losses or its checksum")
    return steps, checksum[0]


def peak_held(out):
    m = re.search(r"^peak bytes held (\d+) ", out, re.M)
    if not m:
        fail("the trainer did not print its peak")
    return int(m.group(1))


def reference(trainer, small, large, args):
    ref = run([trainer] + args, large, tierrt=False)
    if ref.returncode != 0:
        fail("the reference run failed")
    if peak_held(ref.stdout) <= small:
        fail(f"the trainer's peak ({peak_held(ref.stdout)} bytes) fits the small device ({small} bytes)")
    return ref


def check_oom(trainer, small, large, args):
    reference(trainer, small, large, args)
    p = run([trainer] + args, small, tierrt=False)
    if p.returncode != OUT_OF_MEMORY_EXIT or "out of device memory" not in p.stderr:
        fail(f"expected an out-of-memory exit ({OUT_OF_MEMORY_EXIT}) on the small device without tierrt")
    print("ok: out of memory without tierrt, as expected")


def check_tiered(trainer, tierrt_run, small, large, args):
    ref = reference(trainer, small, large, args)
    tiered = run([tierrt_run, "--", trainer] + args, small, tierrt=True)
    if tiered.returncode != 0:
        fail("the run under tierrt failed")
    stats = re.search(r"^tierrt: .*?; (\d+) spills .*?, (\d+) fetches \(.*?, (\d+) on demand\)", tiered.stdout, re.M)
    if not stats:
        fail("tierrt was not running in the trainer")
    if int(stats.group(1)) == 0 or int(stats.group(2)) == 0:
        fail("tierrt neither spilled nor fetched: the test shows nothing")
    if "mark-steps=1" in args and not re.search(r"; [1-9]\d* steps marked", tiered.stdout):
        fail("mark-steps=1 marked no step")
    if results(tiered.stdout) != results(ref.stdout):
        fail("losses or weights differ from the reference run")
    print(f"ok: {len(results(ref.stdout)[0])} losses and the weights bit-identical to the reference; "
          f"{stats.group(1)} spills, {stats.group(2)} fetches ({stats.group(3)} on demand)")


def main():
    if len(sys.argv) < 5:
        print(__doc__)
        return 2
    kind = sys.argv[1]
    if kind == "oom":
        check_oom(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:])
    elif kind == "tiered" and len(sys.argv) >= 6:
        check_tiered(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6:])
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
