/*
 * P-MOSS native runtime — public C API.
 *
 * Objects (all opaque, created and destroyed through this API):
 *   pm_tree      one OLC B+-tree (uint64 keys and values) whose nodes come
 *                from its own arena, so its pages can be placed and migrated.
 *   pm_schedule  a spatial schedule (docs/design.md §4.2): kind + per-slice node/core.
 *   pm_workload  a deterministic query generator (YCSB-style mixes).
 *   pm_runtime   N slices (one pm_tree each) served by pinned router, worker
 *                and sweeper threads under a schedule.
 *
 * Conventions: functions return 0 or -errno; a failed call leaves the object
 * unchanged; outputs go through trailing pointer parameters. Where a call
 * takes `char *err, size_t err_len`, a human-readable reason is written there
 * on failure (NUL-terminated, truncated to err_len; err may be NULL).
 */
#ifndef PMOSS_RUNTIME_H
#define PMOSS_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ tree */

/* Largest and default leaf capacity (entries per leaf). */
#define PM_LEAF_CAPACITY_MAX 255u

typedef struct pm_tree pm_tree;

/* Per-operation work counters; every tree call that takes one ADDS to it. */
typedef struct pm_op_stats {
    uint64_t nodes_visited; /* nodes read, restarts included */
    uint64_t keys_scanned;  /* entries returned by scans */
} pm_op_stats;

/* Result of moving a tree's (or a slice's) pages to a NUMA node. */
typedef struct pm_migration_report {
    uint64_t slices_moved;  /* slices whose node changed (runtime only) */
    uint64_t pages_moved;   /* pages now on the target node */
    uint64_t pages_failed;  /* pages move_pages reported an error for */
    uint64_t pages_absent;  /* reserved, never touched (-ENOENT/-EFAULT) */
    double seconds;         /* wall time spent in move_pages */
} pm_migration_report;

/* Placement of a tree's memory besides a node id >= 0. */
#define PM_NODE_OS_DEFAULT (-1)  /* no binding: first touch */
#define PM_NODE_INTERLEAVE (-2)  /* pages interleaved over all nodes */

/* Create an empty tree. leaf_capacity in [4, PM_LEAF_CAPACITY_MAX] (0 picks
 * 255). node >= 0 binds the tree's memory to that NUMA node; or
 * PM_NODE_OS_DEFAULT / PM_NODE_INTERLEAVE. The caller owns *out and frees it
 * with pm_tree_destroy. Returns 0, -EINVAL (bad capacity/node) or -ENOMEM. */
int pm_tree_create(unsigned leaf_capacity, int node, pm_tree **out);

/* Free the tree and all its nodes. No other thread may use the tree during
 * or after the call. NULL is accepted. Cannot fail. */
void pm_tree_destroy(pm_tree *tree);

/* Find key. Thread-safe against concurrent inserts, updates and scans.
 * Writes the value to *value (may be NULL). stats may be NULL.
 * Returns 0 if found, -ENOENT otherwise. */
int pm_tree_lookup(pm_tree *tree, uint64_t key, uint64_t *value, pm_op_stats *stats);

/* Insert key -> value; an existing key has its value replaced (upsert).
 * Thread-safe. *replaced (may be NULL) is set to 1 if the key existed.
 * Returns 0 or -ENOMEM (the tree is unchanged then). */
int pm_tree_insert(pm_tree *tree, uint64_t key, uint64_t value, int *replaced,
                   pm_op_stats *stats);

/* Replace the value of an existing key. Thread-safe.
 * Returns 0, or -ENOENT if the key is absent (nothing is inserted). */
int pm_tree_update(pm_tree *tree, uint64_t key, uint64_t value, pm_op_stats *stats);

/* Copy up to max entries with key >= start, in ascending key order, into
 * keys[] / values[] (either may be NULL to only count). Thread-safe: every
 * key present for the whole call is returned exactly once, in order.
 * *n_out receives the number of entries copied. Returns 0 (cannot fail). */
int pm_tree_scan(pm_tree *tree, uint64_t start, size_t max, uint64_t *keys,
                 uint64_t *values, size_t *n_out, pm_op_stats *stats);

/* Build the tree from n strictly increasing keys (values[i] belongs to
 * keys[i]; values NULL stores the key as value). Leaves are filled to
 * fill_percent (1..100; 0 picks 100) of leaf capacity. Not thread-safe: call
 * before sharing the tree. Returns 0, -EEXIST if the tree is not empty,
 * -EINVAL if keys are not strictly increasing, -ENOMEM. */
