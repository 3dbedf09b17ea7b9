/* Off-core sweeping through an injected uncore hook (pm_uncore_ops): the
 * off-core sweeper opens, reads and closes it on its own thread, stitches
 * the readings into the snapshot rounds (read concurrently here), keeps NAN
 * as null, restarts them per run, and turns a refused open into null plus
 * the hook's one message. Also the Arrow export of a whole snapshot. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pmoss/arrow_c_data.h"
#include "pmoss/collector.h"
#include "pmoss/runtime.h"

#define N_KEYS 20000
#define N_SLICES 16
#define FAKE_NODES 2
#define FAKE_LINKS 3

enum { FAKE_OK, FAKE_ABSENT, FAKE_REFUSED };

typedef struct fake {
    pthread_t opener;
    int reads, mode;
} fake;

static _Atomic int opens, closes, wrong_thread, last_reads;

static int fake_open(void *ctx, void **state, unsigned *n_nodes, unsigned *n_links, char *msg, size_t len)
{
    int mode = *(const int *)ctx;
    if (mode == FAKE_REFUSED) {
        snprintf(msg, len, "fake: kernel.perf_event_paranoid is 2 (needs <= 0), no CAP_PERFMON");
        return -EACCES;
    }
    fake *f = calloc(1, sizeof *f);
    CHECK(f != NULL);
    f->opener = pthread_self();
    f->mode = mode;
    *state = f;
    *n_nodes = mode == FAKE_ABSENT ? 0 : FAKE_NODES;
    *n_links = mode == FAKE_ABSENT ? 0 : FAKE_LINKS;
    atomic_fetch_add(&opens, 1);
    return 0;
}

/* Reading r of a run: imc_read node i = 100 (i + 1) r, imc_write node 0 =
 * 10 r (node 1 unmeasured: NAN), link_in/out link i = 1000 r + i / 2000 r + i. */
static int fake_read(void *state, double *v, unsigned cap)
{
    fake *f = state;
    if (!pthread_equal(f->opener, pthread_self()))
        atomic_store(&wrong_thread, 1);
    double r = ++f->reads;
    for (unsigned i = 0; i < PM_N_OFFCORE * cap; i++)
        v[i] = NAN;
    if (f->mode == FAKE_ABSENT)
        return 0;
    CHECK(cap >= FAKE_LINKS);
    for (unsigned i = 0; i < FAKE_NODES; i++)
        v[PM_OFF_IMC_READ * cap + i] = 100.0 * (i + 1) * r;
    v[PM_OFF_IMC_WRITE * cap + 0] = 10.0 * r;
    for (unsigned i = 0; i < FAKE_LINKS; i++) {
        v[PM_OFF_LINK_IN * cap + i] = 1000.0 * r + i;
        v[PM_OFF_LINK_OUT * cap + i] = 2000.0 * r + i;
    }
    return 0;
}

static void fake_close(void *state)
{
    fake *f = state;
    atomic_store(&last_reads, f->reads);
    atomic_fetch_add(&closes, 1);
    free(f);
}

static const pm_uncore_ops fake_ops = {fake_open, fake_read, fake_close, PM_N_OFFCORE, pm_offcore_names};

static pm_runtime *make(const pm_uncore_ops *ops, int *mode)
{
    pm_runtime_config cfg;
    pm_runtime_config_init(&cfg);
    cfg.n_keys = N_KEYS;
    cfg.n_slices = N_SLICES;
    cfg.uncore = ops;
    cfg.uncore_ctx = mode;
    pm_runtime *rt;
    CHECK_CREATE(&cfg, &rt);
    return rt;
}

static const pm_workload_spec SPEC = {.mix = "ycsb-a", .seed = 3};

typedef struct reading {
    uint64_t stats[N_SLICES * 16];
    double oc[PM_N_OFFCORE * 8];
    pm_snapshot snap;
} reading;

static int read_now(pm_runtime *rt, reading *r)
{
    memset(r, 0, sizeof *r);
    r->snap.stats = r->stats;
    r->snap.stats_cap = sizeof r->stats / sizeof r->stats[0];
    r->snap.offcore = r->oc;
    r->snap.offcore_cap = sizeof r->oc / sizeof r->oc[0];
    return pm_runtime_snapshot_read(rt, &r->snap);
}

