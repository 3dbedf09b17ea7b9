/* B+-tree with optimistic lock coupling (Leis et al., "The ART of practical
 * synchronization", DaMoN 2016), uint64 keys and values.
 *
 * Lock protocol. Every node has a 64-bit lock word: bit OLC_OBSOLETE, bit
 * OLC_LOCKED, and a version counter in the bits above (OLC_VERSION_STEP).
 * Readers never write: they read the word, read the node, and re-check the
 * word; a change means restart. Writers upgrade a validated read to a lock
 * with a CAS, so a writer never acts on a stale read either.
 *
 * Data races. A reader may read a node while a writer changes it, which C11
 * only allows on atomics, so every node field a reader touches is an atomic
 * accessed relaxed; the lock word's acquire/release plus fences (seqlock
 * pattern, Boehm 2012) give the ordering. On x86-64 relaxed loads and stores
 * are plain moves, so this costs nothing there.
 *
 * Reclamation. This tree never unlinks a node: there are no deletes, and a
 * split keeps the left half in place and adds a right sibling. A pointer a
 * reader loaded therefore always points at a live node, nothing is ever
 * retired, and OLC_OBSOLETE is never set; readers still honour it so the
 * protocol stays the published one. Node memory belongs to the tree's arena
 * and is freed wholesale by pm_tree_destroy, which requires quiescence.
 * (Objects that ARE swapped out under readers — the runtime's routing tables
 * — are reclaimed after an epoch grace period, see epoch.c.)
 *
 * Scans use right-sibling links between leaves (B-link): since a split only
 * moves keys to a new right sibling, following the links from any leaf
 * reaches every larger key.
 *
 * Test hooks. Built with -DPMOSS_OLC_HOOKS (a test-only copy of these
 * objects, never libpmoss), OLC_HOOK calls the hook installed by
 * pm_olc_set_hook at each window between a read and its validation, so a
 * test can stop a thread there while another one splits or inserts
 * (olc_hooks.h names the windows). Otherwise OLC_HOOK compiles to nothing. */
#include <errno.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#ifdef PMOSS_OLC_HOOKS
#include "olc_hooks.h"
static pm_olc_hook_fn olc_hook_fn;
static void *olc_hook_arg;

void pm_olc_set_hook(pm_olc_hook_fn fn, void *arg)
{
    olc_hook_fn = fn;
    olc_hook_arg = arg;
}

#define OLC_HOOK(point, info)                              \
    do {                                                   \
        if (olc_hook_fn)                                   \
            olc_hook_fn((point), (info), olc_hook_arg);    \
    } while (0)
#else
#define OLC_HOOK(point, info) ((void)0)
#endif

#define OLC_OBSOLETE ((uint64_t)1)
#define OLC_LOCKED ((uint64_t)2)
#define OLC_VERSION_STEP ((uint64_t)4)
/* Unlock adds OLC_LOCKED once more: the carry clears the bit and bumps the version. */
_Static_assert(OLC_LOCKED * 2 == OLC_VERSION_STEP, "unlock relies on the carry");

/* Inner nodes fill 4 KiB: header (24 B) + keys + children. */
#define INNER_KEYS 254u

typedef struct node {
    _Atomic uint64_t version;
    _Atomic uint32_t count;           /* keys in use */
    uint32_t leaf;                    /* set before publication, never changes */
    _Atomic(struct node *) next;      /* leaves: right sibling */
    /* leaf: keys[cap] then values[cap]; inner: keys[INNER_KEYS] then
     * children[INNER_KEYS + 1] stored as uintptr_t. */
    _Atomic uint64_t slot[];
} node;

struct pm_tree {
    _Atomic(node *) root;
    unsigned leaf_cap;
    pm_arena arena;
};

/* ---- lock word ---- */

static inline uint64_t olc_read_lock_or_restart(node *n, bool *restart)
{
    /* acquire: the node contents we read next are at least as new as this version */
    uint64_t v = atomic_load_explicit(&n->version, memory_order_acquire);
    if (v & (OLC_LOCKED | OLC_OBSOLETE))
        *restart = true;
    return v;
}

/* ThreadSanitizer does not model atomic_thread_fence (GCC refuses it under
 * -fsanitize=thread), so TSan builds replace each fence by an RMW on the lock
 * word with the same ordering role, which TSan understands. */