int pm_tree_bulk_load(pm_tree *tree, const uint64_t *keys, const uint64_t *values,
                      size_t n, unsigned fill_percent);

/* Number of keys (exact when no insert runs concurrently). Thread-safe. */
uint64_t pm_tree_size(pm_tree *tree);

/* Move every page of the tree to NUMA node `node` (move_pages) and bind its
 * future allocations there; PM_NODE_INTERLEAVE spreads pages round-robin
 * over the nodes, PM_NODE_OS_DEFAULT only drops the binding (no move).
 * Thread-safe, may run while queries run. Adds its counts to *report (may be
 * NULL). Returns 0, -EINVAL (no such node) or the -errno of move_pages/mbind. */
int pm_tree_migrate(pm_tree *tree, int node, pm_migration_report *report);

/* Count the tree's resident pages per NUMA node: counts[i] += pages on node i
 * for i < n_counts. Thread-safe. Returns 0 or the -errno of move_pages. */
int pm_tree_page_nodes(pm_tree *tree, uint64_t *counts, int n_counts);

/* -------------------------------------------------------------- schedule */

/* Schedule kinds, named as in datasets and plots (docs/design.md §4.2). Which
 * widths each kind allows: pm_schedule_kind_widths. */
typedef enum pm_schedule_kind {
    PM_KIND_OS_DEFAULT = 0, /* "os-default": first touch, any worker */
    PM_KIND_OS_INTERLEAVE,  /* "os-interleave": interleaved pages, any worker */
    PM_KIND_SE_NUMA,        /* "se-numa": slice on node[i], any worker */
    PM_KIND_SN_NUMA,        /* "sn-numa": width node: any worker on node[i] */
    PM_KIND_SN_GROUPED,     /* "sn-grouped" ... "sn-random": width thread: core[i] */
    PM_KIND_SN_SPREAD,
    PM_KIND_SN_MIXED,
    PM_KIND_SN_RANDOM,
    PM_KIND_LEARNED,        /* "learned": any width */
    PM_KIND_SN_HOT,         /* "sn-hot": hot slices widened by load; any width */
    PM_KIND_SEARCH,         /* "search": found by the simulator's oracle; any width */
    PM_KIND_SN_RANDOM_WIDTH, /* "sn-random-width": exploration data, a one-core kind widened at random; any width */
    PM_KIND_COUNT
} pm_schedule_kind;

/* Execution group width of a slice (docs/contracts.md, schema version 2).
 * The group of slice i is cut to node[i]:
 *   THREAD  the anchor worker core[i] alone (the paper's SN:T action)
 *   CORE    the workers sharing the anchor's physical core (SMT threads)
 *   L3      the workers sharing the anchor's L3 domain
 *   NODE    every worker on node[i] (core[i] may be -1)
 *   NONE    shared kinds (os-*, se-numa): no group, any worker runs it.
 * Groups of different slices may overlap. */
typedef enum pm_width {
    PM_WIDTH_THREAD = 0,
    PM_WIDTH_CORE,
    PM_WIDTH_L3,
    PM_WIDTH_NODE,
    PM_WIDTH_NONE,
    PM_WIDTH_COUNT
} pm_width;

typedef struct pm_schedule pm_schedule;

/* Name <-> kind. pm_schedule_kind_name returns NULL for an unknown kind;
 * pm_schedule_kind_parse returns 0 and sets *kind, or -EINVAL. Pure. */
const char *pm_schedule_kind_name(pm_schedule_kind kind);
int pm_schedule_kind_parse(const char *name, pm_schedule_kind *kind);

/* Name <-> width ("thread" "core" "l3" "node"; PM_WIDTH_NONE is named
 * "none" but not parsed: a schedule writes no width for shared kinds).
 * pm_width_name returns NULL for an unknown width; pm_width_parse returns 0
 * or -EINVAL. Pure. */
const char *pm_width_name(pm_width width);
int pm_width_parse(const char *name, pm_width *width);

/* Bitmask of the widths (1u << pm_width) a kind allows: thread for the
 * one-core kinds, node for sn-numa, thread..node for learned, sn-hot, search and sn-random-width,
 * none for the shared kinds; 0 for an unknown kind. Pure. */
unsigned pm_schedule_kind_widths(pm_schedule_kind kind);

/* 1 if the kind allows width thread only (every slice runs on exactly one
 * core: sn-grouped, sn-spread, sn-mixed, sn-random), else 0. Pure. */
int pm_schedule_kind_is_one_core(pm_schedule_kind kind);

