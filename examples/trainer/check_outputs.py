#!/usr/bin/env python3
"""What tierrt writes about a run of the trainer, as a test.

  check_outputs.py report TRAINER TIERRT_RUN SMALL [ARGS...]
      Under tierrt-run on a device of SMALL bytes: the JSON report parses
      and holds its documented fields; its figures add up (bytes spilled =
      bytes fetched + bytes freed while spilled + bytes still spilled; the
      steps' figures within the run's); a prefetch hit rate only where
      prefetches were planned; the text report says the same; the SVG
      timeline parses and holds its series; the trace is valid JSON with
      the copy-engine, stream and counter tracks, markers and the real pid.
  check_outputs.py signal TRAINER TIERRT_RUN SMALL SIGNAL [ARGS...]
      The trainer stopped by SIGNAL (TERM or INT) mid-run dies of it, and
      the report, the timeline and the trace are written all the same.
  check_outputs.py plot-needs-a-file TRAINER TIERRT_RUN SMALL [ARGS...]
      TIERRT_PLOT=- is refused in one line, naming the variable.

The spill mode and policy come from the environment (TIERRT_*), like the
simdev settings and LD_LIBRARY_PATH.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

TIMEOUT_S = 120
SVG = "{http://www.w3.org/2000/svg}"

REPORT_FIELDS = {
    "pid": None,
    "tiering_stopped": None,
    "device": ["peak_bytes", "peak_bytes_without_tiering", "budget_bytes", "bytes_in_use", "over_budget"],
    "host": ["peak_bytes", "budget_bytes", "bytes_in_use"],
    "moves": ["spills", "bytes_spilled", "fetches", "demand_fetches", "bytes_fetched", "bytes_freed_while_spilled",
              "bytes_spilled_now", "planned_prefetches", "late_prefetches", "prefetch_hit_rate", "stall_ns"],
    "link": ["d2h_bytes_per_s", "h2d_bytes_per_s"],
    "allocations": ["tracked", "driver", "cache_hits"],
    "launches": None,
    "steps_marked": None,
    "planner": None,
    "classes": None,
    "steps_dropped": None,
    "steps": None,
}
STEP_FIELDS = ["step", "steps_covered", "start_ns", "ns", "stall_ns", "bytes_spilled", "bytes_fetched", "demand_fetches",
               "planned_prefetches", "late_prefetches", "prefetch_hit_rate"]


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def environment(small, outputs):
    env = dict(os.environ, SIMDEV_MEM=str(small), **outputs)
    env.pop("TRAINER_SANITIZER_PRELOAD", None)
    env["LD_PRELOAD"] = os.environ.get("TRAINER_SANITIZER_PRELOAD", "")
    return env


def outputs_in(d, stats_name="report.json"):
    return {"TIERRT_STATS": os.path.join(d, stats_name), "TIERRT_PLOT": os.path.join(d, "timeline.svg"),
            "TIERRT_TRACE": os.path.join(d, "trace.json")}


def run(trainer, tierrt_run, small, args, outputs):
    cmd = [tierrt_run, "--", trainer] + args
    p = subprocess.Popen(cmd, env=environment(small, outputs), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    out, err = p.communicate(timeout=TIMEOUT_S)
    print(f"$ {' '.join(cmd)}\n{out}{err}(exit {p.returncode})\n")
    if p.returncode != 0:
        fail("the run under tierrt failed")
    return p.pid


def check_report(path, pid):
    with open(path) as f:
        r = json.load(f)
    for field, inner in REPORT_FIELDS.items():
        if field not in r:
            fail(f"the report lacks '{field}'")
        for name in inner or []:
            if name not in r[field]:
                fail(f"the report lacks '{field}.{name}'")
    if r["pid"] != pid:
        fail(f"the report names pid {r['pid']}, the trainer was {pid}")
    if r["tiering_stopped"] is not False:
        fail(f"tiering stopped in a run where nothing of tierrt's failed: {r['tiering_stopped']}")
    m = r["moves"]
    if m["bytes_spilled"] == 0:
        fail("nothing was spilled: the test shows nothing")
    if m["bytes_spilled"] != m["bytes_fetched"] + m["bytes_freed_while_spilled"] + m["bytes_spilled_now"]:
        fail(f"bytes spilled ({m['bytes_spilled']}) are not bytes fetched ({m['bytes_fetched']}) + freed while "
             f"spilled ({m['bytes_freed_while_spilled']}) + still spilled ({m['bytes_spilled_now']})")
    if r["device"]["peak_bytes"] > r["device"]["budget_bytes"] and r["device"]["over_budget"] == 0:
        fail("the device peak is above the budget, and nothing says it went over")
    if r["device"]["peak_bytes_without_tiering"] <= r["device"]["peak_bytes"]:
        fail("the peak without tiering is not above the peak with it, on a device too small for the trainer")
    check_rate(m, "the run")
    steps = r["steps"]
    if not steps:
        fail("the report has no steps")
    for s in steps:
        for name in STEP_FIELDS:
            if name not in s:
                fail(f"a step lacks '{name}'")
        check_rate(s, f"step {s['step']}")
    for key in ["bytes_spilled", "bytes_fetched", "demand_fetches", "planned_prefetches"]:
        if sum(s[key] for s in steps) > m[key]:
            fail(f"the steps' {key} add up to more than the run's")
    if not any(c["blocks_in_learned_step"] for c in r["classes"]) and r["planner"] is not None:
        fail("the planner learned a step, and no class counts a block")
    return r


def check_rate(figures, where):
    rate, planned = figures["prefetch_hit_rate"], figures["planned_prefetches"]
    if planned == 0 and rate is not None:
        fail(f"{where}: a hit rate ({rate}) with no prefetch planned")
    if planned and not (rate is not None and 0.0 <= rate <= 1.0):
        fail(f"{where}: {planned} prefetches planned and the hit rate is {rate}")
    if planned and abs(rate - (planned - min(planned, figures["late_prefetches"])) / planned) > 1e-3:
        fail(f"{where}: the hit rate is not hits over planned prefetches")


def check_svg(path, steps_expected):
    root = ET.parse(path).getroot()
    by_id = {e.get("id"): e for e in root.iter() if e.get("id")}
    for series in ["device", "host-tier"]:
        if series not in by_id or len(by_id[series].get("points", "").split()) < 2:
            fail(f"the timeline lacks the '{series}' series")
    if "budget" not in by_id:
        fail("the timeline lacks the budget line")
    if not [i for i in by_id if i.startswith("class-")]:
        fail("the timeline shows no lifetime class")
    for group, least in [("steps", 1 if steps_expected else 0), ("spills", 1), ("fetches", 1)]:
        if group not in by_id or len(list(by_id[group])) < least:
            fail(f"the timeline marks no {group}")
    labels = [t.text for t in root.iter(SVG + "text") if t.text]
    for units in [["KiB", "MiB", "GiB"], ["us", "ms", "s"]]:
        if not any(l.split()[-1] in units for l in labels):
            fail(f"no axis label in {' or '.join(units)}")
    for units in [["KiB", "MiB", "GiB"], ["us", "ms", "s"]]:
        ticks = [l for l in labels if len(l.split()) == 2 and l.split()[1] in units]
        if len(set(ticks)) != len(ticks):
            fail(f"two ticks of an axis read the same: {ticks}")


def check_trace(path, pid, demand_fetches):
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    if {e.get("pid") for e in events} != {pid}:
        fail(f"the trace's pids are {sorted({e.get('pid') for e in events})}, the trainer's is {pid}")
    tracks = {e["args"]["name"]: e["tid"] for e in events if e.get("name") == "thread_name"}
    for name in ["copy engine D2H (spills)", "copy engine H2D (fetches)"]:
        if name not in tracks:
            fail(f"the trace has no track '{name}'")
    if not [n for n in tracks if n.startswith("stream ")]:
        fail("the trace has no stream track")
    counters = {name for e in events if e.get("ph") == "C" for name in e["args"]}
    for name in ["device", "host", "budget"]:
        if name not in counters:
            fail(f"the trace has no counter '{name}'")
    for name, track in [("spill", "copy engine D2H (spills)"), ("fetch", "copy engine H2D (fetches)")]:
        slices = [e for e in events if e.get("ph") == "X" and e.get("name") == name]
        if not slices or any(e["tid"] != tracks[track] or e["args"]["bytes"] <= 0 for e in slices):
            fail(f"no {name} slices with their bytes on '{track}'")
    if demand_fetches and not [e for e in events if e.get("name") == "demand fetch"]:
        fail("demand fetches happened, and the trace marks none")


def check_outputs(trainer, tierrt_run, small, args):
    with tempfile.TemporaryDirectory() as d:
        out = outputs_in(d)
        pid = run(trainer, tierrt_run, small, args, out)
        r = check_report(out["TIERRT_STATS"], pid)
        check_svg(out["TIERRT_PLOT"], len(r["steps"]))
        check_trace(out["TIERRT_TRACE"], pid, r["moves"]["demand_fetches"])
        text = dict(out, TIERRT_STATS=os.path.join(d, "report.txt"))
        run(trainer, tierrt_run, small, args, text)
        with open(text["TIERRT_STATS"]) as f:
            report = f.read()
        print(report)
        for line in ["peak device memory", "prefetch hit rate", "link, measured", "per lifetime class", "steps"]:
            if line not in report:
                fail(f"the text report lacks '{line}'")
        if "prefetch hit rate              n/a" not in report and "% of " not in report:
            fail("the text report gives no hit rate and no n/a")
        if "0.0 % of 0" in report or "nan" in report:
            fail("a rate of nothing in the text report")
    print(f"ok: the report, the timeline and the trace of pid {pid} hold what they should; {len(r['steps'])} steps, "
          f"{r['moves']['bytes_spilled']} bytes spilled, hit rate {r['moves']['prefetch_hit_rate']}")


def check_signal(trainer, tierrt_run, small, signame, args):
    signo = {"TERM": signal.SIGTERM, "INT": signal.SIGINT}[signame]
    with tempfile.TemporaryDirectory() as d:
        out = outputs_in(d)
        cmd = [tierrt_run, "--", trainer] + args
        p = subprocess.Popen(cmd, env=environment(small, out), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
        seen = []
        deadline = time.monotonic() + TIMEOUT_S
        for line in p.stdout:  # two steps done: mid-run
            seen.append(line)
            if line.startswith("step 2 ") or time.monotonic() > deadline:
                break
        p.send_signal(signo)
        rest, _ = p.communicate(timeout=TIMEOUT_S)
        print(f"$ {' '.join(cmd)}  (SIG{signame} after step 2)\n{''.join(seen)}{rest}(exit {p.returncode})\n")
        if p.returncode != -signo:
            fail(f"the trainer did not die of SIG{signame} (exit {p.returncode})")
        if any(l.startswith("weights checksum") for l in seen + rest.splitlines()):
            fail("the trainer finished before the signal: the test shows nothing")
        with open(out["TIERRT_STATS"]) as f:
            r = json.load(f)
        if r["pid"] != p.pid or not r["steps"]:
            fail("the report written on the signal is not the run's, or has no steps")
        ET.parse(out["TIERRT_PLOT"])
        with open(out["TIERRT_TRACE"]) as f:
            json.load(f)
    print(f"ok: SIG{signame} mid-run; the report ({len(r['steps'])} steps), timeline and trace were written")


def check_plot_needs_a_file(trainer, tierrt_run, small, args):
    env = environment(small, {"TIERRT_PLOT": "-"})
    p = subprocess.run([tierrt_run, "--", trainer] + args, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    print(f"{p.stdout}{p.stderr}(exit {p.returncode})")
    said = [l for l in p.stderr.splitlines() if "TIERRT_PLOT" in l]
    if len(said) != 1 or "tierrt is off" not in said[0]:
        fail("TIERRT_PLOT=- was not refused in one line")
    print("ok: TIERRT_PLOT=- refused in one line")


def main():
    if len(sys.argv) < 5:
        print(__doc__)
        return 2
    kind, trainer, tierrt_run, small = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if kind == "report":
        check_outputs(trainer, tierrt_run, small, sys.argv[5:])
    elif kind == "signal" and len(sys.argv) >= 6:
        check_signal(trainer, tierrt_run, small, sys.argv[5], sys.argv[6:])
    elif kind == "plot-needs-a-file":
        check_plot_needs_a_file(trainer, tierrt_run, small, sys.argv[5:])
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