#if defined(__SANITIZE_THREAD__)
#define OLC_NO_FENCES 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define OLC_NO_FENCES 1
#endif
#endif

static inline void olc_check_or_restart(node *n, uint64_t v, bool *restart)
{
#ifdef OLC_NO_FENCES
    /* acq_rel RMW: our earlier reads of the node cannot move after it */
    uint64_t now = atomic_fetch_add_explicit(&n->version, 0, memory_order_acq_rel);
#else
    /* acquire fence: our relaxed reads of the node happen before this reload,
     * so a writer whose change we saw has also made its lock visible */
    atomic_thread_fence(memory_order_acquire);
    uint64_t now = atomic_load_explicit(&n->version, memory_order_relaxed);
#endif
    if (now != v)
        *restart = true;
}

static inline void olc_upgrade_or_restart(node *n, uint64_t v, bool *restart)
{
    /* acquire on success: we own the node from here; relaxed on failure: we
     * only restart */
#ifdef OLC_NO_FENCES
    const memory_order success = memory_order_acq_rel;
#else
    const memory_order success = memory_order_acquire;
#endif
    if (!atomic_compare_exchange_strong_explicit(&n->version, &v, v + OLC_LOCKED, success,
                                                 memory_order_relaxed)) {
        *restart = true;
        return;
    }
#ifndef OLC_NO_FENCES
    /* release fence: our relaxed data stores below are ordered after the lock,
     * so a reader that sees any of them also sees the lock bit on its recheck */
    atomic_thread_fence(memory_order_release);
#endif
}

static inline void olc_write_unlock(node *n)
{
    /* release: publishes the node's new contents with the new version */
    atomic_fetch_add_explicit(&n->version, OLC_LOCKED, memory_order_release);
}

/* One retry loop for everyone: brief backoff keeps a restarting reader from
 * hammering a node its writer is still changing. */
static inline void backoff(unsigned *attempt)
{
    OLC_HOOK(PM_OLC_RESTART, 0);
    if (++*attempt > 8)
        sched_yield();
}

/* ---- node accessors (relaxed: see the header comment) ---- */

#define LD(p) atomic_load_explicit((p), memory_order_relaxed)
#define ST(p, v) atomic_store_explicit((p), (v), memory_order_relaxed)

static inline _Atomic uint64_t *leaf_keys(node *n) { return n->slot; }
static inline _Atomic uint64_t *leaf_vals(const pm_tree *t, node *n) { return n->slot + t->leaf_cap; }
static inline _Atomic uint64_t *inner_keys(node *n) { return n->slot; }
static inline _Atomic uint64_t *inner_kids(node *n) { return n->slot + INNER_KEYS; }
static inline node *kid(node *n, unsigned i) { return (node *)(uintptr_t)LD(&inner_kids(n)[i]); }
static inline void set_kid(node *n, unsigned i, node *c) { ST(&inner_kids(n)[i], (uint64_t)(uintptr_t)c); }

/* count read optimistically may be garbage until validated: clamp it so the
 * search stays inside the node. */
static inline unsigned clamp(unsigned c, unsigned max) { return c > max ? max : c; }

