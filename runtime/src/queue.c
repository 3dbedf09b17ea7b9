/* Bounded MPMC queue after Dmitry Vyukov: each cell carries a sequence number
 * that tells producers and consumers whose turn it is, so neither side ever
 * blocks the other except when the queue is full or empty. The runtime uses
 * it multi-producer (routers) / single-consumer (the worker), FCFS. */
#include <errno.h>
#include <stdlib.h>

#include "internal.h"

int pm_queue_init(pm_queue *q, unsigned capacity)
{
    if (capacity < 2 || (capacity & (capacity - 1)))
        return -EINVAL;
    q->cells = aligned_alloc(PM_CACHE_LINE, capacity * sizeof *q->cells + PM_CACHE_LINE);
    if (!q->cells)
        return -ENOMEM;
    for (unsigned i = 0; i < capacity; i++)
        atomic_init(&q->cells[i].seq, i);
    q->mask = capacity - 1;
    atomic_init(&q->head, 0);
    atomic_init(&q->tail, 0);
    return 0;
}

void pm_queue_fini(pm_queue *q)
{
    free(q->cells);
}

/* stamp: store pm_now_ns(), read once the cell is seen free, right before
 * claiming it: the moment the item is really enqueued. Attempts on a full
 * queue read no clock, and the clock is read outside the claim-to-publish
 * window, which a consumer at that cell would see as an empty queue. */
static inline int push_impl(pm_queue *q, const pm_query *item, int stamp)
{
    /* relaxed: the position is only a claim ticket; the cell's seq orders data */
    uint64_t pos = atomic_load_explicit(&q->head, memory_order_relaxed);
    for (;;) {
        pm_queue_cell *c = &q->cells[pos & q->mask];
        /* acquire: the consumer that freed this cell has finished reading it */
        uint64_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
        int64_t dif = (int64_t)(seq - pos);
        if (dif == 0) {
            uint64_t t_ns = stamp ? pm_now_ns() : 0;
            if (atomic_compare_exchange_weak_explicit(&q->head, &pos, pos + 1,
                                                      memory_order_relaxed, memory_order_relaxed)) {
                c->q = *item;
                c->t_ns = t_ns;
                /* release: the item is visible before the cell reads as full */
                atomic_store_explicit(&c->seq, pos + 1, memory_order_release);
                return 0;
            }
        } else if (dif < 0) {
            return -EAGAIN;
        } else {
            pos = atomic_load_explicit(&q->head, memory_order_relaxed);
        }
    }
}

int pm_queue_pop_at(pm_queue *q, pm_query *item, uint64_t *t_ns)
{
    uint64_t pos = atomic_load_explicit(&q->tail, memory_order_relaxed);
    for (;;) {
        pm_queue_cell *c = &q->cells[pos & q->mask];
        /* acquire: pairs with the producer's release, the item is complete */
        uint64_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
        int64_t dif = (int64_t)(seq - (pos + 1));
        if (dif == 0) {
            if (atomic_compare_exchange_weak_explicit(&q->tail, &pos, pos + 1,
                                                      memory_order_relaxed, memory_order_relaxed)) {
                *item = c->q;
                *t_ns = c->t_ns;
                /* release: our read of the item happens before a producer reuses the cell */
                atomic_store_explicit(&c->seq, pos + q->mask + 1, memory_order_release);
                return 0;
            }
        } else if (dif < 0) {
            return -EAGAIN;
        } else {
            pos = atomic_load_explicit(&q->tail, memory_order_relaxed);
        }
    }
}

int pm_queue_push(pm_queue *q, const pm_query *item)
{
    return push_impl(q, item, 0);
}

int pm_queue_push_stamped(pm_queue *q, const pm_query *item)
{
    return push_impl(q, item, 1);
}

int pm_queue_pop(pm_queue *q, pm_query *item)
{
    uint64_t t_ns;
    return pm_queue_pop_at(q, item, &t_ns);
}
