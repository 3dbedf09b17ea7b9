/* pmoss-runtime: load a data set, enforce a schedule, run a workload and
 * print per-slice and total throughput; optionally switch schedules mid-run. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pmoss/runtime.h"
#ifdef PMOSS_HAVE_COLLECTOR
#include "pmoss/collector.h"
/* The hook instance is defined in collector/src/probe_ops.c (not in its header). */
extern const pm_probe_ops pm_collector_probe_ops;
extern const pm_uncore_ops pm_collector_uncore_ops;
#endif

#define PM_STR_(x) #x
#define PM_STR(x) PM_STR_(x)

static const char usage[] =
    "usage: pmoss-runtime [options]\n"
    "Load keys into an OLC B+-tree cut into slices, enforce a spatial schedule,\n"
    "run a workload and print per-slice and total throughput and query latency\n"
    "percentiles (with --switch-schedule also before, during and after the switch).\n"
    "\n"
    "data:\n"
    "  --keys K               keys to load (default 1000000)\n"
    "  --dataset NAME         dense | uniform | clustered (default dense)\n"
    "  --seed S               dataset seed (default 1)\n"
    "  --slices N             number of slices (default 256)\n"
    "  --equal-width          equal key-range slices (default: equal key counts)\n"
    "  --leaf-capacity C      entries per leaf, 4..255 (default 255)\n"
    "threads:\n"
    "  --routers-per-node R   (default 1)\n"
    "  --max-workers W        cap on worker threads (default: one per usable CPU)\n"
    "  --share-cpus auto|yes|no  let routers/sweepers share worker CPUs (default auto)\n"
    "  --queue Q              per-worker queue capacity, power of two (default 1024)\n"
    "  --batch B              probe granularity: queries per slice batch (default 100)\n"
    "  --batch-max-wait US    deadline: a partial batch runs once its oldest query waited US\n"
    "                         microseconds, or as soon as the queue is empty (0: never\n                         wait; default " PM_STR(PM_BATCH_MAX_WAIT_US_DEFAULT) " with\n"
    "                         --probe-period-us 0, else 0)\n"
    "  --probe-period-us US   sampled attribution: a slice's first batch, then at most\n"
    "                         one per US microseconds, runs between probe readings\n"
    "                         (default " PM_STR(PM_PROBE_PERIOD_US_DEFAULT) "; 0: every batch, exact totals)\n"
    "schedule:\n"
    "  --schedule FILE        schedule JSON (docs/contracts.md, schema version 1 or 2:\n"
    "                         a regular file of at most 64 MiB, read before the keys load;\n"
    "                         per slice a node and an execution group, width thread,\n"
    "                         core, l3 or node: --show-topology lists each worker's\n"
    "                         node, core and L3 domain); default os-default\n"
    "  --machine NAME         this host's machine name: a schedule for another machine\n"
    "                         is refused (default: unknown, such a schedule is run\n"
    "                         with one warning)\n"
    "  --switch-schedule FILE enforce this schedule during the run ...\n"
    "  --switch-at SECONDS    ... this many seconds after the start (default T/2)\n"
    "workload:\n"
    "  --workload MIX         ycsb-a ycsb-b ycsb-c ycsb-d ycsb-e scan rsi-20-30-50\n"
    "                         rsi-25-50-25 (default ycsb-c)\n"
    "  --distribution D       uniform | zipf | latest | hotspot (default: per mix)\n"
    "  --theta X              zipf theta (default 0.99)\n"
    "  --scan-min N --scan-max M  scan length range (default 1..100)\n"
    "  --workload-seed S      (default 1)\n"
    "  --seconds T            run time (default 5)\n"
    "  --offered-qps R        open loop: routers send R queries/s in all (default 0:\n"
    "                         closed loop, every queue kept full)\n"
    "probe (when built with the collector):\n"
    "  --probe auto|software|hardware  read per-slice counters (sampled: --probe-period-us)\n"
    "  --probe hardware-only  hardware counters and no software events: task-clock\n"
    "                         from the counters' enabled time, page faults and\n"
    "                         context switches null; no system call per reading\n"
    "                         where the kernel allows rdpmc and user time\n"
    "  --offcore[=SYSFS]      sweep the uncore PMUs found under SYSFS (default /sys:\n"
    "                         memory controllers, socket links) every round and\n"
    "                         print the run's bytes per node and link\n"
    "output:\n"
    "  --per-slice            print one CSV line per slice (queries and every stat)\n"
    "  --show-topology        print worker CPUs and their nodes, and which counters\n"
    "                         --probe auto gets here and why, then exit\n"
    "  --help\n";