/* The reading a snapshot shows is one whole fake reading: r from imc_read
 * node 0, every other cell consistent with the same r. Returns r. */
static int check_reading(const reading *rd)
{
    const pm_snapshot *s = &rd->snap;
    CHECK_EQ(s->offcore_nodes, FAKE_NODES);
    CHECK_EQ(s->offcore_links, FAKE_LINKS);
    CHECK_EQ(s->offcore_stride, FAKE_LINKS);
    const double *v = rd->oc;
    unsigned st = s->offcore_stride;
    double r = v[PM_OFF_IMC_READ * st] / 100.0;
    CHECK(r >= 1 && r == floor(r));
    CHECK(v[PM_OFF_IMC_READ * st + 1] == 200.0 * r);
    CHECK(v[PM_OFF_IMC_WRITE * st] == 10.0 * r);
    CHECK(isnan(v[PM_OFF_IMC_WRITE * st + 1])); /* null stays null, never 0 */
    for (unsigned i = 0; i < FAKE_LINKS; i++)
        CHECK(v[PM_OFF_LINK_OUT * st + i] == 2000.0 * r + i);
    CHECK(isnan(v[PM_OFF_IMC_TOTAL * st]));
    CHECK_EQ(s->offcore_msg[0], '\0');
    return (int)r;
}

static void *reader_main(void *arg)
{
    pm_runtime *rt = arg;
    reading *rd = malloc(sizeof *rd);
    int prev = 0;
    for (int i = 0; i < 10; i++) {
        CHECK_EQ(read_now(rt, rd), 0);
        int r = check_reading(rd);
        CHECK(r >= prev); /* readings are cumulative within a run */
        prev = r;
    }
    free(rd);
    return NULL;
}

static void test_readings_per_round_and_per_run(void)
{
    int mode = FAKE_OK;
    pm_runtime *rt = make(&fake_ops, &mode);
    CHECK_EQ(pm_runtime_n_offcore_values(rt), PM_N_OFFCORE);
    CHECK(strcmp(pm_runtime_offcore_name(rt, 3), "link_out_bytes") == 0);
    CHECK(pm_runtime_offcore_name(rt, PM_N_OFFCORE) == NULL);
    reading *rd = malloc(sizeof *rd);
    CHECK_EQ(read_now(rt, rd), 0); /* no run yet: nothing to report */
    CHECK_EQ(rd->snap.offcore_nodes + rd->snap.offcore_links, 0);
    for (int run = 1; run <= 2; run++) {
        char err[256] = "";
        CHECK_EQ(pm_runtime_start(rt, &SPEC, err, sizeof err), 0);
        CHECK_EQ(atomic_load(&opens), run); /* opened once the run started */
        pthread_t th[2];
        for (int i = 0; i < 2; i++)
            CHECK_EQ(pthread_create(&th[i], NULL, reader_main, rt), 0);
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        pm_run_result res;
        CHECK_EQ(pm_runtime_stop(rt, &res, NULL), 0);
        CHECK(res.completed > 0);
        CHECK_EQ(atomic_load(&closes), run);
        CHECK_EQ(atomic_load(&wrong_thread), 0); /* open, every read, close: one thread */
        CHECK_EQ(read_now(rt, rd), 0);
        /* the reading taken after the workers stopped, of this run only */
        CHECK_EQ(check_reading(rd), atomic_load(&last_reads));
    }
    rd->snap.offcore_cap = 1; /* too small: -ENOSPC, shape written */
    CHECK_EQ(pm_runtime_snapshot_read(rt, &rd->snap), -ENOSPC);
    CHECK_EQ(rd->snap.offcore_stride, FAKE_LINKS);
    rd->snap.offcore = NULL; /* off-core not wanted: fine */
    CHECK_EQ(pm_runtime_snapshot_read(rt, &rd->snap), 0);
    free(rd);
    pm_runtime_destroy(rt);
}

