/* Stress of the tree's splits under concurrency, for a fixed time budget:
 * rounds of a fresh tree with leaves of 4 entries, preloaded with the even
 * keys of one narrow region; WRITERS threads insert the odd keys between them,
 * interleaved (writer w takes every WRITERS-th odd key, ascending, so all of
 * them work on the same few leaves at once and nearly every insert splits),
 * while READERS threads
 *   - look up keys whose insert has returned (confirmed): each must be found
 *     with its value (a point operation is linearizable);
 *   - scan from a random start: the keys come strictly ascending, and every
 *     key present for the whole scan (preloaded, or confirmed before the scan
 *     began) within the scanned range is there.
 * After each round: every key is found, pm_tree_size is exact, a full scan
 * returns exactly the expected keys.
 *
 * Built against the hooked tree objects: olc_delay.h widens the OLC windows
 * at random (PMOSS_STRESS_DELAYS=0: off), without which the stress finds
 * the descend race of #42 almost never.
 *
 * Usage: test_tree_stress_mt [SECONDS]  (default: $PMOSS_STRESS_SECONDS, else
 * 2; ctest runs the default, also under TSan; `make bench` a longer run).
 * Exits 1 with the first violation. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "internal.h"
#include "olc_delay.h"

#define WRITERS 3
#define READERS 2
#define PER_WRITER 3000 /* inserts per writer and round */
#define PRELOAD (WRITERS * PER_WRITER)    /* even keys 0, 2, .. */
#define SCAN_MAX 256

typedef struct round_state {
    pm_tree *tree;
    _Atomic uint64_t progress[WRITERS]; /* inserts of writer w [0, progress) returned */
    _Atomic int writers_done;
    uint64_t seed;
} round_state;

/* The i-th insert of writer w: odd keys, writers interleaved. */
static uint64_t writer_key(unsigned w, uint64_t i) { return 2 * (i * WRITERS + w) + 1; }
static uint64_t value_of(uint64_t key) { return key * 7 + 3; }

typedef struct warg { round_state *r; unsigned w; } warg; /* writer or reader w */

static void *writer(void *p)
{
    warg *a = p;
    for (uint64_t i = 0; i < PER_WRITER; i++) {
        uint64_t k = writer_key(a->w, i);
        CHECK_EQ(pm_tree_insert(a->r->tree, k, value_of(k), NULL, NULL), 0);
        /* release: a reader that sees the new progress sees the insert done */
        atomic_store_explicit(&a->r->progress[a->w], i + 1, memory_order_release);
    }
    atomic_fetch_add_explicit(&a->r->writers_done, 1, memory_order_release);
    return NULL;
}

static void fail_missing(const char *what, uint64_t key)
{
    fprintf(stderr, "test_tree_stress_mt: %s: key %llu missing\n", what, (unsigned long long)key);
    exit(1);
}

/* Keys in [start, last] that were present for the whole scan must be in
 * buf[0..got), which is strictly ascending. */
static void check_scan(const uint64_t *buf, size_t got, uint64_t start, const uint64_t *before)
{
    for (size_t i = 1; i < got; i++)
        if (buf[i] <= buf[i - 1]) {
            fprintf(stderr, "test_tree_stress_mt: scan not ascending: %llu after %llu\n",
                    (unsigned long long)buf[i], (unsigned long long)buf[i - 1]);
            exit(1);
        }
    if (got == 0)
        return;
    uint64_t last = buf[got - 1];
    size_t at = 0;
    for (uint64_t k = start; k <= last; k++) {
        bool must;
        if (k % 2 == 0) {
            must = k / 2 < PRELOAD;
        } else {
            uint64_t j = (k - 1) / 2;
            must = j / WRITERS < before[j % WRITERS];
        }
        while (at < got && buf[at] < k)
            at++;
        if (must && (at == got || buf[at] != k))
            fail_missing("scan during inserts", k);
    }
}