/* The run's off-core bytes, one line per node / link, or why there are none. */
static void print_offcore(pm_runtime *rt)
{
    unsigned ns = pm_runtime_n_stats(rt), nv = pm_runtime_n_offcore_values(rt);
    size_t n = (size_t)pm_runtime_n_slices(rt) * ns;
    pm_snapshot snap = {.stats = malloc(n * sizeof(uint64_t)), .stats_cap = n};
    /* first read: the shape only (offcore NULL), then the values (the run is
     * over, so both reads see the same round) */
    int rc = snap.stats ? pm_runtime_snapshot_read(rt, &snap) : -ENOMEM;
    if (rc == 0) {
        snap.offcore_cap = (size_t)nv * snap.offcore_stride;
        snap.offcore = malloc(snap.offcore_cap * sizeof(double));
        rc = snap.offcore ? pm_runtime_snapshot_read(rt, &snap) : -ENOMEM;
    }
    if (rc) {
        fprintf(stderr, "pmoss-runtime: off-core snapshot: %s\n", strerror(-rc));
    } else if (!snap.offcore_nodes && !snap.offcore_links) {
        printf("offcore: none (%s)\n", snap.offcore_msg[0] ? snap.offcore_msg : "no uncore PMU found");
    } else {
        for (unsigned scope = 0; scope < 2; scope++) {
            unsigned count = scope ? snap.offcore_links : snap.offcore_nodes;
            for (unsigned i = 0; i < count; i++) {
                printf("offcore %s %u:", scope ? "link" : "node", i);
                for (unsigned j = 0; j < nv; j++) {
                    const char *name = pm_runtime_offcore_name(rt, j);
                    /* a node row shows node values, a link row link_* values */
                    if ((strncmp(name, "link_", 5) == 0) != (scope == 1))
                        continue;
                    double v = snap.offcore[(size_t)j * snap.offcore_stride + i];
                    if (v == v)
                        printf(" %s=%.0f", name, v);
                    else
                        printf(" %s=null", name);
                }
                printf("\n");
            }
        }
    }
    free(snap.offcore);
    free(snap.stats);
}

