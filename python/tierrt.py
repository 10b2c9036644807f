"""tierrt from Python: tell tierrt where steps end, advise it about tensors,
read its statistics.

Every function is safe to call whether or not the process runs under tierrt
(tierrt-run, or LD_PRELOAD=libtierrt.so): without it they do nothing and say
so in their result. The module never loads libtierrt.so itself; it only looks
for the functions the preloaded library put in the process.

    import tierrt
    for batch in loader:
        loss = step(batch)
        tierrt.mark_step()
    print(tierrt.stats().get("bytes_spilled", 0))
"""

import ctypes

__all__ = ["running", "version", "mark_step", "mark_phase", "advise", "stats",
           "PHASES", "ADVICE", "STATS_FIELDS"]

# tierrt_phase and tierrt_advice (tierrt/tierrt.h).
PHASES = {"forward": 0, "backward": 1, "optimizer": 2}
ADVICE = {"spill": 0, "prefetch": 1, "pin": 2, "unpin": 3}

# The fields of struct tierrt_stats after struct_size, in the header's order.
STATS_FIELDS = (
    "device_bytes_in_use", "device_peak_bytes", "peak_bytes_untiered", "device_budget",
    "host_bytes_in_use", "host_peak_bytes", "host_budget",
    "live_blocks", "spilled_blocks", "allocations", "driver_allocations",
    "spills", "bytes_spilled", "fetches", "demand_fetches", "bytes_fetched",
    "launches_seen", "steps_marked", "planned_spills", "planned_prefetches", "late_fetches",
    "d2h_bytes_per_s", "h2d_bytes_per_s", "mispredictions", "steps_learned",
    "spills_aborted", "spills_failed", "fetches_failed", "over_budget", "tiering_stopped",
    "host_placement", "host_numa_node", "host_numa_bytes", "host_unplaced_bytes",
    "granule_groups", "granule_unused_bytes", "granule_fenced_moves", "granule_fence_waits",
    "granule_fence_wait_ns", "demand_fetches_waited", "demand_wait_ns", "use_events", "lazy_uses",
    "fetches_put_off", "chunks_handed_over", "prefetches_by_launchers",
    "fetch_chunks_created",
)


class _Stats(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint64)] + [(name, ctypes.c_uint64) for name in STATS_FIELDS]


def _api():
    """The process's tierrt functions, or None when libtierrt.so is not loaded."""
    process = ctypes.CDLL(None)
    try:
        api = {name: getattr(process, "tierrt_" + name)
               for name in ("version", "mark_step", "mark_phase", "advise", "get_stats")}
    except AttributeError:
        return None
    api["version"].restype = ctypes.c_char_p
    api["version"].argtypes = []
    api["mark_step"].restype = None
    api["mark_step"].argtypes = []
    api["mark_phase"].restype = None
    api["mark_phase"].argtypes = [ctypes.c_int]
    api["advise"].restype = ctypes.c_int
    api["advise"].argtypes = [ctypes.c_void_p, ctypes.c_int]
    api["get_stats"].restype = ctypes.c_int
    api["get_stats"].argtypes = [ctypes.POINTER(_Stats)]
    return api


_API = _api()


def running():
    """True when libtierrt.so is loaded and its engine has started (the process has a CUDA context and
    has made a tracked allocation)."""
    return bool(stats())


def version():
    """The loaded library's version ("0.1.0"), or None without tierrt."""
    return _API["version"]().decode() if _API else None


def mark_step():
    """A training step ends here (optional: tierrt also finds the step itself)."""
    if _API:
        _API["mark_step"]()


def mark_phase(phase):
    """The step enters a phase: "forward", "backward" or "optimizer"."""
    if _API:
        _API["mark_phase"](PHASES[phase])


def advise(ptr, advice):
    """Advice about the allocation containing device address `ptr` (an int, e.g. tensor.data_ptr()):
    "spill", "prefetch", "pin" or "unpin". True when tierrt took it; False when ptr is not a tiered
    block or tierrt is not running."""
    code = ADVICE[advice]
    return bool(_API) and _API["advise"](ctypes.c_void_p(ptr), code) == 0


def stats():
    """tierrt's counters (struct tierrt_stats) as a dict of ints; {} without a running tierrt."""
    if not _API:
        return {}
    s = _Stats(struct_size=ctypes.sizeof(_Stats))
    if _API["get_stats"](ctypes.byref(s)) != 0:
        return {}
    # A library older than this module fills fewer fields; report only those.
    filled = (s.struct_size - 8) // 8
    return {name: getattr(s, name) for name in STATS_FIELDS[:filled]}