/* First position whose key is >= key. */
static unsigned lower_bound(_Atomic uint64_t *keys, unsigned n, uint64_t key)
{
    unsigned lo = 0, hi = n;
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        if (LD(&keys[mid]) < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Child index for key: child i holds keys in [keys[i-1], keys[i]). */
static unsigned child_index(node *n, uint64_t key)
{
    _Atomic uint64_t *keys = inner_keys(n);
    unsigned lo = 0, hi = clamp(LD(&n->count), INNER_KEYS);
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        if (LD(&keys[mid]) <= key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static node *new_node(pm_tree *t, bool leaf)
{
    size_t slots = leaf ? 2u * t->leaf_cap : 2u * INNER_KEYS + 1;
    node *n = pm_arena_alloc(&t->arena, sizeof(node) + slots * sizeof(uint64_t));
    if (n)
        n->leaf = leaf; /* arena memory is zeroed: version 0, count 0, next NULL */
    return n;
}

/* ---- create / destroy ---- */

int pm_tree_create(unsigned leaf_capacity, int node_id, pm_tree **out)
{
    if (leaf_capacity == 0)
        leaf_capacity = PM_LEAF_CAPACITY_MAX;
    if (leaf_capacity < 4 || leaf_capacity > PM_LEAF_CAPACITY_MAX || node_id < -2)
        return -EINVAL;
    pm_tree *t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    t->leaf_cap = leaf_capacity;
    int rc = pm_arena_init(&t->arena, node_id);
    if (rc != 0) {
        free(t);
        return rc;
    }
    node *root = new_node(t, true);
    if (!root) {
        pm_arena_fini(&t->arena);
        free(t);
        return -ENOMEM;
    }
    atomic_init(&t->root, root);
    *out = t;
    return 0;
}

void pm_tree_destroy(pm_tree *t)
{
    if (!t)
        return;
    pm_arena_fini(&t->arena);
    free(t);
}

/* ---- traversal: root to leaf, written once ---- */

/* Descend to the leaf for key. Returns the leaf read-locked at *version, or
 * NULL after setting *restart. The leaf's parent is re-checked after the
 * leaf's version was read, so at *version the leaf's key range held key. With parent/pversion non-NULL (writers) the
 * leaf's parent and its version are returned too, and full inner nodes on
 * the way are split first (so a leaf split always finds room above);
 * *split_rc then carries -ENOMEM if such a split could not allocate. */
static int split_inner(pm_tree *t, node *n, uint64_t v, node *parent, uint64_t pv);

static node *descend(pm_tree *t, uint64_t key, uint64_t *version, node **parent,
                     uint64_t *pversion, bool *restart, int *split_rc, pm_op_stats *st)
{
    node *n = atomic_load_explicit(&t->root, memory_order_acquire);
    uint64_t v = olc_read_lock_or_restart(n, restart);
    if (*restart || n != atomic_load_explicit(&t->root, memory_order_acquire)) {
        *restart = true;
        return NULL;
    }
    node *p = NULL;
    uint64_t pv = 0;
    uint64_t visited = 1;
    while (!n->leaf) {
        if (parent && LD(&n->count) == INNER_KEYS) {
            OLC_HOOK(PM_OLC_SPLIT_INNER, 0);
            int rc = split_inner(t, n, v, p, pv);
            if (rc == -ENOMEM)
                *split_rc = rc;
            *restart = true;
            break;
        }
        if (p) {
            olc_check_or_restart(p, pv, restart);
            if (*restart)
                break;
        }
        p = n;
        pv = v;
        node *c = kid(n, child_index(n, key));
        olc_check_or_restart(n, v, restart); /* c is a real child of n */
        if (*restart)
            break;
        OLC_HOOK(PM_OLC_DESCEND_CHILD, (unsigned)visited);
        v = olc_read_lock_or_restart(c, restart);
        visited++;
        if (*restart)
            break;
        n = c;
    }
    /* The loop re-checks each inner node's parent only on the next
     * iteration, so the leaf's parent is still unchecked: the leaf may have
     * split between the check of p and the read of v above, and then holds
     * only the left half of the keys p routed here (a lookup would miss a
     * key that moved right; a write would put the key into the wrong leaf,
     * invisible to every later lookup). Leis et al. check it here too. */
    if (!*restart) {
        OLC_HOOK(PM_OLC_DESCEND_LEAF, 0);
        if (p)
            olc_check_or_restart(p, pv, restart);
    }
    if (st)
        st->nodes_visited += visited;
    if (*restart)
        return NULL;
    if (parent) {
        *parent = p;
        *pversion = pv;
    }
    *version = v;
    return n;
}

/* Lock n's parent (or, for the root, make sure n still is the root) and n. */
static bool lock_pair(pm_tree *t, node *n, uint64_t v, node *parent, uint64_t pv)
{
    bool restart = false;
    if (parent) {
        olc_upgrade_or_restart(parent, pv, &restart);
        if (restart)
            return false;
    }
    olc_upgrade_or_restart(n, v, &restart);
    if (restart) {
        if (parent)
            olc_write_unlock(parent);
        return false;
    }
    if (!parent && n != atomic_load_explicit(&t->root, memory_order_acquire)) {
        olc_write_unlock(n);
        return false;
    }
    return true;
}

static void unlock_pair(node *n, node *parent)
{
    olc_write_unlock(n);
    if (parent)
        olc_write_unlock(parent);
}

/* Allocate under the locks, so a lost race never wastes arena memory. A block
 * left over by a failed second allocation stays in the arena until destroy. */
static bool alloc_split(pm_tree *t, bool leaf, node *parent, node **right, node **new_root)
{
    *right = new_node(t, leaf);
    *new_root = parent ? NULL : new_node(t, false);
    return *right && (parent || *new_root);
}

/* With parent (or root) and n locked: link right sibling `right` with
 * separator sep next to n, growing a new root (pre-allocated) if needed. */
static void link_sibling(pm_tree *t, node *parent, node *n, uint64_t sep, node *right,
                         node *new_root)
{
    if (!parent) {
        ST(&inner_keys(new_root)[0], sep);
        set_kid(new_root, 0, n);
        set_kid(new_root, 1, right);
        ST(&new_root->count, 1);
        /* release: the new root's contents are visible to whoever loads it */
        atomic_store_explicit(&t->root, new_root, memory_order_release);
        return;
    }
    unsigned c = LD(&parent->count);
    unsigned pos = child_index(parent, sep);
    _Atomic uint64_t *keys = inner_keys(parent);
    for (unsigned i = c; i > pos; i--) {
        ST(&keys[i], LD(&keys[i - 1]));
        set_kid(parent, i + 1, kid(parent, i));
    }
    ST(&keys[pos], sep);
    set_kid(parent, pos + 1, right);
    ST(&parent->count, c + 1);
}

static int split_inner(pm_tree *t, node *n, uint64_t v, node *parent, uint64_t pv)
{
    if (!lock_pair(t, n, v, parent, pv))
        return 0;
    node *right, *new_root;
    if (!alloc_split(t, false, parent, &right, &new_root)) {
        unlock_pair(n, parent);
        return -ENOMEM;
    }
    unsigned c = LD(&n->count), mid = c / 2;
    uint64_t sep = LD(&inner_keys(n)[mid]);
    unsigned rc = c - mid - 1;
    for (unsigned i = 0; i < rc; i++) {
        ST(&inner_keys(right)[i], LD(&inner_keys(n)[mid + 1 + i]));
        set_kid(right, i, kid(n, mid + 1 + i));
    }
    set_kid(right, rc, kid(n, c));
    ST(&right->count, rc);
    ST(&n->count, mid);
    OLC_HOOK(PM_OLC_PARENT_UPDATE, 0);
    link_sibling(t, parent, n, sep, right, new_root);
    unlock_pair(n, parent);
    return 0;
}

static int split_leaf(pm_tree *t, node *n, uint64_t v, node *parent, uint64_t pv)
{
    if (!lock_pair(t, n, v, parent, pv))
        return 0;
    node *right, *new_root;
    if (!alloc_split(t, true, parent, &right, &new_root)) {
        unlock_pair(n, parent);
        return -ENOMEM;
    }
    unsigned c = LD(&n->count), mid = c / 2;
    for (unsigned i = mid; i < c; i++) {
        ST(&leaf_keys(right)[i - mid], LD(&leaf_keys(n)[i]));
        ST(&leaf_vals(t, right)[i - mid], LD(&leaf_vals(t, n)[i]));
    }
    ST(&right->count, c - mid);
    ST(&right->next, LD(&n->next));
    ST(&n->next, right);
    ST(&n->count, mid);
    OLC_HOOK(PM_OLC_PARENT_UPDATE, 1);
    link_sibling(t, parent, n, LD(&leaf_keys(right)[0]), right, new_root);
    unlock_pair(n, parent);
    return 0;
}

/* ---- point operations ---- */

int pm_tree_lookup(pm_tree *t, uint64_t key, uint64_t *value, pm_op_stats *st)
{
    for (unsigned attempt = 0;; backoff(&attempt)) {
        bool restart = false;
        uint64_t v;
        node *leaf = descend(t, key, &v, NULL, NULL, &restart, NULL, st);
        if (restart)
            continue;
        unsigned c = clamp(LD(&leaf->count), t->leaf_cap);
        unsigned pos = lower_bound(leaf_keys(leaf), c, key);
        bool found = pos < c && LD(&leaf_keys(leaf)[pos]) == key;
        uint64_t val = found ? LD(&leaf_vals(t, leaf)[pos]) : 0;
        olc_check_or_restart(leaf, v, &restart);
        if (restart)
            continue;
        if (found && value)
            *value = val;
        return found ? 0 : -ENOENT;
    }
}

/* Shared by insert and update: insert_new says whether a missing key is added. */
static int write_key(pm_tree *t, uint64_t key, uint64_t value, bool insert_new, int *replaced,
                     pm_op_stats *st)
{
    for (unsigned attempt = 0;; backoff(&attempt)) {
        bool restart = false;
        int split_rc = 0;
        node *parent;
        uint64_t v, pv;
        node *leaf = descend(t, key, &v, &parent, &pv, &restart, &split_rc, st);
        if (split_rc)
            return split_rc;
        if (restart)
            continue;
        unsigned c = clamp(LD(&leaf->count), t->leaf_cap);
        unsigned pos = lower_bound(leaf_keys(leaf), c, key);
        bool exists = pos < c && LD(&leaf_keys(leaf)[pos]) == key;
        if (!exists && !insert_new) {
            olc_check_or_restart(leaf, v, &restart);
            if (restart)
                continue;
            return -ENOENT;
        }
        if (!exists && c == t->leaf_cap) {
            OLC_HOOK(PM_OLC_SPLIT_LEAF, 0);
            int rc = split_leaf(t, leaf, v, parent, pv);
            if (rc)
                return rc;
            continue;
        }
        OLC_HOOK(PM_OLC_LEAF_UPGRADE, 0);
        olc_upgrade_or_restart(leaf, v, &restart);
        if (restart)
            continue;
        if (!exists) {
            _Atomic uint64_t *keys = leaf_keys(leaf), *vals = leaf_vals(t, leaf);
            for (unsigned i = c; i > pos; i--) {
                ST(&keys[i], LD(&keys[i - 1]));
                ST(&vals[i], LD(&vals[i - 1]));
            }
            ST(&keys[pos], key);
            ST(&leaf->count, c + 1);
        }
        ST(&leaf_vals(t, leaf)[pos], value);
        olc_write_unlock(leaf);
        if (replaced)
            *replaced = exists;
        return 0;
    }
}

int pm_tree_insert(pm_tree *t, uint64_t key, uint64_t value, int *replaced, pm_op_stats *st)
{
    return write_key(t, key, value, true, replaced, st);
}

int pm_tree_update(pm_tree *t, uint64_t key, uint64_t value, pm_op_stats *st)
{
    return write_key(t, key, value, false, NULL, st);
}

/* ---- scans ---- */

int pm_tree_scan(pm_tree *t, uint64_t start, size_t max, uint64_t *keys, uint64_t *values,
                 size_t *n_out, pm_op_stats *st)
{
    size_t n = 0;
    node *leaf = NULL;
    uint64_t v = 0;
    unsigned attempt = 0;
    while (!leaf) {
        bool restart = false;
        leaf = descend(t, start, &v, NULL, NULL, &restart, NULL, st);
        if (restart)
            backoff(&attempt);
    }
    /* Invariant: every key < start has been emitted (or was below the range). */
    bool done = max == 0;
    while (!done) {
        bool restart = false;
        unsigned c = clamp(LD(&leaf->count), t->leaf_cap);
        unsigned pos = lower_bound(leaf_keys(leaf), c, start);
        size_t take = c - pos < max - n ? c - pos : max - n;
        uint64_t last = 0;
        for (size_t i = 0; i < take; i++) {
            last = LD(&leaf_keys(leaf)[pos + i]);
            if (keys)
                keys[n + i] = last;
            if (values)
                values[n + i] = LD(&leaf_vals(t, leaf)[pos + i]);
        }
        node *next = LD(&leaf->next);
        olc_check_or_restart(leaf, v, &restart);
        if (!restart) {
            n += take;
            if (n == max || (take > 0 && last == UINT64_MAX)) {
                done = true;
            } else if (!next) {
                done = true;
            } else {
                if (take > 0)
                    start = last + 1;
                leaf = next;
                OLC_HOOK(PM_OLC_SCAN_HOP, 0);
                if (st)
                    st->nodes_visited++;
            }
            attempt = 0;
        } else {
            backoff(&attempt);
        }
        /* (Re)read the current leaf: it keeps its keys below any split point. */
        while (!done) {
            restart = false;
            v = olc_read_lock_or_restart(leaf, &restart);
            if (!restart)
                break;
            backoff(&attempt);
        }
    }
    if (st)
        st->keys_scanned += n;
    *n_out = n;
    return 0;
}

/* ---- bulk load ---- */

/* Split m items into k nearly equal groups; group g gets this many. */
static size_t group_size(size_t m, size_t k, size_t g)
{
    return m / k + (g < m % k ? 1 : 0);
}

int pm_tree_bulk_load(pm_tree *t, const uint64_t *keys, const uint64_t *values, size_t n,
                      unsigned fill_percent)
{
    node *root = atomic_load_explicit(&t->root, memory_order_relaxed);
    if (!root->leaf || LD(&root->count) != 0)
        return -EEXIST;
    for (size_t i = 1; i < n; i++)
        if (keys[i] <= keys[i - 1])
            return -EINVAL;
    if (n == 0)
        return 0;
    if (fill_percent == 0 || fill_percent > 100)
        fill_percent = 100;
    size_t per_leaf = (size_t)t->leaf_cap * fill_percent / 100;
    per_leaf = per_leaf ? per_leaf : 1;
    size_t n_nodes = (n + per_leaf - 1) / per_leaf;
    node **level = malloc(n_nodes * sizeof *level);
    uint64_t *first = malloc(n_nodes * sizeof *first);
    if (!level || !first) {
        free(level);
        free(first);
        return -ENOMEM;
    }
    int rc = 0;
    /* Leaves: the existing empty root becomes the first leaf. */
    size_t k = 0;
    for (size_t g = 0; g < n_nodes && rc == 0; g++) {
        node *leaf = g == 0 ? root : new_node(t, true);
        if (!leaf) {
            rc = -ENOMEM;
            break;
        }
        size_t m = group_size(n, n_nodes, g);
        for (size_t i = 0; i < m; i++, k++) {
            ST(&leaf_keys(leaf)[i], keys[k]);
            ST(&leaf_vals(t, leaf)[i], values ? values[k] : keys[k]);
        }
        ST(&leaf->count, (uint32_t)m);
        if (g > 0)
            ST(&level[g - 1]->next, leaf);
        level[g] = leaf;
        first[g] = keys[k - m];
    }
    /* Inner levels bottom-up until one node remains. */
    while (rc == 0 && n_nodes > 1) {
        size_t parents = (n_nodes + INNER_KEYS) / (INNER_KEYS + 1);
        size_t c = 0;
        for (size_t g = 0; g < parents; g++) {
            node *p = new_node(t, false);
            if (!p) {
                rc = -ENOMEM;
                break;
            }
            size_t m = group_size(n_nodes, parents, g);
            uint64_t pfirst = first[c];
            for (size_t i = 0; i < m; i++, c++) {
                set_kid(p, (unsigned)i, level[c]);
                if (i > 0)
                    ST(&inner_keys(p)[i - 1], first[c]);
            }
            ST(&p->count, (uint32_t)(m - 1));
            level[g] = p;
            first[g] = pfirst;
        }
        n_nodes = parents;
    }
    if (rc == 0) {
        /* release: a tree handed to other threads afterwards sees it whole */
        atomic_store_explicit(&t->root, level[0], memory_order_release);
    } else {
        /* undo: an empty root again (blocks stay in the arena until destroy) */
        ST(&root->count, 0);
        ST(&root->next, NULL);
    }
    free(level);
    free(first);
    return rc;
}

/* ---- whole-tree queries ---- */

uint64_t pm_tree_size(pm_tree *t)
{
    size_t n;
    pm_tree_scan(t, 0, SIZE_MAX, NULL, NULL, &n, NULL);
    return n;
}

int pm_tree_migrate(pm_tree *t, int node_id, pm_migration_report *report)
{
    return pm_arena_migrate(&t->arena, node_id, report);
}

int pm_tree_page_nodes(pm_tree *t, uint64_t *counts, int n_counts)
{
    return pm_arena_page_nodes(&t->arena, counts, n_counts);
}
