/* Each OLC window of the tree, on purpose: thread A is stopped inside one
 * window (tree.c's OLC_HOOK, built with -DPMOSS_OLC_HOOKS) while the main
 * thread, or a thread B, completes a split or insert that changes the nodes A
 * has read; then A goes on and the result is checked (the key is found, an
 * insert lands where lookups find it, a scan returns every key). Leaves of 4
 * entries make every split a few inserts away. Where the window must end in
 * a restart, the test also checks that A really restarted (or that B waited
 * on A's locks), so a test whose window was never exercised fails instead of
 * passing by luck; a scan hop needs no restart (B-link), there the scan's
 * result is the check.
 *
 * Usage: test_tree_olc_mt [TEST]  (one test by name; default all). Each
 * test exits 1 with the first violation, naming the test.
 *
 * Trees used (keys are multiples of 10, value = key + 1):
 *   two_level():   leaves [10 20 30 40] [50 60 70 80] under one root;
 *   three_level(): 510 full leaves under two FULL inner nodes (255 children
 *                  each) under the root, so any insert splits an inner node. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "internal.h"
#include "olc_hooks.h"

/* ---- stopping thread A inside a window ---- */

typedef enum { OP_LOOKUP, OP_INSERT, OP_SCAN } op_kind;

typedef struct op {
    op_kind kind;
    uint64_t key;       /* lookup/insert key, scan start */
    int rc;             /* result */
    uint64_t value;     /* lookup: value found */
    size_t n;           /* scan: keys returned */
    _Atomic unsigned restarts; /* restarts of the thread running it */
    uint64_t keys[4096];
} op;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pm_olc_point point; /* the window to stop A in */
    int info;           /* its info, or -1 for any */
    int state;          /* 0 armed, 1 A stopped, 2 released */
} ctl = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0};

static _Thread_local bool is_a;                   /* set by thread A only */
static _Thread_local _Atomic unsigned *my_restarts; /* A's and B's op counters */
static pm_tree *tree;

static void hook(pm_olc_point point, unsigned info, void *arg)
{
    (void)arg;
    if (point == PM_OLC_RESTART) {
        /* relaxed: a counter is only polled, or read after a join */
        if (my_restarts)
            atomic_fetch_add_explicit(my_restarts, 1, memory_order_relaxed);
        return;
    }
    if (!is_a)
        return;
    pthread_mutex_lock(&ctl.mu);
    if (ctl.state == 0 && point == ctl.point && (ctl.info < 0 || (unsigned)ctl.info == info)) {
        ctl.state = 1;
        pthread_cond_broadcast(&ctl.cv);
        while (ctl.state != 2)
            pthread_cond_wait(&ctl.cv, &ctl.mu);
    }
    pthread_mutex_unlock(&ctl.mu);
}

static void run_op(op *o)
{
    switch (o->kind) {
    case OP_LOOKUP: o->rc = pm_tree_lookup(tree, o->key, &o->value, NULL); break;
    case OP_INSERT: o->rc = pm_tree_insert(tree, o->key, o->key + 1, NULL, NULL); break;
    case OP_SCAN:
        o->rc = pm_tree_scan(tree, o->key, sizeof o->keys / sizeof o->keys[0], o->keys, NULL,
                             &o->n, NULL);
        break;
    }
}

static void *thread_a(void *p)
{
    is_a = true;
    my_restarts = &((op *)p)->restarts;
    run_op(p);
    return NULL;
}

static void *thread_b(void *p)
{
    my_restarts = &((op *)p)->restarts;
    run_op(p);
    return NULL;
}

/* Wait on ctl.cv until ctl.state == want; a window never reached fails the
 * test (5 s) instead of hanging it. Call with ctl.mu held. */
static void wait_state(int want, const char *what)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    while (ctl.state != want)
        if (pthread_cond_timedwait(&ctl.cv, &ctl.mu, &until) == ETIMEDOUT) {
            fprintf(stderr, "thread A never reached window %s\n", what);
            exit(1);
        }
}

