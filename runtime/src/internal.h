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
/* How many times this process called move_pages' moving form (tests: a
 * migration whose pages are all in place must not). */
uint64_t pm_arena_move_calls(void);
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
    /* Sharing domains, each named by its smallest CPU id: the physical core
     * (SMT threads) and the L3 domain of each CPU id. NULL: every CPU is its
     * own core and L3 domain. Groups cut them to a node. */
    int *cpu_core;
    int *cpu_l3;
    const char *machine;      /* this host's machine name; NULL or "": unknown */
} pm_topology;

/* Fill t->cpu_core and t->cpu_l3 (allocated here, n_cpus entries; the
 * caller frees them) from sysfs under sysfs_root (NULL: "/sys"), by the
 * rules of src/pmoss/topology.py so both sides see the same groups:
 * physical core = (topology/physical_package_id, topology/core_id), L3
 * domain = shared_cpu_list of the level-3 unified cache under cache/index*.
 * A CPU whose core_id is missing is its own core; one without an L3 entry
 * shares its package's domain. Returns 0 or -ENOMEM. */
int pm_topology_read_domains(pm_topology *t, const char *sysfs_root);

/* The domain of a CPU at a width: the CPU itself (thread), its core or L3
 * domain id, or its node. cpu must be in 0..n_cpus-1. */
int pm_topology_domain(const pm_topology *t, int cpu, pm_width width);

/* Check a schedule against a topology and slice count; message names the
 * first bad slice. Returns 0 or -EINVAL. */
int pm_schedule_validate(const pm_schedule *s, unsigned n_slices, const pm_topology *topo,
                         char *err, size_t err_len);

/* ---- bounded lock-free MPMC queue (Vyukov), used router -> worker ---- */

