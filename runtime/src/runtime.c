/* The runtime: slices over per-slice trees, pinned router / worker / sweeper
 * threads, schedule enforcement (validate -> migrate -> swap routing) and
 * per-slice stats.
 *
 * Thread roles. Routers generate queries (one pm_workload stream each), find
 * the slice by binary search over the boundaries and push each query into
 * one worker's bounded queue, waiting while it is full: the slice's one
 * worker, the least loaded member of its execution group, or any worker
 * (round robin) for shared kinds. Workers pop queued
 * queries into per-slice pending batches (pending.c, FCFS within a slice)
 * and run a slice's batch once it holds batch_queries queries, or earlier
 * when its oldest query waited batch_max_wait_us, as soon as the queue is
 * empty (work-conserving) or when the run stops. Due batches run back to
 * back; a sampled few run between two probe readings (a slice's first
 * batch, then one per probe_period_us), counting per slice. Routers keep
 * every queue full (closed loop) or send spec.offered_qps (open loop). Core sweepers (one per node) sum their
 * node's worker tables; the off-core sweeper drives the sweep rounds, reads
 * the uncore PMUs (memory controllers, socket links) through the uncore hook
 * and publishes both as one snapshot. On hosts too small to reserve CPUs, routers and sweepers run
 * unpinned and every CPU runs a worker.
 *
 * Routing swaps are RCU-style: routers read the routing table inside an
 * epoch section; pm_runtime_set_schedule swaps the pointer and frees the old
 * table after a grace period. Queries already queued run where they were
 * sent — every tree is safe for any thread — so none is lost or repeated.
 *
 * Latency. Routers stamp each query with CLOCK_MONOTONIC when it enters a
 * worker queue (the stamp travels in the queue cell); the worker records
 * completion - stamp into its own histogram without locks (latency.c,
 * internal.h). Readers difference the histograms against their cursors:
 * pm_runtime_latency keeps one cursor set (reset-on-read intervals), start
 * and stop another (the per-run summary), so the two never disturb each
 * other. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <numa.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

/* profiled_queries: the queries that ran inside probe windows (sampled
 * attribution, probe_period_us): a slice's counter total / profiled_queries
 * is its exact per-query rate over the windows; 0 without a probe. */
#define N_OWN_STATS 4
static const char *const own_stat_names[N_OWN_STATS] = {"queries", "nodes_visited", "keys_scanned",
                                                        "profiled_queries"};
#define PM_PROBE_MAX_VALUES 64
#define PM_UNCORE_MAX_VALUES 16
#define ROUTE_BATCH 64       /* queries routed per epoch section */
#define SWEEP_PERIOD_NS 5000000L
/* Pending pool cap per worker (entries of ~40 bytes): n_slices *
 * batch_queries never collides with it at the defaults (256 x 100); above
 * it, a full pool runs its oldest slice's partial batch. */
#define PENDING_MAX 65536u
/* Drain stops once this many batches are due, so one run of batches
 * (one reading per batch + 1) stays short enough to keep expiry timely. */
#define DUE_MAX 32u
/* idle_wait phases, in consecutive empty polls: spin, then yield the CPU,
 * then sleep. A worker enters them only with nothing pending (it runs its
 * partial batches as soon as its queue is empty). */
#define IDLE_SPINS 64u
#define IDLE_YIELDS 2048u

/* Where a slice's queries go: n 0: any worker (shared kinds, round robin);
 * n 1: the worker whose index is `first` (no choice, no member list read);
 * n > 1: members[first .. first + n), the slice's execution group. */
typedef struct route {
    uint32_t first, n;
} route;

/* Up to this many members of a group are compared per query (all of them in
 * groups this small): the cost of a choice stays bounded in node-wide
 * groups, and the rotating start spreads the comparisons over all members. */
#define GROUP_PROBES 4u

typedef struct routing {
    route *slice;      /* [n_slices] */
    uint32_t *members; /* worker indexes of every group, groups back to back */
} routing;

typedef struct worker {
    int cpu, node;
    unsigned idx;
    pm_queue q;
    uint64_t q_base;             /* queue pushes before this run (set before it starts) */
    _Atomic uint64_t *stats;     /* [slice][stat], written only by this worker */
    _Atomic uint64_t completed;  /* written only by this worker; routers read it (load) */
    /* this run's batches, full batches and probe reads: plain, written only
     * by this worker and read after it is joined */
    uint64_t batches, full_batches, probe_reads;
    pm_lat_hist *lat;            /* query latencies, written only by this worker */
    uint64_t *scan_buf;
    pm_pending pend;             /* per-slice batches, allocated per run */
    pthread_t th;
    int probe_rc;
    void *probe_state_ptr;
    struct pm_runtime *rt;
} worker;

typedef struct router {
    int cpu, node;
    unsigned idx;
    pm_workload *w;
    pm_rng rng;
    uint64_t rr;
    _Atomic uint64_t dispatched;
    _Atomic int failed;
    pthread_t th;
    struct pm_runtime *rt;
} router;

typedef struct sweeper {
    int cpu, node; /* node -1: the off-core sweeper */
    _Atomic uint64_t ack;
    _Atomic uint64_t *partial; /* core sweepers: their node's sums */
    pthread_t th;
    struct pm_runtime *rt;
} sweeper;

struct pm_runtime {
    pm_runtime_config cfg;
    pm_probe_ops probe;
    bool has_probe;
    bool profile_runs;             /* runs open and read the probe (has_probe, unless
                                      pm_runtime_set_profiling turned it off) */
    pm_topology topo;
    bool shared_cpus;
    char machine[128];             /* cfg.machine, copied; "" unknown */
    _Atomic int machine_warned;    /* the unknown-host warning was printed */

    unsigned n_slices;
    uint64_t *lower;       /* slice i holds keys in [lower[i], lower[i+1]) */
    uint64_t *slice_keys;  /* keys per slice at load (scan span estimate) */
    pm_tree **trees;
    int *slice_policy;     /* current arena policy per slice */
    uint64_t *keys;        /* loaded keys, sorted: the generators' key space */
    char dataset[32];
    uint64_t n_loaded;

    unsigned n_workers;
    worker *workers;
    int *cpu_worker;             /* CPU id -> worker index or -1 */
    unsigned **node_workers;     /* per node: worker indexes */
    unsigned *node_n_workers;
    unsigned n_routers;
    router *routers;
    sweeper *sweepers;           /* n_nodes core sweepers, then the off-core one */

    _Atomic(routing *) routing;
    pm_epoch epoch;
    pm_schedule *current;
    pthread_mutex_t ctl;

    unsigned n_stats;
    const char **stat_names;

    bool running;
    _Atomic int routers_go, workers_stop, sweep_stop, workers_ready;
    _Atomic uint64_t sweep_gen;
    pm_workload_spec spec;
    unsigned scan_max;
    double t_start, t_stop;
    uint64_t *run_base;

    pthread_mutex_t snap_lock;  /* guards published*, oc_pub*, current's pointer for readers */
    pthread_cond_t snap_cond;
    uint64_t *published;
    uint64_t published_round;

    /* Off-core readings. The oc_run fields belong to the off-core sweeper
     * thread while a run is on (the control thread reads them only after
     * joining it); oc_pub* are what snapshots copy. */
    pm_uncore_ops uncore;
    bool has_uncore;
    _Atomic int oc_ready;          /* the sweeper tried its open for this run */
    struct {
        void *state;               /* NULL: nothing open */
        unsigned nodes, links, stride;
        double *values;            /* [n_values * stride], latest reading */
        size_t cap;
        char msg[PM_OFFCORE_MSG_LEN];
    } oc_run;
    double *oc_pub;                /* snap_lock */
    size_t oc_pub_cap;
    unsigned oc_pub_nodes, oc_pub_links, oc_pub_stride;
    char oc_pub_msg[PM_OFFCORE_MSG_LEN];

    pthread_mutex_t lat_lock;  /* serialises pm_runtime_latency callers */
    pm_lat_cursor *lat_read;   /* per worker: what pm_runtime_latency last saw (lat_lock) */
    pm_lat_cursor *lat_run;    /* per worker: counts at the run's start (ctl) */
};

/* ------------------------------------------------------------ topology */