static void sleep_s(double s)
{
    if (s <= 0)
        return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void print_latency(const char *what, const pm_latency_summary *l)
{
    printf("latency %s: %llu queries, p50 %.1f us, p90 %.1f us, p99 %.1f us, p99.9 %.1f us, "
           "max %.1f us, mean %.1f us\n",
           what, (unsigned long long)l->count, (double)l->p50_ns / 1e3, (double)l->p90_ns / 1e3,
           (double)l->p99_ns / 1e3, (double)l->p999_ns / 1e3, (double)l->max_ns / 1e3,
           l->mean_ns / 1e3);
}

/* Read a schedule file, or print why not (one line naming the file) and
 * return NULL. main reads both files before the runtime loads its keys, so
 * a bad --switch-schedule fails at once instead of mid-run. */
static pm_schedule *load_schedule(const char *path)
{
    char err[512];
    pm_schedule *s;
    if (pm_schedule_load_file(path, &s, err, sizeof err) != 0) {
        fprintf(stderr, "pmoss-runtime: %s\n", err);
        return NULL;
    }
    return s;
}

static int set_schedule(pm_runtime *rt, const pm_schedule *s, const char *path, const char *when)
{
    char err[512];
    pm_migration_report rep;
    int rc = pm_runtime_set_schedule(rt, s, &rep, err, sizeof err);
    if (rc == 0)
        printf("schedule %s (%s, machine %s) %s: %llu slices moved, %llu pages moved, "
               "%llu failed, %llu untouched, %.3f s in move_pages\n",
               path, pm_schedule_kind_name(pm_schedule_kind_of(s)), pm_schedule_machine(s), when,
               (unsigned long long)rep.slices_moved, (unsigned long long)rep.pages_moved,
               (unsigned long long)rep.pages_failed, (unsigned long long)rep.pages_absent,
               rep.seconds);
    else
        fprintf(stderr, "pmoss-runtime: %s: rejected, previous schedule kept: %s\n", path, err);
    return rc != 0;
}

enum {
    O_KEYS = 256, O_DATASET, O_SEED, O_SLICES, O_EQW, O_LEAF, O_ROUTERS, O_WORKERS, O_SHARE,
    O_QUEUE, O_BATCH, O_BATCH_WAIT, O_PROBE_PERIOD, O_SCHED, O_SWITCH, O_SWITCH_AT, O_WORKLOAD, O_DIST, O_THETA, O_SMIN,
    O_SMAX, O_WSEED, O_SECONDS, O_OFFERED, O_PER_SLICE, O_TOPO, O_PROBE, O_OFFCORE, O_MACHINE, O_HELP
};

/* Microseconds 0 .. UINT32_MAX - 1 into *out (UINT32_MAX is the config's
 * AUTO, not a value); -1 with a message naming the option otherwise. */
static int parse_us(const char *opt, const char *arg, unsigned *out)
{
    char *end;
    errno = 0;
    unsigned long us = strtoul(arg, &end, 10);
    if (errno || end == arg || *end || arg[0] == '-' || us >= UINT32_MAX) {
        fprintf(stderr, "pmoss-runtime: %s takes microseconds, 0..%u\n", opt, UINT32_MAX - 1);
        return -1;
    }
    *out = (unsigned)us;
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"keys", 1, 0, O_KEYS},         {"dataset", 1, 0, O_DATASET},
        {"seed", 1, 0, O_SEED},         {"slices", 1, 0, O_SLICES},
        {"equal-width", 0, 0, O_EQW},   {"leaf-capacity", 1, 0, O_LEAF},
        {"routers-per-node", 1, 0, O_ROUTERS}, {"max-workers", 1, 0, O_WORKERS},
        {"share-cpus", 1, 0, O_SHARE},  {"queue", 1, 0, O_QUEUE},
        {"batch", 1, 0, O_BATCH},       {"batch-max-wait", 1, 0, O_BATCH_WAIT},
        {"probe-period-us", 1, 0, O_PROBE_PERIOD},
        {"schedule", 1, 0, O_SCHED},
        {"switch-schedule", 1, 0, O_SWITCH}, {"switch-at", 1, 0, O_SWITCH_AT},
        {"workload", 1, 0, O_WORKLOAD}, {"distribution", 1, 0, O_DIST},
        {"theta", 1, 0, O_THETA},       {"scan-min", 1, 0, O_SMIN},
        {"scan-max", 1, 0, O_SMAX},     {"workload-seed", 1, 0, O_WSEED},
        {"seconds", 1, 0, O_SECONDS},   {"offered-qps", 1, 0, O_OFFERED}, {"per-slice", 0, 0, O_PER_SLICE},
        {"show-topology", 0, 0, O_TOPO}, {"probe", 1, 0, O_PROBE},
        {"offcore", 2, 0, O_OFFCORE},   {"machine", 1, 0, O_MACHINE},
        {"help", 0, 0, O_HELP},
        {0, 0, 0, 0},
    };
    pm_runtime_config cfg;
    pm_runtime_config_init(&cfg);
    pm_workload_spec spec = {.mix = "ycsb-c", .seed = 1};
    const char *sched = NULL, *switch_sched = NULL;
    double seconds = 5, switch_at = -1;
    int per_slice = 0, show_topo = 0, o;
    const char *probe = NULL;
    int offcore = 0;
    const char *offcore_root = NULL; /* NULL: /sys */
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case O_KEYS: cfg.n_keys = strtoull(optarg, NULL, 0); break;
        case O_DATASET: cfg.dataset = optarg; break;
        case O_SEED: cfg.seed = strtoull(optarg, NULL, 0); break;
        case O_SLICES: cfg.n_slices = (unsigned)strtoul(optarg, NULL, 0); break;
        case O_EQW: cfg.boundaries = PM_BOUNDARIES_EQUAL_WIDTH; break;
        case O_LEAF: cfg.leaf_capacity = (unsigned)strtoul(optarg, NULL, 0); break;
        case O_ROUTERS: cfg.routers_per_node = (unsigned)strtoul(optarg, NULL, 0); break;
        case O_WORKERS: cfg.max_workers = (unsigned)strtoul(optarg, NULL, 0); break;
        case O_SHARE:
            if (strcmp(optarg, "auto") && strcmp(optarg, "yes") && strcmp(optarg, "no")) {
                fprintf(stderr, "pmoss-runtime: --share-cpus takes auto, yes or no\n");
                return 2;
            }
            cfg.share_cpus = !strcmp(optarg, "auto") ? -1 : !strcmp(optarg, "yes");
            break;
        case O_QUEUE: cfg.queue_capacity = (unsigned)strtoul(optarg, NULL, 0); break;
        case O_BATCH: cfg.batch_queries = (unsigned)strtoul(optarg, NULL, 0); break;
        case O_BATCH_WAIT:
            if (parse_us("--batch-max-wait", optarg, &cfg.batch_max_wait_us))
                return 2;
            break;
        case O_PROBE_PERIOD:
            if (parse_us("--probe-period-us", optarg, &cfg.probe_period_us))
                return 2;
            break;
        case O_SCHED: sched = optarg; break;
        case O_SWITCH: switch_sched = optarg; break;
        case O_SWITCH_AT: switch_at = strtod(optarg, NULL); break;
        case O_WORKLOAD: spec.mix = optarg; break;
        case O_DIST: spec.distribution = optarg; break;
        case O_THETA: spec.zipf_theta = strtod(optarg, NULL); break;
        case O_SMIN: spec.scan_min = (uint32_t)strtoul(optarg, NULL, 0); break;
        case O_SMAX: spec.scan_max = (uint32_t)strtoul(optarg, NULL, 0); break;
        case O_WSEED: spec.seed = strtoull(optarg, NULL, 0); break;
        case O_SECONDS: seconds = strtod(optarg, NULL); break;
        case O_OFFERED: spec.offered_qps = strtod(optarg, NULL); break;
        case O_PER_SLICE: per_slice = 1; break;
        case O_TOPO: show_topo = 1; break;
        case O_PROBE: probe = optarg; break;
        case O_OFFCORE:
            offcore = 1;
            offcore_root = optarg;
            break;
        case O_MACHINE: cfg.machine = optarg; break;
        case O_HELP: fputs(usage, stdout); return 0;
        default: fputs(usage, stderr); return 2;
        }
    }
    if (optind < argc || seconds <= 0) {
        fputs(usage, stderr);
        return 2;
    }
    if (switch_at < 0)
        switch_at = seconds / 2;
    if (switch_sched && switch_at > seconds) {
        fprintf(stderr, "pmoss-runtime: --switch-at %.3f is after the end of the run\n", switch_at);
        return 2;
    }

