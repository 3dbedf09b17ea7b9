/* Workload generator: determinism, op mixes, key distributions, datasets. */
#include <errno.h>
#include <string.h>

#include "check.h"
#include "internal.h"

#define N 100000

static uint64_t keys[N];

static pm_workload *gen(const char *mix, const char *dist, uint64_t seed, uint32_t stream)
{
    pm_workload_spec spec = {.mix = mix, .distribution = dist, .seed = seed};
    pm_workload *w;
    char err[128];
    CHECK_EQ(pm_workload_create(&spec, "dense", keys, N, stream, &w, err, sizeof err), 0);
    return w;
}

static void test_determinism(void)
{
    pm_workload *a = gen("rsi-25-50-25", NULL, 9, 0), *b = gen("rsi-25-50-25", NULL, 9, 0),
                *c = gen("rsi-25-50-25", NULL, 10, 0), *d = gen("rsi-25-50-25", NULL, 9, 1);
    int diff_seed = 0, diff_stream = 0;
    for (int i = 0; i < 10000; i++) {
        pm_query qa, qb, qc, qd;
        pm_workload_next(a, &qa), pm_workload_next(b, &qb), pm_workload_next(c, &qc),
            pm_workload_next(d, &qd);
        CHECK(qa.key == qb.key && qa.op == qb.op && qa.value == qb.value);
        diff_seed += qa.key != qc.key;
        diff_stream += qa.key != qd.key;
        if (qa.op == PM_OP_INSERT && qd.op == PM_OP_INSERT)
            CHECK(qa.key != qd.key); /* dense inserts of two streams never collide */
    }
    CHECK(diff_seed > 5000 && diff_stream > 5000);
    pm_workload_destroy(a), pm_workload_destroy(b), pm_workload_destroy(c), pm_workload_destroy(d);
}

static void test_mixes(void)
{
    struct { const char *mix; unsigned pct[4]; } want[] = {
        {"ycsb-a", {50, 50, 0, 0}}, {"ycsb-b", {95, 5, 0, 0}},   {"ycsb-c", {100, 0, 0, 0}},
        {"ycsb-d", {95, 0, 5, 0}},  {"ycsb-e", {0, 0, 5, 95}},   {"scan", {0, 0, 0, 100}},
        {"rsi-20-30-50", {20, 0, 50, 30}}, {"rsi-25-50-25", {25, 0, 25, 50}},
    };
    for (size_t m = 0; m < sizeof want / sizeof *want; m++) {
        pm_workload *w = gen(want[m].mix, "uniform", 1, 0);
        unsigned count[4] = {0};
        for (int i = 0; i < 100000; i++) {
            pm_query q;
            CHECK_EQ(pm_workload_next(w, &q), 0);
            count[q.op]++;
            if (q.op == PM_OP_SCAN)
                CHECK(q.value >= 1 && q.value <= 100);
            if (q.op == PM_OP_READ || q.op == PM_OP_UPDATE || q.op == PM_OP_SCAN)
                CHECK(q.key < N);
            if (q.op == PM_OP_INSERT)
                CHECK(q.key >= N);
        }
        for (int op = 0; op < 4; op++) {
            double got = count[op] / 1000.0;
            CHECK(got > want[m].pct[op] - 1.0 && got < want[m].pct[op] + 1.0);
        }
        pm_workload_destroy(w);
    }
    char err[128];
    pm_workload *w;
    pm_workload_spec bad = {.mix = "ycsb-a", .distribution = "pareto"};
    CHECK_EQ(pm_workload_create(&bad, "dense", keys, N, 0, &w, err, sizeof err), -EINVAL);
    CHECK(strstr(err, "pareto"));
    bad.distribution = NULL;
    CHECK_EQ(pm_workload_create(&bad, "sparse", keys, N, 0, &w, err, sizeof err), -EINVAL);
    bad.zipf_theta = 1.0;
    CHECK_EQ(pm_workload_create(&bad, "dense", keys, N, 0, &w, err, sizeof err), -EINVAL);
}

/* Share of ops on the most popular 1% of keys. */
static double top_share(const char *mix, const char *dist)
{
    static unsigned hits[N];
    memset(hits, 0, sizeof hits);
    pm_workload *w = gen(mix, dist, 5, 0);
    int reads = 0;
    for (int i = 0; i < 200000; i++) {
        pm_query q;
        pm_workload_next(w, &q);
        if (q.op == PM_OP_READ && q.key < N)
            hits[q.key]++, reads++;
    }
    pm_workload_destroy(w);
    /* partial selection: sum of the N/100 largest counts */
    unsigned long top = 0;
    for (int k = 0; k < N / 100; k++) {
        unsigned best = 0, at = 0;
        for (unsigned i = 0; i < N; i++)
            if (hits[i] > best)
                best = hits[i], at = i;
        top += best;
        hits[at] = 0;
    }
    return (double)top / reads;
}

static void test_distributions(void)
{
    double u = top_share("ycsb-c", "uniform"), z = top_share("ycsb-c", "zipf");
    CHECK(u < 0.06); /* sampling noise only: ~2 reads per key */
    CHECK(z > 0.4); /* theta 0.99: the top 1% gets roughly half the reads */
    /* hotspot: 80% of ops on the first 20% of keys */
    pm_workload *w = gen("ycsb-c", "hotspot", 2, 0);
    int hot = 0;
    for (int i = 0; i < 100000; i++) {
        pm_query q;
        pm_workload_next(w, &q);
        hot += q.key < N / 5;
    }
    CHECK(hot > 79000 && hot < 81000);
    pm_workload_destroy(w);
    /* latest: reads favour the newest keys, including fresh inserts */
    w = gen("ycsb-d", NULL, 3, 0);
    int recent = 0, reads = 0;
    for (int i = 0; i < 100000; i++) {
        pm_query q;
        pm_workload_next(w, &q);
        if (q.op == PM_OP_READ)
            reads++, recent += q.key >= N - 1000;
    }
    CHECK(recent > reads / 2);
    pm_workload_destroy(w);
}

static void test_datasets(void)
{
    static uint64_t a[N], b[N];
    const char *names[] = {"dense", "uniform", "clustered"};
    for (int d = 0; d < 3; d++) {
        CHECK_EQ(pm_dataset_generate(names[d], N, 11, a), 0);
        CHECK_EQ(pm_dataset_generate(names[d], N, 11, b), 0);
        CHECK(memcmp(a, b, sizeof a) == 0);
        for (int i = 1; i < N; i++)
            CHECK(a[i] > a[i - 1]);
    }
    CHECK(a[N - 1] - a[0] > (1ull << 40)); /* clustered: spread over the key space */
    int close = 0;                          /* ...but most neighbours are near */
    for (int i = 1; i < N; i++)
        close += a[i] - a[i - 1] < (1ull << 24);
    CHECK(close > N * 9 / 10);
    CHECK_EQ(pm_dataset_generate("zipf", N, 1, a), -EINVAL);
}

int main(void)
{
    for (uint64_t i = 0; i < N; i++)
        keys[i] = i;
    test_determinism();
    test_mixes();
    test_distributions();
    test_datasets();
    printf("test_workload: ok\n");
    return 0;
}
