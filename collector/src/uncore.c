/*
 * Off-core sweeper: memory-controller and socket-link PMUs from sysfs.
 *
 * The kernel describes each uncore PMU under bus/event_source/devices/<pmu>:
 * `type` (perf_event_attr.type), `cpumask` (one CPU per socket/die to open
 * it on), `events/<name>` ("event=0x04,umask=0x03") and `format/<field>`
 * ("config:0-7"). Encodings come from there first (the host's own truth,
 * also for PMUs libpfm4 4.13 lacks: SPR IMC, AMD UMC/DF); a recipe's
 * fallback spec covers events the kernel does not name (UPI/QPI flits, DF
 * channels), still placed through the PMU's own format files. The root is a
 * parameter so tests run against fake trees.
 */
#include "internal.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef enum scope { SCOPE_NODE, SCOPE_LINK } scope;

/* Build a path; a path longer than the buffer reads as "absent" (empty
 * string) instead of silently naming another file. */
static void pm_path(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void pm_path(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= len)
        buf[0] = '\0';
}

typedef struct recipe {
    const char *prefix; /* device name prefix ("amd_df" matches exactly) */
    pm_offcore_feature feature;
    const char *sysfs_event; /* preferred named event, or NULL */
    const char *spec;        /* fallback spec, or NULL */
    double bytes_per_count;
} recipe;

static const recipe RECIPES[] = {
    /* Intel IMC: one CAS = one 64-byte line. */
    {"uncore_imc", PM_OFF_IMC_READ, "cas_count_read", "event=0x04,umask=0x03", 64.0},
    {"uncore_imc", PM_OFF_IMC_WRITE, "cas_count_write", "event=0x04,umask=0x0c", 64.0},
    /* Intel UPI (SKX+): RxL/TxL_FLITS.ALL_DATA; 9 data flits carry 64 bytes. */
    {"uncore_upi", PM_OFF_LINK_IN, NULL, "event=0x03,umask=0x0f", 64.0 / 9.0},
    {"uncore_upi", PM_OFF_LINK_OUT, NULL, "event=0x02,umask=0x0f", 64.0 / 9.0},
    /* Intel QPI (SNB-EP): RxL/TxL_FLITS_G0.DATA, 8 bytes per flit. */
    {"uncore_qpi", PM_OFF_LINK_IN, NULL, "event=0x01,umask=0x02", 8.0},
    {"uncore_qpi", PM_OFF_LINK_OUT, NULL, "event=0x00,umask=0x02", 8.0},
    /* AMD UMC (Zen 4, Linux >= 6.8): CAS commands split by read/write. */
    {"amd_umc", PM_OFF_IMC_READ, NULL, "event=0x0a,rdwrmask=0x1", 64.0},
    {"amd_umc", PM_OFF_IMC_WRITE, NULL, "event=0x0a,rdwrmask=0x2", 64.0},
    /* AMD DF (Zen 2/3): DRAM channel 0..7 data beats, reads and writes
     * together (the DF cannot split them): imc_total_bytes. */
    {"amd_df", PM_OFF_IMC_TOTAL, NULL, "event=0x07,umask=0x38", 64.0},
    {"amd_df", PM_OFF_IMC_TOTAL, NULL, "event=0x47,umask=0x38", 64.0},
    {"amd_df", PM_OFF_IMC_TOTAL, NULL, "event=0x87,umask=0x38", 64.0},
    {"amd_df", PM_OFF_IMC_TOTAL, NULL, "event=0xc7,umask=0x38", 64.0},
    {"amd_df", PM_OFF_IMC_TOTAL, NULL, "event=0x107,umask=0x38", 64.0},
    {"amd_df", PM_OFF_IMC_TOTAL, NULL, "event=0x147,umask=0x38", 64.0},
    {"amd_df", PM_OFF_IMC_TOTAL, NULL, "event=0x187,umask=0x38", 64.0},
    {"amd_df", PM_OFF_IMC_TOTAL, NULL, "event=0x1c7,umask=0x38", 64.0},
    /* Arm CMN: home-node requests to memory controllers, 64-byte lines. */
    {"arm_cmn", PM_OFF_IMC_TOTAL, "hnf_mc_reqs", NULL, 64.0},
};
#define N_RECIPES (sizeof(RECIPES) / sizeof(RECIPES[0]))

const size_t pm_perf_attr_size = sizeof(struct perf_event_attr);
const size_t pm_uncore_event_size = sizeof(pm_uncore_event);

struct pm_uncore {
    unsigned n, cap;
    pm_uncore_event *ev;
    int *fd;
    int opened;
    unsigned n_nodes, n_links;
};

static int scope_of(pm_offcore_feature f) { return f == PM_OFF_LINK_IN || f == PM_OFF_LINK_OUT ? SCOPE_LINK : SCOPE_NODE; }

