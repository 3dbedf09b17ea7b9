/* Page-granular arenas: each tree (slice) owns its chunks, so its pages can
 * be bound with mbind and moved with move_pages as one unit. */
#define _GNU_SOURCE
#include <errno.h>
#include <numa.h>
#include <numaif.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define MASK_BITS (8 * sizeof(unsigned long))

static _Atomic uint64_t move_calls;

uint64_t pm_arena_move_calls(void)
{
    return atomic_load_explicit(&move_calls, memory_order_relaxed);
}

int pm_numa_nodes(void)
{
    if (numa_available() < 0)
        return 1;
    int n = numa_num_configured_nodes();
    return n > 0 ? n : 1;
}

/* Apply the policy to [addr, addr+len). Single-node hosts without NUMA
 * support have nothing to bind, so ENOSYS is not an error. */
static int bind_range(void *addr, size_t len, int policy)
{
    unsigned long mask = 0;
    int mode;
    if (policy == PM_ARENA_OS_DEFAULT) {
        mode = MPOL_DEFAULT;
    } else if (policy == PM_ARENA_INTERLEAVE) {
        int n = pm_numa_nodes();
        mask = (n >= (int)MASK_BITS) ? ~0ul : ((1ul << n) - 1);
        mode = MPOL_INTERLEAVE;
    } else {
        mask = 1ul << policy;
        mode = MPOL_BIND;
    }
    if (mbind(addr, len, mode, mode == MPOL_DEFAULT ? NULL : &mask, MASK_BITS + 1, 0) != 0)
        return errno == ENOSYS ? 0 : -errno;
    return 0;
}

static int policy_ok(int policy)
{
    return policy == PM_ARENA_OS_DEFAULT || policy == PM_ARENA_INTERLEAVE ||
           (policy >= 0 && policy < pm_numa_nodes() && policy < (int)MASK_BITS);
}

int pm_arena_init(pm_arena *a, int policy)
{
    if (!policy_ok(policy))
        return -EINVAL;
    memset(a, 0, sizeof *a);
    a->policy = policy;
    a->used = PM_ARENA_CHUNK; /* forces a chunk on first allocation */
    return -pthread_mutex_init(&a->lock, NULL);
}

void pm_arena_fini(pm_arena *a)
{
    for (size_t i = 0; i < a->n_chunks; i++)
        munmap(a->chunks[i], PM_ARENA_CHUNK);
    free(a->chunks);
    pthread_mutex_destroy(&a->lock);
}

static int add_chunk(pm_arena *a)
{
    if (a->n_chunks == a->cap_chunks) {
        size_t cap = a->cap_chunks ? 2 * a->cap_chunks : 8;
        char **c = realloc(a->chunks, cap * sizeof *c);
        if (!c)
            return -ENOMEM;
        a->chunks = c;
        a->cap_chunks = cap;
    }
    void *p = mmap(NULL, PM_ARENA_CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED)
        return -ENOMEM;
    /* Chunks of neighbouring slices merge into one VMA, where a transparent
     * huge page could span several slices and pin them to one node; keep
     * pages base-sized so each slice moves on its own. */
    madvise(p, PM_ARENA_CHUNK, MADV_NOHUGEPAGE);
    /* Bind before the first touch so the pages fault in on the slice's node. */
    if (bind_range(p, PM_ARENA_CHUNK, a->policy) != 0) {
        munmap(p, PM_ARENA_CHUNK);
        return -ENOMEM;
    }
    a->chunks[a->n_chunks++] = p;
    a->used = 0;
    return 0;
}

void *pm_arena_alloc(pm_arena *a, size_t size)
{
    size = (size + PM_CACHE_LINE - 1) & ~(size_t)(PM_CACHE_LINE - 1);
    if (size > PM_ARENA_CHUNK)
        return NULL;
    void *p = NULL;
    pthread_mutex_lock(&a->lock);
    if (a->used + size <= PM_ARENA_CHUNK || add_chunk(a) == 0) {
        p = a->chunks[a->n_chunks - 1] + a->used; /* mmap memory is zeroed */
        a->used += size;
    }
    pthread_mutex_unlock(&a->lock);
    return p;
}

/* Snapshot the page addresses under the lock; move_pages runs without it so
 * allocation (and thus inserts) is not blocked during a migration. */
static int list_pages(pm_arena *a, void ***pages_out, size_t *n_out)
{
    long psz = sysconf(_SC_PAGESIZE);
    size_t per_chunk = PM_ARENA_CHUNK / (size_t)psz;
    pthread_mutex_lock(&a->lock);
    size_t n = a->n_chunks * per_chunk;
    void **pages = malloc((n ? n : 1) * sizeof *pages);
    if (pages) {
        for (size_t c = 0; c < a->n_chunks; c++)
            for (size_t i = 0; i < per_chunk; i++)
                pages[c * per_chunk + i] = a->chunks[c] + i * (size_t)psz;
    }
    pthread_mutex_unlock(&a->lock);
    if (!pages)
        return -ENOMEM;
    *pages_out = pages;
    *n_out = n;
    return 0;
}

