/* Single-thread pm_tree inserts and lookups, and single-router throughput.
 * usage: pmoss_bench_tree tree N | router N SECONDS
 * Prints one JSON object. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_keys.h"
#include "internal.h"

static int bench_tree(uint64_t n)
{
    pm_tree *t;
    if (pm_tree_create(0, -1, &t))
        return 1;
    double t0 = bench_now();
    for (uint64_t i = 0; i < n; i++)
        pm_tree_insert(t, bench_key(i), i, NULL, NULL);
    double t1 = bench_now();
    uint64_t found = 0, v;
    for (uint64_t i = 0; i < n; i++)
        found += pm_tree_lookup(t, bench_probe(i, n), &v, NULL) == 0;
    double t2 = bench_now();
    printf("{\"impl\": \"pm_tree\", \"n\": %llu, \"insert_s\": %.6f, \"lookup_s\": %.6f, "
           "\"found\": %llu}\n",
           (unsigned long long)n, t1 - t0, t2 - t1, (unsigned long long)found);
    pm_tree_destroy(t);
    return found == n ? 0 : 1;
}

/* Router throughput: one thread generates ycsb-c queries (zipf), routes them
 * by binary search over 256 slice boundaries and pushes them into a worker
 * queue (waiting while it is full); a drain thread pops and discards them in
 * bursts (no tree work), so the figure is the router's own cost. */
typedef struct drain { pm_queue *q; _Atomic int stop; uint64_t popped; } drain;

static void *drain_main(void *arg)
{
    drain *d = arg;
    pm_query q;
    for (;;) {
        int stop = atomic_load(&d->stop);
        if (pm_queue_pop(d->q, &q) == 0) {
            d->popped++;
        } else if (stop) {
            return NULL;
        } else {
            /* drain in bursts: popping right behind the router would bounce
             * every cell's cache line and measure that instead */
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
}

static int bench_router(uint64_t n, double seconds)
{
    pm_runtime_config cfg;
    pm_runtime_config_init(&cfg);
    cfg.n_keys = n;
    pm_runtime *rt;
    char err[256];
    if (pm_runtime_create(&cfg, &rt, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    uint64_t *keys = malloc(n * sizeof *keys);
    pm_dataset_generate("dense", n, 1, keys);
    pm_workload_spec spec = {.mix = "ycsb-c", .seed = 1};
    pm_workload *w;
    if (pm_workload_create(&spec, "dense", keys, n, 0, &w, err, sizeof err))
        return 1;
    pm_queue q;
    pm_queue_init(&q, 1024);
    drain d = {.q = &q};
    pthread_t th;
    pthread_create(&th, NULL, drain_main, &d);
    uint64_t sent = 0;
    double t0 = bench_now(), t1 = t0;
    while (t1 - t0 < seconds) {
        for (int i = 0; i < 4096; i++) {
            pm_query qq;
            pm_workload_next(w, &qq);
            qq.slice = pm_runtime_slice_of(rt, qq.key);
            while (pm_queue_push(&q, &qq) != 0)
                sched_yield();
            sent++;
        }
        t1 = bench_now();
    }
    atomic_store(&d.stop, 1);
    pthread_join(th, NULL);
    printf("{\"impl\": \"router\", \"n\": %llu, \"queries\": %llu, \"seconds\": %.6f, "
           "\"popped\": %llu}\n",
           (unsigned long long)n, (unsigned long long)sent, t1 - t0,
           (unsigned long long)d.popped);
    pm_queue_fini(&q);
    pm_workload_destroy(w);
    free(keys);
    pm_runtime_destroy(rt);
    return d.popped == sent ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "tree") == 0)
        return bench_tree(strtoull(argv[2], NULL, 0));
    if (argc >= 4 && strcmp(argv[1], "router") == 0)
        return bench_router(strtoull(argv[2], NULL, 0), strtod(argv[3], NULL));
    fprintf(stderr, "usage: pmoss_bench_tree tree N | router N SECONDS\n");
    return 2;
}
