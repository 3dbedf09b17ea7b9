/* Concurrent inserts + lookups + scans: every inserted key is found, every
 * scan is sorted and complete. Sized to run under TSan in seconds. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "check.h"
#include "internal.h"

#define N_WRITERS 2
#define PER_WRITER 40000
#define PRELOAD 80000

typedef struct shared {
    pm_tree *tree;
    _Atomic uint64_t progress[N_WRITERS]; /* keys [0, progress) of writer w are in */
    _Atomic int writers_done;
} shared;

/* Writer w inserts keys 4*i + 1 + 2*w (odd) between the preloaded even keys;
 * writer 0 ascending, writer 1 descending, so the two meet mid-tree. The j-th
 * insert of writer w has index writer_index(w, j). */
static uint64_t writer_key(unsigned w, uint64_t i) { return 4 * i + 1 + 2 * w; }
static uint64_t writer_index(unsigned w, uint64_t j) { return w == 0 ? j : PER_WRITER - 1 - j; }
static int inserted_before(unsigned w, uint64_t i, uint64_t progress)
{
    return w == 0 ? i < progress : i >= PER_WRITER - progress;
}

typedef struct warg { shared *s; unsigned w; } warg;

static void *writer(void *p)
{
    warg *a = p;
    for (uint64_t i = 0; i < PER_WRITER; i++) {
        uint64_t k = writer_key(a->w, writer_index(a->w, i));
        CHECK_EQ(pm_tree_insert(a->s->tree, k, k * 3, NULL, NULL), 0);
        atomic_store_explicit(&a->s->progress[a->w], i + 1, memory_order_release);
    }
    atomic_fetch_add(&a->s->writers_done, 1);
    return NULL;
}

static void *reader(void *p)
{
    shared *s = p;
    pm_rng rng;
    pm_rng_seed(&rng, 42);
    uint64_t buf[300];
    for (unsigned round = 0; round < 3000 || atomic_load(&s->writers_done) < N_WRITERS; round++) {
        /* lookups of keys a writer has finished inserting */
        for (unsigned w = 0; w < N_WRITERS; w++) {
            uint64_t done = atomic_load_explicit(&s->progress[w], memory_order_acquire);
            if (done == 0)
                continue;
            uint64_t k = writer_key(w, writer_index(w, pm_rng_below(&rng, done))), v;
            CHECK_EQ(pm_tree_lookup(s->tree, k, &v, NULL), 0);
            CHECK(v == k * 3);
        }
        /* a scan: sorted, contains every preloaded key in its range, and
         * every key writers had finished before the scan began */
        uint64_t before[N_WRITERS];
        for (unsigned w = 0; w < N_WRITERS; w++)
            before[w] = atomic_load_explicit(&s->progress[w], memory_order_acquire);
        uint64_t start = 2 * pm_rng_below(&rng, PRELOAD);
        size_t got;
        CHECK_EQ(pm_tree_scan(s->tree, start, 300, buf, NULL, &got, NULL), 0);
        CHECK(got > 0 && buf[0] == start);
        for (size_t i = 1; i < got; i++)
            CHECK(buf[i] > buf[i - 1]);
        size_t evens = 0;
        for (size_t i = 0; i < got; i++)
            if (buf[i] % 2 == 0)
                CHECK(buf[i] == start + 2 * evens++);
        uint64_t last = buf[got - 1];
        size_t at = 0;
        for (uint64_t k = start + 1; k < last; k += 2) {
            unsigned w = (unsigned)((k % 4) / 2);
            uint64_t i = (k - 1 - 2 * w) / 4;
            while (at < got && buf[at] < k)
                at++;
            if (i < PER_WRITER && inserted_before(w, i, before[w]))
                CHECK(at < got && buf[at] == k);
        }
    }
    return NULL;
}

static void run(unsigned leaf_cap)
{
    shared s = {0};
    CHECK_EQ(pm_tree_create(leaf_cap, -1, &s.tree), 0);
    static uint64_t pre[PRELOAD];
    for (uint64_t i = 0; i < PRELOAD; i++)
        pre[i] = 2 * i;
    CHECK_EQ(pm_tree_bulk_load(s.tree, pre, NULL, PRELOAD, 100), 0);
    pthread_t th[N_WRITERS + 1];
    warg args[N_WRITERS];
    for (unsigned w = 0; w < N_WRITERS; w++) {
        args[w] = (warg){&s, w};
        CHECK_EQ(pthread_create(&th[w], NULL, writer, &args[w]), 0);
    }
    CHECK_EQ(pthread_create(&th[N_WRITERS], NULL, reader, &s), 0);
    for (unsigned i = 0; i <= N_WRITERS; i++)
        pthread_join(th[i], NULL);
    CHECK_EQ(pm_tree_size(s.tree), PRELOAD + N_WRITERS * PER_WRITER);
    for (unsigned w = 0; w < N_WRITERS; w++)
        for (uint64_t i = 0; i < PER_WRITER; i++)
            CHECK_EQ(pm_tree_lookup(s.tree, writer_key(w, i), NULL, NULL), 0);
    pm_tree_destroy(s.tree);
}

int main(void)
{
    run(8);
    run(255);
    printf("test_tree_mt: ok\n");
    return 0;
}
