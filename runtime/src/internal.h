/* Internal interfaces shared by the runtime's translation units. */
#ifndef PMOSS_INTERNAL_H
#define PMOSS_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "pmoss/runtime.h"

#define PM_CACHE_LINE 64

/* ---- arena: page-granular memory for one tree, placeable per NUMA node ---- */

/* Placement policies besides a node id >= 0 (the public PM_NODE_* values). */
#define PM_ARENA_OS_DEFAULT PM_NODE_OS_DEFAULT
#define PM_ARENA_INTERLEAVE PM_NODE_INTERLEAVE

typedef struct pm_arena {
    pthread_mutex_t lock;  /* guards everything below */
    int policy;            /* node id, PM_ARENA_OS_DEFAULT or PM_ARENA_INTERLEAVE */
    char **chunks;         /* mmap'ed chunks of PM_ARENA_CHUNK bytes */
    size_t n_chunks, cap_chunks;
    size_t used;           /* bytes used in the newest chunk */
} pm_arena;

#define PM_ARENA_CHUNK ((size_t)256 * 1024)

int pm_arena_init(pm_arena *a, int policy);
void pm_arena_fini(pm_arena *a);
/* Zeroed, 64-byte aligned block of size <= PM_ARENA_CHUNK, or NULL. Thread-safe. */
void *pm_arena_alloc(pm_arena *a, size_t size);
/* Set policy for existing and future pages and move resident pages there
 * (node >= 0 or PM_ARENA_INTERLEAVE; PM_ARENA_OS_DEFAULT only drops the binding). */
int pm_arena_migrate(pm_arena *a, int policy, pm_migration_report *report);
int pm_arena_page_nodes(pm_arena *a, uint64_t *counts, int n_counts);
/* Number of NUMA nodes the kernel reports (1 without NUMA support). */
int pm_numa_nodes(void);

/* ---- epochs: RCU-style grace periods for readers of swapped pointers ---- */

/* One slot per reader thread, each on its own cache line. A reader brackets
 * its use of a shared pointer with pm_epoch_enter/exit; a writer that
 * unlinked an object calls pm_epoch_synchronize and may free the object once
 * it returns, because every reader that could still hold it has exited. */
typedef struct pm_epoch_slot {
    _Alignas(PM_CACHE_LINE) _Atomic uint64_t epoch; /* 0 = quiescent */
} pm_epoch_slot;

typedef struct pm_epoch {
    _Atomic uint64_t global;
    unsigned n_slots;
    pm_epoch_slot *slots;
} pm_epoch;

int pm_epoch_init(pm_epoch *e, unsigned n_slots);
void pm_epoch_fini(pm_epoch *e);
void pm_epoch_enter(pm_epoch *e, unsigned slot);
void pm_epoch_exit(pm_epoch *e, unsigned slot);
void pm_epoch_synchronize(pm_epoch *e);

/* ---- small helpers ---- */

/* splitmix64: seeds and hashes. */
static inline uint64_t pm_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* xoshiro256** generator. */
typedef struct pm_rng { uint64_t s[4]; } pm_rng;
void pm_rng_seed(pm_rng *r, uint64_t seed);
uint64_t pm_rng_next(pm_rng *r);
/* Uniform in [0, n), n > 0 (Lemire's multiply-shift, negligible bias). */
static inline uint64_t pm_rng_below(pm_rng *r, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)pm_rng_next(r) * n) >> 64);
}
/* Uniform double in [0, 1). */
static inline double pm_rng_unit(pm_rng *r)
{
    return (double)(pm_rng_next(r) >> 11) * 0x1.0p-53;
}

double pm_now(void);
void pm_errf(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));



/* ---- machine topology as the runtime uses it ---- */

typedef enum pm_cpu_role {
    PM_CPU_ABSENT = 0, /* offline or outside our affinity mask */
    PM_CPU_WORKER,
    PM_CPU_ROUTER,     /* reserved */
    PM_CPU_SWEEPER     /* reserved */
} pm_cpu_role;

typedef struct pm_topology {
    int n_nodes;
    int n_cpus;               /* CPU ids are 0..n_cpus-1 */
    int *cpu_node;            /* node of each CPU id */
    unsigned char *cpu_role;  /* pm_cpu_role of each CPU id */
} pm_topology;

/* Check a schedule against a topology and slice count; message names the
 * first bad slice. Returns 0 or -EINVAL. */
int pm_schedule_validate(const pm_schedule *s, unsigned n_slices, const pm_topology *topo,
                         char *err, size_t err_len);

/* ---- bounded lock-free MPMC queue (Vyukov), used router -> worker ---- */

typedef struct pm_queue_cell {
    _Atomic uint64_t seq;
    pm_query q;
} pm_queue_cell;

typedef struct pm_queue {
    _Alignas(PM_CACHE_LINE) _Atomic uint64_t head; /* next enqueue position */
    _Alignas(PM_CACHE_LINE) _Atomic uint64_t tail; /* next dequeue position */
    _Alignas(PM_CACHE_LINE) uint64_t mask;
    pm_queue_cell *cells;
} pm_queue;

/* capacity must be a power of two >= 2. */
int pm_queue_init(pm_queue *q, unsigned capacity);
void pm_queue_fini(pm_queue *q);
/* 0 on success, -EAGAIN when full (the caller waits; nothing is dropped). */
int pm_queue_push(pm_queue *q, const pm_query *item);
/* 0 on success, -EAGAIN when empty. */
int pm_queue_pop(pm_queue *q, pm_query *item);
#endif
