/* Deterministic workload generator: YCSB-style op mixes over the loaded keys,
 * with uniform, scrambled-zipf, latest and hotspot key choice, and the three
 * datasets. Names match the Python side and the simulator. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef enum dist { D_UNIFORM, D_ZIPF, D_LATEST, D_HOTSPOT } dist;
typedef enum dataset { DS_DENSE, DS_UNIFORM, DS_CLUSTERED } dataset;

/* Percentages of read, update, insert, scan; default key distribution. */
typedef struct mix { const char *name; unsigned pct[4]; dist dflt; } mix;

static const mix mixes[] = {
    {"ycsb-a", {50, 50, 0, 0}, D_ZIPF},
    {"ycsb-b", {95, 5, 0, 0}, D_ZIPF},
    {"ycsb-c", {100, 0, 0, 0}, D_ZIPF},
    {"ycsb-d", {95, 0, 5, 0}, D_LATEST},
    {"ycsb-e", {0, 0, 5, 95}, D_ZIPF},
    {"scan", {0, 0, 0, 100}, D_ZIPF},
    {"rsi-20-30-50", {20, 0, 50, 30}, D_ZIPF},
    {"rsi-25-50-25", {25, 0, 25, 50}, D_ZIPF},
};

static const char *const dist_names[] = {"uniform", "zipf", "latest", "hotspot"};
static const char *const dataset_names[] = {"dense", "uniform", "clustered"};

/* Keys per cluster and the spread of a cluster for the clustered dataset
 * (map cell ids: many keys share a high-order prefix). */
#define CLUSTER_KEYS 1024
#define CLUSTER_SPAN (1ull << 24)
/* Insert keys of the dense dataset are max+1+stream+k*MAX_STREAMS. */
#define MAX_STREAMS 64

static int lookup_name(const char *const *names, int n, const char *name)
{
    for (int i = 0; name && i < n; i++)
        if (strcmp(names[i], name) == 0)
            return i;
    return -1;
}

/* ---- zipf (Gray et al. 1994, as in YCSB's ZipfianGenerator) ---- */

typedef struct zipf {
    double theta, alpha, zeta2, zetan, eta;
    uint64_t n;
} zipf;

/* zeta(n, theta) = sum_{i=1..n} i^-theta: exact up to 1e5 terms, then an
 * Euler-Maclaurin tail (error far below what the sampler can resolve), so
 * a 10M-key generator starts in microseconds instead of a 10M-term sum. */
static double zeta(uint64_t n, double theta)
{
    uint64_t m = n < 100000 ? n : 100000;
    double s = 0;
    for (uint64_t i = 1; i <= m; i++)
        s += pow((double)i, -theta);
    if (n > m) {
        double a = (double)m, b = (double)n;
        s += (pow(b, 1 - theta) - pow(a, 1 - theta)) / (1 - theta) +
             (pow(b, -theta) - pow(a, -theta)) / 2 +
             theta / 12 * (pow(a, -theta - 1) - pow(b, -theta - 1));
    }
    return s;
}

static void zipf_set_n(zipf *z, uint64_t n, double zetan)
{
    z->n = n;
    z->zetan = zetan;
    z->eta = (1 - pow(2.0 / (double)n, 1 - z->theta)) / (1 - z->zeta2 / zetan);
}

static void zipf_init(zipf *z, uint64_t n, double theta)
{
    z->theta = theta;
    z->alpha = 1 / (1 - theta);
    z->zeta2 = zeta(2, theta);
    zipf_set_n(z, n, zeta(n, theta));
}

/* Grow by one item (latest: a new insert), updating zeta incrementally. */
static void zipf_grow(zipf *z)
{
    zipf_set_n(z, z->n + 1, z->zetan + pow((double)(z->n + 1), -z->theta));
}

/* Rank in [0, n): 0 is the most popular. */
static uint64_t zipf_next(zipf *z, pm_rng *r)
{
    double u = pm_rng_unit(r), uz = u * z->zetan;
    if (uz < 1)
        return 0;
    if (uz < 1 + pow(0.5, z->theta))
        return z->n > 1;
    uint64_t v = (uint64_t)((double)z->n * pow(z->eta * u - z->eta + 1, z->alpha));
    return v < z->n ? v : z->n - 1;
}