static int discover_topology(pm_runtime *rt, char *err, size_t err_len)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) {
        pm_errf(err, err_len, "sched_getaffinity failed");
        return -errno;
    }
    int n_cpus = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set))
            n_cpus = c + 1;
    pm_topology *t = &rt->topo;
    t->n_cpus = n_cpus;
    t->n_nodes = pm_numa_nodes();
    t->cpu_node = calloc((size_t)n_cpus, sizeof *t->cpu_node);
    t->cpu_role = calloc((size_t)n_cpus, 1);
    if (!t->cpu_node || !t->cpu_role || pm_topology_read_domains(t, rt->cfg.sysfs_root))
        return -ENOMEM;
    t->machine = rt->machine;
    bool numa = numa_available() >= 0;
    for (int c = 0; c < n_cpus; c++) {
        if (!CPU_ISSET(c, &set))
            continue;
        int node = numa ? numa_node_of_cpu(c) : 0;
        t->cpu_node[c] = node >= 0 && node < t->n_nodes ? node : 0;
        t->cpu_role[c] = PM_CPU_WORKER;
    }
    /* Reserve routers and one sweeper per node unless the host is too small
     * (a node would keep fewer than 2 workers): then every CPU is a worker
     * and routers/sweepers float. */
    unsigned reserve = rt->cfg.routers_per_node + 1;
    bool share = rt->cfg.share_cpus == 1;
    if (rt->cfg.share_cpus == -1) {
        for (int n = 0; n < t->n_nodes; n++) {
            unsigned cpus = 0;
            for (int c = 0; c < n_cpus; c++)
                cpus += t->cpu_role[c] && t->cpu_node[c] == n;
            if (cpus > 0 && cpus < reserve + 2)
                share = true;
        }
    }
    rt->shared_cpus = share;
    if (!share) {
        for (int n = 0; n < t->n_nodes; n++) {
            unsigned taken = 0;
            for (int c = 0; c < n_cpus && taken < reserve; c++) {
                if (t->cpu_role[c] == PM_CPU_WORKER && t->cpu_node[c] == n) {
                    t->cpu_role[c] = taken < rt->cfg.routers_per_node ? PM_CPU_ROUTER : PM_CPU_SWEEPER;
                    taken++;
                }
            }
        }
    }
    unsigned workers = 0;
    for (int c = 0; c < n_cpus; c++) {
        if (t->cpu_role[c] != PM_CPU_WORKER)
            continue;
        if (rt->cfg.max_workers && workers == rt->cfg.max_workers)
            t->cpu_role[c] = PM_CPU_ABSENT;
        else
            workers++;
    }
    if (workers == 0) {
        pm_errf(err, err_len, "no CPU left for workers");
        return -EINVAL;
    }
    return 0;
}

/* Reserved CPU of a role on a node, or -1 (floating). */
static int reserved_cpu(const pm_runtime *rt, int node, pm_cpu_role role, unsigned nth)
{
    for (int c = 0; c < rt->topo.n_cpus; c++)
        if (rt->topo.cpu_role[c] == role && rt->topo.cpu_node[c] == node && nth-- == 0)
            return c;
    return -1;
}

static int setup_threads(pm_runtime *rt)
{
    const pm_topology *t = &rt->topo;
    rt->cpu_worker = malloc((size_t)t->n_cpus * sizeof *rt->cpu_worker);
    rt->node_workers = calloc((size_t)t->n_nodes, sizeof *rt->node_workers);
    rt->node_n_workers = calloc((size_t)t->n_nodes, sizeof *rt->node_n_workers);
    if (!rt->cpu_worker || !rt->node_workers || !rt->node_n_workers)
        return -ENOMEM;
    for (int c = 0; c < t->n_cpus; c++) {
        rt->cpu_worker[c] = -1;
        if (t->cpu_role[c] == PM_CPU_WORKER)
            rt->cpu_worker[c] = (int)rt->n_workers++;
    }
    rt->workers = calloc(rt->n_workers, sizeof *rt->workers);
    rt->lat_read = calloc(rt->n_workers, sizeof *rt->lat_read);
    rt->lat_run = calloc(rt->n_workers, sizeof *rt->lat_run);
    if (!rt->workers || !rt->lat_read || !rt->lat_run)
        return -ENOMEM;
    for (int n = 0; n < t->n_nodes; n++) {
        rt->node_workers[n] = malloc((rt->n_workers + 1) * sizeof **rt->node_workers);
        if (!rt->node_workers[n])
            return -ENOMEM;
    }
    size_t table = (size_t)rt->n_slices * rt->n_stats;
    for (int c = 0; c < t->n_cpus; c++) {
        if (rt->cpu_worker[c] < 0)
            continue;
        worker *w = &rt->workers[rt->cpu_worker[c]];
        w->cpu = c;
        w->node = t->cpu_node[c];
        w->idx = (unsigned)rt->cpu_worker[c];
        w->rt = rt;
        w->stats = calloc(table, sizeof *w->stats);
        /* own cache lines: only this worker writes them */
        w->lat = aligned_alloc(PM_CACHE_LINE, sizeof *w->lat);
        if (!w->stats || !w->lat)
            return -ENOMEM;
        memset(w->lat, 0, sizeof *w->lat);
        int rc = pm_queue_init(&w->q, rt->cfg.queue_capacity);
        if (rc)
            return rc;
        rt->node_workers[w->node][rt->node_n_workers[w->node]++] = w->idx;
    }
    /* Routers: routers_per_node on every node that has CPUs. */
    unsigned nodes_with_cpus = 0;
    for (int n = 0; n < t->n_nodes; n++) {
        bool any = false;
        for (int c = 0; c < t->n_cpus && !any; c++)
            any = t->cpu_role[c] != PM_CPU_ABSENT && t->cpu_node[c] == n;
        nodes_with_cpus += any;
    }
    rt->n_routers = rt->cfg.routers_per_node * (nodes_with_cpus ? nodes_with_cpus : 1);
    rt->routers = calloc(rt->n_routers, sizeof *rt->routers);
    rt->sweepers = calloc((size_t)t->n_nodes + 1, sizeof *rt->sweepers);
    if (!rt->routers || !rt->sweepers)
        return -ENOMEM;
    unsigned r = 0;
    for (int n = 0; n < t->n_nodes && r < rt->n_routers; n++) {
        if (!rt->node_n_workers[n] && nodes_with_cpus)
            continue;
        for (unsigned k = 0; k < rt->cfg.routers_per_node; k++, r++) {
            rt->routers[r] = (router){.cpu = reserved_cpu(rt, n, PM_CPU_ROUTER, k), .node = n,
                                      .idx = r, .rt = rt};
        }
    }
    rt->n_routers = r;
    for (int n = 0; n <= t->n_nodes; n++) {
        sweeper *s = &rt->sweepers[n];
        s->node = n < t->n_nodes ? n : -1;
        /* the off-core sweeper shares node 0's sweeper CPU */
        s->cpu = reserved_cpu(rt, n < t->n_nodes ? n : 0, PM_CPU_SWEEPER, 0);
        s->rt = rt;
        if (s->node >= 0) {
            s->partial = calloc(table, sizeof *s->partial);
            if (!s->partial)
                return -ENOMEM;
        }
    }
    return pm_epoch_init(&rt->epoch, rt->n_routers);
}

/* --------------------------------------------------------------- slices */