/* Build a schedule from arrays of n_slices node ids, anchor core ids and
 * widths (pm_width values; all copied). width NULL gives every slice its
 * kind's default: thread, node for sn-numa, none for shared kinds. Only the
 * shape is checked here (n_slices > 0, valid kind and width values); the
 * rules of the contract and machine consistency are checked by
 * pm_runtime_check_schedule / pm_runtime_set_schedule. machine may be NULL
 * (names no machine). Caller owns *out (pm_schedule_destroy).
 * Returns 0, -EINVAL, -ENOMEM. Thread-safe. */
int pm_schedule_create_groups(pm_schedule_kind kind, unsigned n_slices, const int *node,
                              const int *core, const uint8_t *width, const char *machine,
                              pm_schedule **out);

/* pm_schedule_create_groups with width NULL (the kind's default widths). */
int pm_schedule_create(pm_schedule_kind kind, unsigned n_slices, const int *node,
                       const int *core, const char *machine, pm_schedule **out);

/* Parse the JSON schedule contract (docs/contracts.md):
 * {"schema_version":2,"machine":S,"n_slices":N,"kind":S,"node":[N ints],
 *  "core":[N ints],"width":S or [N strings],"provenance":{...}}; schema
 * version 1 has no width. JSON syntax is jansson's (RFC 8259: UTF-8,
 * escapes, no trailing bytes, nesting up to 2048 levels). Strict: unknown
 * fields, duplicated keys anywhere (the message names the key), wrong
 * types, wrong lengths, unknown widths and widths the kind does not allow
 * are errors whose message names the field (and the first bad slice for
 * array entries). Caller owns *out. Returns 0, -EINVAL (message in err) or
 * -ENOMEM. Thread-safe. */
int pm_schedule_parse_json(const char *text, size_t len, pm_schedule **out,
                           char *err, size_t err_len);

/* Largest schedule file pm_schedule_load_file reads: 64 MiB. The largest
 * schedule the runtime takes has 2^20 slices; written as pmoss writes JSON
 * (one array element per line) that is about 28 bytes per slice (node, core
 * and width), 28 MiB, so the limit leaves room for provenance. */
#define PM_SCHEDULE_FILE_MAX (64u << 20)

/* Read and parse a schedule file (as pm_schedule_parse_json). Only a
 * regular file is read, and only up to PM_SCHEDULE_FILE_MAX bytes: anything
 * else is refused before reading, with a one-line message in err naming the
 * file and the limit (a FIFO, /dev/zero or a terminal never blocks or
 * fills memory). Returns 0, -ENOENT etc. (the -errno of open/read),
 * -EISDIR (a directory), -EINVAL (another non-regular file, or bad JSON:
 * message in err), -EFBIG (larger than the limit) or -ENOMEM. */
int pm_schedule_load_file(const char *path, pm_schedule **out, char *err, size_t err_len);

/* Accessors; pointers stay valid until pm_schedule_destroy. Cannot fail.
 * pm_schedule_widths: n_slices pm_width values. pm_schedule_machine: ""
 * when the schedule names no machine. */
pm_schedule_kind pm_schedule_kind_of(const pm_schedule *s);
unsigned pm_schedule_n_slices(const pm_schedule *s);
const int *pm_schedule_nodes(const pm_schedule *s);
const int *pm_schedule_cores(const pm_schedule *s);
const uint8_t *pm_schedule_widths(const pm_schedule *s);
const char *pm_schedule_machine(const pm_schedule *s);

/* Free a schedule. NULL is accepted. */
void pm_schedule_destroy(pm_schedule *s);

/* -------------------------------------------------------------- workload */

typedef enum pm_op { PM_OP_READ = 0, PM_OP_UPDATE, PM_OP_INSERT, PM_OP_SCAN } pm_op;

typedef struct pm_query {
    uint64_t key;
    uint64_t value;    /* update/insert value; scan: number of keys wanted */
    uint32_t slice;    /* filled in by the router */
    uint8_t op;        /* pm_op */
} pm_query;

/* A workload: op mix + key distribution. Names are the lowercase names used
 * by the Python side and the simulator:
 *   mix: ycsb-a ycsb-b ycsb-c ycsb-d ycsb-e scan rsi-20-30-50 rsi-25-50-25
 *   distribution: uniform zipf latest hotspot (NULL = the mix's default:
 *                 latest for ycsb-d, zipf otherwise); zipf is scrambled.
 *   dataset: dense uniform clustered (see pm_dataset_generate). */