/* Read a small sysfs file, trailing newline stripped. 0, -ENOENT or -EIO. */
static int read_small(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -ENOENT;
    size_t n = fread(buf, 1, len - 1, f);
    int err = ferror(f);
    fclose(f);
    if (err)
        return -EIO;
    buf[n] = '\0';
    while (n && isspace((unsigned char)buf[n - 1]))
        buf[--n] = '\0';
    return 0;
}

/* First CPU of each range in a cpumask/cpulist ("0,28" or "0-27,56-83"):
 * for cpumask these are the per-socket CPUs to open on. */
static int parse_cpus(const char *s, int *cpus, int cap, int first_only)
{
    int n = 0;
    while (*s && n < cap) {
        char *end;
        long a = strtol(s, &end, 10);
        if (end == s)
            return -EINVAL;
        long b = a;
        if (*end == '-')
            b = strtol(end + 1, &end, 10);
        for (long c = a; c <= b && n < cap; c++) {
            cpus[n++] = (int)c;
            if (first_only)
                break;
        }
        s = *end == ',' ? end + 1 : end;
        if (*s && *s != ',' && !isdigit((unsigned char)*s))
            return -EINVAL;
    }
    return n;
}

static int node_of_cpu(const char *root, int cpu)
{
    for (int node = 0; node < 1024; node++) {
        char path[4096], buf[4096];
        pm_path(path, sizeof(path), "%s/devices/system/node/node%d/cpulist", root, node);
        if (read_small(path, buf, sizeof(buf)) != 0)
            return node == 0 ? 0 : -1; /* no node tree: one node */
        int cpus[4096];
        int n = parse_cpus(buf, cpus, 4096, 0);
        for (int i = 0; i < n; i++)
            if (cpus[i] == cpu)
                return node;
    }
    return -1;
}

/* Place value into attr per a format file ("config1:0-7,32-35"): bits are
 * filled low to high across the listed ranges. */
static int apply_format(const char *fmt, uint64_t value, struct perf_event_attr *a)
{
    const char *colon = strchr(fmt, ':');
    if (!colon)
        return -EINVAL;
    uint64_t *dst;
    size_t kw = (size_t)(colon - fmt);
    if (kw == 6 && strncmp(fmt, "config", 6) == 0)
        dst = (uint64_t *)&a->config;
    else if (kw == 7 && strncmp(fmt, "config1", 7) == 0)
        dst = (uint64_t *)&a->config1;
    else if (kw == 7 && strncmp(fmt, "config2", 7) == 0)
        dst = (uint64_t *)&a->config2;
    else
        return -EINVAL;
    const char *s = colon + 1;
    while (*s) {
        char *end;
        long lo = strtol(s, &end, 10), hi = lo;
        if (end == s || lo < 0 || lo > 63)
            return -EINVAL;
        if (*end == '-')
            hi = strtol(end + 1, &end, 10);
        if (hi < lo || hi > 63)
            return -EINVAL;
        for (long bit = lo; bit <= hi; bit++, value >>= 1)
            *dst |= (value & 1) << bit;
        if (*end == ',')
            end++;
        else if (*end)
            return -EINVAL;
        s = end;
    }
    return value == 0 ? 0 : -ERANGE; /* value wider than the field */
}

/* Encode "event=0x04,umask=0x03" with the PMU's format files. */
static int encode_spec(const char *pmu_dir, const char *spec, struct perf_event_attr *a, char *msg, size_t msg_len)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", spec);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        uint64_t value = 1;
        if (eq) {
            *eq = '\0';
            char *end;
            value = strtoull(eq + 1, &end, 0);
            if (end == eq + 1 || *end) {
                pm_msg(msg, msg_len, "%s: bad value in event spec '%s'", pmu_dir, spec);
                return -EINVAL;
            }
        }
        char path[4096], fmt[256];
        pm_path(path, sizeof(path), "%s/format/%s", pmu_dir, tok);
        if (read_small(path, fmt, sizeof(fmt)) != 0) {
            pm_msg(msg, msg_len, "%s: no format field '%s' for event spec '%s'", path, tok, spec);
            return -EINVAL;
        }
        if (apply_format(fmt, value, a) != 0) {
            pm_msg(msg, msg_len, "%s: cannot place %s=0x%llx with format '%s'", path, tok,
                   (unsigned long long)value, fmt);
            return -EINVAL;
        }
    }
    return 0;
}

static int push_event(pm_uncore *u, const pm_uncore_event *e)
{
    if (u->n == u->cap) {
        unsigned cap = u->cap ? 2 * u->cap : 16;
        pm_uncore_event *ev = realloc(u->ev, cap * sizeof(*ev));
        if (!ev)
            return -ENOMEM;
        u->ev = ev;
        u->cap = cap;
    }
    u->ev[u->n++] = *e;
    return 0;
}

