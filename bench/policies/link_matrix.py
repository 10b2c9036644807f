#!/usr/bin/env python3
"""tierrt against every baseline and the lower bound, over the shipped presets,
both links and offload fractions 0.25 to 1.0: one modeled table from one command.

    bench/policies/link_matrix.py [--replay PATH] [--links pcie5,c2c]
                                  [--fractions 0.25,0.5,0.75,1.0] [--csv FILE]

PATH is the tierrt-replay binary (default: build/tools/tierrt-replay/tierrt-replay).
Each row is one preset, link and fraction: the bound, each policy's step in ms,
tierrt's step over the bound, and the baselines tierrt is slower than. Recomputing
policies (jax, checkpoint) run a different step, with fewer bytes to move: a loss
to one is marked "(recompute)", and "(recompute, below the bound)" where it is
faster than any copy schedule of the recorded step can be. Every figure is
modeled, not measured.
"""
import argparse
import csv
import io
import subprocess
import sys
import tempfile

POLICIES = ["tierrt", "te", "vdnn", "lru", "save_on_cpu", "jax", "checkpoint"]
RECOMPUTING = {"jax", "checkpoint"}


def parse_list(text, convert, what):
    try:
        values = [convert(v) for v in text.split(",") if v]
    except ValueError:
        sys.exit(f"link_matrix: bad {what} list '{text}'")
    if not values:
        sys.exit(f"link_matrix: empty {what} list")
    return values


def run_shipped(replay, link, fraction):
    """Rows of `tierrt-replay shipped` for one link and fraction, from its CSV."""
    with tempfile.NamedTemporaryFile(mode="r", suffix=".csv") as f:
        cmd = [replay, "shipped", "--link", link, "--offload-fraction", str(fraction), "--csv", f.name]
        try:
            subprocess.run(cmd, check=True, capture_output=True, text=True)
        except FileNotFoundError:
            sys.exit(f"link_matrix: {replay}: not found (build tierrt-replay, or pass --replay PATH)")
        except subprocess.CalledProcessError as e:
            sys.exit(f"link_matrix: {' '.join(cmd)} failed: {e.stderr.strip()}")
        lines = [l for l in f.read().splitlines() if l and not l.startswith("#")]
    return list(csv.DictReader(io.StringIO("\n".join(lines))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replay", default="build/tools/tierrt-replay/tierrt-replay")
    ap.add_argument("--links", default="pcie5,c2c")
    ap.add_argument("--fractions", default="0.25,0.5,0.75,1.0")
    ap.add_argument("--csv", help="also write the matrix as CSV")
    a = ap.parse_args()
    links = parse_list(a.links, str, "link")
    fractions = parse_list(a.fractions, float, "fraction")
    if any(not 0 <= f <= 1 for f in fractions):
        sys.exit(f"link_matrix: fractions must be in [0, 1], got '{a.fractions}'")

    rows = []
    for link in links:
        for fraction in fractions:
            by_config = {}
            for r in run_shipped(a.replay, link, fraction):
                model = r["config"].split(",")[0]
                entry = by_config.setdefault(model, {"bound": r["modeled_bound_ms"]})
                entry[r["policy"]] = float(r["modeled_step_ms"])
                entry[r["policy"] + "_held"] = r["modeled_within_budget"]
            for model, e in by_config.items():
                bound = float(e["bound"]) if e["bound"] else None
                t = e.get("tierrt")
                losses = []
                for p in POLICIES[1:]:
                    if p in e and t is not None and t > e[p] * (1 + 1e-9):
                        note = ""
                        if p in RECOMPUTING:
                            note = " (recompute, below the bound)" if bound and e[p] < bound else " (recompute)"
                        losses.append(p + note)
                if e.get("tierrt_held") == "no":
                    losses.append("tierrt EXCEEDED the budget")
                rows.append({
                    "model": model, "link": link, "fraction": fraction, "bound": bound,
                    **{p: e.get(p) for p in POLICIES},
                    "ratio": t / bound if (t is not None and bound) else None,
                    "slower_than": "; ".join(losses),
                })

    head = f"{'model':<14}{'link':<6}{'frac':>5}{'bound':>9}" + "".join(f"{p:>12}" for p in POLICIES) + \
           f"{'t/bound':>9}  slower than"
    print("MODELED figures (tierrt-replay's discrete-event model), step ms")
    print(head)
    for r in rows:
        cells = "".join(f"{r[p]:>12.1f}" if r[p] is not None else f"{'-':>12}" for p in POLICIES)
        bound = f"{r['bound']:>9.1f}" if r["bound"] else f"{'-':>9}"
        ratio = f"{r['ratio']:>9.3f}" if r["ratio"] else f"{'-':>9}"
        print(f"{r['model']:<14}{r['link']:<6}{r['fraction']:>5.2f}{bound}{cells}{ratio}  {r['slower_than'] or '-'}")
    worst = max((r for r in rows if r["ratio"]), key=lambda r: r["ratio"], default=None)
    if worst:
        print(f"worst tierrt/bound: {worst['ratio']:.3f} ({worst['model']}, {worst['link']}, {worst['fraction']:.2f})")
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()) if rows else ["model"])
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