static uint64_t fnv1a64(uint64_t x)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < 8; i++) {
        h ^= (x >> (8 * i)) & 0xff;
        h *= 0x100000001b3ull;
    }
    return h;
}

/* ---- generator ---- */

struct pm_workload {
    const mix *mix;
    dist dist;
    dataset ds;
    pm_workload_spec spec;
    const uint64_t *keys;
    uint64_t n;
    uint32_t stream;
    pm_rng rng;
    zipf z;
    uint64_t *inserted; /* this stream's inserts, oldest first (latest) */
    uint64_t n_inserted, cap_inserted;
    uint64_t insert_seq;
};

int pm_workload_create(const pm_workload_spec *spec, const char *dataset_name,
                       const uint64_t *keys, uint64_t n, uint32_t stream, pm_workload **out,
                       char *err, size_t err_len)
{
    const mix *m = NULL;
    for (size_t i = 0; i < sizeof mixes / sizeof *mixes; i++)
        if (spec->mix && strcmp(spec->mix, mixes[i].name) == 0)
            m = &mixes[i];
    if (!m) {
        pm_errf(err, err_len, "unknown workload mix \"%s\"", spec->mix ? spec->mix : "(null)");
        return -EINVAL;
    }
    int d = spec->distribution ? lookup_name(dist_names, 4, spec->distribution) : (int)m->dflt;
    if (d < 0) {
        pm_errf(err, err_len, "unknown key distribution \"%s\"", spec->distribution);
        return -EINVAL;
    }
    int ds = lookup_name(dataset_names, 3, dataset_name);
    if (ds < 0) {
        pm_errf(err, err_len, "unknown dataset \"%s\"", dataset_name ? dataset_name : "(null)");
        return -EINVAL;
    }
    pm_workload_spec sp = *spec;
    if (sp.zipf_theta == 0)
        sp.zipf_theta = 0.99;
    if (sp.hotspot_data == 0)
        sp.hotspot_data = 0.2;
    if (sp.hotspot_ops == 0)
        sp.hotspot_ops = 0.8;
    if (sp.scan_min == 0 && sp.scan_max == 0)
        sp.scan_min = 1, sp.scan_max = 100;
    if (!(sp.zipf_theta > 0 && sp.zipf_theta < 1) || !(sp.hotspot_data > 0 && sp.hotspot_data < 1) ||
        !(sp.hotspot_ops > 0 && sp.hotspot_ops <= 1) || sp.scan_min == 0 ||
        sp.scan_max < sp.scan_min || n == 0 || stream >= MAX_STREAMS) {
        pm_errf(err, err_len,
                "bad workload parameters (need 0<zipf_theta<1, 0<hotspot fractions<=1, "
                "1<=scan_min<=scan_max, keys loaded, stream < %d)",
                MAX_STREAMS);
        return -EINVAL;
    }
    pm_workload *w = calloc(1, sizeof *w);
    if (!w)
        return -ENOMEM;
    w->mix = m;
    w->dist = (dist)d;
    w->ds = (dataset)ds;
    w->spec = sp;
    w->spec.mix = m->name;
    w->spec.distribution = dist_names[d];
    w->keys = keys;
    w->n = n;
    w->stream = stream;
    pm_rng_seed(&w->rng, sp.seed * MAX_STREAMS + stream);
    zipf_init(&w->z, n, sp.zipf_theta);
    *out = w;
    return 0;
}

void pm_workload_destroy(pm_workload *w)
{
    if (!w)
        return;
    free(w->inserted);
    free(w);
}