/* Start A on o and return once it is stopped in the window. */
static pthread_t stop_a_in(op *o, pm_olc_point point, int info, const char *what)
{
    pthread_mutex_lock(&ctl.mu);
    ctl.point = point;
    ctl.info = info;
    ctl.state = 0;
    pthread_mutex_unlock(&ctl.mu);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, thread_a, o), 0);
    pthread_mutex_lock(&ctl.mu);
    wait_state(1, what);
    pthread_mutex_unlock(&ctl.mu);
    return th;
}

static void release_a(pthread_t th)
{
    pthread_mutex_lock(&ctl.mu);
    ctl.state = 2;
    pthread_cond_broadcast(&ctl.cv);
    pthread_mutex_unlock(&ctl.mu);
    CHECK_EQ(pthread_join(th, NULL), 0);
}

/* ---- trees and checks ---- */

static void load(size_t n, unsigned fill)
{
    static uint64_t keys[4096], vals[4096];
    for (size_t i = 0; i < n; i++) {
        keys[i] = 10 * (i + 1);
        vals[i] = keys[i] + 1;
    }
    CHECK_EQ(pm_tree_create(4, -1, &tree), 0);
    CHECK_EQ(pm_tree_bulk_load(tree, keys, vals, n, fill), 0);
}

static void two_level(void) { load(8, 100); }

/* 510 leaves of 4: the level above has (510 + 254) / 255 = 2 nodes of 255
 * children (254 keys, full), under one root. */
#define THREE_LEVEL_KEYS 2040
static void three_level(void) { load(THREE_LEVEL_KEYS, 100); }

/* The tree holds exactly want[0..n) (sorted): each is found with its value,
 * a full scan returns them in order, pm_tree_size agrees. */
static void check_exactly(const uint64_t *want, size_t n, const char *test)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t v = 0;
        if (pm_tree_lookup(tree, want[i], &v, NULL) != 0 || v != want[i] + 1) {
            fprintf(stderr, "%s: lookup(%llu) after the race: not found\n", test,
                    (unsigned long long)want[i]);
            exit(1);
        }
    }
    static uint64_t got[8192];
    size_t n_got;
    CHECK_EQ(pm_tree_scan(tree, 0, 8192, got, NULL, &n_got, NULL), 0);
    if (n_got != n || memcmp(got, want, n * sizeof *want) != 0) {
        fprintf(stderr, "%s: full scan returned %zu keys, expected %zu\n", test, n_got, n);
        exit(1);
    }
    CHECK_EQ(pm_tree_size(tree), n);
}

/* A scan that ran while keys were inserted: strictly ascending, every one of
 * the `loaded` keys (there throughout) returned, any other key one of
 * maybe[0..n_maybe) (inserted during the scan: may or may not appear). */