unsigned pm_runtime_slice_of(const pm_runtime *rt, uint64_t key)
{
    /* largest i with lower[i] <= key; lower[0] == 0 */
    unsigned lo = 0, hi = rt->n_slices;
    while (hi - lo > 1) {
        unsigned mid = (lo + hi) / 2;
        if (rt->lower[mid] <= key)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static int load_slices(pm_runtime *rt)
{
    unsigned n = rt->n_slices;
    uint64_t k = rt->n_loaded;
    const uint64_t *keys = rt->keys;
    rt->lower[0] = 0;
    for (unsigned i = 1; i < n; i++) {
        if (rt->cfg.boundaries == PM_BOUNDARIES_EQUAL_WIDTH) {
            unsigned __int128 span = keys[k - 1] - keys[0];
            rt->lower[i] = keys[0] + (uint64_t)(span * i / n) + 1;
        } else {
            rt->lower[i] = keys[(uint64_t)((unsigned __int128)k * i / n)];
        }
        if (rt->lower[i] < rt->lower[i - 1])
            rt->lower[i] = rt->lower[i - 1];
    }
    uint64_t at = 0;
    for (unsigned i = 0; i < n; i++) {
        uint64_t end = at;
        while (end < k && (i + 1 == n || keys[end] < rt->lower[i + 1]))
            end++;
        int rc = pm_tree_create(rt->cfg.leaf_capacity, PM_ARENA_OS_DEFAULT, &rt->trees[i]);
        if (rc == 0)
            rc = pm_tree_bulk_load(rt->trees[i], keys + at, NULL, end - at, 100);
        if (rc)
            return rc;
        rt->slice_keys[i] = end - at;
        rt->slice_policy[i] = PM_ARENA_OS_DEFAULT;
        at = end;
    }
    return 0;
}

/* --------------------------------------------------------------- create */

void pm_runtime_config_init(pm_runtime_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->n_keys = 1000000;
    cfg->dataset = "dense";
    cfg->seed = 1;
    cfg->n_slices = 256;
    cfg->boundaries = PM_BOUNDARIES_EQUAL_COUNT;
    cfg->leaf_capacity = PM_LEAF_CAPACITY_MAX;
    cfg->batch_queries = 100;
    cfg->batch_max_wait_us = PM_BATCH_MAX_WAIT_AUTO;
    cfg->probe_period_us = PM_PROBE_PERIOD_AUTO;
    cfg->queue_capacity = 1024;
    cfg->routers_per_node = 1;
    cfg->share_cpus = -1;
}

static void free_routing(routing *r)
{
    if (r) {
        free(r->slice);
        free(r->members);
        free(r);
    }
}

/* Append the group of (anchor, width) cut to node — workers in index order —
 * to r->members (room for n_workers more entries is there) and return its
 * route. core -1 (width node) needs no anchor. */
static route add_group(const pm_runtime *rt, routing *r, size_t *used, int node, int core,
                       pm_width width)
{
    const pm_topology *t = &rt->topo;
    if (width == PM_WIDTH_THREAD)
        return (route){(uint32_t)rt->cpu_worker[core], 1};
    int dom = core >= 0 ? pm_topology_domain(t, core, width) : -1;
    route g = {(uint32_t)*used, 0};
    for (unsigned k = 0; k < rt->node_n_workers[node]; k++) {
        unsigned w = rt->node_workers[node][k];
        if (width == PM_WIDTH_NODE || pm_topology_domain(t, rt->workers[w].cpu, width) == dom)
            r->members[g.first + g.n++] = w;
    }
    *used += g.n;
    return g.n == 1 ? (route){r->members[g.first], 1} : g;
}

/* The routing table of a validated schedule. Groups are built once per
 * (width, anchor) — or per node for anchorless width node — and shared by
 * every slice that names them, so the member list stays within
 * (3 x n_cpus + n_nodes) groups whatever n_slices is. */
static int build_routing(const pm_runtime *rt, const pm_schedule *s, routing **out)
{
    const pm_topology *t = &rt->topo;
    size_t n_keys = 3 * (size_t)t->n_cpus + (size_t)t->n_nodes, used = 0, cap = rt->n_workers;
    routing *r = calloc(1, sizeof *r);
    route *memo = malloc(n_keys * sizeof *memo);
    int rc = r && memo ? 0 : -ENOMEM;
    if (rc == 0) {
        r->slice = malloc(rt->n_slices * sizeof *r->slice);
        r->members = malloc(cap * sizeof *r->members);
        rc = r->slice && r->members ? 0 : -ENOMEM;
    }
    for (size_t k = 0; rc == 0 && k < n_keys; k++)
        memo[k].n = UINT32_MAX; /* not built yet */
    const int *node = pm_schedule_nodes(s), *core = pm_schedule_cores(s);
    const uint8_t *width = pm_schedule_widths(s);
    for (unsigned i = 0; rc == 0 && i < rt->n_slices; i++) {
        pm_width w = (pm_width)width[i];
        if (w == PM_WIDTH_NONE) {
            r->slice[i] = (route){0, 0};
            continue;
        }
        /* width node: one group per node, whatever the anchor (or none) */
        size_t key = w == PM_WIDTH_NODE ? 3 * (size_t)t->n_cpus + (size_t)node[i]
                                        : (size_t)w * (size_t)t->n_cpus + (size_t)core[i];
        if (memo[key].n == UINT32_MAX) {
            if (used + rt->n_workers > cap) {
                uint32_t *m = realloc(r->members, 2 * cap * sizeof *m);
                if (!m) {
                    rc = -ENOMEM;
                    break;
                }
                r->members = m;
                cap *= 2;
            }
            memo[key] = add_group(rt, r, &used, node[i], core[i], w);
        }
        r->slice[i] = memo[key];
    }
    free(memo);
    if (rc) {
        free_routing(r);
        return rc;
    }
    *out = r;
    return 0;
}

int pm_runtime_create(const pm_runtime_config *cfg, pm_runtime **out, char *err, size_t err_len)
{
    if (cfg->n_keys == 0 || cfg->n_slices == 0 || cfg->n_slices > (1u << 20) ||
        cfg->batch_queries == 0 || cfg->routers_per_node == 0 || cfg->queue_capacity < 2 ||
        (cfg->queue_capacity & (cfg->queue_capacity - 1)) ||
        (cfg->boundaries != PM_BOUNDARIES_EQUAL_COUNT && cfg->boundaries != PM_BOUNDARIES_EQUAL_WIDTH) ||
        (cfg->probe && (!cfg->probe->open || !cfg->probe->read || !cfg->probe->close ||
                        cfg->probe->n_values <= 0 || cfg->probe->n_values > PM_PROBE_MAX_VALUES ||
                        !cfg->probe->names)) ||
        (cfg->uncore && (!cfg->uncore->open || !cfg->uncore->read || !cfg->uncore->close ||
                         cfg->uncore->n_values <= 0 || cfg->uncore->n_values > PM_UNCORE_MAX_VALUES ||
                         !cfg->uncore->names))) {
        pm_errf(err, err_len,
                "bad runtime config (need n_keys > 0, 0 < n_slices <= 2^20, batch_queries > 0, "
                "routers_per_node > 0, queue_capacity a power of two, complete probe and uncore ops)");
        return -EINVAL;
    }
    pm_runtime *rt = calloc(1, sizeof *rt);
    if (!rt)
        return -ENOMEM;
    rt->cfg = *cfg;
    rt->cfg.probe = NULL;
    if (cfg->probe) {
        rt->probe = *cfg->probe;
        rt->has_probe = rt->profile_runs = true;
    }
    rt->cfg.uncore = NULL;
    if (cfg->uncore) {
        rt->uncore = *cfg->uncore;
        rt->has_uncore = true;
    }
    rt->n_slices = cfg->n_slices;
    rt->n_stats = N_OWN_STATS + (rt->has_probe ? (unsigned)rt->probe.n_values : 0);
    pthread_mutex_init(&rt->ctl, NULL);
    pthread_mutex_init(&rt->snap_lock, NULL);
    pthread_cond_init(&rt->snap_cond, NULL);
    pthread_mutex_init(&rt->lat_lock, NULL);
    snprintf(rt->machine, sizeof rt->machine, "%s", cfg->machine ? cfg->machine : "");
    int rc = discover_topology(rt, err, err_len);
    size_t table = (size_t)rt->n_slices * rt->n_stats;
    if (rc == 0) {
        rt->stat_names = malloc(rt->n_stats * sizeof *rt->stat_names);
        rt->lower = malloc(rt->n_slices * sizeof *rt->lower);
        rt->slice_keys = malloc(rt->n_slices * sizeof *rt->slice_keys);
        rt->trees = calloc(rt->n_slices, sizeof *rt->trees);
        rt->slice_policy = malloc(rt->n_slices * sizeof *rt->slice_policy);
        rt->keys = malloc(cfg->n_keys * sizeof *rt->keys);
        rt->published = calloc(table, sizeof *rt->published);
        rt->run_base = calloc(rt->n_slices, sizeof *rt->run_base);
        if (!rt->stat_names || !rt->lower || !rt->slice_keys || !rt->trees || !rt->slice_policy ||
            !rt->keys || !rt->published || !rt->run_base)
            rc = -ENOMEM;
    }
    if (rc == 0) {
        for (unsigned i = 0; i < rt->n_stats; i++)
            rt->stat_names[i] = i < N_OWN_STATS ? own_stat_names[i] : rt->probe.names[i - N_OWN_STATS];
        rt->n_loaded = cfg->n_keys;
        snprintf(rt->dataset, sizeof rt->dataset, "%s", cfg->dataset ? cfg->dataset : "");
        rc = pm_dataset_generate(cfg->dataset, cfg->n_keys, cfg->seed, rt->keys);
        if (rc == -EINVAL)
            pm_errf(err, err_len, "unknown dataset \"%s\"", cfg->dataset ? cfg->dataset : "(null)");
    }
    if (rc == 0)
        rc = setup_threads(rt);
    if (rc == 0)
        rc = load_slices(rt);
    if (rc == 0) {
        int *minus = malloc(rt->n_slices * sizeof *minus);
        if (!minus) {
            rc = -ENOMEM;
        } else {
            for (unsigned i = 0; i < rt->n_slices; i++)
                minus[i] = -1;
            rc = pm_schedule_create(PM_KIND_OS_DEFAULT, rt->n_slices, minus, minus, NULL,
                                    &rt->current);
            free(minus);
        }
    }
    routing *r = NULL;
    if (rc == 0)
        rc = build_routing(rt, rt->current, &r);
    if (rc != 0) {
        if (rc == -ENOMEM)
            pm_errf(err, err_len, "out of memory");
        pm_runtime_destroy(rt);
        return rc;
    }
    atomic_init(&rt->routing, r);
    /* borrowed strings: not kept */
    rt->cfg.dataset = rt->cfg.machine = rt->cfg.sysfs_root = NULL;
    *out = rt;
    return 0;
}

void pm_runtime_destroy(pm_runtime *rt)
{
    if (!rt)
        return;
    if (rt->running)
        pm_runtime_stop(rt, NULL, NULL);
    free_routing(atomic_load(&rt->routing));
    pm_schedule_destroy(rt->current);
    if (rt->epoch.slots)
        pm_epoch_fini(&rt->epoch);
    for (unsigned i = 0; rt->trees && i < rt->n_slices; i++)
        pm_tree_destroy(rt->trees[i]);
    for (unsigned i = 0; rt->workers && i < rt->n_workers; i++) {
        free(rt->workers[i].stats);
        free(rt->workers[i].lat);
        if (rt->workers[i].q.cells)
            pm_queue_fini(&rt->workers[i].q);
    }
    for (int n = 0; rt->sweepers && n <= rt->topo.n_nodes; n++)
        free(rt->sweepers[n].partial);
    for (int n = 0; rt->node_workers && n < rt->topo.n_nodes; n++)
        free(rt->node_workers[n]);
    free(rt->node_workers);
    free(rt->node_n_workers);
    free(rt->cpu_worker);
    free(rt->workers);
    free(rt->lat_read);
    free(rt->lat_run);
    free(rt->routers);
    free(rt->sweepers);
    free(rt->trees);
    free(rt->lower);
    free(rt->slice_keys);
    free(rt->slice_policy);
    free(rt->keys);
    free(rt->published);
    free(rt->oc_run.values);
    free(rt->oc_pub);
    free(rt->run_base);
    free(rt->stat_names);
    free(rt->topo.cpu_node);
    free(rt->topo.cpu_role);
    free(rt->topo.cpu_core);
    free(rt->topo.cpu_l3);
    pthread_mutex_destroy(&rt->ctl);
    pthread_mutex_destroy(&rt->snap_lock);
    pthread_cond_destroy(&rt->snap_cond);
    pthread_mutex_destroy(&rt->lat_lock);
    free(rt);
}

/* ------------------------------------------------------------- accessors */

unsigned pm_runtime_n_slices(const pm_runtime *rt) { return rt->n_slices; }
int pm_runtime_n_nodes(const pm_runtime *rt) { return rt->topo.n_nodes; }
unsigned pm_runtime_n_stats(const pm_runtime *rt) { return rt->n_stats; }

const char *pm_runtime_stat_name(const pm_runtime *rt, unsigned i)
{
    return i < rt->n_stats ? rt->stat_names[i] : NULL;
}

unsigned pm_runtime_worker_cpus(const pm_runtime *rt, int *cpus, unsigned cap)
{
    for (unsigned i = 0; i < rt->n_workers && i < cap; i++)
        cpus[i] = rt->workers[i].cpu;
    return rt->n_workers;
}

int pm_runtime_cpu_node(const pm_runtime *rt, int cpu)
{
    if (cpu < 0 || cpu >= rt->topo.n_cpus || rt->topo.cpu_role[cpu] == PM_CPU_ABSENT)
        return -1;
    return rt->topo.cpu_node[cpu];
}

int pm_runtime_cpu_domain(const pm_runtime *rt, int cpu, pm_width width)
{
    if (pm_runtime_cpu_node(rt, cpu) < 0 || (unsigned)width >= PM_WIDTH_NONE)
        return -1;
    return pm_topology_domain(&rt->topo, cpu, width);
}

void pm_runtime_slice_bounds(const pm_runtime *rt, uint64_t *lower)
{
    memcpy(lower, rt->lower, rt->n_slices * sizeof *lower);
}

/* ------------------------------------------------------- direct queries */

int pm_runtime_lookup(pm_runtime *rt, uint64_t key, uint64_t *value)
{
    return pm_tree_lookup(rt->trees[pm_runtime_slice_of(rt, key)], key, value, NULL);
}

int pm_runtime_insert(pm_runtime *rt, uint64_t key, uint64_t value)
{
    return pm_tree_insert(rt->trees[pm_runtime_slice_of(rt, key)], key, value, NULL, NULL);
}

/* Scan from start across slice trees until max entries are copied. */
static size_t scan_slices(pm_runtime *rt, uint64_t start, size_t max, uint64_t *keys,
                          uint64_t *values, pm_op_stats *st)
{
    size_t n = 0;
    for (unsigned s = pm_runtime_slice_of(rt, start); s < rt->n_slices && n < max; s++) {
        size_t got;
        uint64_t from = s == pm_runtime_slice_of(rt, start) ? start : rt->lower[s];
        pm_tree_scan(rt->trees[s], from, max - n, keys ? keys + n : NULL,
                     values ? values + n : NULL, &got, st);
        n += got;
    }
    return n;
}

int pm_runtime_scan(pm_runtime *rt, uint64_t start, size_t max, uint64_t *keys,
                    uint64_t *values, size_t *n_out)
{
    *n_out = scan_slices(rt, start, max, keys, values, NULL);
    return 0;
}

int pm_runtime_slice_page_nodes(pm_runtime *rt, unsigned slice, uint64_t *counts, int n_counts)
{
    if (slice >= rt->n_slices)
        return -EINVAL;
    return pm_tree_page_nodes(rt->trees[slice], counts, n_counts);
}

uint64_t pm_runtime_n_keys(pm_runtime *rt)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < rt->n_slices; i++)
        n += pm_tree_size(rt->trees[i]);
    return n;
}