typedef struct pm_workload_spec {
    const char *mix;
    const char *distribution;
    double zipf_theta;          /* 0 picks 0.99 */
    double hotspot_data;        /* hot set fraction, 0 picks 0.2 */
    double hotspot_ops;         /* ops going to the hot set, 0 picks 0.8 */
    uint32_t scan_min;          /* scan length uniform in [scan_min, scan_max]; */
    uint32_t scan_max;          /* 0/0 picks 1..100 */
    uint64_t seed;
    double offered_qps;         /* pm_runtime_start/run: 0 closed loop (routers
                                  keep every queue full); > 0 open loop at
                                  this many queries/s over all routers */
} pm_workload_spec;

typedef struct pm_workload pm_workload;

/* Create a generator over the n sorted keys of the loaded data set (the array
 * is borrowed and must outlive the generator). stream makes independent
 * deterministic streams (one per router, stream < 64); inserts of stream s never collide
 * with another stream's inserts for the dense dataset. Caller owns *out.
 * Not thread-safe: one generator per thread. Returns 0, -EINVAL (message in
 * err: unknown name or bad parameter) or -ENOMEM. */
int pm_workload_create(const pm_workload_spec *spec, const char *dataset,
                       const uint64_t *keys, uint64_t n, uint32_t stream, pm_workload **out,
                       char *err, size_t err_len);

/* Produce the next query (slice left 0). Deterministic for (spec, dataset,
 * keys, stream). Returns 0 or -ENOMEM (insert history could not grow). */
int pm_workload_next(pm_workload *w, pm_query *q);

void pm_workload_destroy(pm_workload *w);

/* Generate n distinct keys of a dataset ("dense": 0..n-1; "uniform": random
 * 64-bit; "clustered": runs of nearby keys around random centres, like map
 * cell ids), sorted ascending, into keys[n]. Deterministic by seed.
 * Returns 0, -EINVAL (unknown dataset) or -ENOMEM. */
int pm_dataset_generate(const char *dataset, uint64_t n, uint64_t seed, uint64_t *keys);

/* --------------------------------------------------------------- probes */

/* A probe value (and thus a slice stat) that the host cannot measure. A
 * stat is unavailable if any of its readings was: it is reported as this
 * value (null on the Python side), never as 0. */
#define PM_STAT_UNAVAILABLE UINT64_MAX

/* Per-worker counter probe implemented by the collector. open() runs on the
 * worker's thread after it is pinned to worker_cpu and returns 0 or -errno;
 * read() writes n_values cumulative counter values; close() frees state.
 * read() runs only on the worker's thread. Each worker collects queued
 * queries into per-slice batches of up to batch_queries queries (a batch
 * closes when full, on its deadline, or as soon as the worker's queue is
 * empty: see batch_max_wait_us) and runs due batches back to back. A
 * profiled batch runs between two probe readings (consecutive profiled
 * batches share one) and the delta goes to its slice: the window holds only
 * that slice's queries (exact attribution, never a mixed window; popping the
 * queue happens outside every window). Which batches are profiled: see
 * probe_period_us (default: a slice's first batch, then at most one per
 * period, per worker). n_values <= 64. */
typedef struct pm_probe_ops {
    int (*open)(void *ctx, int worker_cpu, void **state);
    void (*read)(void *state, uint64_t *values);
    void (*close)(void *state);
    int n_values;
    const char *const *names;
} pm_probe_ops;

/* -------------------------------------------------------------- off-core */

/* Off-core hook implemented by the collector (pm_collector_uncore_ops):
 * memory-controller and socket-link PMUs, driven by the runtime's off-core
 * sweeper thread.
 *   open()  runs on the off-core sweeper at every run start. It writes the
 *           shape of its readings: n_nodes per-node entries and n_links
 *           per-link entries (0 and 0: the host has no such PMU, not an
 *           error). Returns 0 or -errno with a one-line reason in msg
 *           (-EACCES: system-wide perf access refused; the message names
 *           kernel.perf_event_paranoid and CAP_PERFMON). A failed open leaves
 *           the run's off-core readings null; the run itself goes on.
 *   read()  writes the cumulative readings since open into
 *           values[n_values][cap] (row-major, cap >= max(n_nodes, n_links)),
 *           NAN where nothing was measured; 0 or -errno. Called once per
 *           sweep round and once more when the run stops, only on the thread
 *           that opened state.
 *   close() frees state (on the same thread).
 * names[n_values] name the features (the collector's: imc_read_bytes,
 * imc_write_bytes, link_in_bytes, link_out_bytes, imc_total_bytes); which
 * feature is per node and which per link is the implementation's layout:
 * the runtime only stores and copies the readings. 0 < n_values <= 16. */
