/* Control calls from other threads while a run is in progress, as the Python
 * serving loop does it: one thread in pm_runtime_run, the main thread
 * reading latency (reset-on-read), switching schedules and taking snapshots,
 * a second reader thread reading latency too. Checks that the intervals
 * partition the run (counts add up to the completed queries), that every
 * summary is ordered, and (under TSan) that nothing races. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "internal.h"

#define N_SLICES 32

typedef struct run_arg {
    pm_runtime *rt;
    double seconds;
    pm_run_result res;
    int rc;
    _Atomic int done;
} run_arg;

static void *run_main(void *p)
{
    run_arg *a = p;
    pm_workload_spec spec = {.mix = "ycsb-b", .distribution = "uniform", .seed = 9};
    char err[256] = "";
    a->rc = pm_runtime_run(a->rt, &spec, a->seconds, &a->res, NULL, err, sizeof err);
    atomic_store(&a->done, 1);
    return NULL;
}

typedef struct reader_arg {
    pm_runtime *rt;
    _Atomic int *stop;
    uint64_t count, reads;
} reader_arg;

static void check_summary(const pm_latency_summary *s)
{
    if (s->count == 0) {
        CHECK(s->p50_ns == 0 && s->max_ns == 0);
        return;
    }
    CHECK(s->p50_ns <= s->p90_ns && s->p90_ns <= s->p99_ns && s->p99_ns <= s->p999_ns &&
          s->p999_ns <= s->max_ns);
}

static void *reader_main(void *p)
{
    reader_arg *a = p;
    while (!atomic_load(a->stop)) {
        pm_latency_summary s;
        CHECK_EQ(pm_runtime_latency(a->rt, &s), 0);
        check_summary(&s);
        a->count += s.count;
        a->reads++;
        struct timespec ts = {0, 3000000L};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static pm_schedule *spread(pm_runtime *rt)
{
    int cpus[1024], node[N_SLICES], core[N_SLICES];
    unsigned n = pm_runtime_worker_cpus(rt, cpus, 1024);
    for (unsigned i = 0; i < N_SLICES; i++) {
        core[i] = cpus[i % n];
        node[i] = pm_runtime_cpu_node(rt, core[i]);
    }
    pm_schedule *s;
    CHECK_EQ(pm_schedule_create(PM_KIND_SN_SPREAD, N_SLICES, node, core, "test", &s), 0);
    return s;
}

static pm_schedule *os_default(void)
{
    int minus[N_SLICES];
    for (unsigned i = 0; i < N_SLICES; i++)
        minus[i] = -1;
    pm_schedule *s;
    CHECK_EQ(pm_schedule_create(PM_KIND_OS_DEFAULT, N_SLICES, minus, minus, "test", &s), 0);
    return s;
}

int main(void)
{
    pm_runtime_config cfg;
    pm_runtime_config_init(&cfg);
    cfg.n_keys = 100000;
    cfg.n_slices = N_SLICES;
    cfg.queue_capacity = 64;
    pm_runtime *rt;
    CHECK_CREATE(&cfg, &rt);
    char err[256] = "";

    _Atomic int stop_reader = 0;
    reader_arg ra = {.rt = rt, .stop = &stop_reader};
    pthread_t reader;
    CHECK_EQ(pthread_create(&reader, NULL, reader_main, &ra), 0);

    run_arg a = {.rt = rt, .seconds = 0.6};
    pthread_t runner;
    CHECK_EQ(pthread_create(&runner, NULL, run_main, &a), 0);

    uint64_t count = 0, reads_with_queries = 0, snap[N_SLICES * 4];
    int switched = 0;
    pm_schedule *sched[2] = {spread(rt), os_default()};
    while (!atomic_load(&a.done)) {
        pm_latency_summary s;
        CHECK_EQ(pm_runtime_latency(rt, &s), 0);
        check_summary(&s);
        count += s.count;
        reads_with_queries += s.count > 0;
        /* switch twice mid-run: latency reads must not wait for (or break)
         * the migration, and the switch must not lose queries */
        if (switched < 2 && reads_with_queries > (uint64_t)(switched + 1) * 3) {
            pm_migration_report rep;
            CHECK_EQ(pm_runtime_set_schedule(rt, sched[switched], &rep, err, sizeof err), 0);
            switched++;
            CHECK_EQ(pm_runtime_snapshot(rt, snap, N_SLICES * 4), 0);
        }
        sleep_ms(5);
    }
    CHECK_EQ(pthread_join(runner, NULL), 0);
    atomic_store(&stop_reader, 1);
    CHECK_EQ(pthread_join(reader, NULL), 0);
    CHECK_EQ(a.rc, 0);
    pm_latency_summary last;
    CHECK_EQ(pm_runtime_latency(rt, &last), 0);
    count += last.count + ra.count;

    CHECK(a.res.completed > 0);
    CHECK_EQ(a.res.completed, a.res.dispatched);
    /* the reset-on-read intervals of both readers partition the run */
    CHECK_EQ(count, a.res.completed);
    /* the run's own summary saw every query, whatever the readers did */
    CHECK_EQ(a.res.latency.count, a.res.completed);
    check_summary(&a.res.latency);
    CHECK(a.res.latency.p50_ns > 0);
    CHECK(reads_with_queries > 0 && ra.reads > 0);
    CHECK_EQ(switched, 2);
    printf("test_latency_mt: ok (%llu queries, %d switches, %llu+%llu reads, p50 %llu ns, "
           "p99 %llu ns, max %llu ns)\n",
           (unsigned long long)a.res.completed, switched,
           (unsigned long long)reads_with_queries, (unsigned long long)ra.reads,
           (unsigned long long)a.res.latency.p50_ns, (unsigned long long)a.res.latency.p99_ns,
           (unsigned long long)a.res.latency.max_ns);
    pm_schedule_destroy(sched[0]);
    pm_schedule_destroy(sched[1]);
    pm_runtime_destroy(rt);
    return 0;
}
