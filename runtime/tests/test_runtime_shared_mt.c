/* Inserts through the runtime, with two or more workers serving one slice
 * while schedules swap: no confirmed insert is lost.
 *
 * The dense dataset's inserts of router stream s are the keys
 * n + s + 64 k, k = 0, 1, ... in order (workload.c), all above the loaded keys,
 * so they all go to the last slice: under a shared kind (os-*, se-numa) or a
 * node-wide group (sn-numa, learned width node) every worker runs that
 * slice's inserts, into one tree with leaves of 4 entries, splitting all the
 * time. A control thread swaps schedules every few milliseconds, one-core
 * kinds included (during an RCU swap the old and the new worker run the
 * slice at once). After stop every dispatched query has completed, and a
 * router dispatches its stream in order, so the keys inserted by stream s
 * are exactly k < m_s for some m_s: every such key must be found by lookup,
 * a full scan must return exactly them, and every loaded key is still found.
 * A lost insert shows as a gap.
 *
 * Built against the hooked runtime objects: olc_delay.h widens the tree's
 * OLC windows at random (PMOSS_STRESS_DELAYS=0: off), so a race in them
 * shows in a short run. Skips (77) on a host with fewer than 2 workers.
 *
 * Usage: test_runtime_shared_mt [SECONDS]  (per mix; default:
 * $PMOSS_STRESS_SECONDS, else 0.6; `make bench` runs it longer). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "internal.h"
#include "olc_delay.h"

#define N_KEYS 20000
#define N_SLICES 8
#define MAX_STREAMS 64 /* workload.c: insert keys n + stream + 64 k */
#define SECONDS_PER_MIX 0.6 /* default */

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The k-th schedule of the rotation: every kind under which the last slice
 * has two or more workers, and a one-core kind between them. */
static pm_schedule *rotation(pm_runtime *rt, unsigned k)
{
    static const pm_schedule_kind kinds[] = {PM_KIND_OS_DEFAULT, PM_KIND_SN_NUMA,
                                             PM_KIND_OS_INTERLEAVE, PM_KIND_SN_GROUPED,
                                             PM_KIND_SE_NUMA, PM_KIND_LEARNED};
    pm_schedule_kind kind = kinds[k % (sizeof kinds / sizeof kinds[0])];
    int cpus[1024];
    unsigned n_cpus = pm_runtime_worker_cpus(rt, cpus, 1024);
    int node[N_SLICES], core[N_SLICES];
    uint8_t width[N_SLICES];
    for (unsigned i = 0; i < N_SLICES; i++) {
        int cpu = cpus[(i + k) % n_cpus];
        bool shared = kind == PM_KIND_OS_DEFAULT || kind == PM_KIND_OS_INTERLEAVE ||
                      kind == PM_KIND_SE_NUMA;
        node[i] = kind == PM_KIND_OS_DEFAULT || kind == PM_KIND_OS_INTERLEAVE
                      ? -1
                      : pm_runtime_cpu_node(rt, cpu);
        core[i] = shared || kind == PM_KIND_SN_NUMA ? -1 : cpu;
        width[i] = shared ? PM_WIDTH_NONE
                   : kind == PM_KIND_SN_GROUPED ? PM_WIDTH_THREAD
                                                : PM_WIDTH_NODE;
        if (kind == PM_KIND_LEARNED)
            core[i] = -1; /* width node: the whole node's workers */
    }
    pm_schedule *s;
    CHECK_EQ(pm_schedule_create_groups(kind, N_SLICES, node, core, width, NULL, &s), 0);
    return s;
}