typedef struct pm_uncore_ops {
    int (*open)(void *ctx, void **state, unsigned *n_nodes, unsigned *n_links, char *msg,
                size_t msg_len);
    int (*read)(void *state, double *values, unsigned cap);
    void (*close)(void *state);
    int n_values;
    const char *const *names;
} pm_uncore_ops;

/* --------------------------------------------------------------- runtime */

typedef enum pm_boundaries {
    PM_BOUNDARIES_EQUAL_COUNT = 0, /* each slice gets ~n_keys/n_slices keys */
    PM_BOUNDARIES_EQUAL_WIDTH = 1  /* equal key-range width over [min, max] */
} pm_boundaries;

/* batch_max_wait_us (see pm_runtime_config): the deadline used with a probe
 * when the config says AUTO (the latency/overhead trade-off behind it is
 * measured in docs/benchmarks.md), and AUTO itself. Short: it only matters
 * while a worker's queue never empties (overload, closed loop). */
#define PM_BATCH_MAX_WAIT_US_DEFAULT 1000
#define PM_BATCH_MAX_WAIT_AUTO UINT32_MAX
/* probe_period_us (see pm_runtime_config): the default sampling period of
 * a slice's probe windows, and AUTO itself. */
#define PM_PROBE_PERIOD_US_DEFAULT 100000
#define PM_PROBE_PERIOD_AUTO UINT32_MAX

typedef struct pm_runtime_config {
    uint64_t n_keys;           /* keys loaded at create */
    const char *dataset;       /* "dense" | "uniform" | "clustered" */
    uint64_t seed;             /* dataset seed */
    unsigned n_slices;         /* default 256 */
    pm_boundaries boundaries;  /* default equal count */
    unsigned leaf_capacity;    /* default 255 */
    unsigned batch_queries;    /* probe granularity G, default 100: a
                                  worker pops queued queries into per-slice
                                  pending batches and runs a slice's batch
                                  (one probe window) when it holds G
                                  queries. Execution order is FCFS per
                                  slice within what the worker has drained
                                  (work-conserving: see batch_max_wait_us):
                                  the price of exact per-slice attribution
                                  at <= 1 read per batch. */
    unsigned batch_max_wait_us; /* deadline of a partial batch while the
                                  worker's queue keeps delivering: it runs
                                  once its oldest query waited this long
                                  (0: every drain runs all that is
                                  pending). Default PM_BATCH_MAX_WAIT_AUTO:
                                  PM_BATCH_MAX_WAIT_US_DEFAULT when every
                                  batch is profiled (probe_period_us 0),
                                  else 0 (nothing to amortise). Work-
                                  conserving: whenever a drain finds the
                                  queue empty, every partial batch runs at
                                  once (waiting would only idle the
                                  worker), so batches are as large as the
                                  load makes them and a light load adds no
                                  batching wait. Partial batches also run
                                  when the run stops (nothing lost or
                                  repeated) and when the worker's pending
                                  pool (min(n_slices x G, 65536) queries)
                                  is full. A longer deadline means fuller
                                  batches under overload (fewer reads) and
                                  higher latency there. */
    unsigned probe_period_us;  /* sampled attribution: a worker profiles
                                  a slice's first batch of a run, then at
                                  most one of its batches per this period;
                                  the others run between no readings. Each
                                  profiled window is exact; a slice's
                                  counter totals are estimates, scaled by
                                  queries / profiled_queries (the stat that
                                  counts the queries in its windows). 0:
                                  every batch (exact totals, a reading per
                                  batch + 1 per run). Default
                                  PM_PROBE_PERIOD_AUTO =
                                  PM_PROBE_PERIOD_US_DEFAULT: a query rarely
                                  pays for a reading, so profiling leaves the
                                  latency median alone. */
    unsigned queue_capacity;   /* per worker, power of two, default 1024 */
    unsigned routers_per_node; /* default 1 */
    unsigned max_workers;      /* 0 = one worker per usable CPU */
    int share_cpus;            /* -1 auto (share when < 4 CPUs per node),
                                  0 reserve router/sweeper CPUs, 1 share */
    const pm_probe_ops *probe; /* NULL: only the runtime's own counts */
    void *probe_ctx;
    const pm_uncore_ops *uncore; /* NULL: no off-core readings */
    void *uncore_ctx;            /* handed to uncore->open; must outlive the runtime */
    const char *machine;       /* this host's machine name (copied; NULL or "":
                                  unknown). A schedule that names another
                                  machine is refused (its core ids are that
                                  machine's); with the name unknown, the
                                  first schedule that names a machine gets
                                  one warning on stderr. */
    const char *sysfs_root;    /* where CPU core and L3 domains are read
                                  (copied at create; NULL: "/sys"). Tests
                                  point it at a fake tree. */
} pm_runtime_config;

