/* Epoch-based grace periods (see internal.h). All operations are seq_cst:
 * the reader's slot store must be ordered before its load of the protected
 * pointer, and the writer's pointer swap before its scan of the slots — a
 * store->load ordering that only seq_cst (or a full fence) provides. Readers
 * enter once per routing batch, so the cost is off the per-query path. */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>

#include "internal.h"

int pm_epoch_init(pm_epoch *e, unsigned n_slots)
{
    e->slots = aligned_alloc(PM_CACHE_LINE, (n_slots ? n_slots : 1) * sizeof *e->slots);
    if (!e->slots)
        return -ENOMEM;
    e->n_slots = n_slots;
    atomic_init(&e->global, 1);
    for (unsigned i = 0; i < n_slots; i++)
        atomic_init(&e->slots[i].epoch, 0);
    return 0;
}

void pm_epoch_fini(pm_epoch *e)
{
    free(e->slots);
}

void pm_epoch_enter(pm_epoch *e, unsigned slot)
{
    atomic_store(&e->slots[slot].epoch, atomic_load(&e->global));
}

void pm_epoch_exit(pm_epoch *e, unsigned slot)
{
    atomic_store(&e->slots[slot].epoch, 0);
}

/* Returns once every reader that entered before the call has exited. */
void pm_epoch_synchronize(pm_epoch *e)
{
    uint64_t target = atomic_fetch_add(&e->global, 1) + 1;
    for (unsigned i = 0; i < e->n_slots; i++) {
        for (;;) {
            uint64_t s = atomic_load(&e->slots[i].epoch);
            if (s == 0 || s >= target)
                break;
            sched_yield();
        }
    }
}
