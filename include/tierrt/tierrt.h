/*
 * tierrt.h: what a framework or a training script may tell tierrt, and ask
 * of it. Every function is exported by libtierrt.so and is safe to call at
 * any time: before CUDA is initialised, with tierrt turned off, or from any
 * thread. Calls that need a running tierrt return -1 (or do nothing) then.
 *
 * From Python, without a hard dependency on tierrt:
 *   import ctypes
 *   try:
 *       tierrt = ctypes.CDLL(None).tierrt_mark_step   # present only when preloaded
 *   except AttributeError:
 *       tierrt = lambda: None
 */
#ifndef TIERRT_TIERRT_H
#define TIERRT_TIERRT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tierrt_phase {
  TIERRT_PHASE_FORWARD = 0,
  TIERRT_PHASE_BACKWARD = 1,
  TIERRT_PHASE_OPTIMIZER = 2,
} tierrt_phase;

typedef enum tierrt_advice {
  TIERRT_ADVISE_SPILL = 0,     /* move the block's bytes to host memory now */
  TIERRT_ADVISE_PREFETCH = 1,  /* start bringing them back now */
  TIERRT_ADVISE_PIN = 2,       /* keep resident until TIERRT_ADVISE_UNPIN */
  TIERRT_ADVISE_UNPIN = 3,
} tierrt_advice;

/* Where the host tier's memory is (tierrt_stats.host_placement). */
typedef enum tierrt_host_placement {
  TIERRT_HOST_FIRST_TOUCH = 0,    /* copy mode, the GPU names no NUMA node: wherever the pages were touched */
  TIERRT_HOST_ON_NODE = 1,        /* on the GPU's NUMA node, host_numa_node */
  TIERRT_HOST_UNPLACED = 2,       /* copy mode, the GPU's node (host_numa_node) cannot be used here (TIERRT_STATS says why) */
  TIERRT_HOST_DRIVER_CHOICE = 3,  /* remap mode without a node: the driver picks */
} tierrt_host_placement;

typedef struct tierrt_stats {
  /* Set by the caller to sizeof(tierrt_stats): the struct only grows. */
  uint64_t struct_size;
  uint64_t device_bytes_in_use;     /* device memory tierrt holds for blocks now */
  uint64_t device_peak_bytes;       /* ... at its peak */
  uint64_t peak_bytes_untiered;     /* peak of live tracked bytes: the peak without tiering */
  uint64_t device_budget;
  uint64_t host_bytes_in_use;       /* host memory holding spilled blocks now */
  uint64_t host_peak_bytes;
  uint64_t host_budget;
  uint64_t live_blocks;             /* tracked allocations not freed */
  uint64_t spilled_blocks;          /* ... of them in host memory now */
  uint64_t allocations;             /* tracked allocations so far */
  uint64_t driver_allocations;      /* ... that had to ask the driver */
  uint64_t spills;
  uint64_t bytes_spilled;
  uint64_t fetches;                 /* prefetches and demand fetches whose copy went out */
  uint64_t demand_fetches;          /* fetches a launch or copy had to wait for */
  uint64_t bytes_fetched;
  uint64_t launches_seen;
  uint64_t steps_marked;            /* tierrt_mark_step calls */
  uint64_t planned_spills;          /* spills the planner started (TIERRT_POLICY=planner) */
  uint64_t planned_prefetches;      /* prefetches the planner started */
  uint64_t late_fetches;            /* prefetches still under way when a launch's stream reached it */
  uint64_t d2h_bytes_per_s;         /* spill copies as measured on the device; 0 before the first */
  uint64_t h2d_bytes_per_s;         /* fetch copies, likewise */
  uint64_t mispredictions;          /* demand fetches of blocks the planner's plan had spilled */
  uint64_t steps_learned;           /* training steps the planner has seen end */
  uint64_t spills_aborted;          /* spills (counted in spills) overtaken by a use or free: the block stayed */
  uint64_t spills_failed;           /* spills (counted in spills) a driver call failed: the block stayed resident */
  uint64_t fetches_failed;          /* fetches that could not start (not in fetches): the block stayed where its bytes were */
  uint64_t over_budget;             /* device claims that passed device_budget while the device had room */
  uint64_t tiering_stopped;         /* 1 once tierrt stopped tiering after a failure of its own (see the log) */
  uint64_t host_placement;          /* a tierrt_host_placement */
  uint64_t host_numa_node;          /* the GPU's NUMA node (ON_NODE, UNPLACED), else UINT64_MAX */
  uint64_t host_numa_bytes;         /* host-tier bytes on host_numa_node */
  uint64_t host_unplaced_bytes;     /* copy mode: pinned host-tier bytes on no node or another one */
  uint64_t granule_groups;          /* allocations tiered per granule group now (TIERRT_GRANULE_BYTES) */
  uint64_t granule_unused_bytes;    /* their granules never used: no memory behind them */
  uint64_t granule_fenced_moves;    /* granule moves during which no launch naming their allocation ran */
  uint64_t granule_fence_waits;     /* launches that waited on the host for such a move */
  uint64_t granule_fence_wait_ns;   /* how long they waited in all */
  uint64_t demand_fetches_waited;   /* demand fetches whose launch's stream reached it before the copy ended */
  uint64_t demand_wait_ns;          /* how long those streams waited, on the device's clock */
  uint64_t use_events;              /* events recorded to know when work using tierrt's memory is done */
  uint64_t lazy_uses;               /* launches whose use shared their stream's next such event */
  uint64_t fetches_put_off;         /* prefetches that found no room within device_budget yet (not in fetches_failed): tried again later */
  uint64_t chunks_handed_over;      /* fetches given a freed allocation's memory in stream order (no host wait for its last uses) */
  uint64_t prefetches_by_launchers; /* of planned_prefetches, those the application's launching threads carried out */
  uint64_t fetch_chunks_created;    /* fetches given new device memory (cuMemCreate), not a spare or a freed allocation's */
} tierrt_stats;

/* "0.1.0" */
const char* tierrt_version(void);

/* A training step ends here (optional: tierrt also finds the step itself). */
void tierrt_mark_step(void);
void tierrt_mark_phase(tierrt_phase phase);

/* Advice about the allocation containing ptr (in an allocation tiered per
 * granule group, TIERRT_GRANULE_BYTES: the granule group holding ptr). 0 when
 * taken, -1 when ptr is not a tracked block, the advice is unknown, or tierrt
 * is not running. */
int tierrt_advise(const void* ptr, tierrt_advice advice);

/* Fills *out (up to out->struct_size bytes). 0, or -1 when tierrt is not
 * running or out is NULL. */
int tierrt_get_stats(tierrt_stats* out);

#ifdef __cplusplus
}
#endif

#endif /* TIERRT_TIERRT_H */
