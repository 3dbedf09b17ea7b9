/*
 * Arrow C Data Interface export of counter tables (record batches = struct
 * arrays). Every ArrowSchema/ArrowArray owns its buffers through
 * private_data and frees them, its children and its dictionary-free self in
 * release; the consumer (pyarrow) calls release exactly once per struct.
 */
#include "internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pmoss/arrow_c_data.h"

/* ------------------------------------------------------------- schema */

typedef struct schema_priv {
    char *format, *name;
} schema_priv;

static void schema_release(struct ArrowSchema *s)
{
    if (!s || !s->release)
        return;
    for (int64_t i = 0; i < s->n_children; i++) {
        struct ArrowSchema *c = s->children[i];
        if (c->release)
            c->release(c);
        free(c);
    }
    free(s->children);
    schema_priv *p = s->private_data;
    if (p) {
        free(p->format);
        free(p->name);
        free(p);
    }
    s->release = NULL; /* marks it released, as the spec requires */
}

static int schema_init(struct ArrowSchema *s, const char *format, const char *name, int64_t flags,
                       int64_t n_children)
{
    memset(s, 0, sizeof(*s));
    schema_priv *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->format = strdup(format);
    p->name = strdup(name);
    s->private_data = p;
    s->release = schema_release;
    if (n_children) {
        s->children = calloc((size_t)n_children, sizeof(*s->children));
        if (!s->children)
            goto fail;
        for (int64_t i = 0; i < n_children; i++) {
            if (!(s->children[i] = calloc(1, sizeof(struct ArrowSchema))))
                goto fail;
            s->n_children = i + 1; /* release frees only what exists */
        }
    }
    if (!p->format || !p->name)
        goto fail;
    s->format = p->format;
    s->name = p->name;
    s->flags = flags;
    return 0;
fail:
    schema_release(s);
    return -ENOMEM;
}

/* -------------------------------------------------------------- array */

typedef struct array_priv {
    void *bufs[3];
    const void *buf_ptrs[3];
} array_priv;

static void array_release(struct ArrowArray *a)
{
    if (!a || !a->release)
        return;
    for (int64_t i = 0; i < a->n_children; i++) {
        struct ArrowArray *c = a->children[i];
        if (c && c->release)
            c->release(c);
        free(c);
    }
    free(a->children);
    array_priv *p = a->private_data;
    if (p) {
        for (int i = 0; i < 3; i++)
            free(p->bufs[i]);
        free(p);
    }
    a->release = NULL;
}

/* A child array that takes ownership of up to 3 malloc'd buffers. On
 * failure the buffers are freed too, so callers never leak on error. */
static int array_init(struct ArrowArray *a, int64_t length, int64_t null_count, int n_buffers, void *b0,
                      void *b1, void *b2)
{
    memset(a, 0, sizeof(*a));
    array_priv *p = calloc(1, sizeof(*p));
    if (!p) {
        free(b0);
        free(b1);
        free(b2);
        return -ENOMEM;
    }
    p->bufs[0] = b0;
    p->bufs[1] = b1;
    p->bufs[2] = b2;
    for (int i = 0; i < 3; i++)
        p->buf_ptrs[i] = p->bufs[i];
    a->length = length;
    a->null_count = null_count;
    a->n_buffers = n_buffers;
    a->buffers = p->buf_ptrs;
    a->private_data = p;
    a->release = array_release;
    return 0;
}

/* Column data handed to the batch builder. */
typedef struct column {
    const char *name;
    char format;           /* 'i' int32, 'l' int64, 'g' float64, 'u' utf8 */
    const void *data;      /* n values (utf8: const char *const *) */
    const uint8_t *valid;  /* NULL = all valid; for 'g' NaN also means null */
    size_t stride;         /* in elements; 0 = 1 */
} column;

static int column_array(struct ArrowArray *a, const column *c, int64_t n)
{
    size_t stride = c->stride ? c->stride : 1;
    uint8_t *bitmap = calloc((size_t)(n + 7) / 8 + 1, 1);
    if (!bitmap)
        return -ENOMEM;
    int64_t nulls = 0;
    void *data = NULL, *extra = NULL;
    size_t width = c->format == 'i' ? 4 : 8;
    if (c->format == 'u') {
        const char *const *strs = c->data;
        int32_t *offsets = malloc(sizeof(int32_t) * (size_t)(n + 1));
        size_t total = 0;
        for (int64_t i = 0; i < n; i++)
            total += strlen(strs[i * stride]);
        char *chars = malloc(total + 1);
        if (!offsets || !chars) {
            free(offsets);
            free(chars);
            free(bitmap);
            return -ENOMEM;
        }
        offsets[0] = 0;
        for (int64_t i = 0; i < n; i++) {
            size_t len = strlen(strs[i * stride]);
            memcpy(chars + offsets[i], strs[i * stride], len);
            offsets[i + 1] = offsets[i] + (int32_t)len;
            bitmap[i / 8] |= (uint8_t)(1u << (i % 8));
        }
        return array_init(a, n, 0, 3, bitmap, offsets, chars);
    }
    data = malloc(width * (size_t)(n ? n : 1));
    if (!data) {
        free(bitmap);
        return -ENOMEM;
    }
    for (int64_t i = 0; i < n; i++) {
        size_t src = (size_t)i * stride;
        int ok = !c->valid || c->valid[src];
        if (c->format == 'g') {
            double v = ((const double *)c->data)[src];
            ok = ok && !isnan(v);
            ((double *)data)[i] = ok ? v : 0.0;
        } else if (c->format == 'i') {
            ((int32_t *)data)[i] = ((const int32_t *)c->data)[src];
        } else {
            ((int64_t *)data)[i] = ((const int64_t *)c->data)[src];
        }
        if (ok)
            bitmap[i / 8] |= (uint8_t)(1u << (i % 8));
        else
            nulls++;
    }
    (void)extra;
    return array_init(a, n, nulls, 2, bitmap, data, NULL);
}