static uint64_t pick_existing(pm_workload *w)
{
    switch (w->dist) {
    case D_UNIFORM:
        return w->keys[pm_rng_below(&w->rng, w->n)];
    case D_ZIPF:
        return w->keys[fnv1a64(zipf_next(&w->z, &w->rng)) % w->n];
    case D_LATEST: {
        uint64_t back = zipf_next(&w->z, &w->rng); /* 0 = newest */
        uint64_t total = w->n + w->n_inserted;
        uint64_t i = total - 1 - (back < total ? back : total - 1);
        return i < w->n ? w->keys[i] : w->inserted[i - w->n];
    }
    default: {
        uint64_t hot = (uint64_t)((double)w->n * w->spec.hotspot_data);
        hot = hot ? hot : 1;
        if (pm_rng_unit(&w->rng) < w->spec.hotspot_ops || hot == w->n)
            return w->keys[pm_rng_below(&w->rng, hot)];
        return w->keys[hot + pm_rng_below(&w->rng, w->n - hot)];
    }
    }
}

static uint64_t new_key(pm_workload *w)
{
    switch (w->ds) {
    case DS_DENSE:
        return w->keys[w->n - 1] + 1 + w->stream + MAX_STREAMS * w->insert_seq++;
    case DS_UNIFORM:
        return pm_rng_next(&w->rng);
    default: /* near an existing key: the data grows inside its clusters */
        return w->keys[pm_rng_below(&w->rng, w->n)] + 1 + pm_rng_below(&w->rng, CLUSTER_SPAN);
    }
}

int pm_workload_next(pm_workload *w, pm_query *q)
{
    unsigned r = (unsigned)pm_rng_below(&w->rng, 100), op = 0;
    while (r >= w->mix->pct[op])
        r -= w->mix->pct[op++];
    q->op = (uint8_t)op;
    q->slice = 0;
    switch (op) {
    case PM_OP_READ:
        q->key = pick_existing(w);
        q->value = 0;
        break;
    case PM_OP_UPDATE:
        q->key = pick_existing(w);
        q->value = pm_rng_next(&w->rng);
        break;
    case PM_OP_SCAN:
        q->key = pick_existing(w);
        q->value = w->spec.scan_min + pm_rng_below(&w->rng, w->spec.scan_max - w->spec.scan_min + 1);
        break;
    default:
        q->key = new_key(w);
        q->value = pm_rng_next(&w->rng);
        if (w->dist == D_LATEST) {
            if (w->n_inserted == w->cap_inserted) {
                uint64_t cap = w->cap_inserted ? 2 * w->cap_inserted : 1024;
                uint64_t *b = realloc(w->inserted, cap * sizeof *b);
                if (!b)
                    return -ENOMEM;
                w->inserted = b;
                w->cap_inserted = cap;
            }
            w->inserted[w->n_inserted++] = q->key;
            zipf_grow(&w->z);
        }
    }
    return 0;
}

/* ---- datasets ---- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Sort and drop duplicates; returns the distinct count. */
static uint64_t sort_unique(uint64_t *k, uint64_t n)
{
    qsort(k, n, sizeof *k, cmp_u64);
    uint64_t m = 0;
    for (uint64_t i = 0; i < n; i++)
        if (m == 0 || k[i] != k[m - 1])
            k[m++] = k[i];
    return m;
}

int pm_dataset_generate(const char *name, uint64_t n, uint64_t seed, uint64_t *keys)
{
    int ds = lookup_name(dataset_names, 3, name);
    if (ds < 0)
        return -EINVAL;
    if (ds == DS_DENSE) {
        for (uint64_t i = 0; i < n; i++)
            keys[i] = i;
        return 0;
    }
    pm_rng rng;
    pm_rng_seed(&rng, seed);
    uint64_t n_clusters = n / CLUSTER_KEYS + 1;
    uint64_t *centre = NULL;
    if (ds == DS_CLUSTERED) {
        centre = malloc(n_clusters * sizeof *centre);
        if (!centre)
            return -ENOMEM;
        for (uint64_t c = 0; c < n_clusters; c++)
            centre[c] = pm_rng_next(&rng) & ~(CLUSTER_SPAN - 1);
    }
    /* Draw, dedupe, top up until n distinct keys (collisions are rare). */
    uint64_t have = 0;
    while (have < n) {
        for (uint64_t i = have; i < n; i++)
            keys[i] = ds == DS_UNIFORM
                          ? pm_rng_next(&rng)
                          : centre[pm_rng_below(&rng, n_clusters)] + pm_rng_below(&rng, CLUSTER_SPAN);
        have = sort_unique(keys, n);
    }
    free(centre);
    return 0;
}