static void test_absent_refused_and_none(void)
{
    int modes[] = {FAKE_ABSENT, FAKE_REFUSED};
    for (int m = 0; m < 3; m++) {
        pm_runtime *rt = make(m < 2 ? &fake_ops : NULL, m < 2 ? &modes[m] : NULL);
        pm_run_result res;
        char err[256] = "";
        CHECK_EQ(pm_runtime_run(rt, &SPEC, 0.05, &res, NULL, err, sizeof err), 0);
        CHECK(res.completed > 0); /* off-core trouble never stops the run */
        reading *rd = malloc(sizeof *rd);
        CHECK_EQ(read_now(rt, rd), 0);
        CHECK_EQ(rd->snap.offcore_nodes + rd->snap.offcore_links, 0);
        if (m == 1)
            CHECK(strstr(rd->snap.offcore_msg, "CAP_PERFMON") != NULL);
        else
            CHECK_EQ(rd->snap.offcore_msg[0], '\0');
        free(rd);
        pm_runtime_destroy(rt);
    }
}

static int bit(const struct ArrowArray *a, int64_t i)
{
    const uint8_t *valid = a->buffers[0];
    return !valid || (valid[i / 8] >> (i % 8)) & 1;
}

static void test_export_arrow(void)
{
    int mode = FAKE_OK;
    pm_runtime *rt = make(&fake_ops, &mode);
    int cpus[256];
    unsigned n = pm_runtime_worker_cpus(rt, cpus, 256);
    int node[N_SLICES], core[N_SLICES];
    for (int i = 0; i < N_SLICES; i++) {
        core[i] = cpus[i % n];
        node[i] = pm_runtime_cpu_node(rt, core[i]);
    }
    pm_schedule *s;
    CHECK_EQ(pm_schedule_create(PM_KIND_SN_SPREAD, N_SLICES, node, core, NULL, &s), 0);
    CHECK_EQ(pm_runtime_set_schedule(rt, s, NULL, NULL, 0), 0);
    pm_schedule_destroy(s);
    char err[256] = "";
    CHECK_EQ(pm_runtime_run(rt, &SPEC, 0.05, NULL, NULL, err, sizeof err), 0);
    struct ArrowArray sa, oa;
    struct ArrowSchema ss, os;
    char msg[PM_OFFCORE_MSG_LEN] = "x";
    CHECK_EQ(pm_runtime_export_arrow(rt, &sa, &ss, &oa, &os, msg, sizeof msg), 0);
    CHECK_EQ(msg[0], '\0');
    /* slices: slice, core, node, queries, then the stats after "queries" */
    CHECK_EQ(sa.length, N_SLICES);
    CHECK_EQ(sa.n_children, 4 + (int64_t)pm_runtime_n_stats(rt) - 1);
    CHECK(strcmp(ss.children[1]->name, "core") == 0 && strcmp(ss.children[4]->name, "nodes_visited") == 0);
    const int32_t *ecore = sa.children[1]->buffers[1];
    const int64_t *queries = sa.children[3]->buffers[1];
    int64_t total = 0;
    for (int i = 0; i < N_SLICES; i++) {
        CHECK_EQ(ecore[i], core[i]);
        total += queries[i];
    }
    CHECK(total > 0);
    /* off-core: 2 node rows then 3 link rows; a node row has no link values */
    CHECK_EQ(oa.length, FAKE_NODES + FAKE_LINKS);
    CHECK(strcmp(os.children[2]->name, "imc_read_bytes") == 0);
    const struct ArrowArray *imc_write = oa.children[2 + PM_OFF_IMC_WRITE];
    const struct ArrowArray *link_in = oa.children[2 + PM_OFF_LINK_IN];
    const double *lin = link_in->buffers[1];
    double r = ((const double *)imc_write->buffers[1])[0] / 10.0;
    CHECK(r >= 1 && bit(imc_write, 0) && !bit(imc_write, 1) && !bit(imc_write, 2));
    CHECK(!bit(link_in, 0) && bit(link_in, 2) && lin[4] == 1000.0 * r + 2);
    sa.release(&sa);
    ss.release(&ss);
    oa.release(&oa);
    os.release(&os);
    pm_runtime_destroy(rt);

    /* a hook in another layout cannot go through the collector's exporter */
    pm_uncore_ops other = fake_ops;
    other.n_values = 2;
    rt = make(&other, &mode);
    CHECK_EQ(pm_runtime_export_arrow(rt, &sa, &ss, &oa, &os, NULL, 0), -EINVAL);
    pm_runtime_destroy(rt);
}

int main(void)
{
    test_readings_per_round_and_per_run();
    test_absent_refused_and_none();
    test_export_arrow();
    printf("ok\n");
    return 0;
}