#ifdef PMOSS_HAVE_COLLECTOR
    pm_probe_config probe_cfg = {PM_MODE_AUTO, NULL, 0, 0};
    if (probe) {
        if (!strcmp(probe, "software"))
            probe_cfg.mode = PM_MODE_SOFTWARE;
        else if (!strcmp(probe, "hardware"))
            probe_cfg.mode = PM_MODE_HARDWARE;
        else if (!strcmp(probe, "hardware-only"))
            probe_cfg.mode = PM_MODE_HARDWARE, probe_cfg.hardware_only = 1;
        else if (strcmp(probe, "auto")) {
            fprintf(stderr, "pmoss-runtime: --probe takes auto, software, hardware or hardware-only\n");
            return 2;
        }
        cfg.probe = &pm_collector_probe_ops;
        cfg.probe_ctx = &probe_cfg;
    }
    pm_uncore_config uncore_cfg = {offcore_root};
    if (offcore) {
        cfg.uncore = &pm_collector_uncore_ops;
        cfg.uncore_ctx = &uncore_cfg;
    }
#else
    if (probe || offcore) {
        fprintf(stderr, "pmoss-runtime: built without the collector, --probe/--offcore are unavailable\n");
        return 2;
    }
#endif
    pm_schedule *first = NULL, *second = NULL;
    if ((sched && !(first = load_schedule(sched))) ||
        (switch_sched && !(second = load_schedule(switch_sched)))) {
        pm_schedule_destroy(first);
        return 1;
    }
    char err[512];
    pm_runtime *rt;
    int rc = pm_runtime_create(&cfg, &rt, err, sizeof err);
    if (rc) {
        fprintf(stderr, "pmoss-runtime: %s\n", err);
        pm_schedule_destroy(first);
        pm_schedule_destroy(second);
        return 1;
    }
    if (show_topo) {
        int cpus[4096];
        unsigned n = pm_runtime_worker_cpus(rt, cpus, 4096);
        printf("nodes %d, worker CPUs %u:", pm_runtime_n_nodes(rt), n);
        for (unsigned i = 0; i < n && i < 4096; i++)
            printf(" %d(node %d, core %d, l3 %d)", cpus[i], pm_runtime_cpu_node(rt, cpus[i]),
                   pm_runtime_cpu_domain(rt, cpus[i], PM_WIDTH_CORE),
                   pm_runtime_cpu_domain(rt, cpus[i], PM_WIDTH_L3));
        printf("\n");
#ifdef PMOSS_HAVE_COLLECTOR
        /* what --probe auto would count here, and why (this thread's view) */
        pm_host_pmu pmu;
        pm_host_pmu_facts(&pmu);
        printf("counters %s: model %s, hardware_events %d (%s)\n",
               pmu.model && pmu.hardware_events ? "hardware" : pmu.software_events ? "software" : "none",
               pmu.model ? pmu.model : "unknown", pmu.hardware_events, pmu.reason);
#endif
        pm_runtime_destroy(rt);
        pm_schedule_destroy(first);
        pm_schedule_destroy(second);
        return 0;
    }
    if ((first && set_schedule(rt, first, sched, "enforced before the run")) ||
        (rc = pm_runtime_start(rt, &spec, err, sizeof err)) != 0) {
        if (rc)
            fprintf(stderr, "pmoss-runtime: %s\n", err);
        pm_runtime_destroy(rt);
        pm_schedule_destroy(first);
        pm_schedule_destroy(second);
        return 1;
    }
    int status = 0;
    /* With a switch, latency is read (reset-on-read) at the switch and once
     * set_schedule returns: before / during (validate + migrate + swap) /
     * after the switch. Nothing ran before the start, so the first read
     * covers the run from its beginning. */
    pm_latency_summary lat_before, lat_during, lat_after;
    if (switch_sched) {
        sleep_s(switch_at);
        char when[64];
        snprintf(when, sizeof when, "enforced at %.3f s", switch_at);
        pm_runtime_latency(rt, &lat_before);
        status = set_schedule(rt, second, switch_sched, when);
        pm_runtime_latency(rt, &lat_during);
        sleep_s(seconds - switch_at);
    } else {
        sleep_s(seconds);
    }
    unsigned n = pm_runtime_n_slices(rt);
    uint64_t *q = calloc(n, sizeof *q);
    pm_run_result res;
    pm_runtime_stop(rt, &res, q);
    if (per_slice) {
        /* stats are cumulative since create: with one run they are this run's */
        unsigned ns = pm_runtime_n_stats(rt);
        uint64_t *snap = malloc((size_t)n * ns * sizeof *snap);
        if (snap && pm_runtime_snapshot(rt, snap, (size_t)n * ns) == 0) {
            printf("slice,queries_per_s");
            for (unsigned j = 0; j < ns; j++)
                printf(",%s", pm_runtime_stat_name(rt, j));
            printf("\n");
            for (unsigned i = 0; i < n; i++) {
                printf("%u,%.1f", i, (double)q[i] / res.seconds);
                for (unsigned j = 0; j < ns; j++) {
                    uint64_t v = snap[(size_t)i * ns + j];
                    if (v == PM_STAT_UNAVAILABLE)
                        printf(",");
                    else
                        printf(",%llu", (unsigned long long)v);
                }
                printf("\n");
            }
        }
        free(snap);
    }
    printf("workload %s: %llu queries in %.3f s = %.0f queries/s (dispatched %llu, %u slices)\n",
           spec.mix, (unsigned long long)res.completed, res.seconds, res.throughput,
           (unsigned long long)res.dispatched, n);
    printf("batches %llu (%llu full of %u, %.1f queries each), probe reads %llu (%.4f per query)\n",
           (unsigned long long)res.batches, (unsigned long long)res.full_batches, cfg.batch_queries,
           res.batches ? (double)res.completed / (double)res.batches : 0.0,
           (unsigned long long)res.probe_reads,
           res.completed ? (double)res.probe_reads / (double)res.completed : 0.0);
    if (switch_sched) {
        pm_runtime_latency(rt, &lat_after);
        print_latency("before switch", &lat_before);
        print_latency("during switch", &lat_during);
        print_latency("after switch", &lat_after);
    }
    print_latency("run", &res.latency);
    if (offcore)
        print_offcore(rt);
    free(q);
    pm_runtime_destroy(rt);
    pm_schedule_destroy(first);
    pm_schedule_destroy(second);
    return status;
}