static void *reader(void *p)
{
    warg *a = p;
    round_state *r = a->r;
    pm_rng rng;
    pm_rng_seed(&rng, r->seed * READERS + a->w);
    uint64_t buf[SCAN_MAX];
    /* acquire: pairs with the writers' release, so the final round of reads
     * also sees the last inserts */
    while (atomic_load_explicit(&r->writers_done, memory_order_acquire) < WRITERS) {
        for (unsigned n = 0; n < 8; n++) {
            unsigned w = (unsigned)pm_rng_below(&rng, WRITERS);
            uint64_t done = atomic_load_explicit(&r->progress[w], memory_order_acquire);
            if (done == 0)
                continue;
            /* mostly the newest keys: they sit in the leaves being split */
            uint64_t i = done - 1 - pm_rng_below(&rng, done < 64 ? done : 64);
            uint64_t k = writer_key(w, i), v = 0;
            if (pm_tree_lookup(r->tree, k, &v, NULL) != 0)
                fail_missing("lookup of a confirmed insert", k);
            CHECK(v == value_of(k));
        }
        uint64_t before[WRITERS];
        for (unsigned w = 0; w < WRITERS; w++)
            before[w] = atomic_load_explicit(&r->progress[w], memory_order_acquire);
        /* start just behind the writers' front, where the splits are */
        uint64_t front = writer_key(0, before[0]);
        uint64_t back = pm_rng_below(&rng, 4 * SCAN_MAX);
        uint64_t start = front > back ? front - back : 0;
        size_t got;
        CHECK_EQ(pm_tree_scan(r->tree, start, SCAN_MAX, buf, NULL, &got, NULL), 0);
        check_scan(buf, got, start, before);
    }
    return NULL;
}

static void final_check(round_state *r)
{
    static uint64_t all[PRELOAD + WRITERS * PER_WRITER + 1];
    size_t got;
    CHECK_EQ(pm_tree_scan(r->tree, 0, sizeof all / sizeof all[0], all, NULL, &got, NULL), 0);
    uint64_t full[WRITERS];
    for (unsigned w = 0; w < WRITERS; w++)
        full[w] = PER_WRITER;
    check_scan(all, got, 0, full);
    CHECK_EQ(got, PRELOAD + WRITERS * PER_WRITER);
    CHECK_EQ(pm_tree_size(r->tree), PRELOAD + WRITERS * PER_WRITER);
    for (unsigned w = 0; w < WRITERS; w++)
        for (uint64_t i = 0; i < PER_WRITER; i++)
            if (pm_tree_lookup(r->tree, writer_key(w, i), NULL, NULL) != 0)
                fail_missing("lookup after the round", writer_key(w, i));
}

static void run_round(uint64_t seed)
{
    round_state r = {.seed = seed};
    CHECK_EQ(pm_tree_create(4, -1, &r.tree), 0);
    static uint64_t pre[PRELOAD], vals[PRELOAD];
    for (uint64_t i = 0; i < PRELOAD; i++) {
        pre[i] = 2 * i;
        vals[i] = value_of(pre[i]);
    }
    CHECK_EQ(pm_tree_bulk_load(r.tree, pre, vals, PRELOAD, 100), 0);
    pthread_t th[WRITERS + READERS];
    warg wa[WRITERS], ra[READERS];
    for (unsigned w = 0; w < WRITERS; w++) {
        wa[w] = (warg){&r, w};
        CHECK_EQ(pthread_create(&th[w], NULL, writer, &wa[w]), 0);
    }
    for (unsigned i = 0; i < READERS; i++) {
        ra[i] = (warg){&r, i};
        CHECK_EQ(pthread_create(&th[WRITERS + i], NULL, reader, &ra[i]), 0);
    }
    for (unsigned i = 0; i < WRITERS + READERS; i++)
        CHECK_EQ(pthread_join(th[i], NULL), 0);
    final_check(&r);
    pm_tree_destroy(r.tree);
}

int main(int argc, char **argv)
{
    const char *arg = argc > 1 ? argv[1] : getenv("PMOSS_STRESS_SECONDS");
    double budget = arg ? strtod(arg, NULL) : 2.0;
    if (!(budget > 0)) {
        fprintf(stderr, "usage: test_tree_stress_mt [SECONDS > 0]\n");
        return 2;
    }
    bool delays = olc_delay_install();
    double t0 = pm_now();
    unsigned rounds = 0;
    do
        run_round(++rounds);
    while (pm_now() - t0 < budget);
    printf("test_tree_stress_mt: ok, %u rounds of %u inserts by %u writers with %u readers "
           "in %.1f s (delays %s)\n",
           rounds, WRITERS * PER_WRITER, WRITERS, READERS, pm_now() - t0, delays ? "on" : "off");
    return 0;
}
