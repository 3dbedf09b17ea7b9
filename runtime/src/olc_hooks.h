/* Test-only hooks into the B+-tree's optimistic lock coupling (tree.c).
 *
 * Compiled in only with -DPMOSS_OLC_HOOKS, which CMake sets for a test-only
 * copy of the runtime objects (pmoss_runtime_hooks); libpmoss never has them. A
 * hook runs at each OLC window — a point where a thread has read a node (or
 * decided to change it) but has not yet validated or locked what it read —
 * so a test can stop one thread there while another splits or inserts, and
 * then check that the first one notices (restarts) instead of acting on
 * what it read. runtime/tests/test_tree_olc_mt.c has one test per window. */
#ifndef PMOSS_OLC_HOOKS_H
#define PMOSS_OLC_HOOKS_H

typedef enum pm_olc_point {
    /* descend: inner node validated (its child pointer is real), the child
     * not yet read-locked. info: depth of the child (root = 0). */
    PM_OLC_DESCEND_CHILD = 0,
    /* descend: the leaf read-locked, its parent not yet re-checked. */
    PM_OLC_DESCEND_LEAF,
    /* write: a full leaf read (leaf and parent versions in hand), split
     * decided, neither locked yet. */
    PM_OLC_SPLIT_LEAF,
    /* writer's descend: a full inner node read, split decided, not locked. */
    PM_OLC_SPLIT_INNER,
    /* split: node and parent (or root) locked, keys moved to the new right
     * sibling, the parent not yet updated. info: 1 leaf split, 0 inner. */
    PM_OLC_PARENT_UPDATE,
    /* write: the key's slot found in a non-full leaf, upgrade not yet tried. */
    PM_OLC_LEAF_UPGRADE,
    /* scan: leaf validated with its right-sibling pointer, the sibling not
     * yet read-locked. */
    PM_OLC_SCAN_HOP,
    /* any retry loop is about to retry (a restart). */
    PM_OLC_RESTART,
    PM_OLC_POINT_COUNT
} pm_olc_point;

typedef void (*pm_olc_hook_fn)(pm_olc_point point, unsigned info, void *arg);

/* Install fn (NULL: none); every thread in any tree calls it at each window.
 * Not thread-safe: call while no thread uses a tree (the threads started
 * afterwards see it through pthread_create's ordering). */
void pm_olc_set_hook(pm_olc_hook_fn fn, void *arg);

#endif