static bool wanted(int status, int node, bool retry)
{
    return retry ? status == -EBUSY : status >= 0 && status != node;
}

/* Move the pages whose status calls for it with move_pages' moving form and
 * write their new status back: the misplaced ones (present on another node),
 * or on a retry those the last call found -EBUSY (transient: a page just
 * faulted in by a running query can sit in a per-CPU LRU batch or be
 * locked). Returns how many it tried, or -errno. */
static long move_wanted(void **pages, const int *nodes, int *status, size_t n, bool retry)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        m += wanted(status[i], nodes[i], retry);
    if (m == 0)
        return 0;
    void **mp = malloc(m * sizeof *mp);
    int *mn = malloc(m * sizeof *mn), *ms = malloc(m * sizeof *ms);
    size_t *at = malloc(m * sizeof *at);
    long rc = -ENOMEM;
    if (mp && mn && ms && at) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (wanted(status[i], nodes[i], retry))
                mp[k] = pages[i], mn[k] = nodes[i], at[k] = i, k++;
        if (retry) {
            struct timespec pause = {0, 1000000L};
            nanosleep(&pause, NULL);
        }
        atomic_fetch_add_explicit(&move_calls, 1, memory_order_relaxed);
        rc = move_pages(0, m, mp, mn, ms, MPOL_MF_MOVE) < 0 ? -errno : (long)m;
        for (k = 0; rc > 0 && k < m; k++)
            status[at[k]] = ms[k];
    }
    free(mp);
    free(mn);
    free(ms);
    free(at);
    return rc;
}

/* Bind the chunks to the new policy, then move the pages that are not where
 * it wants them. The pages are first located with move_pages' query form:
 * the moving form starts with lru_cache_disable(), a system-wide expedited
 * RCU grace period, which on a 2-vCPU VM with every CPU busy was measured
 * to block this thread (and the schedule swap holding rt->ctl) for 6 s to
 * over 2 min, even when every page already sat on the target node. Pages in
 * place are never moved, so a swap that changes only the policy (always so on
 * a one-node host) costs one query. */
int pm_arena_migrate(pm_arena *a, int policy, pm_migration_report *report)
{
    if (!policy_ok(policy))
        return -EINVAL;
    pthread_mutex_lock(&a->lock);
    int rc = 0;
    for (size_t c = 0; c < a->n_chunks && rc == 0; c++)
        rc = bind_range(a->chunks[c], PM_ARENA_CHUNK, policy);
    if (rc == 0)
        a->policy = policy;
    pthread_mutex_unlock(&a->lock);
    if (rc != 0 || policy == PM_ARENA_OS_DEFAULT)
        return rc;

    void **pages;
    size_t n;
    if ((rc = list_pages(a, &pages, &n)) != 0)
        return rc;
    int *nodes = malloc((n ? n : 1) * sizeof *nodes);
    int *status = malloc((n ? n : 1) * sizeof *status);
    if (!nodes || !status) {
        rc = -ENOMEM;
        goto out;
    }
    int n_nodes = pm_numa_nodes();
    for (size_t i = 0; i < n; i++) {
        nodes[i] = policy == PM_ARENA_INTERLEAVE ? (int)(i % (size_t)n_nodes) : policy;
        status[i] = nodes[i]; /* without NUMA support every page is "in place" */
    }
    double t0 = pm_now();
    if (numa_available() >= 0 && n > 0 && move_pages(0, n, pages, NULL, status, 0) < 0) {
        rc = errno == ENOSYS ? 0 : -errno; /* no migration support: nothing moves */
        for (size_t i = 0; i < n; i++)
            status[i] = nodes[i];
    }
    /* Pages present elsewhere move; absent ones (-ENOENT/-EFAULT) fault in
     * on the bound policy's node when first touched. */
    long moving = rc == 0 ? move_wanted(pages, nodes, status, n, false) : 0;
    if (moving < 0)
        rc = (int)moving;
    for (int retry = 0; moving > 0 && retry < 5; retry++)
        if (move_wanted(pages, nodes, status, n, true) == 0)
            break;
    double t1 = pm_now();
    if (rc == 0 && report) {
        for (size_t i = 0; i < n; i++) {
            if (status[i] == nodes[i])
                report->pages_moved++;
            else if (status[i] == -ENOENT || status[i] == -EFAULT)
                report->pages_absent++; /* never touched: -EFAULT where not even a
                                           page table exists yet (FOLL_DUMP) */
            else
                report->pages_failed++;
        }
        report->seconds += t1 - t0;
    }
out:
    free(nodes);
    free(status);
    free(pages);
    return rc;
}

int pm_arena_page_nodes(pm_arena *a, uint64_t *counts, int n_counts)
{
    void **pages;
    size_t n;
    int rc = list_pages(a, &pages, &n);
    if (rc != 0)
        return rc;
    int *status = malloc((n ? n : 1) * sizeof *status);
    if (!status) {
        free(pages);
        return -ENOMEM;
    }
    if (n > 0 && move_pages(0, n, pages, NULL, status, 0) < 0)
        rc = -errno;
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (status[i] >= 0 && status[i] < n_counts)
            counts[status[i]]++;
    free(status);
    free(pages);
    return rc;
}
