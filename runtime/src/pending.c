/* A worker's per-slice pending batches (see internal.h).
 *
 * Storage is one pool of entries per worker (query, enqueue stamp, link), so
 * memory is bounded by the pool size whatever the slice count, and a LIFO
 * free list keeps resident memory at the peak number of pending queries
 * (pages of the pool never needed are never touched). Each collecting slice
 * chains its entries FIFO; the collecting slices themselves sit on an age
 * list ordered by when each got its first pending query, so the oldest
 * pending query of the worker is always the head of the oldest slice. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int pm_pending_init(pm_pending *p, unsigned n_slices, unsigned batch, unsigned cap, unsigned due_max)
{
    memset(p, 0, sizeof *p);
    if (n_slices == 0 || batch == 0 || cap == 0 || due_max == 0)
        return -EINVAL;
    p->batch = batch;
    p->cap = cap;
    p->n_slices = n_slices;
    p->due_max = due_max;
    p->q = malloc((size_t)cap * sizeof *p->q);
    p->t_ns = malloc((size_t)cap * sizeof *p->t_ns);
    p->next = malloc((size_t)cap * sizeof *p->next);
    p->slice = malloc((size_t)n_slices * sizeof *p->slice);
    /* drain stops at due_max; then expiry or a flush adds each collecting
     * slice once, and at most cap slices can be collecting */
    p->due_cap = due_max + (n_slices < cap ? n_slices : cap);
    p->due = malloc((size_t)p->due_cap * sizeof *p->due);
    if (!p->q || !p->t_ns || !p->next || !p->slice || !p->due) {
        pm_pending_fini(p);
        return -ENOMEM;
    }
    /* the free list is built lazily (fresh = first never-used entry), so
     * init touches none of the pool's pages */
    p->free = PM_PENDING_NONE;
    p->fresh = 0;
    for (unsigned s = 0; s < n_slices; s++)
        p->slice[s] = (pm_pending_slice){PM_PENDING_NONE, PM_PENDING_NONE, 0, PM_PENDING_NONE,
                                         PM_PENDING_NONE, 0};
    p->oldest = p->newest = PM_PENDING_NONE;
    return 0;
}

void pm_pending_fini(pm_pending *p)
{
    free(p->q);
    free(p->t_ns);
    free(p->next);
    free(p->slice);
    free(p->due);
    memset(p, 0, sizeof *p);
}

static uint32_t entry_alloc(pm_pending *p)
{
    uint32_t e = p->free;
    if (e != PM_PENDING_NONE)
        p->free = p->next[e];
    else
        e = p->fresh++;
    return e;
}

static void entry_free(pm_pending *p, uint32_t e)
{
    p->next[e] = p->free;
    p->free = e;
}

static void age_unlink(pm_pending *p, uint32_t s)
{
    pm_pending_slice *ps = &p->slice[s];
    if (ps->older != PM_PENDING_NONE)
        p->slice[ps->older].newer = ps->newer;
    else
        p->oldest = ps->newer;
    if (ps->newer != PM_PENDING_NONE)
        p->slice[ps->newer].older = ps->older;
    else
        p->newest = ps->older;
    ps->older = ps->newer = PM_PENDING_NONE;
}

/* Move slice s's whole chain (it is collecting) to the due list. */
static void make_due(pm_pending *p, uint32_t s)
{
    pm_pending_slice *ps = &p->slice[s];
    age_unlink(p, s);
    assert(p->n_due < p->due_cap);
    p->due[p->n_due++] = (pm_batch){s, ps->head, ps->tail, ps->n};
    ps->head = ps->tail = PM_PENDING_NONE;
    ps->n = 0;
}

/* Link entry e (already filled) at the tail of its slice's chain. */
static void add(pm_pending *p, uint32_t e)
{
    uint32_t s = p->q[e].slice;
    pm_pending_slice *ps = &p->slice[s];
    p->next[e] = PM_PENDING_NONE;
    if (ps->n == 0) {
        ps->head = e;
        ps->older = p->newest;
        ps->newer = PM_PENDING_NONE;
        if (p->newest != PM_PENDING_NONE)
            p->slice[p->newest].newer = s;
        else
            p->oldest = s;
        p->newest = s;
    } else {
        p->next[ps->tail] = e;
    }
    ps->tail = e;
    if (++ps->n == p->batch)
        make_due(p, s);
}

unsigned pm_pending_drain(pm_pending *p, pm_queue *q, unsigned max, int *empty)
{
    unsigned n = 0;
    *empty = 0;
    while (n < max && p->used < p->cap && p->n_due < p->due_max) {
        uint32_t e = entry_alloc(p);
        if (pm_queue_pop_at(q, &p->q[e], &p->t_ns[e]) != 0) {
            entry_free(p, e);
            *empty = 1;
            break;
        }
        p->used++;
        n++;
        add(p, e);
    }
    return n;
}

void pm_pending_pick(pm_pending *p, int idle, uint64_t wait_ns, uint64_t now_ns)
{
    if (idle || wait_ns == 0) {
        while (p->oldest != PM_PENDING_NONE)
            make_due(p, p->oldest);
        return;
    }
    /* the age list is ordered by first query, so expiry stops at the first
     * slice still within its wait */
    uint64_t deadline = now_ns > wait_ns ? now_ns - wait_ns : 0;
    while (p->oldest != PM_PENDING_NONE && p->t_ns[p->slice[p->oldest].head] <= deadline)
        make_due(p, p->oldest);
    if (p->n_due == 0 && p->used == p->cap)
        make_due(p, p->oldest); /* a full pool holds at least one slice */
}

void pm_pending_release(pm_pending *p, const pm_batch *b)
{
    p->next[b->tail] = p->free;
    p->free = b->head;
    p->used -= b->n;
}
