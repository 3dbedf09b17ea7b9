/* Latency histograms: bucket math, percentiles of known inputs within bucket
 * precision, reset-on-read intervals (histogram level and through the
 * runtime API), and the per-run summary being independent of readers. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "internal.h"

/* v <= reported <= v * 17/16: the highest value of v's bucket. */
static int within_bucket(uint64_t reported, uint64_t v)
{
    return reported >= v && (unsigned __int128)reported * 16 <= (unsigned __int128)v * 17;
}

static void test_buckets(void)
{
    for (uint64_t v = 0; v < 32; v++) {
        CHECK_EQ(pm_lat_bucket_low(pm_lat_bucket(v)), v);
        CHECK_EQ(pm_lat_bucket_high(pm_lat_bucket(v)), v);
    }
    unsigned last = pm_lat_bucket(UINT64_MAX);
    CHECK(last < PM_LAT_BUCKETS);
    CHECK(pm_lat_bucket_high(last) == UINT64_MAX);
    /* buckets tile [0, 2^64) without gaps or overlaps */
    for (unsigned b = 0; b < last; b++) {
        CHECK(pm_lat_bucket_low(b) <= pm_lat_bucket_high(b));
        CHECK(pm_lat_bucket_high(b) + 1 == pm_lat_bucket_low(b + 1));
        CHECK_EQ(pm_lat_bucket(pm_lat_bucket_low(b)), b);
        CHECK_EQ(pm_lat_bucket(pm_lat_bucket_high(b)), b);
    }
    /* every value lies in its bucket, and buckets are at most 1/16 wide */
    pm_rng r;
    pm_rng_seed(&r, 42);
    for (int i = 0; i < 200000; i++) {
        uint64_t v = pm_rng_next(&r) >> pm_rng_below(&r, 64);
        unsigned b = pm_lat_bucket(v);
        uint64_t lo = pm_lat_bucket_low(b), hi = pm_lat_bucket_high(b);
        CHECK(lo <= v && v <= hi);
        CHECK(hi - lo <= (lo < 32 ? 0 : lo / 16));
    }
}

static pm_lat_hist *new_hist(void)
{
    pm_lat_hist *h = aligned_alloc(PM_CACHE_LINE, sizeof *h);
    CHECK(h != NULL);
    memset(h, 0, sizeof *h);
    return h;
}

static void summarize(pm_lat_hist *h, pm_lat_cursor *cur, int take_max, pm_latency_summary *s)
{
    static pm_lat_interval iv;
    memset(&iv, 0, sizeof iv);
    pm_lat_collect(h, cur, take_max, &iv);
    pm_lat_summarize(&iv, s);
}

static void test_percentiles(void)
{
    static pm_lat_cursor reader, run;
    memset(&reader, 0, sizeof reader);
    memset(&run, 0, sizeof run);
    pm_lat_hist *h = new_hist();
    pm_latency_summary s;

    /* empty: everything 0 */
    summarize(h, &reader, 1, &s);
    CHECK(s.count == 0 && s.p50_ns == 0 && s.p99_ns == 0 && s.max_ns == 0 && s.mean_ns == 0);

    /* 1 us .. 1 ms in 1 us steps, recorded in a scrambled order:
     * p50 = 500 us (rank 500), p90 = 900 us, p99 = 990 us, p99.9 = 999 us */
    for (uint64_t i = 0; i < 1000; i++)
        pm_lat_record(h, ((i * 7919) % 1000 + 1) * 1000);
    summarize(h, &reader, 1, &s);
    CHECK_EQ(s.count, 1000);
    CHECK(within_bucket(s.p50_ns, 500000));
    CHECK(within_bucket(s.p90_ns, 900000));
    CHECK(within_bucket(s.p99_ns, 990000));
    CHECK(within_bucket(s.p999_ns, 999000)); /* its bucket reaches past 1 ms: capped */
    CHECK_EQ(s.p999_ns, 1000000);
    CHECK_EQ(s.max_ns, 1000000);  /* exact, not a bucket bound */
    CHECK(s.mean_ns == 500500.0); /* exact sum */
    CHECK(s.p50_ns <= s.p90_ns && s.p90_ns <= s.p99_ns && s.p99_ns <= s.p999_ns &&
          s.p999_ns <= s.max_ns);

    /* reset-on-read: nothing new, nothing reported; the max was reset too */
    summarize(h, &reader, 1, &s);
    CHECK_EQ(s.count, 0);
    CHECK_EQ(s.max_ns, 0);
    uint64_t small[] = {3, 9, 17, 5, 12};
    for (int i = 0; i < 5; i++)
        pm_lat_record(h, small[i]);
    summarize(h, &reader, 1, &s);
    CHECK_EQ(s.count, 5);
    CHECK_EQ(s.max_ns, 17);
    CHECK_EQ(s.p50_ns, 9); /* values < 32 are exact: sorted 3 5 9 12 17 */
    CHECK_EQ(s.p99_ns, 17);
    CHECK(s.mean_ns == 46.0 / 5);

    /* a second cursor (the per-run one) is independent of the first: it
     * still sees all 1005 samples, and the run max was never reset */
    summarize(h, &run, 0, &s);
    CHECK_EQ(s.count, 1005);
    CHECK_EQ(s.max_ns, 1000000);

    /* identical samples: every percentile is capped by the exact max */
    for (int i = 0; i < 100; i++)
        pm_lat_record(h, 12345);
    summarize(h, &reader, 1, &s);
    CHECK(s.count == 100 && s.p50_ns == 12345 && s.p99_ns == 12345 && s.max_ns == 12345);

    /* one outlier among 999 fast queries: p99 stays fast, max finds it */
    for (int i = 0; i < 999; i++)
        pm_lat_record(h, 2000);
    pm_lat_record(h, 50000000);
    summarize(h, &reader, 1, &s);
    CHECK_EQ(s.count, 1000);
    CHECK(within_bucket(s.p50_ns, 2000) && within_bucket(s.p99_ns, 2000));
    CHECK(within_bucket(s.p999_ns, 2000));
    CHECK_EQ(s.max_ns, 50000000);
    free(h);

    /* a max lost to a concurrent reset is bounded below by the top bucket */
    static pm_lat_interval iv;
    memset(&iv, 0, sizeof iv);
    iv.count[pm_lat_bucket(700)] = 1;
    iv.sum_ns = 700;
    pm_lat_summarize(&iv, &s);
    CHECK_EQ(s.max_ns, pm_lat_bucket_low(pm_lat_bucket(700)));
    CHECK(s.p50_ns <= s.max_ns);
}

