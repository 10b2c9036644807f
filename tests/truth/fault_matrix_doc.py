#!/usr/bin/env python3
"""Keeps docs/fault-matrix.md's table of functions equal to the functions of
tests/truth/fault_points.txt: a point added without its row (where tierrt
calls the function), or a row left after its points went, fails with one line.

Usage: fault_matrix_doc.py POINTS DOC
"""
import re
import sys


def main(points_path, doc_path):
    with open(points_path) as f:
        points = {line.split()[0].split(":")[0] for line in f if line.strip() and not line.startswith("#")}
    with open(doc_path) as f:
        rows = set(re.findall(r"^\| `([A-Za-z0-9_]+)` \|", f.read(), re.M))
    missing, extra = sorted(points - rows), sorted(rows - points)
    if missing or extra:
        print(f"fault_matrix_doc: {doc_path}: no row for {missing}; rows without points {extra}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]) if len(sys.argv) == 3 else (print(__doc__), 2)[1])