static void check_scan_during(const op *o, size_t loaded, const uint64_t *maybe, size_t n_maybe,
                              const char *test)
{
    size_t j = 0;
    for (size_t i = 0; i < o->n; i++) {
        if (i > 0 && o->keys[i] <= o->keys[i - 1]) {
            fprintf(stderr, "%s: scan not strictly ascending at %zu\n", test, i);
            exit(1);
        }
        if (j < loaded && o->keys[i] == 10 * (j + 1)) {
            j++;
            continue;
        }
        bool known = false;
        for (size_t m = 0; m < n_maybe; m++)
            known |= o->keys[i] == maybe[m];
        if (!known) {
            fprintf(stderr, "%s: scan returned %llu, never inserted\n", test,
                    (unsigned long long)o->keys[i]);
            exit(1);
        }
    }
    if (j != loaded) {
        fprintf(stderr, "%s: scan during the split returned %zu of the %zu loaded keys\n", test,
                j, loaded);
        exit(1);
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The loaded keys plus extra[0..n_extra), sorted, into out; returns the count. */
static size_t expected(size_t loaded, const uint64_t *extra, size_t n_extra, uint64_t *out)
{
    for (size_t i = 0; i < loaded; i++)
        out[i] = 10 * (i + 1);
    memcpy(out + loaded, extra, n_extra * sizeof *extra);
    qsort(out, loaded + n_extra, sizeof *out, cmp_u64);
    return loaded + n_extra;
}

/* A restarted at least `least` times (a write also retries after its own
 * successful split, which counts as one). */
static void check_restarts(const op *a, unsigned least, const char *test)
{
    unsigned n = atomic_load_explicit(&a->restarts, memory_order_relaxed);
    if (n < least) {
        fprintf(stderr, "%s: thread A restarted %u times, expected at least %u: the window was "
                        "not exercised\n", test, n, least);
        exit(1);
    }
}

static void insert(uint64_t key) { CHECK_EQ(pm_tree_insert(tree, key, key + 1, NULL, NULL), 0); }

/* ---- one test per window ---- */

/* DESCEND_CHILD, leaf level: A's lookup(70) validated the root and holds the
 * pointer to leaf [50 60 70 80]; inserting 75 splits that leaf into [50 60]
 * and [70 75 80]. A must notice (the root changed) and find 70. */
static void test_descend_child_leaf_lookup(void)
{
    two_level();
    op a = {.kind = OP_LOOKUP, .key = 70};
    pthread_t th = stop_a_in(&a, PM_OLC_DESCEND_CHILD, 1, "descend_child(leaf)");
    insert(75);
    release_a(th);
    if (a.rc != 0 || a.value != 71) {
        fprintf(stderr, "descend_child_leaf_lookup: lookup(70) during the split of its leaf "
                        "returned %d\n", a.rc);
        exit(1);
    }
    check_restarts(&a, 1, "descend_child_leaf_lookup");
    pm_tree_destroy(tree);
}

/* DESCEND_CHILD, leaf level, writer: A's insert(78) is headed for leaf
 * [50 60 70 80] when 75 splits it. A must put 78 into [70 75 80], where
 * lookups and scans look for it; writing it into the left half would hide
 * 78 from lookups and make scans skip 70 and 75. */
static void test_descend_child_leaf_insert(void)
{
    two_level();
    op a = {.kind = OP_INSERT, .key = 78};
    pthread_t th = stop_a_in(&a, PM_OLC_DESCEND_CHILD, 1, "descend_child(leaf)");
    insert(75);
    release_a(th);
    CHECK_EQ(a.rc, 0);
    uint64_t want[16];
    size_t n = expected(8, (uint64_t[]){75, 78}, 2, want);
    check_exactly(want, n, "descend_child_leaf_insert");
    check_restarts(&a, 1, "descend_child_leaf_insert");
    pm_tree_destroy(tree);
}

/* DESCEND_CHILD, inner level: A's lookup(8010) (leaf 200, in the right half
 * of the first full inner node I) validated the root and holds the pointer
 * to I when an insert of 15 splits I. A must notice at the next level (the
 * root changed) instead of descending into I's left half. */
static void test_descend_child_inner_lookup(void)
{
    three_level();
    op a = {.kind = OP_LOOKUP, .key = 8010};
    pthread_t th = stop_a_in(&a, PM_OLC_DESCEND_CHILD, 1, "descend_child(inner)");
    insert(15);
    release_a(th);
    if (a.rc != 0 || a.value != 8011) {
        fprintf(stderr, "descend_child_inner_lookup: lookup(8010) during the split of an inner "
                        "node returned %d\n", a.rc);
        exit(1);
    }
    check_restarts(&a, 1, "descend_child_inner_lookup");
    uint64_t want[THREE_LEVEL_KEYS + 1];
    size_t n = expected(THREE_LEVEL_KEYS, (uint64_t[]){15}, 1, want);
    check_exactly(want, n, "descend_child_inner_lookup");
    pm_tree_destroy(tree);
}

/* DESCEND_LEAF: A's lookup(70) has read leaf [50 60 70 80]'s version when 75
 * splits it. A must restart (parent or leaf version changed) and find 70. */
static void test_descend_leaf_lookup(void)
{
    two_level();
    op a = {.kind = OP_LOOKUP, .key = 70};
    pthread_t th = stop_a_in(&a, PM_OLC_DESCEND_LEAF, -1, "descend_leaf");
    insert(75);
    release_a(th);
    if (a.rc != 0 || a.value != 71) {
        fprintf(stderr, "descend_leaf_lookup: lookup(70) returned %d\n", a.rc);
        exit(1);
    }
    check_restarts(&a, 1, "descend_leaf_lookup");
    pm_tree_destroy(tree);
}

/* SPLIT_LEAF: 509 full leaves under inner nodes I0 (255 children, full) and
 * I1 (254 children, one short of full). A's insert(16045) read the full leaf
 * [16010 .. 16040] (leaf 400, under I1) and I1, and decided to split the
 * leaf; before A locks, 10215 splits leaf 255 (I1 is now full) and 10225
 * splits I1, which moves leaf 400 to I1's new right sibling. A's lock of I1
 * must fail: splitting leaf 400 under I1 would put its right half where no
 * lookup routes its keys. */
static void test_split_leaf(void)
{
    load(509 * 4, 100);
    op a = {.kind = OP_INSERT, .key = 16045};
    pthread_t th = stop_a_in(&a, PM_OLC_SPLIT_LEAF, -1, "split_leaf");
    insert(10215);
    insert(10225);
    release_a(th);
    CHECK_EQ(a.rc, 0);
    static uint64_t want[509 * 4 + 3];
    size_t n = expected(509 * 4, (uint64_t[]){10215, 10225, 16045}, 3, want);
    check_exactly(want, n, "split_leaf");
    check_restarts(&a, 2, "split_leaf"); /* its failed lock, then its own split */
    pm_tree_destroy(tree);
}

/* SPLIT_INNER: A's insert(8015) read the full inner node I and decided to
 * split it; before A locks, an insert of 15 splits I. A's lock fails (I's
 * version moved on), A descends again into I's right half and its insert
 * lands there. (Splitting I's left half again would be harmless here, since
 * I's parent did not change: no mutant of lock_pair fails this test; the
 * parent-changed case is split_leaf's.) */
static void test_split_inner(void)
{
    three_level();
    op a = {.kind = OP_INSERT, .key = 8015};
    pthread_t th = stop_a_in(&a, PM_OLC_SPLIT_INNER, -1, "split_inner");
    insert(15);
    release_a(th);
    CHECK_EQ(a.rc, 0);
    uint64_t want[THREE_LEVEL_KEYS + 2];
    size_t n = expected(THREE_LEVEL_KEYS, (uint64_t[]){15, 8015}, 2, want);
    check_exactly(want, n, "split_inner");
    check_restarts(&a, 1, "split_inner");
    pm_tree_destroy(tree);
}

/* PARENT_UPDATE: A is inside a split holding the node and parent locks, the
 * keys already moved right but the parent not yet pointing at the new
 * sibling. Threads B (a lookup of a moved key, and a full scan) must wait for
 * A (restart while the locks are held) and then see every key. */
static void parent_update(bool leaf_split)
{
    const char *test = leaf_split ? "parent_update(leaf)" : "parent_update(inner)";
    if (leaf_split)
        two_level();
    else
        three_level();
    size_t loaded = leaf_split ? 8 : THREE_LEVEL_KEYS;
    uint64_t moved = leaf_split ? 70 : 8010; /* in the right half of what splits */
    op a = {.kind = OP_INSERT, .key = leaf_split ? 75 : 15};
    pthread_t th = stop_a_in(&a, PM_OLC_PARENT_UPDATE, leaf_split, test);
    static op b_lookup, b_scan;
    b_lookup = (op){.kind = OP_LOOKUP, .key = moved};
    b_scan = (op){.kind = OP_SCAN, .key = 0};
    pthread_t tb[2];
    CHECK_EQ(pthread_create(&tb[0], NULL, thread_b, &b_lookup), 0);
    CHECK_EQ(pthread_create(&tb[1], NULL, thread_b, &b_scan), 0);
    /* both B threads must have met the locks (restarted) before A goes on */
    for (int i = 0; atomic_load_explicit(&b_lookup.restarts, memory_order_relaxed) == 0 ||
                    atomic_load_explicit(&b_scan.restarts, memory_order_relaxed) == 0;
         i++) {
        if (i == 5000) {
            fprintf(stderr, "%s: readers did not restart while the split held its locks\n", test);
            exit(1);
        }
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    release_a(th);
    CHECK_EQ(pthread_join(tb[0], NULL), 0);
    CHECK_EQ(pthread_join(tb[1], NULL), 0);
    CHECK_EQ(a.rc, 0);
    if (b_lookup.rc != 0 || b_lookup.value != moved + 1) {
        fprintf(stderr, "%s: lookup(%llu) during the split returned %d\n", test,
                (unsigned long long)moved, b_lookup.rc);
        exit(1);
    }
    static uint64_t want[THREE_LEVEL_KEYS + 1];
    size_t n = expected(loaded, (uint64_t[]){a.key}, 1, want);
    /* A's key goes in after the split it waits in, maybe after B's scan */
    check_scan_during(&b_scan, loaded, &a.key, 1, test);
    check_exactly(want, n, test);
    pm_tree_destroy(tree);
}

static void test_parent_update_leaf(void) { parent_update(true); }
static void test_parent_update_inner(void) { parent_update(false); }

/* LEAF_UPGRADE: A's insert(58) found its slot in leaf [40 50 60] (3 of 4)
 * and is about to lock it; meanwhile 45 and 55 are inserted, splitting it
 * into [40 45] and [50 55 60]. The upgrade must fail (the version moved on)
 * so A does not write 58 at its stale position in the left half. */
static void test_leaf_upgrade(void)
{
    load(6, 75); /* [10 20 30] [40 50 60] */
    op a = {.kind = OP_INSERT, .key = 58};
    pthread_t th = stop_a_in(&a, PM_OLC_LEAF_UPGRADE, -1, "leaf_upgrade");
    insert(45);
    insert(55);
    release_a(th);
    CHECK_EQ(a.rc, 0);
    uint64_t want[16];
    size_t n = expected(6, (uint64_t[]){45, 55, 58}, 3, want);
    check_exactly(want, n, "leaf_upgrade");
    check_restarts(&a, 1, "leaf_upgrade");
    pm_tree_destroy(tree);
}

/* SCAN_HOP: A's full scan has emitted [10 20 30 40] and holds the pointer to
 * the next leaf [50 60 70 80] when 75, 85 and 90 split it twice. A must
 * still return every key that was there for the whole scan, once and in
 * order (75, 85, 90 may or may not appear: inserted during the scan). */
static void test_scan_hop(void)
{
    two_level();
    op a = {.kind = OP_SCAN, .key = 0};
    pthread_t th = stop_a_in(&a, PM_OLC_SCAN_HOP, -1, "scan_hop");
    insert(75);
    insert(85);
    insert(90);
    release_a(th);
    CHECK_EQ(a.rc, 0);
    check_scan_during(&a, 8, (uint64_t[]){75, 85, 90}, 3, "scan_hop");
    uint64_t want[16];
    size_t n = expected(8, (uint64_t[]){75, 85, 90}, 3, want);
    check_exactly(want, n, "scan_hop");
    pm_tree_destroy(tree);
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } tests[] = {
        {"descend_child_leaf_lookup", test_descend_child_leaf_lookup},
        {"descend_child_leaf_insert", test_descend_child_leaf_insert},
        {"descend_child_inner_lookup", test_descend_child_inner_lookup},
        {"descend_leaf_lookup", test_descend_leaf_lookup},
        {"split_leaf", test_split_leaf},
        {"split_inner", test_split_inner},
        {"parent_update_leaf", test_parent_update_leaf},
        {"parent_update_inner", test_parent_update_inner},
        {"leaf_upgrade", test_leaf_upgrade},
        {"scan_hop", test_scan_hop},
    };
    pm_olc_set_hook(hook, NULL);
    /* argv[1]: run only the test of that name (each test exits 1 on failure) */
    int ran = 0;
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        if (argc > 1 && strcmp(argv[1], tests[i].name) != 0)
            continue;
        tests[i].fn();
        printf("test_tree_olc_mt: %s ok\n", tests[i].name);
        ran++;
    }
    CHECK(ran > 0);
    return 0;
}