/* Fill cfg with the defaults above (n_keys 1e6, dataset "dense", seed 1). */
void pm_runtime_config_init(pm_runtime_config *cfg);

typedef struct pm_runtime pm_runtime;

/* Generate and bulk-load the data set, cut it into slices and set an
 * os-default schedule. Caller owns *out (pm_runtime_destroy). The config
 * and probe ops are copied; probe_ctx must outlive the runtime.
 * Returns 0, -EINVAL (message in err) or -ENOMEM. */
int pm_runtime_create(const pm_runtime_config *cfg, pm_runtime **out, char *err,
                      size_t err_len);

/* Stop a running workload if any and free everything. NULL accepted. */
void pm_runtime_destroy(pm_runtime *rt);

/* Topology seen by the runtime. Cannot fail; thread-safe. */
unsigned pm_runtime_n_slices(const pm_runtime *rt);
int pm_runtime_n_nodes(const pm_runtime *rt);
/* Worker CPUs (ids usable in a one-core schedule): writes up to cap ids,
 * returns how many exist. */
unsigned pm_runtime_worker_cpus(const pm_runtime *rt, int *cpus, unsigned cap);
/* NUMA node of a CPU, or -1 if the CPU is not usable. */
int pm_runtime_cpu_node(const pm_runtime *rt, int cpu);
/* Domain of a usable CPU at a width, each named by an id shared by its
 * members: the CPU itself (PM_WIDTH_THREAD), its physical core and its L3
 * domain (the smallest CPU id in it), or its node (PM_WIDTH_NODE). The
 * group of (anchor, width) is the workers on the anchor's node with the
 * anchor's domain. -1 if the CPU is not usable or width is NONE. */
int pm_runtime_cpu_domain(const pm_runtime *rt, int cpu, pm_width width);
/* Slice boundaries: lower[i] is the smallest key routed to slice i
 * (lower[0] = 0). Writes n_slices values. */
void pm_runtime_slice_bounds(const pm_runtime *rt, uint64_t *lower);
/* Slice that owns key (binary search over boundaries). */
unsigned pm_runtime_slice_of(const pm_runtime *rt, uint64_t key);

/* Check a schedule against this runtime and machine without applying it:
 * slice count, the machine name (see pm_runtime_config.machine), then per
 * slice: node exists (-1 for os-* kinds), the width is one the kind allows,
 * the anchor core[i] is a usable, unreserved worker on node[i] (-1: shared
 * kinds, and width node, whose node must have a worker). Returns 0 or
 * -EINVAL with a message naming the first bad slice, e.g. "slice 17: core
 * 9 is on node 1 but the schedule says node 0". Thread-safe. */
int pm_runtime_check_schedule(const pm_runtime *rt, const pm_schedule *s, char *err,
                              size_t err_len);

/* Enforce a schedule, also while a workload runs: validate (as above; on
 * failure the old schedule keeps running), migrate every page of every slice
 * whose node changed, then swap routing atomically (RCU: queries already
 * queued finish where they are; none is lost or run twice). The schedule is
 * copied. report (may be NULL) receives the migration counts. Serialised
 * against other set_schedule/start/stop calls by an internal mutex.
 * Returns 0, -EINVAL, -ENOMEM. Pages move_pages could not move are counted
 * in *report, not an error. If mbind/move_pages itself fails for a slice
 * (-errno, message names the slice), the slices migrated before it stay
 * where they are now — pages cannot be un-moved atomically — and routing
 * stays on the old schedule. */
int pm_runtime_set_schedule(pm_runtime *rt, const pm_schedule *s,
                            pm_migration_report *report, char *err, size_t err_len);

/* Start routers (each with its own pm_workload stream), workers and sweepers.
 * Returns 0, -EBUSY (already running), -EINVAL (bad spec, message in err),
 * -ENOMEM, or the -errno of a probe open (nothing keeps running then). */
int pm_runtime_start(pm_runtime *rt, const pm_workload_spec *spec, char *err,
                     size_t err_len);