typedef struct pm_queue_cell {
    _Atomic uint64_t seq;
    uint64_t t_ns;  /* enqueue time (pm_now_ns) or 0, carried next to the query */
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
/* The same with an enqueue timestamp travelling with the item: push_stamped
 * stores pm_now_ns() taken when a free cell is found (so a wait on a full
 * queue is not counted and failed attempts read no clock); pop_at returns
 * it (0 for items from pm_queue_push, which pm_queue_pop drops). */
int pm_queue_push_stamped(pm_queue *q, const pm_query *item);
int pm_queue_pop_at(pm_queue *q, pm_query *item, uint64_t *t_ns);

/* ---- per-slice pending batches of a worker (pending.c) ---- */

/* A worker pops queued queries into a pool and chains them per slice (FCFS
 * within the slice); a slice's chain becomes a due batch when it holds
 * `batch` queries, or earlier when the worker flushes it (max wait, idle,
 * stop, pool full). Due batches are run by the worker back to back, one
 * probe reading between two batches. Single-threaded: only the owning
 * worker touches it. Queue draining happens only in pm_pending_drain, never
 * while a batch runs, so drain work stays outside every counter window. */
#define PM_PENDING_NONE UINT32_MAX

typedef struct pm_batch {
    uint32_t slice;
    uint32_t head, tail; /* pool entries: head .. tail through next[] */
    uint32_t n;          /* 1 .. batch queries */
} pm_batch;

typedef struct pm_pending_slice {
    uint32_t head, tail, n;  /* this slice's collecting chain (n 0: none) */
    uint32_t older, newer;   /* age list neighbours while collecting */
    uint64_t next_probe_ns;  /* the worker profiles this slice's next batch
                                from then on (runtime.c; 0: the first one) */
} pm_pending_slice;

typedef struct pm_pending {
    unsigned batch;         /* G: a full batch */
    unsigned cap;           /* pool entries */
    unsigned n_slices;
    unsigned due_max;       /* drain stops once this many batches are due */
    unsigned used;          /* entries holding a query (collecting or due) */
    uint32_t free, fresh;   /* LIFO free list; first never-used entry */
    pm_query *q;            /* [cap] */
    uint64_t *t_ns;         /* [cap] enqueue stamps */
    uint32_t *next;         /* [cap] chain link (slice chain or free list) */
    pm_pending_slice *slice; /* [n_slices] */
    uint32_t oldest, newest; /* collecting slices by age of their first query */
    pm_batch *due;          /* [due_cap] batches to run, in order */
    unsigned n_due, due_cap;
} pm_pending;

/* 0, -EINVAL (a zero size) or -ENOMEM (nothing left allocated). */
int pm_pending_init(pm_pending *p, unsigned n_slices, unsigned batch, unsigned cap, unsigned due_max);
void pm_pending_fini(pm_pending *p);
/* Pop up to max queued queries into the pool, stopping early when the pool
 * is full or due_max batches are due. *empty is set to 1 if it stopped
 * because the queue was empty. Returns the number popped. */
unsigned pm_pending_drain(pm_pending *p, pm_queue *q, unsigned max, int *empty);
/* After a drain, make partial batches due (full ones already are), oldest
 * first: all of them when idle (the worker is about to sleep or stop) or
 * wait_ns is 0; else each whose oldest query was enqueued at least wait_ns
 * before now_ns; and if then nothing is due but the pool is full, the
 * oldest one (so a drain can go on). */
void pm_pending_pick(pm_pending *p, int idle, uint64_t wait_ns, uint64_t now_ns);
/* Return a due batch's entries to the pool after it ran (the caller then
 * clears n_due once the whole due list ran). */
void pm_pending_release(pm_pending *p, const pm_batch *b);

/* Queries the calling runtime worker thread has completed so far (since its
 * run started); 0 on any other thread. For probes that want an exact
 * per-query counter (tests). */
uint64_t pm_worker_self_completed(void);

/* ---- latency histograms: per-worker, log2 buckets with linear sub-buckets ---- */

/* Bucket b < PM_LAT_SUB holds exactly the value b. Above, a value v with its
 * highest set bit at position m >= PM_LAT_SUB_BITS falls in bucket
 * (m - PM_LAT_SUB_BITS + 1) * PM_LAT_SUB + the PM_LAT_SUB_BITS bits below
 * that bit: 16 equal sub-buckets per power of two, so a bucket is at most
 * 1/16 (6.25%) as wide as its lowest value (HDR-style, 2 significant hex
 * digits). 61 major groups cover all of uint64; 64 x 16 counters = 8 KiB. */
#define PM_LAT_SUB_BITS 4
#define PM_LAT_SUB (1u << PM_LAT_SUB_BITS)
#define PM_LAT_BUCKETS (64u * PM_LAT_SUB)

static inline unsigned pm_lat_bucket(uint64_t ns)
{
    if (ns < PM_LAT_SUB)
        return (unsigned)ns;
    unsigned m = 63u - (unsigned)__builtin_clzll(ns);
    return (m - PM_LAT_SUB_BITS + 1) * PM_LAT_SUB +
           (unsigned)((ns >> (m - PM_LAT_SUB_BITS)) & (PM_LAT_SUB - 1));
}

/* Smallest and largest value (inclusive) that land in bucket b. */
uint64_t pm_lat_bucket_low(unsigned b);
uint64_t pm_lat_bucket_high(unsigned b);

/* One writer's histogram (a worker's). The writer records with plain
 * relaxed load+store (no RMW: it is the only writer of the counters);
 * readers never reset it — they remember what they last read (a
 * pm_lat_cursor) and take differences, so every sample lands in exactly one
 * reader interval. max_ns is the exception: an interval maximum cannot be
 * differenced, so the interval reader exchanges it with 0 and the writer
 * raises it with a CAS (only when a sample beats it: rare). run_max_ns has
 * no concurrent reader (reset before a run's workers start, read after they
 * are joined), so the writer updates it without RMW. */
typedef struct pm_lat_hist {
    _Atomic uint64_t count[PM_LAT_BUCKETS];
    _Alignas(PM_CACHE_LINE) _Atomic uint64_t sum_ns;
    _Atomic uint64_t max_ns;
    _Atomic uint64_t run_max_ns;
} pm_lat_hist;

/* Record one sample. Called only by the histogram's writer thread. */
static inline void pm_lat_record(pm_lat_hist *h, uint64_t ns)
{
    /* relaxed: single writer; published by the release store below */
    atomic_store_explicit(&h->sum_ns, atomic_load_explicit(&h->sum_ns, memory_order_relaxed) + ns,
                          memory_order_relaxed);
    uint64_t m = atomic_load_explicit(&h->max_ns, memory_order_relaxed);
    /* relaxed CAS: the release store below orders it before the count */
    while (ns > m && !atomic_compare_exchange_weak_explicit(&h->max_ns, &m, ns, memory_order_relaxed,
                                                            memory_order_relaxed))
        ;
    if (ns > atomic_load_explicit(&h->run_max_ns, memory_order_relaxed))
        atomic_store_explicit(&h->run_max_ns, ns, memory_order_relaxed);
    _Atomic uint64_t *c = &h->count[pm_lat_bucket(ns)];
    /* release: a reader that sees this count (acquire) also sees the sum and
     * the max that include this sample */
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1, memory_order_release);
}

/* What one reader last saw of one histogram. */
typedef struct pm_lat_cursor {
    uint64_t count[PM_LAT_BUCKETS];
    uint64_t sum_ns;
} pm_lat_cursor;

/* A merged interval: bucket counts, sum and max of the samples in it. */
typedef struct pm_lat_interval {
    uint64_t count[PM_LAT_BUCKETS];
    uint64_t sum_ns;
    uint64_t max_ns;
} pm_lat_interval;

/* Add to acc what h gained since cur last saw it and advance cur. Takes the
 * interval max from h->max_ns (exchange, resetting it) when take_max, else
 * from h->run_max_ns (read only). One reader per cursor at a time; the
 * writer may run concurrently. */
void pm_lat_collect(pm_lat_hist *h, pm_lat_cursor *cur, int take_max, pm_lat_interval *acc);

/* Percentiles of a merged interval (see pm_latency_summary). */
void pm_lat_summarize(const pm_lat_interval *iv, pm_latency_summary *out);

/* CLOCK_MONOTONIC in nanoseconds (vDSO: no syscall on common hosts). Out of
 * line: clock_gettime needs POSIX feature macros not every unit defines. */
uint64_t pm_now_ns(void);
#endif
