/* CPU sharing domains (physical core, L3) from sysfs, for execution groups.
 * NUMA nodes come from libnuma in runtime.c; this file only adds what
 * libnuma does not know. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* First integer of a sysfs file (a number or a cpulist such as "0-3,8"),
 * or fallback when the file is missing or does not start with one. */
static long read_first_int(const char *root, int cpu, const char *rel, long fallback)
{
    char path[512];
    snprintf(path, sizeof path, "%s/devices/system/cpu/cpu%d/%s", root, cpu, rel);
    FILE *f = fopen(path, "r");
    if (!f)
        return fallback;
    long v;
    int ok = fscanf(f, "%ld", &v) == 1;
    fclose(f);
    return ok ? v : fallback;
}

/* First CPU of the level-3 unified cache's shared_cpu_list, or -1. */
static long l3_first_cpu(const char *root, int cpu)
{
    for (int k = 0; k < 16; k++) {
        char rel[64], type[32] = "";
        snprintf(rel, sizeof rel, "cache/index%d/level", k);
        long level = read_first_int(root, cpu, rel, -1);
        if (level < 0)
            break; /* no more cache indexes */
        char path[512];
        snprintf(path, sizeof path, "%s/devices/system/cpu/cpu%d/cache/index%d/type", root, cpu, k);
        FILE *f = fopen(path, "r");
        if (f) {
            if (fscanf(f, "%31s", type) != 1)
                type[0] = '\0';
            fclose(f);
        }
        if (level == 3 && strcmp(type, "Unified") == 0) {
            snprintf(rel, sizeof rel, "cache/index%d/shared_cpu_list", k);
            return read_first_int(root, cpu, rel, -1);
        }
    }
    return -1;
}

/* dom[c] = the smallest CPU id whose key equals c's key. */
static void canonical(const long *key, int n, int *dom)
{
    for (int c = 0; c < n; c++) {
        dom[c] = c;
        for (int d = 0; d < c; d++) {
            if (key[d] == key[c]) {
                dom[c] = dom[d];
                break;
            }
        }
    }
}

int pm_topology_read_domains(pm_topology *t, const char *sysfs_root)
{
    const char *root = sysfs_root && sysfs_root[0] ? sysfs_root : "/sys";
    int n = t->n_cpus;
    int *core = malloc((size_t)n * sizeof *core), *l3 = malloc((size_t)n * sizeof *l3);
    long *kcore = malloc((size_t)n * sizeof *kcore), *kl3 = malloc((size_t)n * sizeof *kl3);
    if (!core || !l3 || !kcore || !kl3) {
        free(core), free(l3), free(kcore), free(kl3);
        return -ENOMEM;
    }
    /* keys: (package, core_id) packed, core_id < 2^20 in practice; a CPU
     * without core_id gets a key no other CPU has (negative) */
    for (int c = 0; c < n; c++) {
        long pkg = read_first_int(root, c, "topology/physical_package_id", 0);
        long id = read_first_int(root, c, "topology/core_id", -1);
        pkg = pkg < 0 ? 0 : pkg; /* some VMs report -1 */
        kcore[c] = id < 0 ? -1 - c : (pkg << 20) + id;
        long first = l3_first_cpu(root, c);
        kl3[c] = first >= 0 ? first : -1 - pkg;
    }
    canonical(kcore, n, core);
    canonical(kl3, n, l3);
    free(kcore);
    free(kl3);
    t->cpu_core = core;
    t->cpu_l3 = l3;
    return 0;
}

int pm_topology_domain(const pm_topology *t, int cpu, pm_width width)
{
    switch (width) {
    case PM_WIDTH_CORE:
        return t->cpu_core ? t->cpu_core[cpu] : cpu;
    case PM_WIDTH_L3:
        return t->cpu_l3 ? t->cpu_l3[cpu] : cpu;
    case PM_WIDTH_NODE:
        return t->cpu_node[cpu];
    default:
        return cpu;
    }
}