/* Query latency over an interval: the time from the moment a router put a
 * query into its worker's queue (after any wait for room) to the moment the
 * worker finished it, CLOCK_MONOTONIC, in nanoseconds. Routers keep every
 * queue near full, so under load this is mostly queueing delay (Little's
 * law: about queue fill / per-worker throughput).
 *
 * Percentiles come from per-worker histograms with 16 linear sub-buckets per
 * power of two: values below 32 ns are exact; above, a percentile is the
 * highest value of its bucket (never below the true percentile, at most
 * 6.25% above it), capped by max_ns. pXX is the smallest bucket value that
 * at least XX% of the interval's queries did not exceed. All fields are 0
 * when count is 0. */
typedef struct pm_latency_summary {
    uint64_t count;    /* queries completed in the interval */
    uint64_t p50_ns;
    uint64_t p90_ns;
    uint64_t p99_ns;
    uint64_t p999_ns;
    uint64_t max_ns;   /* exact (see pm_runtime_latency for the edge case) */
    double mean_ns;
} pm_latency_summary;

/* Totals of one run (start..stop). */
typedef struct pm_run_result {
    uint64_t dispatched;   /* queries routers handed to workers */
    uint64_t completed;    /* queries workers finished */
    double seconds;        /* start to the moment routers stopped */
    double throughput;     /* completed / seconds */
    pm_latency_summary latency; /* every query of this run (count == completed);
                                   independent of pm_runtime_latency readers */
    uint64_t batches;      /* slice batches run (one probe window each) */
    uint64_t full_batches; /* ... of them holding batch_queries queries */
    uint64_t probe_reads;  /* probe readings taken (0 without a probe) */
} pm_run_result;

/* Stop routers, let workers drain their queues (every dispatched query
 * completes), join all threads and do a final sweep. result (may be NULL)
 * receives the run's totals and latency summary; slice_queries (may be
 * NULL) receives n_slices per-slice completed-query counts of this run.
 * Returns 0 or -EINVAL if not running. */
int pm_runtime_stop(pm_runtime *rt, pm_run_result *result, uint64_t *slice_queries);

/* start + sleep(seconds) + stop. No lock is held while it sleeps, so other
 * threads may call pm_runtime_set_schedule, pm_runtime_snapshot and
 * pm_runtime_latency during the run (a serving loop: run in one thread,
 * control from another). */
int pm_runtime_run(pm_runtime *rt, const pm_workload_spec *spec, double seconds,
                   pm_run_result *result, uint64_t *slice_queries, char *err,
                   size_t err_len);

/* Stats per slice: own counts first ("queries", "nodes_visited",
 * "keys_scanned"), then the probe's values. Cumulative since create. */
unsigned pm_runtime_n_stats(const pm_runtime *rt);
const char *pm_runtime_stat_name(const pm_runtime *rt, unsigned i);

/* Copy the latest swept snapshot, n_slices x n_stats row-major, into values
 * (capacity cap entries). While running, waits for a sweep round that began
 * after the call. Thread-safe. Returns 0 or -ENOSPC if cap is too small. */
int pm_runtime_snapshot(pm_runtime *rt, uint64_t *values, size_t cap);

/* Off-core features of the uncore hook (0 without one) and their names
 * (NULL past the end). Cannot fail; thread-safe. */
unsigned pm_runtime_n_offcore_values(const pm_runtime *rt);
const char *pm_runtime_offcore_name(const pm_runtime *rt, unsigned i);

#define PM_OFFCORE_MSG_LEN 256

/* One swept snapshot: everything a call copies comes from the same sweep
 * round. The caller provides the buffers; the call writes the rest. */
typedef struct pm_snapshot {
    uint64_t *stats;     /* n_slices x n_stats row-major, as pm_runtime_snapshot */
    size_t stats_cap;    /* entries */
    int *node, *core;    /* n_slices each, or NULL: the schedule in force */
    double *offcore;     /* n_offcore_values x offcore_stride row-major, or
                            NULL: off-core values not wanted (shape still written) */
    size_t offcore_cap;  /* entries */
    /* written: off-core readings of the run in progress (bytes since it
     * started; between runs, the last run's). NAN = null. 0 nodes and 0
     * links: none — no uncore hook, no uncore PMU, no run yet, or the open
     * failed (then offcore_msg says why, else it is ""). */
    unsigned offcore_nodes, offcore_links;
    unsigned offcore_stride; /* max(offcore_nodes, offcore_links, 1) */
    char offcore_msg[PM_OFFCORE_MSG_LEN];
} pm_snapshot;

/* Copy the latest swept snapshot into *snap (buffers as above). While
 * running, waits for a sweep round that began after the call, like
 * pm_runtime_snapshot. Thread-safe. Returns 0, -EINVAL (snap or stats
 * NULL), or -ENOSPC when stats_cap or offcore_cap is too small — for
 * offcore_cap the shape is written, so the caller can size offcore and
 * retry; no buffer is written. */