/* After the run: the inserted keys of every stream form a prefix with no gap. */
static uint64_t check_inserts(pm_runtime *rt, const char *mix)
{
    size_t cap = pm_runtime_n_keys(rt) + 1, n_got; /* + 1: a scan that fills it is wrong */
    uint64_t *got = malloc(cap * sizeof *got);
    CHECK(got != NULL);
    CHECK_EQ(pm_runtime_scan(rt, N_KEYS, cap, got, NULL, &n_got), 0);
    CHECK(n_got < cap);
    uint64_t m[MAX_STREAMS] = {0}; /* per stream: 1 + the largest k present */
    for (size_t i = 0; i < n_got; i++) {
        if (i > 0 && got[i] <= got[i - 1]) {
            fprintf(stderr, "%s: scan not ascending at %llu\n", mix, (unsigned long long)got[i]);
            exit(1);
        }
        uint64_t off = got[i] - N_KEYS, s = off % MAX_STREAMS, k = off / MAX_STREAMS;
        if (k + 1 > m[s])
            m[s] = k + 1;
    }
    uint64_t total = 0;
    for (unsigned s = 0; s < MAX_STREAMS; s++) {
        for (uint64_t k = 0; k < m[s]; k++) {
            uint64_t key = N_KEYS + s + MAX_STREAMS * k;
            if (pm_runtime_lookup(rt, key, NULL) != 0) {
                fprintf(stderr, "%s: insert %llu of router stream %u (key %llu) is lost: "
                                "stream %u inserted %llu keys\n",
                        mix, (unsigned long long)k, s, (unsigned long long)key, s,
                        (unsigned long long)m[s]);
                exit(1);
            }
        }
        total += m[s];
    }
    free(got);
    if (n_got != total) {
        fprintf(stderr, "%s: a full scan returned %zu inserted keys, lookups found %llu\n", mix,
                n_got, (unsigned long long)total);
        exit(1);
    }
    for (uint64_t k = 0; k < N_KEYS; k++)
        if (pm_runtime_lookup(rt, k, NULL) != 0) {
            fprintf(stderr, "%s: loaded key %llu is lost\n", mix, (unsigned long long)k);
            exit(1);
        }
    CHECK_EQ(pm_runtime_n_keys(rt), N_KEYS + total);
    return total;
}

static int run_mix(const char *mix, double seconds)
{
    pm_runtime_config cfg;
    pm_runtime_config_init(&cfg);
    cfg.n_keys = N_KEYS;
    cfg.dataset = "dense";
    cfg.n_slices = N_SLICES;
    cfg.leaf_capacity = 4; /* a split every few inserts */
    pm_runtime *rt;
    CHECK_CREATE(&cfg, &rt);
    int cpus[1024];
    if (pm_runtime_worker_cpus(rt, cpus, 1024) < 2) {
        printf("test_runtime_shared_mt: skipped, fewer than 2 workers on this host\n");
        pm_runtime_destroy(rt);
        return 77;
    }
    pm_workload_spec spec = {.mix = mix, .seed = 11};
    char err[256] = "";
    CHECK_EQ(pm_runtime_start(rt, &spec, err, sizeof err), 0);
    double t0 = pm_now();
    unsigned swaps = 0;
    while (pm_now() - t0 < seconds) {
        pm_schedule *s = rotation(rt, swaps);
        if (pm_runtime_set_schedule(rt, s, NULL, err, sizeof err) != 0) {
            fprintf(stderr, "%s: schedule %u refused: %s\n", mix, swaps, err);
            exit(1);
        }
        pm_schedule_destroy(s);
        swaps++;
        sleep_ms(5);
    }
    pm_run_result res;
    CHECK_EQ(pm_runtime_stop(rt, &res, NULL), 0);
    CHECK_EQ(res.completed, res.dispatched);
    uint64_t inserted = check_inserts(rt, mix);
    CHECK(inserted > 0);
    printf("test_runtime_shared_mt: %s ok: %llu queries, %llu inserts, %u schedule swaps\n", mix,
           (unsigned long long)res.completed, (unsigned long long)inserted, swaps);
    pm_runtime_destroy(rt);
    return 0;
}

int main(int argc, char **argv)
{
    const char *arg = argc > 1 ? argv[1] : getenv("PMOSS_STRESS_SECONDS");
    double seconds = arg ? strtod(arg, NULL) : SECONDS_PER_MIX;
    if (!(seconds > 0)) {
        fprintf(stderr, "usage: test_runtime_shared_mt [SECONDS > 0]\n");
        return 2;
    }
    bool delays = olc_delay_install();
    static const char *const mixes[] = {"ycsb-d", "rsi-20-30-50"};
    for (unsigned i = 0; i < 2; i++) {
        int rc = run_mix(mixes[i], seconds);
        if (rc)
            return rc;
    }
    printf("test_runtime_shared_mt: ok (delays %s)\n", delays ? "on" : "off");
    return 0;
}