static void test_runtime_latency(void)
{
    pm_runtime_config cfg;
    pm_runtime_config_init(&cfg);
    cfg.n_keys = 100000;
    cfg.n_slices = 16;
    cfg.queue_capacity = 64;
    pm_runtime *rt;
    CHECK_CREATE(&cfg, &rt);
    char err[256] = "";
    pm_latency_summary s;
    CHECK_EQ(pm_runtime_latency(rt, NULL), -EINVAL);
    CHECK_EQ(pm_runtime_latency(rt, &s), 0);
    CHECK_EQ(s.count, 0);
    pm_workload_spec spec = {.mix = "ycsb-a", .seed = 5};
    for (int round = 0; round < 2; round++) {
        pm_run_result res;
        CHECK_EQ(pm_runtime_run(rt, &spec, 0.15, &res, NULL, err, sizeof err), 0);
        CHECK(res.completed > 0);
        CHECK_EQ(res.latency.count, res.completed);
        CHECK(res.latency.p50_ns > 0);
        CHECK(res.latency.p50_ns <= res.latency.p90_ns && res.latency.p90_ns <= res.latency.p99_ns &&
              res.latency.p99_ns <= res.latency.p999_ns && res.latency.p999_ns <= res.latency.max_ns);
        CHECK(res.latency.mean_ns > 0 && res.latency.mean_ns <= (double)res.latency.max_ns);
        /* the reader's interval is exactly this run (read after each run) */
        CHECK_EQ(pm_runtime_latency(rt, &s), 0);
        CHECK_EQ(s.count, res.completed);
        CHECK_EQ(s.max_ns, res.latency.max_ns);
        CHECK_EQ(s.p99_ns, res.latency.p99_ns);
        CHECK_EQ(pm_runtime_latency(rt, &s), 0);
        CHECK_EQ(s.count, 0); /* reset-on-read */
    }
    /* reading does not disturb the next run's own summary */
    pm_run_result res;
    CHECK_EQ(pm_runtime_start(rt, &spec, err, sizeof err), 0);
    struct timespec ts = {0, 50000000L};
    nanosleep(&ts, NULL);
    CHECK_EQ(pm_runtime_latency(rt, &s), 0);
    uint64_t during = s.count;
    CHECK_EQ(pm_runtime_stop(rt, &res, NULL), 0);
    CHECK_EQ(pm_runtime_latency(rt, &s), 0);
    CHECK_EQ(during + s.count, res.completed);
    CHECK_EQ(res.latency.count, res.completed);
    pm_runtime_destroy(rt);
}

int main(void)
{
    test_buckets();
    test_percentiles();
    test_runtime_latency();
    printf("test_latency: ok\n");
    return 0;
}