/* Build a record batch (struct array "+s" and its schema) from columns. */
static int export_batch(const column *cols, int n_cols, int64_t n_rows, struct ArrowArray *out_array,
                        struct ArrowSchema *out_schema)
{
    struct ArrowSchema s;
    struct ArrowArray a;
    int rc = schema_init(&s, "+s", "", 0, n_cols);
    if (rc)
        return rc;
    for (int i = 0; i < n_cols && rc == 0; i++) {
        char fmt[2] = {cols[i].format, '\0'};
        /* Every column may hold nulls except the row keys; pyarrow marks a
         * field not-null unless ARROW_FLAG_NULLABLE is set. */
        int64_t flags = (cols[i].valid || cols[i].format == 'g') ? ARROW_FLAG_NULLABLE : 0;
        rc = schema_init(s.children[i], fmt, cols[i].name, flags, 0);
    }
    if (rc) {
        schema_release(&s);
        return rc;
    }
    void *no_validity = NULL;
    rc = array_init(&a, n_rows, 0, 1, no_validity, NULL, NULL);
    if (rc == 0 && !(a.children = calloc((size_t)n_cols, sizeof(*a.children))))
        rc = -ENOMEM;
    for (int i = 0; i < n_cols && rc == 0; i++) {
        if (!(a.children[i] = calloc(1, sizeof(struct ArrowArray)))) {
            rc = -ENOMEM;
            break;
        }
        a.n_children = i + 1;
        rc = column_array(a.children[i], &cols[i], n_rows);
    }
    if (rc) {
        if (a.release)
            array_release(&a);
        schema_release(&s);
        return rc;
    }
    *out_array = a;
    *out_schema = s;
    return 0;
}

int pm_ctab_export_arrow(const pm_ctab *t, const int32_t *core, const int32_t *node,
                         struct ArrowArray *out_array, struct ArrowSchema *out_schema)
{
    if (!t || !out_array || !out_schema)
        return -EINVAL;
    unsigned ns = pm_ctab_n_slices(t), nv = pm_ctab_n_values(t);
    int32_t *idx = malloc(sizeof(int32_t) * ns), *minus = malloc(sizeof(int32_t) * ns);
    int64_t *queries = malloc(sizeof(int64_t) * ns);
    double *vals = malloc(sizeof(double) * (size_t)ns * nv);
    column *cols = malloc(sizeof(column) * (4 + nv));
    int rc = -ENOMEM;
    if (idx && minus && queries && vals && cols) {
        for (unsigned s = 0; s < ns; s++) {
            idx[s] = (int32_t)s;
            minus[s] = -1;
            queries[s] = pm_ctab_queries(t, s);
            for (unsigned v = 0; v < nv; v++)
                if (pm_ctab_get(t, s, v, &vals[(size_t)s * nv + v]) != 0)
                    vals[(size_t)s * nv + v] = NAN; /* never measured: null */
        }
        cols[0] = (column){"slice", 'i', idx, NULL, 0};
        cols[1] = (column){"core", 'i', core ? core : minus, NULL, 0};
        cols[2] = (column){"node", 'i', node ? node : minus, NULL, 0};
        cols[3] = (column){"queries", 'l', queries, NULL, 0};
        for (unsigned v = 0; v < nv; v++)
            cols[4 + v] = (column){pm_ctab_name(t, v), 'g', vals + v, NULL, nv};
        rc = export_batch(cols, (int)(4 + nv), ns, out_array, out_schema);
    }
    free(idx);
    free(minus);
    free(queries);
    free(vals);
    free(cols);
    return rc;
}

const char *const pm_offcore_names[PM_N_OFFCORE] = {"imc_read_bytes", "imc_write_bytes", "link_in_bytes",
                                                    "link_out_bytes", "imc_total_bytes"};

int pm_offcore_export_arrow(const double *values, unsigned cap, unsigned n_nodes, unsigned n_links,
                            struct ArrowArray *out_array, struct ArrowSchema *out_schema)
{
    if (!values || !out_array || !out_schema || n_nodes > cap || n_links > cap)
        return -EINVAL;
    unsigned n = n_nodes + n_links;
    const char **scope = malloc(sizeof(char *) * (n ? n : 1));
    int32_t *index = malloc(sizeof(int32_t) * (n ? n : 1));
    double *v = malloc(sizeof(double) * PM_N_OFFCORE * (n ? n : 1));
    int rc = -ENOMEM;
    if (scope && index && v) {
        for (unsigned r = 0; r < n; r++) {
            int is_node = r < n_nodes;
            unsigned i = is_node ? r : r - n_nodes;
            scope[r] = is_node ? "node" : "link";
            index[r] = (int32_t)i;
            for (int f = 0; f < PM_N_OFFCORE; f++) {
                int node_feature = f != PM_OFF_LINK_IN && f != PM_OFF_LINK_OUT;
                /* a node row has no link values and vice versa: null */
                v[(size_t)r * PM_N_OFFCORE + f] =
                    node_feature == is_node ? values[(size_t)f * cap + i] : NAN;
            }
        }
        column cols[2 + PM_N_OFFCORE] = {{"scope", 'u', scope, NULL, 0}, {"index", 'i', index, NULL, 0}};
        for (int f = 0; f < PM_N_OFFCORE; f++)
            cols[2 + f] = (column){pm_offcore_names[f], 'g', v + f, NULL, PM_N_OFFCORE};
        rc = export_batch(cols, 2 + PM_N_OFFCORE, n, out_array, out_schema);
    }
    free(scope);
    free(index);
    free(v);
    return rc;
}
