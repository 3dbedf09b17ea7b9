/* The runtime's snapshot as Arrow record batches (Arrow C Data Interface):
 * the stitched per-slice table — the collector's counter table holding one
 * window per slice, the cumulative counts of the swept snapshot — and the
 * off-core readings, both through the collector's exporters.
 *
 * Built into libpmoss only together with the collector (see
 * runtime/CMakeLists.txt); the runtime itself does not depend on it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pmoss/arrow_c_data.h"
#include "pmoss/collector.h"
#include "pmoss/runtime.h"

_Static_assert(sizeof(int) == sizeof(int32_t), "schedule ids are exported as int32");
_Static_assert(PM_STAT_UNAVAILABLE == PM_VALUE_UNAVAILABLE, "one null marker for stats and counters");

/* The uncore hook must be the collector's layout for its exporter. */
static int offcore_layout_ok(const pm_runtime *rt)
{
    unsigned n = pm_runtime_n_offcore_values(rt);
    if (n == 0)
        return 1;
    if (n != PM_N_OFFCORE)
        return 0;
    for (unsigned i = 0; i < n; i++)
        if (strcmp(pm_runtime_offcore_name(rt, i), pm_offcore_names[i]) != 0)
            return 0;
    return 1;
}

/* Read one snapshot into freshly allocated buffers (free_snapshot frees
 * them). The off-core shape is set per run and can grow between the sizing
 * and the copy: retry with the size the call reported. */
static int read_snapshot(pm_runtime *rt, pm_snapshot *snap)
{
    unsigned ns = pm_runtime_n_slices(rt);
    size_t table = (size_t)ns * pm_runtime_n_stats(rt);
    memset(snap, 0, sizeof *snap);
    snap->stats = malloc(table * sizeof *snap->stats);
    snap->node = malloc(ns * sizeof *snap->node);
    snap->core = malloc(ns * sizeof *snap->core);
    snap->stats_cap = table;
    if (!snap->stats || !snap->node || !snap->core)
        return -ENOMEM;
    /* the exporter reads PM_N_OFFCORE rows, whether or not a hook exists */
    size_t cap = (size_t)PM_N_OFFCORE * 4;
    int rc = -ENOSPC;
    for (int tries = 0; tries < 4 && rc == -ENOSPC; tries++) {
        double *oc = realloc(snap->offcore, cap * sizeof *oc);
        if (!oc)
            return -ENOMEM;
        snap->offcore = oc;
        snap->offcore_cap = cap;
        rc = pm_runtime_snapshot_read(rt, snap);
        cap = (size_t)PM_N_OFFCORE * snap->offcore_stride;
    }
    return rc;
}

static void free_snapshot(pm_snapshot *snap)
{
    free(snap->stats);
    free(snap->node);
    free(snap->core);
    free(snap->offcore);
}

/* slice x (stats after "queries"): one window per slice from 0 to the
 * cumulative value, so PM_STAT_UNAVAILABLE cells stay null. The table
 * borrows names (n_stats - 1 entries, filled here) until it is destroyed. */
static int slice_table(pm_runtime *rt, const pm_snapshot *snap, const char **names, pm_ctab **out)
{
    unsigned ns = pm_runtime_n_slices(rt), nst = pm_runtime_n_stats(rt), nv = nst - 1;
    for (unsigned v = 0; v < nv; v++)
        names[v] = pm_runtime_stat_name(rt, v + 1);
    uint64_t *zero = calloc(nv, sizeof *zero);
    pm_ctab *t = NULL;
    int rc = zero ? pm_ctab_create(ns, nv, names, &t) : -ENOMEM;
    for (unsigned s = 0; rc == 0 && s < ns; s++) {
        const uint64_t *row = snap->stats + (size_t)s * nst;
        rc = pm_ctab_add_window(t, s, zero, row + 1, row[0]);
    }
    free(zero);
    if (rc)
        pm_ctab_destroy(t);
    else
        *out = t;
    return rc;
}

int pm_runtime_export_arrow(pm_runtime *rt, struct ArrowArray *slices, struct ArrowSchema *slices_schema,
                            struct ArrowArray *offcore, struct ArrowSchema *offcore_schema, char *msg,
                            size_t msg_len)
{
    if (!rt || !slices || !slices_schema || !offcore || !offcore_schema || !offcore_layout_ok(rt) ||
        pm_runtime_n_stats(rt) < 1 || strcmp(pm_runtime_stat_name(rt, 0), "queries") != 0)
        return -EINVAL;
    pm_snapshot snap;
    int rc = read_snapshot(rt, &snap);
    pm_ctab *t = NULL;
    const char **names = malloc(pm_runtime_n_stats(rt) * sizeof *names);
    if (rc == 0)
        rc = names ? slice_table(rt, &snap, names, &t) : -ENOMEM;
    if (rc == 0)
        rc = pm_ctab_export_arrow(t, (const int32_t *)snap.core, (const int32_t *)snap.node, slices,
                                  slices_schema);
    pm_ctab_destroy(t);
    free(names);
    if (rc == 0) {
        rc = pm_offcore_export_arrow(snap.offcore, snap.offcore_stride, snap.offcore_nodes,
                                     snap.offcore_links, offcore, offcore_schema);
        if (rc) {
            slices->release(slices);
            slices_schema->release(slices_schema);
        }
    }
    if (rc == 0 && msg && msg_len)
        snprintf(msg, msg_len, "%s", snap.offcore_msg);
    free_snapshot(&snap);
    return rc;
}
