/* Query latency histograms: bucket bounds, interval collection (difference
 * against a reader's cursor) and percentiles. Recording is inline in
 * internal.h because it sits on every worker's per-query path. */
#include <string.h>

#include "internal.h"

uint64_t pm_lat_bucket_low(unsigned b)
{
    if (b < PM_LAT_SUB)
        return b;
    unsigned group = b / PM_LAT_SUB, sub = b % PM_LAT_SUB;
    /* group g holds values whose top bit is at g + SUB_BITS - 1; past the
     * 64-bit range (g > 64 - SUB_BITS) nothing can land */
    if (group > 64 - PM_LAT_SUB_BITS)
        return UINT64_MAX;
    return (uint64_t)(PM_LAT_SUB + sub) << (group - 1);
}

uint64_t pm_lat_bucket_high(unsigned b)
{
    if (b < PM_LAT_SUB)
        return b;
    unsigned group = b / PM_LAT_SUB;
    if (group > 64 - PM_LAT_SUB_BITS)
        return UINT64_MAX;
    return pm_lat_bucket_low(b) + ((uint64_t)1 << (group - 1)) - 1;
}

void pm_lat_collect(pm_lat_hist *h, pm_lat_cursor *cur, int take_max, pm_lat_interval *acc)
{
    for (unsigned b = 0; b < PM_LAT_BUCKETS; b++) {
        /* acquire: pairs with the writer's release in pm_lat_record, so the
         * sum and max updates of every sample counted here are visible */
        uint64_t now = atomic_load_explicit(&h->count[b], memory_order_acquire);
        acc->count[b] += now - cur->count[b];
        cur->count[b] = now;
    }
    /* relaxed: ordered after the acquire loads above; it covers at least the
     * samples counted, plus possibly a few whose count is not stored yet
     * (they are counted next interval; the sums still add up over calls) */
    uint64_t sum = atomic_load_explicit(&h->sum_ns, memory_order_relaxed);
    acc->sum_ns += sum - cur->sum_ns;
    cur->sum_ns = sum;
    /* relaxed: the writer's CAS of every sample counted above happens before
     * this exchange (via the acquire loads), so coherence makes it read a
     * max that includes them; nothing else is published through max_ns */
    uint64_t max = take_max ? atomic_exchange_explicit(&h->max_ns, 0, memory_order_relaxed)
                            : atomic_load_explicit(&h->run_max_ns, memory_order_relaxed);
    if (max > acc->max_ns)
        acc->max_ns = max;
}

/* Value at 1-based rank `rank` (the smallest bucket whose cumulative count
 * reaches it), reported as that bucket's highest value, capped by max. */
static uint64_t value_at_rank(const pm_lat_interval *iv, uint64_t rank, uint64_t max)
{
    uint64_t cum = 0;
    for (unsigned b = 0; b < PM_LAT_BUCKETS; b++) {
        cum += iv->count[b];
        if (cum >= rank) {
            uint64_t v = pm_lat_bucket_high(b);
            return v < max ? v : max;
        }
    }
    return max;
}

/* ceil(count * num / den), at least 1. */
static uint64_t rank_of(uint64_t count, unsigned num, unsigned den)
{
    uint64_t r = (uint64_t)(((unsigned __int128)count * num + den - 1) / den);
    return r ? r : 1;
}

void pm_lat_summarize(const pm_lat_interval *iv, pm_latency_summary *out)
{
    memset(out, 0, sizeof *out);
    uint64_t count = 0;
    unsigned top = 0;
    for (unsigned b = 0; b < PM_LAT_BUCKETS; b++) {
        count += iv->count[b];
        if (iv->count[b])
            top = b;
    }
    if (count == 0)
        return;
    /* The exchanged max misses a sample whose writer read the old max just
     * before a reader reset it and whose count landed after the read (the
     * sample is counted in the next interval); bound it below by the top
     * bucket so max is never under a counted sample's bucket. */
    uint64_t max = iv->max_ns;
    if (max < pm_lat_bucket_low(top))
        max = pm_lat_bucket_low(top);
    out->count = count;
    out->max_ns = max;
    out->mean_ns = (double)iv->sum_ns / (double)count;
    out->p50_ns = value_at_rank(iv, rank_of(count, 50, 100), max);
    out->p90_ns = value_at_rank(iv, rank_of(count, 90, 100), max);
    out->p99_ns = value_at_rank(iv, rank_of(count, 99, 100), max);
    out->p999_ns = value_at_rank(iv, rank_of(count, 999, 1000), max);
}