static int matches(const char *name, const char *prefix)
{
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n) != 0)
        return 0;
    return name[n] == '\0' || name[n] == '_'; /* uncore_imc_3, amd_df, not amd_dfx */
}

static long instance_of(const char *name)
{
    const char *p = name + strlen(name);
    while (p > name && isdigit((unsigned char)p[-1]))
        p--;
    return *p ? strtol(p, NULL, 10) : 0;
}

static int add_pmu(pm_uncore *u, const char *root, const char *devdir, const char *name, char *msg, size_t msg_len)
{
    char pmu_dir[4096], path[4096 + 64], buf[4096];
    pm_path(pmu_dir, sizeof(pmu_dir), "%s/%s", devdir, name);
    int any = 0;
    for (size_t r = 0; r < N_RECIPES; r++)
        any |= matches(name, RECIPES[r].prefix);
    if (!any)
        return 0;
    pm_path(path, sizeof(path), "%s/type", pmu_dir);
    char *end;
    if (read_small(path, buf, sizeof(buf)) != 0 || (strtoul(buf, &end, 10), *end) || !buf[0]) {
        pm_msg(msg, msg_len, "%s: missing or not a number", path);
        return -EINVAL;
    }
    unsigned type = (unsigned)strtoul(buf, NULL, 10);
    int cpus[1024], n_cpus = 1;
    cpus[0] = 0;
    pm_path(path, sizeof(path), "%s/cpumask", pmu_dir);
    if (read_small(path, buf, sizeof(buf)) == 0 && (n_cpus = parse_cpus(buf, cpus, 1024, 1)) <= 0) {
        pm_msg(msg, msg_len, "%s: malformed cpumask '%s'", path, buf);
        return -EINVAL;
    }
    for (size_t r = 0; r < N_RECIPES; r++) {
        const recipe *rc = &RECIPES[r];
        if (!matches(name, rc->prefix))
            continue;
        char spec[256] = "";
        if (rc->sysfs_event) {
            pm_path(path, sizeof(path), "%s/events/%s", pmu_dir, rc->sysfs_event);
            if (read_small(path, spec, sizeof(spec)) != 0)
                spec[0] = '\0';
        }
        if (!spec[0] && rc->spec)
            snprintf(spec, sizeof(spec), "%s", rc->spec);
        if (!spec[0])
            continue; /* the kernel does not name it and we have no fallback */
        pm_uncore_event e;
        memset(&e, 0, sizeof(e));
        e.attr.size = sizeof(e.attr);
        e.attr.type = type;
        int err = encode_spec(pmu_dir, spec, &e.attr, msg, msg_len);
        if (err)
            return err;
        snprintf(e.pmu, sizeof(e.pmu), "%.63s", name);
        snprintf(e.spec, sizeof(e.spec), "%s", spec);
        e.feature = rc->feature;
        e.bytes_per_count = rc->bytes_per_count;
        for (int c = 0; c < n_cpus; c++) {
            e.cpu = cpus[c];
            if (scope_of(e.feature) == SCOPE_NODE) {
                int node = node_of_cpu(root, e.cpu);
                e.scope_index = node < 0 ? 0 : node;
            } else {
                /* ranked into a dense link index after discovery */
                e.scope_index = (int)(e.cpu * 4096 + instance_of(name));
            }
            if ((err = push_event(u, &e)) != 0)
                return err;
        }
    }
    return 0;
}

static int cmp_int(const void *a, const void *b) { return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b); }

