#!/usr/bin/env python3
"""The folder graph of docs/design.md is one-way, and the build enforces it.

1. Every include in a folder's sources names a folder the arrows allow.
2. Compiled with the very flags the build gives each library, a header
   against the arrows (or another library's private header) does not
   compile, while the library's own public header does.

Usage: include_graph.py SOURCE_ROOT BUILD_ROOT
"""
import json
import os
import re
import subprocess
import sys
import tempfile

# Direct arrows: what each folder's sources may include ("tierrt" is the
# public C API in include/tierrt/).
ALLOWED = {
    "driver": {"driver"},
    "allocator": {"allocator", "driver"},
    "policies": {"policies"},
    "policies/trace": {"policies/trace", "policies"},
    "policies/eval": {"policies/eval", "policies"},
    "runtime": {"runtime", "allocator", "driver", "policies", "policies/trace", "tierrt"},
    "preload": {"preload", "runtime", "driver", "tierrt"},
    "tools": {"tools", "policies", "policies/eval", "policies/trace"},
}
# tierrt-run parses sizes the way the settings do, and links nothing else.
ALLOWED_FILES = {"tools": {"runtime/config.h"}}

# Per library target: a header it must reach and headers it must not.
COMPILE_CHECKS = {
    "tierrt_driver": ("driver/driver.h", ["allocator/allocator.h", "policies/event.hpp", "runtime/engine.h"]),
    "tierrt_allocator": ("allocator/allocator.h",
                         ["runtime/engine.h", "policies/event.hpp", "preload/hooks.h"]),
    "tierrt_policies": ("policies/policy_engine.hpp",
                        ["driver/driver.h", "allocator/allocator.h", "runtime/engine.h",
                         "policies/trace/trace_file.hpp", "policies/eval/policy.hpp"]),
    "tierrt_trace": ("policies/trace/trace_file.hpp", ["policies/eval/policy.hpp", "runtime/engine.h"]),
    "tierrt_eval": ("policies/eval/policy_comparison.hpp",
                    ["policies/trace/crc32.hpp", "driver/driver.h", "runtime/engine.h"]),
    "tierrt_runtime": ("runtime/engine.h",
                       ["preload/hooks.h", "policies/eval/policy.hpp", "allocator/mover.h",
                        "policies/trace/crc32.hpp"]),
    "tierrt": ("runtime/engine.h", ["runtime/log.h", "allocator/mover.h", "policies/eval/policy.hpp"]),
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def folder_of(path):
    """The most specific folder of ALLOWED that holds path, or None."""
    best = None
    for folder in ALLOWED:
        if path.startswith(folder + "/") and (best is None or len(folder) > len(best)):
            best = folder
    return best


def target_of(include):
    """The folder an include names: "policies/eval/x.hpp" -> "policies/eval"."""
    parts = include.split("/")
    if len(parts) < 2:
        return None  # same-folder include
    if parts[0] == "policies" and len(parts) > 2 and parts[1] in ("eval", "trace"):
        return "policies/" + parts[1]
    return parts[0]


def check_sources(root):
    errors = []
    for dirpath, _, names in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir.startswith((".git", "build")):
            continue
        for name in names:
            if not name.endswith((".c", ".cpp", ".h", ".hpp")):
                continue
            rel = os.path.join(rel_dir, name)
            folder = folder_of(rel)
            if folder is None:
                continue
            with open(os.path.join(root, rel), errors="replace") as f:
                for inc in INCLUDE.findall(f.read()):
                    target = target_of(inc)
                    if target is None or target in ALLOWED[folder]:
                        continue
                    if inc in ALLOWED_FILES.get(folder, set()):
                        continue
                    errors.append(f"{rel}: includes {inc}: {folder} -> {target} is against the arrows")
    return errors


def compiles(compiler, params, header, cwd):
    with tempfile.NamedTemporaryFile("w", suffix=".cpp", delete=False) as f:
        f.write(f'#include "{header}"\n')
        src = f.name
    try:
        # Only what decides what a quote include can reach: -I, -isystem,
        # -std and defines.
        flags, keep = [], False
        for p in params:
            if keep:
                flags.append(p)
                keep = False
            elif p in ("-isystem", "-I"):
                flags.append(p)
                keep = True
            elif p.startswith(("-I", "-isystem", "-std=", "-D")):
                flags.append(p)
        r = subprocess.run(compiler + flags + ["-fsyntax-only", src], cwd=cwd, capture_output=True, text=True)
        return r.returncode == 0, r.stderr.strip().splitlines()[:1]
    finally:
        os.unlink(src)


def check_compiles(build):
    with open(os.path.join(build, "meson-info", "intro-targets.json")) as f:
        targets = {t["name"]: t for t in json.load(f)}
    errors, checked = [], 0
    for name, (must, must_not) in COMPILE_CHECKS.items():
        if name not in targets:
            errors.append(f"library target {name} is not in the build")
            continue
        src = next(s for s in targets[name]["target_sources"] if s["language"] == "cpp")
        ok, why = compiles(src["compiler"], src["parameters"], must, build)
        checked += 1
        if not ok:
            errors.append(f"{name}: its own {must} does not compile: {why}")
        for header in must_not:
            ok, _ = compiles(src["compiler"], src["parameters"], header, build)
            checked += 1
            if ok:
                errors.append(f"{name}: can include {header}, against the arrows")
    return errors, checked


def main():
    root, build = sys.argv[1], sys.argv[2]
    errors = check_sources(root)
    compile_errors, checked = check_compiles(build)
    errors += compile_errors
    for e in errors:
        print(e)
    if errors:
        return 1
    print(f"include graph one-way: sources checked, {checked} compile checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