/* -------------------------------------------------------------- schedule */

int pm_runtime_check_schedule(const pm_runtime *rt, const pm_schedule *s, char *err,
                              size_t err_len)
{
    int rc = pm_schedule_validate(s, rt->n_slices, &rt->topo, err, err_len);
    /* a known host name is checked by validate; an unknown one cannot be,
     * which is worth saying once (not per schedule: a serving loop swaps
     * often). The flag is the only state a check touches: an atomic, so
     * the call stays const and thread-safe. */
    if (rc == 0 && !rt->machine[0] && pm_schedule_machine(s)[0] &&
        !atomic_exchange_explicit(&((pm_runtime *)rt)->machine_warned, 1, memory_order_relaxed))
        fprintf(stderr,
                "pmoss runtime: warning: schedule for machine \"%s\" accepted without checking the "
                "machine (this host's name is unknown: set pm_runtime_config.machine or "
                "--machine)\n",
                pm_schedule_machine(s));
    return rc;
}

static int policy_of(const pm_schedule *s, unsigned i)
{
    switch (pm_schedule_kind_of(s)) {
    case PM_KIND_OS_DEFAULT:
        return PM_ARENA_OS_DEFAULT;
    case PM_KIND_OS_INTERLEAVE:
        return PM_ARENA_INTERLEAVE;
    default:
        return pm_schedule_nodes(s)[i];
    }
}

int pm_runtime_set_schedule(pm_runtime *rt, const pm_schedule *s, pm_migration_report *report,
                            char *err, size_t err_len)
{
    pm_migration_report rep;
    memset(&rep, 0, sizeof rep);
    pthread_mutex_lock(&rt->ctl);
    int rc = pm_runtime_check_schedule(rt, s, err, err_len);
    routing *r = NULL;
    pm_schedule *copy = NULL;
    if (rc == 0)
        rc = build_routing(rt, s, &r);
    if (rc == 0)
        rc = pm_schedule_create_groups(pm_schedule_kind_of(s), rt->n_slices, pm_schedule_nodes(s),
                                       pm_schedule_cores(s), pm_schedule_widths(s),
                                       pm_schedule_machine(s), &copy);
    if (rc == -ENOMEM)
        pm_errf(err, err_len, "out of memory");
    /* Migrate: a slice moves when its placement policy changes. */
    for (unsigned i = 0; rc == 0 && i < rt->n_slices; i++) {
        int policy = policy_of(s, i);
        if (policy == rt->slice_policy[i])
            continue;
        rc = pm_tree_migrate(rt->trees[i], policy, &rep);
        if (rc) {
            pm_errf(err, err_len, "slice %u: migration to node %d failed: %s", i, policy,
                    strerror(-rc));
            break;
        }
        rt->slice_policy[i] = policy;
        rep.slices_moved++;
    }
    if (rc == 0) {
        /* seq_cst exchange: ordered before the epoch scan (see epoch.c) */
        routing *old = atomic_exchange(&rt->routing, r);
        pm_epoch_synchronize(&rt->epoch);
        free_routing(old);
        /* snap_lock: snapshot readers copy the placement without taking ctl
         * (which a migration holds for long) */
        pthread_mutex_lock(&rt->snap_lock);
        pm_schedule *prev = rt->current;
        rt->current = copy;
        pthread_mutex_unlock(&rt->snap_lock);
        pm_schedule_destroy(prev);
    } else {
        free_routing(r);
        pm_schedule_destroy(copy);
    }
    pthread_mutex_unlock(&rt->ctl);
    if (report)
        *report = rep;
    return rc;
}

/* --------------------------------------------------------------- threads */

