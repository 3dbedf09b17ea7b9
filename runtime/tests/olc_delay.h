/* Delay injection for the stress tests, through the tree's OLC test hooks
 * (olc_hooks.h; link the hooked objects, pmoss_runtime_hooks).
 *
 * The OLC windows are a few instructions wide, so a thread is rarely stopped
 * inside one by luck: without delays the split stress lost no key in 9 runs
 * of the unfixed descend (release and TSan), with them it failed every run.
 * A random 1 in OLC_DELAY_ONE_IN window visits spins for up to
 * OLC_DELAY_SPIN iterations, and 1 in 8 of those yields the CPU instead, so
 * another thread's split often lands inside the window. Header-only: each
 * test includes it once. */
#ifndef PMOSS_TEST_OLC_DELAY_H
#define PMOSS_TEST_OLC_DELAY_H
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "olc_hooks.h"

#define OLC_DELAY_ONE_IN 16
#define OLC_DELAY_SPIN 2000

static bool olc_delays_on;
static _Thread_local pm_rng olc_delay_rng;
static _Thread_local bool olc_delay_seeded;
static _Atomic uint64_t olc_delay_seed;

static void olc_delay_hook(pm_olc_point point, unsigned info, void *arg)
{
    (void)info;
    (void)arg;
    if (point == PM_OLC_RESTART || !olc_delays_on)
        return;
    if (!olc_delay_seeded) {
        /* relaxed: only distinct seeds per thread matter */
        pm_rng_seed(&olc_delay_rng,
                    atomic_fetch_add_explicit(&olc_delay_seed, 1, memory_order_relaxed) + 1);
        olc_delay_seeded = true;
    }
    uint64_t r = pm_rng_next(&olc_delay_rng);
    if (r % OLC_DELAY_ONE_IN != 0)
        return;
    if ((r >> 8) % 8 == 0) {
        sched_yield();
        return;
    }
    for (volatile uint64_t i = (r >> 16) % OLC_DELAY_SPIN; i > 0; i--)
        ;
}

/* Install the hook; delays are on unless $PMOSS_STRESS_DELAYS is "0".
 * Call before starting threads. Returns whether delays are on. */
static bool olc_delay_install(void)
{
    const char *d = getenv("PMOSS_STRESS_DELAYS");
    olc_delays_on = !(d && strcmp(d, "0") == 0);
    pm_olc_set_hook(olc_delay_hook, NULL);
    return olc_delays_on;
}
#endif
