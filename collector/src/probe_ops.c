/*
 * The runtime's hooks backed by the collector: pm_probe_ops (per-worker core
 * counters) and pm_uncore_ops (the off-core sweeper's uncore PMUs). Compiled
 * against the runtime's own structs when runtime.h is on the include path,
 * so a change of a hook's shape breaks the build here instead of at run time.
 */
#include "internal.h"

#if defined(__has_include)
#if __has_include(<pmoss/runtime.h>)
#include <pmoss/runtime.h>

const pm_probe_ops pm_collector_probe_ops = {
    .open = pm_probe_open,
    .read = pm_probe_read,
    .close = pm_probe_close,
    .n_values = PM_PROBE_N_VALUES,
    .names = pm_probe_names,
};

/* Discover under the ctx's sysfs root and open system-wide. Nothing found
 * is a run with 0 nodes and 0 links, not an error. */
static int uncore_hook_open(void *ctx, void **state, unsigned *n_nodes, unsigned *n_links, char *msg,
                            size_t msg_len)
{
    const pm_uncore_config *cfg = ctx;
    pm_uncore *u = NULL;
    int rc = pm_uncore_discover(cfg ? cfg->sysfs_root : NULL, &u, msg, msg_len);
    if (rc == 0 && (rc = pm_uncore_open(u, msg, msg_len)) != 0)
        pm_uncore_destroy(u);
    if (rc)
        return rc;
    *n_nodes = pm_uncore_n_nodes(u);
    *n_links = pm_uncore_n_links(u);
    *state = u;
    return 0;
}

static int uncore_hook_read(void *state, double *values, unsigned cap)
{
    return pm_uncore_read(state, values, cap);
}

static void uncore_hook_close(void *state) { pm_uncore_destroy(state); }

const pm_uncore_ops pm_collector_uncore_ops = {
    .open = uncore_hook_open,
    .read = uncore_hook_read,
    .close = uncore_hook_close,
    .n_values = PM_N_OFFCORE,
    .names = pm_offcore_names,
};
#endif
#endif

/* ISO C forbids an empty translation unit when runtime.h is absent. */
typedef int pm_probe_ops_unit_not_empty;
