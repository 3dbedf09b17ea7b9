/*
 * Per-slice counter table: the stitching step between probe reads and a
 * snapshot. Each cell keeps a sum and how many windows measured it, so a
 * cell no window measured exports as null instead of 0.
 */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct pm_ctab {
    unsigned n_slices, n_values;
    const char *const *names;
    double *sum;       /* [n_slices * n_values] */
    uint32_t *windows; /* measured windows per cell */
    int64_t *queries;  /* [n_slices] */
};

int pm_ctab_create(unsigned n_slices, unsigned n_values, const char *const *names, pm_ctab **out)
{
    if (!out || !names || n_slices == 0 || n_values == 0)
        return -EINVAL;
    pm_ctab *t = calloc(1, sizeof(*t));
    size_t cells = (size_t)n_slices * n_values;
    if (t) {
        t->sum = calloc(cells, sizeof(double));
        t->windows = calloc(cells, sizeof(uint32_t));
        t->queries = calloc(n_slices, sizeof(int64_t));
    }
    if (!t || !t->sum || !t->windows || !t->queries) {
        pm_ctab_destroy(t);
        return -ENOMEM;
    }
    t->n_slices = n_slices;
    t->n_values = n_values;
    t->names = names;
    *out = t;
    return 0;
}

void pm_ctab_destroy(pm_ctab *t)
{
    if (!t)
        return;
    free(t->sum);
    free(t->windows);
    free(t->queries);
    free(t);
}

int pm_ctab_add_window(pm_ctab *t, unsigned slice, const uint64_t *before, const uint64_t *after,
                       uint64_t queries)
{
    if (!t || slice >= t->n_slices || !before || !after)
        return -EINVAL;
    size_t base = (size_t)slice * t->n_values;
    for (unsigned v = 0; v < t->n_values; v++) {
        if (before[v] == PM_VALUE_UNAVAILABLE || after[v] == PM_VALUE_UNAVAILABLE)
            continue;
        /* Cumulative values never decrease; a rounding wobble of the scaled
         * sum could, so clamp instead of wrapping around. */
        t->sum[base + v] += after[v] >= before[v] ? (double)(after[v] - before[v]) : 0.0;
        t->windows[base + v]++;
    }
    t->queries[slice] += (int64_t)queries;
    return 0;
}

int pm_ctab_merge(pm_ctab *dst, const pm_ctab *src)
{
    if (!dst || !src || dst->n_slices != src->n_slices || dst->n_values != src->n_values)
        return -EINVAL;
    size_t cells = (size_t)dst->n_slices * dst->n_values;
    for (size_t i = 0; i < cells; i++) {
        dst->sum[i] += src->sum[i];
        dst->windows[i] += src->windows[i];
    }
    for (unsigned s = 0; s < dst->n_slices; s++)
        dst->queries[s] += src->queries[s];
    return 0;
}

int pm_ctab_get(const pm_ctab *t, unsigned slice, unsigned value_index, double *value)
{
    if (!t || slice >= t->n_slices || value_index >= t->n_values || !value)
        return -EINVAL;
    size_t i = (size_t)slice * t->n_values + value_index;
    if (t->windows[i] == 0)
        return -ENODATA;
    *value = t->sum[i];
    return 0;
}

/* Accessors for arrow.c. */
unsigned pm_ctab_n_slices(const pm_ctab *t) { return t->n_slices; }
unsigned pm_ctab_n_values(const pm_ctab *t) { return t->n_values; }
const char *pm_ctab_name(const pm_ctab *t, unsigned v) { return t->names[v]; }
int64_t pm_ctab_queries(const pm_ctab *t, unsigned slice) { return t->queries[slice]; }