/* Links: (socket CPU, PMU instance) keys -> 0..n_links-1 in that order. */
static void rank_links(pm_uncore *u)
{
    int keys[4096];
    unsigned nk = 0;
    for (unsigned i = 0; i < u->n && nk < 4096; i++)
        if (scope_of(u->ev[i].feature) == SCOPE_LINK)
            keys[nk++] = u->ev[i].scope_index;
    qsort(keys, nk, sizeof(int), cmp_int);
    unsigned distinct = 0;
    for (unsigned i = 0; i < nk; i++)
        if (i == 0 || keys[i] != keys[i - 1])
            keys[distinct++] = keys[i];
    for (unsigned i = 0; i < u->n; i++) {
        pm_uncore_event *e = &u->ev[i];
        if (scope_of(e->feature) != SCOPE_LINK)
            continue;
        int *hit = bsearch(&e->scope_index, keys, distinct, sizeof(int), cmp_int);
        e->scope_index = (int)(hit - keys);
    }
    u->n_links = distinct;
    for (unsigned i = 0; i < u->n; i++)
        if (scope_of(u->ev[i].feature) == SCOPE_NODE && (unsigned)u->ev[i].scope_index + 1 > u->n_nodes)
            u->n_nodes = (unsigned)u->ev[i].scope_index + 1;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int pm_uncore_discover(const char *sysfs_root, pm_uncore **out, char *msg, size_t msg_len)
{
    if (!out)
        return -EINVAL;
    const char *root = sysfs_root ? sysfs_root : "/sys";
    pm_uncore *u = calloc(1, sizeof(*u));
    if (!u)
        return -ENOMEM;
    char devdir[4096];
    pm_path(devdir, sizeof(devdir), "%s/bus/event_source/devices", root);
    DIR *d = opendir(devdir);
    int rc = 0;
    if (d) {
        char *names[1024];
        int n = 0;
        struct dirent *de;
        while ((de = readdir(d)) && n < 1024)
            if (de->d_name[0] != '.' && !(names[n++] = strdup(de->d_name)))
                rc = -ENOMEM;
        closedir(d);
        qsort(names, (size_t)n, sizeof(char *), cmp_name); /* deterministic order */
        for (int i = 0; i < n; i++) {
            if (rc == 0 && names[i])
                rc = add_pmu(u, root, devdir, names[i], msg, msg_len);
            free(names[i]);
        }
    }
    if (rc) {
        pm_uncore_destroy(u);
        return rc;
    }
    rank_links(u);
    *out = u;
    return 0;
}

void pm_uncore_destroy(pm_uncore *u)
{
    if (!u)
        return;
    for (unsigned i = 0; u->fd && i < u->n; i++)
        if (u->fd[i] >= 0)
            close(u->fd[i]);
    free(u->fd);
    free(u->ev);
    free(u);
}

unsigned pm_uncore_n_events(const pm_uncore *u) { return u ? u->n : 0; }
const pm_uncore_event *pm_uncore_event_at(const pm_uncore *u, unsigned i) { return u && i < u->n ? &u->ev[i] : NULL; }
unsigned pm_uncore_n_nodes(const pm_uncore *u) { return u ? u->n_nodes : 0; }
unsigned pm_uncore_n_links(const pm_uncore *u) { return u ? u->n_links : 0; }

static void permission_message(char *msg, size_t msg_len)
{
    char level[32] = "?";
    read_small("/proc/sys/kernel/perf_event_paranoid", level, sizeof(level));
    pm_msg(msg, msg_len,
           "off-core counters need system-wide perf access: kernel.perf_event_paranoid is %s "
           "(needs <= 0) and this process lacks CAP_PERFMON; run `sysctl -w "
           "kernel.perf_event_paranoid=0` or grant CAP_PERFMON (off-core readings stay null)",
           level);
}

int pm_uncore_open(pm_uncore *u, char *msg, size_t msg_len)
{
    if (!u || u->opened)
        return -EINVAL;
    int *fd = malloc(sizeof(int) * (u->n ? u->n : 1));
    if (!fd)
        return -ENOMEM;
    for (unsigned i = 0; i < u->n; i++) {
        struct perf_event_attr a = u->ev[i].attr;
        a.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
        fd[i] = pm_perf_event_open(&a, -1, u->ev[i].cpu, -1, PERF_FLAG_FD_CLOEXEC);
        if (fd[i] < 0) {
            int err = fd[i];
            for (unsigned j = 0; j < i; j++)
                close(fd[j]);
            free(fd);
            if (err == -EACCES || err == -EPERM) {
                permission_message(msg, msg_len);
                return -EACCES;
            }
            pm_msg(msg, msg_len, "%s/%s/ on cpu %d: perf_event_open: %s", u->ev[i].pmu, u->ev[i].spec,
                   u->ev[i].cpu, strerror(-err));
            return err;
        }
    }
    u->fd = fd;
    u->opened = 1;
    return 0;
}

int pm_uncore_read(pm_uncore *u, double *values, unsigned cap)
{
    if (!u || !values || !u->opened || cap < u->n_nodes || cap < u->n_links)
        return -EINVAL;
    for (size_t i = 0; i < (size_t)PM_N_OFFCORE * cap; i++)
        values[i] = NAN;
    for (unsigned i = 0; i < u->n; i++) {
        uint64_t buf[3];
        if (read(u->fd[i], buf, sizeof(buf)) != (ssize_t)sizeof(buf))
            return -EIO;
        if (buf[2] == 0)
            continue; /* never scheduled: stays null */
        double scaled = (double)buf[0] * ((double)buf[1] / (double)buf[2]);
        double *cell = &values[(size_t)u->ev[i].feature * cap + (unsigned)u->ev[i].scope_index];
        *cell = (isnan(*cell) ? 0.0 : *cell) + scaled * u->ev[i].bytes_per_count;
    }
    return 0;
}