int pm_runtime_snapshot_read(pm_runtime *rt, pm_snapshot *snap);

struct ArrowArray;
struct ArrowSchema;

/* The latest swept snapshot (as pm_runtime_snapshot_read) as two Arrow
 * record batches through the Arrow C Data Interface, built by the
 * collector's exporters:
 *   slices:  slice, core, node (int32; the schedule in force, -1 where the
 *            kind has none), queries (int64), then one nullable float64
 *            column per stat after "queries", cumulative since create, null
 *            where PM_STAT_UNAVAILABLE;
 *   offcore: one row per node then per link: scope ("node"|"link"), index,
 *            one nullable float64 column per collector off-core feature
 *            (bytes of the run in progress / the last run).
 * msg receives offcore_msg (why off-core readings are null, or "").
 * The caller owns the four outputs and must call their release callbacks
 * (pyarrow's importer does); on failure none needs releasing. Thread-safe.
 * Returns 0, -ENOMEM, or -EINVAL (the uncore hook is not the collector's
 * layout). Present in libpmoss when it is built with the collector. */
int pm_runtime_export_arrow(pm_runtime *rt, struct ArrowArray *slices,
                            struct ArrowSchema *slices_schema, struct ArrowArray *offcore,
                            struct ArrowSchema *offcore_schema, char *msg, size_t msg_len);

/* Latency of the queries completed since the previous pm_runtime_latency
 * call (reset-on-read; the first call covers everything since create),
 * merged over all workers, written to *out (caller-owned).
 *
 * Consecutive intervals partition the completed queries: each is counted in
 * exactly one call's count, so counts summed over calls equal the queries
 * completed. A query that completes while the call runs goes to this or the
 * next interval; its contribution to mean_ns may land in the other one, and
 * if it was the next interval's largest, that max_ns is reported at bucket
 * precision (the lowest value of its bucket) instead of exactly.
 *
 * Thread-safe, also while a workload runs and concurrently with
 * pm_runtime_set_schedule, start, stop, run and snapshot: it takes only its
 * own mutex (calls serialise against each other) and reads the workers'
 * histograms, which workers update without locks. It does not wait for a
 * sweep. Must not race with pm_runtime_destroy. pm_runtime_stop's
 * per-run summary is kept separately and is not reset by this call.
 * Returns 0, or -EINVAL if out is NULL. */
int pm_runtime_latency(pm_runtime *rt, pm_latency_summary *out);

/* Profile the following runs or not (default: on when the runtime has a
 * probe). Off, workers neither open nor read the probe: a run as on a runtime
 * created without one, on the same tree. What it is for: measuring what
 * profiling costs without a second tree (two trees of the same keys differ by
 * their memory alone by more than profiling costs: bench_collector's A/A
 * control). The slice table keeps its probe columns; an unprofiled run adds
 * no readings to them. Control thread only. Returns 0, -EINVAL (rt NULL, or
 * on for a runtime without a probe) or -EBUSY (a workload is running). */
int pm_runtime_set_profiling(pm_runtime *rt, int on);

/* The probe period of the following runs (probe_period_us of
 * pm_runtime_config; PM_PROBE_PERIOD_AUTO: the default), so that periods are
 * compared on one tree, as set_profiling compares on and off. Control thread
 * only. Returns 0, -EINVAL (rt NULL, or a runtime without a probe) or -EBUSY
 * (a workload is running). */
int pm_runtime_set_probe_period(pm_runtime *rt, unsigned period_us);

/* Direct single-query access from the calling thread (tests, tools); routed
 * to the owning slice's tree. Same semantics as the pm_tree calls. A scan
 * continues across slices. Thread-safe. */
int pm_runtime_lookup(pm_runtime *rt, uint64_t key, uint64_t *value);
int pm_runtime_insert(pm_runtime *rt, uint64_t key, uint64_t value);
int pm_runtime_scan(pm_runtime *rt, uint64_t start, size_t max, uint64_t *keys,
                    uint64_t *values, size_t *n_out);

/* Pages of slice i per NUMA node (counts[n] += pages on node n). */
int pm_runtime_slice_page_nodes(pm_runtime *rt, unsigned slice, uint64_t *counts,
                                int n_counts);

/* Total keys over all slices (exact when nothing inserts concurrently). */
uint64_t pm_runtime_n_keys(pm_runtime *rt);

#ifdef __cplusplus
}
#endif
#endif /* PMOSS_RUNTIME_H */
