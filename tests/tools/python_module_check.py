"""python/tierrt.py under python3: inert without the library, live with it.

Usage: python_module_check.py absent|preloaded TIERRT_H
`preloaded` expects LD_PRELOAD=libtierrt.so and simdev's libcuda.so.1 on the
library path; it starts CUDA through ctypes so that tierrt's engine runs.
"""
import ctypes
import re
import sys

import tierrt

mode, header = sys.argv[1], sys.argv[2]
failures = 0


def check(what, expected, actual):
    global failures
    if expected == actual:
        print("ok:", what)
    else:
        print(f"FAIL: {what}: expected {expected!r}, got {actual!r}")
        failures += 1


# The module's field list is tierrt.h's, in order.
text = open(header).read()
body = re.search(r"typedef struct tierrt_stats \{(.*?)\} tierrt_stats;", text, re.S).group(1)
fields = re.findall(r"uint64_t (\w+);", body)
check("STATS_FIELDS follow tierrt.h", ["struct_size"] + list(tierrt.STATS_FIELDS), fields)

if mode == "absent":
    check("version() without tierrt", None, tierrt.version())
    check("stats() without tierrt", {}, tierrt.stats())
    check("mark_step() without tierrt", None, tierrt.mark_step())
    check("mark_phase() without tierrt", None, tierrt.mark_phase("backward"))
    check("advise() without tierrt", False, tierrt.advise(0x1000, "spill"))
    check("running() without tierrt", False, tierrt.running())
else:
    check("version() under tierrt", "0.1.0", tierrt.version())
    check("stats() before CUDA starts", {}, tierrt.stats())
    cuda = ctypes.CDLL("libcuda.so.1")
    dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    check("cuInit", 0, cuda.cuInit(0))
    check("cuDeviceGet", 0, cuda.cuDeviceGet(ctypes.byref(dev), 0))
    check("cuDevicePrimaryCtxRetain", 0, cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    check("cuCtxSetCurrent", 0, cuda.cuCtxSetCurrent(ctx))
    check("cuMemAlloc", 0, cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(16 << 20)))
    s = tierrt.stats()
    check("running() once CUDA allocates", True, tierrt.running())
    check("stats() counts the allocation", 1, s.get("allocations"))
    check("stats() holds every field", list(tierrt.STATS_FIELDS), list(s))
    tierrt.mark_step()
    tierrt.mark_step()
    tierrt.mark_phase("forward")
    check("mark_step() is counted", 2, tierrt.stats()["steps_marked"])
    check("advise() on a tracked block", True, tierrt.advise(ptr.value, "pin"))
    check("advise() unpin", True, tierrt.advise(ptr.value, "unpin"))
    check("advise() on an unknown address", False, tierrt.advise(0x10, "spill"))
    check("cuMemFree", 0, cuda.cuMemFree_v2(ptr))

sys.exit(1 if failures else 0)