static void pin_self(int cpu)
{
    if (cpu < 0)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void nap(long ns)
{
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

/* Idle policy shared by every waiting loop: spin briefly, then yield the CPU
 * (roles may share CPUs on small hosts), then sleep. */
static void idle_wait(unsigned *spins)
{
    ++*spins;
    if (*spins < IDLE_SPINS)
        return;
    if (*spins < IDLE_YIELDS)
        sched_yield();
    else
        nap(20000);
}

/* Slices a scan of len keys from key may reach, estimated from the slice's
 * key count and the key's position in its range (the router cannot know the
 * exact end without running the scan). */
static unsigned scan_last_slice(const pm_runtime *rt, unsigned s, uint64_t key, uint64_t len)
{
    while (s + 1 < rt->n_slices) {
        uint64_t lo = rt->lower[s], hi = rt->lower[s + 1];
        double frac = hi > lo ? (double)(hi - key) / (double)(hi - lo) : 0;
        uint64_t left = (uint64_t)(frac * (double)rt->slice_keys[s]);
        if (left >= len)
            break;
        len -= left;
        key = hi;
        s++;
    }
    return s;
}

/* A worker's load: queries handed to it this run and not yet completed
 * (queued or in its pending batches). Relaxed loads: the value only steers
 * which member gets a query — a stale value picks a less good member, never
 * loses or repeats a query (the queue push hands the query over and orders
 * it) — and nothing else is read on the strength of it. The two loads are
 * not ordered with each other, so the difference is clamped at 0. */
static uint64_t worker_load(const worker *w)
{
    uint64_t done = atomic_load_explicit(&w->completed, memory_order_relaxed);
    uint64_t pushed = atomic_load_explicit(&w->q.head, memory_order_relaxed) - w->q_base;
    return pushed > done ? pushed - done : 0;
}

/* The least loaded of up to GROUP_PROBES members, starting at a rotating
 * position (ties go round robin; an idle member ends the search). */
static unsigned least_loaded(const pm_runtime *rt, const uint32_t *m, uint32_t n, uint64_t rot)
{
    uint32_t probes = n < GROUP_PROBES ? n : GROUP_PROBES;
    unsigned best = m[rot % n];
    uint64_t best_load = worker_load(&rt->workers[best]);
    for (uint32_t k = 1; k < probes && best_load > 0; k++) {
        unsigned w = m[(rot + k) % n];
        uint64_t load = worker_load(&rt->workers[w]);
        if (load < best_load)
            best = w, best_load = load;
    }
    return best;
}

static unsigned choose_worker(pm_runtime *rt, router *ro, const routing *r, const pm_query *q)
{
    unsigned s = q->slice;
    if (q->op == PM_OP_SCAN) {
        unsigned last = scan_last_slice(rt, s, q->key, q->value);
        s += (unsigned)pm_rng_below(&ro->rng, last - s + 1);
    }
    route g = r->slice[s];
    if (g.n == 1)
        return g.first; /* width thread (or a one-member group): as fast as ever */
    if (g.n == 0)
        return (unsigned)(ro->rr++ % rt->n_workers);
    return least_loaded(rt, r->members + g.first, g.n, ro->rr++);
}

/* Open loop (spec.offered_qps > 0): each router sends its share of the
 * offered rate, query k at start + k / rate; a router behind schedule sends
 * at once (it never skips), so the achieved rate is min(offered, capacity). */
static uint64_t due_ns(const pm_runtime *rt, uint64_t t0_ns, uint64_t sent)
{
    double per_router = rt->spec.offered_qps / (double)rt->n_routers;
    return t0_ns + (uint64_t)((double)sent * 1e9 / per_router);
}

/* Wait for the next query's time; called outside every epoch section, so a
 * slow rate never holds up a schedule swap's grace period. */
static void pace(const pm_runtime *rt, uint64_t t0_ns, uint64_t sent)
{
    uint64_t due = due_ns(rt, t0_ns, sent);
    unsigned spins = 0;
    while (pm_now_ns() < due && atomic_load_explicit(&rt->routers_go, memory_order_relaxed))
        if (++spins > IDLE_SPINS)
            sched_yield(); /* a paced router may share its CPU with a worker */
}

static void *router_main(void *arg)
{
    router *ro = arg;
    pm_runtime *rt = ro->rt;
    pin_self(ro->cpu);
    uint64_t sent = 0, t0_ns = pm_now_ns();
    bool paced = rt->spec.offered_qps > 0;
    while (atomic_load_explicit(&rt->routers_go, memory_order_relaxed)) {
        pm_epoch_enter(&rt->epoch, ro->idx);
        routing *r = atomic_load(&rt->routing); /* seq_cst: after the epoch store */
        for (int i = 0; i < ROUTE_BATCH; i++) {
            if (paced && pm_now_ns() < due_ns(rt, t0_ns, sent))
                break; /* not due yet: wait outside the epoch section */
            pm_query q;
            if (pm_workload_next(ro->w, &q) != 0) {
                atomic_store(&ro->failed, 1);
                atomic_store(&rt->routers_go, 0);
                break;
            }
            q.slice = pm_runtime_slice_of(rt, q.key);
            worker *w = &rt->workers[choose_worker(rt, ro, r, &q)];
            unsigned spins = 0;
            /* stamped when the query enters the queue: the router's wait
             * for room (back-pressure) is not part of the query's latency */
            while (pm_queue_push_stamped(&w->q, &q) != 0)
                idle_wait(&spins); /* full: wait, never drop */
            sent++;
        }
        pm_epoch_exit(&rt->epoch, ro->idx);
        /* relaxed: read by stop() after joining this thread */
        atomic_store_explicit(&ro->dispatched, sent, memory_order_relaxed);
        if (paced)
            pace(rt, t0_ns, sent);
    }
    return NULL;
}

/* Per-slice stats of one executed group: own counts, and, for a profiled
 * batch (before/after not NULL), the probe delta between the readings taken
 * right before its first query and right after its last one (an
 * unavailable reading makes the stat unavailable). */
static void add_slice_stats(worker *w, uint32_t slice, uint64_t n, uint64_t nodes, uint64_t keys,
                            const uint64_t *before, const uint64_t *after)
{
    pm_runtime *rt = w->rt;
    _Atomic uint64_t *row = w->stats + (size_t)slice * rt->n_stats;
    uint64_t add[N_OWN_STATS] = {n, nodes, keys, after ? n : 0};
    /* single writer per table: relaxed load+store, no RMW needed; sweepers
     * read relaxed and only need each counter's latest value */
    for (unsigned i = 0; i < N_OWN_STATS; i++)
        atomic_store_explicit(&row[i], atomic_load_explicit(&row[i], memory_order_relaxed) + add[i],
                              memory_order_relaxed);
    if (!after)
        return;
    for (int i = 0; i < rt->probe.n_values; i++) {
        _Atomic uint64_t *c = &row[N_OWN_STATS + i];
        uint64_t old = atomic_load_explicit(c, memory_order_relaxed);
        bool unavailable = old == PM_STAT_UNAVAILABLE || before[i] == PM_STAT_UNAVAILABLE ||
                           after[i] == PM_STAT_UNAVAILABLE;
        atomic_store_explicit(c, unavailable ? PM_STAT_UNAVAILABLE : old + after[i] - before[i],
                              memory_order_relaxed);
    }
}

static void execute(worker *w, const pm_query *q, pm_op_stats *st)
{
    pm_runtime *rt = w->rt;
    pm_tree *t = rt->trees[q->slice];
    uint64_t v;
    switch (q->op) {
    case PM_OP_READ:
        pm_tree_lookup(t, q->key, &v, st);
        break;
    case PM_OP_UPDATE:
        pm_tree_update(t, q->key, q->value, st);
        break;
    case PM_OP_INSERT:
        pm_tree_insert(t, q->key, q->value, NULL, st);
        break;
    default:
        scan_slices(rt, q->key, q->value < rt->scan_max ? q->value : rt->scan_max, w->scan_buf,
                    NULL, st);
    }
}

/* Run the due batches back to back. A profiled batch runs between two
 * readings: the one before it (taken now, or the previous profiled batch's
 * closing one) and one right after it, so its window holds exactly one
 * slice's queries, at most batch_queries of them; B consecutive profiled
 * batches cost B + 1 reads. A slice's batch is profiled when its period has
 * passed (probe_ns 0: every batch); the others run between no readings.
 * now: the clock the worker read for pm_pending_pick, 0 if it read none (at
 * light load a due run is a query or two, and a second clock read per run
 * showed in their p50). Nothing is popped from the queue in between. */
static void run_due(worker *w, uint64_t *before, uint64_t *after, uint64_t *done, uint64_t probe_ns,
                    uint64_t now)
{
    pm_runtime *rt = w->rt;
    pm_pending *p = &w->pend;
    if (probe_ns && rt->profile_runs && !now)
        now = pm_now_ns();
    bool open = false; /* `before` holds the reading that opens the next window */
    w->batches += p->n_due;
    for (unsigned d = 0; d < p->n_due; d++) {
        const pm_batch *b = &p->due[d];
        uint64_t *next_ns = &p->slice[b->slice].next_probe_ns;
        bool profiled = rt->profile_runs && (!probe_ns || now >= *next_ns);
        if (profiled && !open) {
            rt->probe.read(w->probe_state_ptr, before);
            w->probe_reads++;
        }
        uint64_t nodes = 0, keys = 0;
        uint32_t e = b->head;
        for (uint32_t k = 0; k < b->n; k++, e = p->next[e]) {
            pm_op_stats st = {0, 0};
            execute(w, &p->q[e], &st);
            /* per query, from its own enqueue stamp (time spent pending
             * counts). CLOCK_MONOTONIC is one clock for all CPUs; the guard
             * only keeps a misbehaving clock from recording ~2^64 */
            uint64_t t_done = pm_now_ns();
            pm_lat_record(w->lat, t_done > p->t_ns[e] ? t_done - p->t_ns[e] : 0);
            nodes += st.nodes_visited;
            keys += st.keys_scanned;
            /* relaxed: a progress counter, read after join for the totals */
            atomic_store_explicit(&w->completed, ++*done, memory_order_relaxed);
        }
        if (profiled) {
            rt->probe.read(w->probe_state_ptr, after);
            w->probe_reads++;
            *next_ns = now + probe_ns;
        }
        add_slice_stats(w, b->slice, b->n, nodes, keys, profiled ? before : NULL, profiled ? after : NULL);
        w->full_batches += b->n == p->batch;
        pm_pending_release(p, b);
        if (profiled) { /* the closing reading opens the next profiled window */
            uint64_t *t = before;
            before = after;
            after = t;
        }
        open = profiled;
    }
    p->n_due = 0;
}

static _Thread_local const _Atomic uint64_t *self_completed;

uint64_t pm_worker_self_completed(void)
{
    return self_completed ? atomic_load_explicit(self_completed, memory_order_relaxed) : 0;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    pm_runtime *rt = w->rt;
    pin_self(w->cpu);
    self_completed = &w->completed;
    uint64_t probe_buf[2 * PM_PROBE_MAX_VALUES];
    w->probe_rc = rt->profile_runs ? rt->probe.open(rt->cfg.probe_ctx, w->cpu, &w->probe_state_ptr) : 0;
    atomic_fetch_add(&rt->workers_ready, 1);
    if (w->probe_rc)
        return NULL;
    uint64_t done = atomic_load_explicit(&w->completed, memory_order_relaxed);
    unsigned period_us = rt->cfg.probe_period_us != PM_PROBE_PERIOD_AUTO ? rt->cfg.probe_period_us
                                                                         : PM_PROBE_PERIOD_US_DEFAULT;
    uint64_t probe_ns = (uint64_t)period_us * 1000u;
    /* AUTO: a read to amortise only when every batch is read; sampled or
     * unprofiled batches never wait */
    unsigned wait_us = rt->cfg.batch_max_wait_us != PM_BATCH_MAX_WAIT_AUTO ? rt->cfg.batch_max_wait_us
                       : rt->profile_runs && !probe_ns                    ? PM_BATCH_MAX_WAIT_US_DEFAULT
                                                                          : 0;
    uint64_t wait_ns = (uint64_t)wait_us * 1000u;
    unsigned spins = 0;
    for (;;) {
        /* acquire: routers were joined before workers_stop was set, so once
         * it reads set, a queue found empty afterwards stays empty */
        int stopping = atomic_load_explicit(&rt->workers_stop, memory_order_acquire);
        int empty;
        if (pm_pending_drain(&w->pend, &w->q, rt->cfg.queue_capacity, &empty))
            spins = 0;
        /* work-conserving: once the queue is empty, waiting for more of a
         * slice's queries would only idle the worker, so everything
         * pending runs now (grouped by slice); while queries keep coming,
         * batches fill up to G or until the deadline */
        uint64_t now = 0;
        if (w->pend.oldest != PM_PENDING_NONE)
            pm_pending_pick(&w->pend, empty, wait_ns, now = pm_now_ns());
        if (w->pend.n_due) {
            /* every batch's stats are stored when it ends: idle time finds
             * nothing left to flush for the sweepers */
            run_due(w, probe_buf, probe_buf + PM_PROBE_MAX_VALUES, &done, probe_ns, now);
            continue;
        }
        if (!empty)
            continue; /* drained a queue's worth, nothing due yet: go on */
        if (stopping && w->pend.used == 0)
            break;
        idle_wait(&spins);
    }
    if (rt->profile_runs)
        rt->probe.close(w->probe_state_ptr);
    self_completed = NULL;
    return NULL;
}

/* Sum where an unavailable reading makes the total unavailable. */
static inline uint64_t stat_add(uint64_t a, uint64_t b)
{
    return a == PM_STAT_UNAVAILABLE || b == PM_STAT_UNAVAILABLE ? PM_STAT_UNAVAILABLE : a + b;
}

/* One core sweep: sum node's worker tables into its partial table. */
static void sweep_node(pm_runtime *rt, sweeper *s)
{
    size_t table = (size_t)rt->n_slices * rt->n_stats;
    unsigned n = rt->node_n_workers[s->node];
    for (size_t i = 0; i < table; i++) {
        uint64_t sum = 0;
        for (unsigned k = 0; k < n; k++)
            sum = stat_add(sum, atomic_load_explicit(&rt->workers[rt->node_workers[s->node][k]].stats[i],
                                                     memory_order_relaxed));
        /* relaxed: each value is a monotone counter; the generation handshake
         * (acq/rel on ack) orders the whole table for the merger */
        atomic_store_explicit(&s->partial[i], sum, memory_order_relaxed);
    }
}

/* ---- off-core readings: the off-core sweeper thread's, during a run ---- */

/* Open the uncore hook for this run. A failure leaves the run without
 * off-core readings (null) and its one-line reason in oc_run.msg. */
static void offcore_open(pm_runtime *rt)
{
    rt->oc_run.state = NULL;
    rt->oc_run.nodes = rt->oc_run.links = 0;
    rt->oc_run.stride = 1;
    rt->oc_run.msg[0] = '\0';
    if (!rt->has_uncore)
        return;
    unsigned nodes = 0, links = 0;
    void *state = NULL;
    int rc = rt->uncore.open(rt->cfg.uncore_ctx, &state, &nodes, &links, rt->oc_run.msg,
                             sizeof rt->oc_run.msg);
    if (rc) {
        if (!rt->oc_run.msg[0])
            pm_errf(rt->oc_run.msg, sizeof rt->oc_run.msg, "off-core counters could not be opened: %s",
                    strerror(-rc));
        return;
    }
    rt->oc_run.msg[0] = '\0'; /* success: an open may leave notes in msg */
    unsigned stride = nodes > links ? nodes : links;
    stride = stride ? stride : 1;
    size_t need = (size_t)rt->uncore.n_values * stride;
    if (need > rt->oc_run.cap) {
        double *v = realloc(rt->oc_run.values, need * sizeof *v);
        if (!v) {
            rt->uncore.close(state);
            pm_errf(rt->oc_run.msg, sizeof rt->oc_run.msg, "off-core readings: out of memory");
            return;
        }
        rt->oc_run.values = v;
        rt->oc_run.cap = need;
    }
    for (size_t i = 0; i < need; i++)
        rt->oc_run.values[i] = NAN;
    rt->oc_run.state = state;
    rt->oc_run.nodes = nodes;
    rt->oc_run.links = links;
    rt->oc_run.stride = stride;
}

/* Take this round's reading (cumulative since the open). */
static void offcore_read(pm_runtime *rt)
{
    if (!rt->oc_run.state)
        return;
    int rc = rt->uncore.read(rt->oc_run.state, rt->oc_run.values, rt->oc_run.stride);
    if (rc) {
        for (size_t i = 0; i < (size_t)rt->uncore.n_values * rt->oc_run.stride; i++)
            rt->oc_run.values[i] = NAN; /* a failed read is null, never a stale value */
        pm_errf(rt->oc_run.msg, sizeof rt->oc_run.msg, "off-core read failed: %s", strerror(-rc));
    }
}

static void offcore_close(pm_runtime *rt)
{
    if (rt->oc_run.state)
        rt->uncore.close(rt->oc_run.state);
    rt->oc_run.state = NULL;
}

/* Copy the run's latest off-core reading to what snapshots see. snap_lock
 * held; on the off-core sweeper, or on the control thread after joining it. */
static void publish_offcore(pm_runtime *rt)
{
    unsigned nodes = rt->oc_run.nodes, links = rt->oc_run.links;
    size_t need = nodes || links ? (size_t)rt->uncore.n_values * rt->oc_run.stride : 0;
    snprintf(rt->oc_pub_msg, sizeof rt->oc_pub_msg, "%s", rt->oc_run.msg);
    if (need > rt->oc_pub_cap) {
        double *v = realloc(rt->oc_pub, need * sizeof *v);
        if (!v) {
            nodes = links = 0;
            need = 0;
            snprintf(rt->oc_pub_msg, sizeof rt->oc_pub_msg, "off-core readings: out of memory");
        } else {
            rt->oc_pub = v;
            rt->oc_pub_cap = need;
        }
    }
    if (need)
        memcpy(rt->oc_pub, rt->oc_run.values, need * sizeof *rt->oc_pub);
    rt->oc_pub_nodes = nodes;
    rt->oc_pub_links = links;
    rt->oc_pub_stride = rt->oc_run.stride;
}

/* Merge all partials and the off-core reading into the published snapshot
 * (one round) and wake waiters. */
static void merge_partials(pm_runtime *rt)
{
    size_t table = (size_t)rt->n_slices * rt->n_stats;
    pthread_mutex_lock(&rt->snap_lock);
    for (size_t i = 0; i < table; i++) {
        uint64_t sum = 0;
        for (int n = 0; n < rt->topo.n_nodes; n++)
            sum = stat_add(sum, atomic_load_explicit(&rt->sweepers[n].partial[i], memory_order_relaxed));
        rt->published[i] = sum;
    }
    publish_offcore(rt);
    rt->published_round++;
    pthread_cond_broadcast(&rt->snap_cond);
    pthread_mutex_unlock(&rt->snap_lock);
}

static void *core_sweeper_main(void *arg)
{
    sweeper *s = arg;
    pm_runtime *rt = s->rt;
    pin_self(s->cpu);
    while (!atomic_load_explicit(&rt->sweep_stop, memory_order_acquire)) {
        /* acquire: pairs with the off-core sweeper's generation bump */
        uint64_t gen = atomic_load_explicit(&rt->sweep_gen, memory_order_acquire);
        if (gen == atomic_load_explicit(&s->ack, memory_order_relaxed)) {
            nap(SWEEP_PERIOD_NS / 20);
            continue;
        }
        sweep_node(rt, s);
        /* release: our partial table is complete before the ack is seen */
        atomic_store_explicit(&s->ack, gen, memory_order_release);
    }
    return NULL;
}

/* Drives sweep rounds: bump the generation, wait for every core sweeper's
 * ack, read the uncore PMUs, publish. Owns the uncore state of the run: the
 * hook is opened, read and closed on this thread only. */
static void *offcore_sweeper_main(void *arg)
{
    sweeper *s = arg;
    pm_runtime *rt = s->rt;
    pin_self(s->cpu);
    offcore_open(rt);
    /* release: start() returns once the open was tried (its outcome is
     * then the run's, whatever round a reader looks at) */
    atomic_store_explicit(&rt->oc_ready, 1, memory_order_release);
    while (!atomic_load_explicit(&rt->sweep_stop, memory_order_acquire)) {
        uint64_t gen = atomic_fetch_add_explicit(&rt->sweep_gen, 1, memory_order_acq_rel) + 1;
        bool all = false;
        while (!all && !atomic_load_explicit(&rt->sweep_stop, memory_order_acquire)) {
            all = true;
            for (int n = 0; n < rt->topo.n_nodes; n++)
                all = all && atomic_load_explicit(&rt->sweepers[n].ack, memory_order_acquire) >= gen;
            if (!all)
                nap(SWEEP_PERIOD_NS / 20);
        }
        if (all) {
            offcore_read(rt);
            merge_partials(rt);
        }
        nap(SWEEP_PERIOD_NS);
    }
    /* workers are joined before sweep_stop is set: this reading covers the
     * whole run; stop() publishes it with the final core sweep */
    offcore_read(rt);
    offcore_close(rt);
    return NULL;
}

static int spawn(pthread_t *th, void *(*fn)(void *), void *arg)
{
    return -pthread_create(th, NULL, fn, arg);
}

/* Join the first n workers (after telling them to stop). */
static void join_workers(pm_runtime *rt, unsigned n)
{
    atomic_store_explicit(&rt->workers_stop, 1, memory_order_release);
    for (unsigned i = 0; i < n; i++)
        pthread_join(rt->workers[i].th, NULL);
}

static void free_run(pm_runtime *rt)
{
    for (unsigned i = 0; i < rt->n_routers; i++) {
        pm_workload_destroy(rt->routers[i].w);
        rt->routers[i].w = NULL;
    }
    for (unsigned i = 0; i < rt->n_workers; i++) {
        free(rt->workers[i].scan_buf);
        rt->workers[i].scan_buf = NULL;
        pm_pending_fini(&rt->workers[i].pend);
    }
}

static int prepare_run(pm_runtime *rt, const pm_workload_spec *spec, char *err, size_t err_len)
{
    rt->spec = *spec;
    rt->scan_max = spec->scan_max ? spec->scan_max : 100;
    if (rt->scan_max > (1u << 20)) {
        pm_errf(err, err_len, "scan_max %u is above the limit %u", rt->scan_max, 1u << 20);
        return -EINVAL;
    }
    for (unsigned i = 0; i < rt->n_routers; i++) {
        router *ro = &rt->routers[i];
        int rc = pm_workload_create(spec, rt->dataset, rt->keys, rt->n_loaded, i, &ro->w, err, err_len);
        if (rc)
            return rc;
        pm_rng_seed(&ro->rng, spec->seed ^ 0x5ca1ab1eull ^ i);
        ro->rr = i;
        atomic_store(&ro->dispatched, 0);
        atomic_store(&ro->failed, 0);
    }
    for (unsigned i = 0; i < rt->n_workers; i++) {
        rt->workers[i].scan_buf = malloc(rt->scan_max * sizeof(uint64_t));
        if (!rt->workers[i].scan_buf)
            return -ENOMEM;
        /* room for a full batch of every slice, within PENDING_MAX */
        uint64_t cap = (uint64_t)rt->n_slices * rt->cfg.batch_queries;
        int rc = pm_pending_init(&rt->workers[i].pend, rt->n_slices, rt->cfg.batch_queries,
                                 cap < PENDING_MAX ? (unsigned)cap : PENDING_MAX, DUE_MAX);
        if (rc)
            return rc;
        atomic_store(&rt->workers[i].completed, 0);
        /* no thread runs: the queue is empty and head is exact */
        rt->workers[i].q_base = atomic_load_explicit(&rt->workers[i].q.head, memory_order_relaxed);
        rt->workers[i].batches = rt->workers[i].full_batches = rt->workers[i].probe_reads = 0;
    }
    return 0;
}

int pm_runtime_set_profiling(pm_runtime *rt, int on)
{
    if (!rt || (on && !rt->has_probe))
        return -EINVAL;
    pthread_mutex_lock(&rt->ctl);
    int rc = rt->running ? -EBUSY : 0;
    if (!rc)
        rt->profile_runs = on != 0;
    pthread_mutex_unlock(&rt->ctl);
    return rc;
}

int pm_runtime_set_probe_period(pm_runtime *rt, unsigned period_us)
{
    if (!rt || !rt->has_probe)
        return -EINVAL;
    pthread_mutex_lock(&rt->ctl);
    int rc = rt->running ? -EBUSY : 0;
    if (!rc) /* read where each run's workers start */
        rt->cfg.probe_period_us = period_us;
    pthread_mutex_unlock(&rt->ctl);
    return rc;
}

int pm_runtime_start(pm_runtime *rt, const pm_workload_spec *spec, char *err, size_t err_len)
{
    pthread_mutex_lock(&rt->ctl);
    if (rt->running) {
        pthread_mutex_unlock(&rt->ctl);
        pm_errf(err, err_len, "a workload is already running");
        return -EBUSY;
    }
    int rc = prepare_run(rt, spec, err, err_len);
    if (rc) {
        free_run(rt);
        pthread_mutex_unlock(&rt->ctl);
        return rc;
    }
    /* The run's latency baseline. No worker runs yet (they are spawned
     * below, which orders these accesses before theirs), so plain relaxed
     * reads are exact. */
    for (unsigned i = 0; i < rt->n_workers; i++) {
        pm_lat_hist *h = rt->workers[i].lat;
        for (unsigned b = 0; b < PM_LAT_BUCKETS; b++)
            rt->lat_run[i].count[b] = atomic_load_explicit(&h->count[b], memory_order_relaxed);
        rt->lat_run[i].sum_ns = atomic_load_explicit(&h->sum_ns, memory_order_relaxed);
        atomic_store_explicit(&h->run_max_ns, 0, memory_order_relaxed);
    }
    atomic_store(&rt->workers_stop, 0);
    atomic_store(&rt->workers_ready, 0);
    atomic_store(&rt->sweep_stop, 0);
    atomic_store(&rt->oc_ready, 0);
    atomic_store(&rt->routers_go, 1);
    /* Workers first; each opens its probe after pinning itself. */
    unsigned started = 0;
    for (; started < rt->n_workers && rc == 0; started++)
        if ((rc = spawn(&rt->workers[started].th, worker_main, &rt->workers[started])))
            break;
    while (rc == 0 && atomic_load(&rt->workers_ready) < (int)rt->n_workers)
        nap(100000);
    for (unsigned i = 0; rc == 0 && i < rt->n_workers; i++)
        if (rt->workers[i].probe_rc) {
            rc = rt->workers[i].probe_rc;
            pm_errf(err, err_len, "probe open failed on CPU %d: %s", rt->workers[i].cpu,
                    strerror(-rc));
        }
    if (rc) {
        join_workers(rt, started);
        free_run(rt);
        pthread_mutex_unlock(&rt->ctl);
        return rc;
    }
    /* The published snapshot is exact between runs: the run's base. */
    pthread_mutex_lock(&rt->snap_lock);
    for (unsigned i = 0; i < rt->n_slices; i++)
        rt->run_base[i] = rt->published[(size_t)i * rt->n_stats];
    pthread_mutex_unlock(&rt->snap_lock);
    for (int n = 0; n < rt->topo.n_nodes; n++)
        atomic_store(&rt->sweepers[n].ack, atomic_load(&rt->sweep_gen));
    /* Thread creation failures past this point are fatal for the process
     * state we promise, so they abort the start the same way. */
    unsigned sw = 0, ro = 0;
    for (; rc == 0 && sw <= (unsigned)rt->topo.n_nodes; sw++)
        rc = spawn(&rt->sweepers[sw].th, sw < (unsigned)rt->topo.n_nodes ? core_sweeper_main
                                                                          : offcore_sweeper_main,
                   &rt->sweepers[sw]);
    /* acquire: pairs with the off-core sweeper's release after its open */
    while (rc == 0 && !atomic_load_explicit(&rt->oc_ready, memory_order_acquire))
        nap(100000);
    rt->t_start = pm_now();
    for (; rc == 0 && ro < rt->n_routers; ro++)
        rc = spawn(&rt->routers[ro].th, router_main, &rt->routers[ro]);
    if (rc) {
        atomic_store(&rt->routers_go, 0);
        for (unsigned i = 0; i + 1 < ro; i++)
            pthread_join(rt->routers[i].th, NULL);
        join_workers(rt, rt->n_workers);
        atomic_store(&rt->sweep_stop, 1);
        for (unsigned i = 0; i + 1 < sw; i++)
            pthread_join(rt->sweepers[i].th, NULL);
        free_run(rt);
        pm_errf(err, err_len, "could not start threads: %s", strerror(-rc));
    } else {
        rt->running = true;
    }
    pthread_mutex_unlock(&rt->ctl);
    return rc;
}

int pm_runtime_stop(pm_runtime *rt, pm_run_result *result, uint64_t *slice_queries)
{
    pthread_mutex_lock(&rt->ctl);
    if (!rt->running) {
        pthread_mutex_unlock(&rt->ctl);
        return -EINVAL;
    }
    atomic_store(&rt->routers_go, 0);
    uint64_t dispatched = 0, completed = 0;
    for (unsigned i = 0; i < rt->n_routers; i++) {
        pthread_join(rt->routers[i].th, NULL);
        dispatched += atomic_load_explicit(&rt->routers[i].dispatched, memory_order_relaxed);
    }
    rt->t_stop = pm_now();
    join_workers(rt, rt->n_workers);
    uint64_t batches = 0, full = 0, reads = 0;
    for (unsigned i = 0; i < rt->n_workers; i++) {
        const worker *w = &rt->workers[i];
        completed += atomic_load_explicit(&w->completed, memory_order_relaxed);
        batches += w->batches;
        full += w->full_batches;
        reads += w->probe_reads;
    }
    atomic_store(&rt->sweep_stop, 1);
    for (int n = 0; n <= rt->topo.n_nodes; n++)
        pthread_join(rt->sweepers[n].th, NULL);
    /* Final sweep: every worker stored its last batch's stats before exiting. */
    for (int n = 0; n < rt->topo.n_nodes; n++)
        sweep_node(rt, &rt->sweepers[n]);
    merge_partials(rt);
    if (slice_queries) {
        pthread_mutex_lock(&rt->snap_lock);
        for (unsigned i = 0; i < rt->n_slices; i++)
            slice_queries[i] = rt->published[(size_t)i * rt->n_stats] - rt->run_base[i];
        pthread_mutex_unlock(&rt->snap_lock);
    }
    if (result) {
        /* workers are joined: the run cursors read exact final counts */
        pm_lat_interval iv;
        memset(&iv, 0, sizeof iv);
        for (unsigned i = 0; i < rt->n_workers; i++)
            pm_lat_collect(rt->workers[i].lat, &rt->lat_run[i], 0, &iv);
        pm_lat_summarize(&iv, &result->latency);
        result->dispatched = dispatched;
        result->completed = completed;
        result->seconds = rt->t_stop - rt->t_start;
        result->throughput = result->seconds > 0 ? (double)completed / result->seconds : 0;
        result->batches = batches;
        result->full_batches = full;
        result->probe_reads = reads;
    }
    free_run(rt);
    rt->running = false;
    pthread_mutex_unlock(&rt->ctl);
    return 0;
}

int pm_runtime_run(pm_runtime *rt, const pm_workload_spec *spec, double seconds,
                   pm_run_result *result, uint64_t *slice_queries, char *err, size_t err_len)
{
    int rc = pm_runtime_start(rt, spec, err, err_len);
    if (rc)
        return rc;
    if (seconds > 0) {
        struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
    return pm_runtime_stop(rt, result, slice_queries);
}

/* snap_lock held. While a run is on, wait until two more rounds are
 * published: the first may have swept before the caller asked. Bounded,
 * since the run may end (its final sweep also bumps the round). */
static void wait_fresh_round(pm_runtime *rt)
{
    uint64_t target = rt->published_round + 2;
    for (int tries = 0; tries < 200 && rt->published_round < target &&
                        !atomic_load(&rt->sweep_stop) && atomic_load(&rt->routers_go);
         tries++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10000000L;
        if (ts.tv_nsec >= 1000000000L)
            ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&rt->snap_cond, &rt->snap_lock, &ts);
    }
}

int pm_runtime_snapshot_read(pm_runtime *rt, pm_snapshot *snap)
{
    size_t table = (size_t)rt->n_slices * rt->n_stats;
    if (!snap || !snap->stats)
        return -EINVAL;
    if (snap->stats_cap < table)
        return -ENOSPC;
    pthread_mutex_lock(&rt->snap_lock);
    wait_fresh_round(rt);
    size_t oc_need = rt->oc_pub_nodes || rt->oc_pub_links
                         ? (size_t)rt->uncore.n_values * rt->oc_pub_stride
                         : 0;
    snap->offcore_nodes = rt->oc_pub_nodes;
    snap->offcore_links = rt->oc_pub_links;
    snap->offcore_stride = rt->oc_pub_stride ? rt->oc_pub_stride : 1;
    if (snap->offcore && snap->offcore_cap < oc_need) {
        pthread_mutex_unlock(&rt->snap_lock);
        return -ENOSPC;
    }
    memcpy(snap->stats, rt->published, table * sizeof *snap->stats);
    if (snap->node)
        memcpy(snap->node, pm_schedule_nodes(rt->current), rt->n_slices * sizeof *snap->node);
    if (snap->core)
        memcpy(snap->core, pm_schedule_cores(rt->current), rt->n_slices * sizeof *snap->core);
    if (snap->offcore && oc_need)
        memcpy(snap->offcore, rt->oc_pub, oc_need * sizeof *snap->offcore);
    snprintf(snap->offcore_msg, sizeof snap->offcore_msg, "%s", rt->oc_pub_msg);
    pthread_mutex_unlock(&rt->snap_lock);
    return 0;
}

int pm_runtime_snapshot(pm_runtime *rt, uint64_t *values, size_t cap)
{
    pm_snapshot snap = {.stats = values, .stats_cap = cap};
    return pm_runtime_snapshot_read(rt, &snap);
}

unsigned pm_runtime_n_offcore_values(const pm_runtime *rt)
{
    return rt->has_uncore ? (unsigned)rt->uncore.n_values : 0;
}

const char *pm_runtime_offcore_name(const pm_runtime *rt, unsigned i)
{
    return i < pm_runtime_n_offcore_values(rt) ? rt->uncore.names[i] : NULL;
}

int pm_runtime_latency(pm_runtime *rt, pm_latency_summary *out)
{
    if (!out)
        return -EINVAL;
    /* ~8 KiB: fine on any thread that calls into the runtime */
    pm_lat_interval iv;
    memset(&iv, 0, sizeof iv);
    /* lat_lock, not ctl: a reader must not wait behind a set_schedule
     * migration or a stop draining queues, and needs neither — the workers
     * and their histograms live from create to destroy */
    pthread_mutex_lock(&rt->lat_lock);
    for (unsigned i = 0; i < rt->n_workers; i++)
        pm_lat_collect(rt->workers[i].lat, &rt->lat_read[i], 1, &iv);
    pthread_mutex_unlock(&rt->lat_lock);
    pm_lat_summarize(&iv, out);
    return 0;
}
