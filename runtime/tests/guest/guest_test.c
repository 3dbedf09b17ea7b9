/* Runs inside a 2-node qemu guest (see run_guest.sh; 2 CPUs per node):
 * enforce a mixed-width schedule (execution groups of width
 * thread, core, l3 and node), check with move_pages that every page of
 * every slice lies on its node, then switch every slice to the other node
 * while queries run and check again — while they still run — and that no
 * key or query was lost. Prints "PMOSS-GUEST: PASS" or "PMOSS-GUEST: FAIL
 * <why>". */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#define N_KEYS 100000
#define N_SLICES 32

static int fail(const char *why)
{
    printf("PMOSS-GUEST: FAIL %s\n", why);
    return 1;
}

static int cpus[8];
static unsigned n_cpus;

/* Schedule: first half of the slices on node `first`, second half on the
 * other; slice i anchored on one of its node's workers with width i mod 4
 * (thread, core, l3, node; every eighth anchorless, width node). */
static pm_schedule *halves(pm_runtime *rt, int first)
{
    int node[N_SLICES], core[N_SLICES];
    uint8_t width[N_SLICES];
    for (int i = 0; i < N_SLICES; i++) {
        node[i] = i < N_SLICES / 2 ? first : 1 - first;
        core[i] = -1;
        for (unsigned k = 0, seen = 0; k < n_cpus; k++)
            if (pm_runtime_cpu_node(rt, cpus[k]) == node[i] && seen++ == (unsigned)(i / 4) % 2)
                core[i] = cpus[k];
        if (core[i] < 0) /* one worker on the node: the first one */
            for (unsigned k = n_cpus; k-- > 0;)
                if (pm_runtime_cpu_node(rt, cpus[k]) == node[i])
                    core[i] = cpus[k];
        width[i] = (uint8_t)(i % 4);
        if (i % 8 == 7)
            core[i] = -1;
    }
    pm_schedule *s = NULL;
    pm_schedule_create_groups(PM_KIND_LEARNED, N_SLICES, node, core, width, "qemu-2node", &s);
    return s;
}

/* Every resident page of every slice on the node the schedule says. */
static int check_placement(pm_runtime *rt, pm_schedule *s, const char *when)
{
    uint64_t total = 0;
    for (unsigned i = 0; i < N_SLICES; i++) {
        uint64_t counts[2] = {0, 0};
        if (pm_runtime_slice_page_nodes(rt, i, counts, 2) != 0)
            return fail("move_pages query failed");
        int want = pm_schedule_nodes(s)[i];
        if (counts[1 - want] != 0 || counts[want] == 0) {
            printf("PMOSS-GUEST: FAIL %s: slice %u has %llu pages on node %d, %llu on node %d\n",
                   when, i, (unsigned long long)counts[want], want,
                   (unsigned long long)counts[1 - want], 1 - want);
            return 1;
        }
        total += counts[want];
    }
    printf("placement %s: all %llu pages of %d slices on their nodes\n", when,
           (unsigned long long)total, N_SLICES);
    return 0;
}

int main(void)
{
    if (pm_numa_nodes() != 2)
        return fail("the guest does not have 2 NUMA nodes");
    pm_runtime_config cfg;
    pm_runtime_config_init(&cfg);
    cfg.n_keys = N_KEYS;
    cfg.n_slices = N_SLICES;
    cfg.dataset = "uniform";
    cfg.machine = "qemu-2node";
    pm_runtime *rt;
    char err[256];
    if (pm_runtime_create(&cfg, &rt, err, sizeof err) != 0)
        return fail(err);
    n_cpus = pm_runtime_worker_cpus(rt, cpus, 8);
    unsigned on1 = 0;
    printf("topology:");
    for (unsigned k = 0; k < n_cpus && k < 8; k++) {
        on1 += pm_runtime_cpu_node(rt, cpus[k]) == 1;
        printf(" cpu %d (node %d, core %d, l3 %d)", cpus[k], pm_runtime_cpu_node(rt, cpus[k]),
               pm_runtime_cpu_domain(rt, cpus[k], PM_WIDTH_CORE),
               pm_runtime_cpu_domain(rt, cpus[k], PM_WIDTH_L3));
    }
    printf("\n");
    if (n_cpus > 8 || on1 == 0 || on1 == n_cpus)
        return fail("expected worker CPUs on each of 2 nodes");
    pm_schedule *a = halves(rt, 0), *b = halves(rt, 1);
    pm_migration_report rep;
    if (pm_runtime_set_schedule(rt, a, &rep, err, sizeof err) != 0)
        return fail(err);
    printf("schedule A: %llu slices moved, %llu pages moved, %llu failed\n",
           (unsigned long long)rep.slices_moved, (unsigned long long)rep.pages_moved,
           (unsigned long long)rep.pages_failed);
    if (rep.pages_failed || check_placement(rt, a, "after schedule A"))
        return fail("schedule A placement");

    pm_workload_spec spec = {.mix = "rsi-20-30-50", .seed = 1};
    if (pm_runtime_start(rt, &spec, err, sizeof err) != 0)
        return fail(err);
    struct timespec ts = {0, 300000000L};
    nanosleep(&ts, NULL);
    if (pm_runtime_set_schedule(rt, b, &rep, err, sizeof err) != 0)
        return fail(err);
    printf("schedule B while running: %llu slices moved, %llu pages moved, %llu failed, %.3f s\n",
           (unsigned long long)rep.slices_moved, (unsigned long long)rep.pages_moved,
           (unsigned long long)rep.pages_failed, rep.seconds);
    if (rep.slices_moved != N_SLICES || rep.pages_failed)
        return fail("schedule B migration incomplete");
    nanosleep(&ts, NULL);
    if (check_placement(rt, b, "while queries run under schedule B"))
        return 1;
    pm_run_result res;
    pm_runtime_stop(rt, &res, NULL);
    printf("run: %llu dispatched, %llu completed\n", (unsigned long long)res.dispatched,
           (unsigned long long)res.completed);
    if (res.completed != res.dispatched || res.completed == 0)
        return fail("queries lost");
    if (check_placement(rt, b, "after the run (inserted pages included)"))
        return 1;
    uint64_t *keys = malloc(N_KEYS * sizeof *keys);
    pm_dataset_generate("uniform", N_KEYS, cfg.seed, keys);
    for (uint64_t i = 0; i < N_KEYS; i++)
        if (pm_runtime_lookup(rt, keys[i], NULL) != 0)
            return fail("a loaded key was lost");
    free(keys);
    pm_schedule_destroy(a);
    pm_schedule_destroy(b);
    pm_runtime_destroy(rt);
    printf("PMOSS-GUEST: PASS\n");
    return 0;
}
