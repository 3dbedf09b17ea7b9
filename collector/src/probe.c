/*
 * Per-worker probe: perf_event groups on the calling thread, read at batch
 * boundaries.
 *
 * Groups: one software group (task-clock leads page-faults and
 * context-switches; the kernel always schedules software events; not opened
 * with hardware_only, where task-clock is the first hardware group's
 * time_enabled) and hardware groups of at most PM_GROUP_HW events with at most one off-core
 * response event each (those share one extra MSR per slot, so two in a group
 * could never be scheduled together). A group's members are counted over
 * exactly the same time, so ratios inside a group are exact even while the
 * kernel multiplexes groups.
 *
 * Scaling: every read closes a window; a window's estimate is
 * d_count * d_time_enabled / d_time_running of its group, and the probe
 * returns the running sum of window estimates. Scaling per window (rather
 * than count * enabled / running since open) keeps a batch's delta from being
 * skewed by how the group was scheduled long before that batch.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* 4 general-purpose counters per hyper-thread on Intel; AMD has 6, Arm >= 6. */
#define PM_GROUP_HW 4
#define PM_GROUP_MAX 8 /* members of any group (software group has 3) */
#define PM_MAX_GROUPS (1 + PM_N_CORE_FEATURES)

typedef struct pm_group {
    int n;
    int fd[PM_GROUP_MAX];    /* fd[0] leads */
    int value[PM_GROUP_MAX]; /* index into the probe's values */
    struct perf_event_mmap_page *page[PM_GROUP_MAX]; /* NULL: no rdpmc */
    int has_offcore;
    uint64_t last_raw[PM_GROUP_MAX], last_enabled, last_running;
    uint64_t raw_total[PM_GROUP_MAX], running_total;
    double cum[PM_GROUP_MAX];
} pm_group;

typedef struct pm_probe_state {
    int n_groups;
    pm_group group[PM_MAX_GROUPS];
    const char *mode;  /* "hardware" | "software" */
    const char *model; /* NULL in software mode */
    char reason[320];  /* why this mode (pm_probe_counter_mode_reason) */
    int use_rdpmc;
    int task_from_enabled; /* hardware_only: task_clock_ns = group 0's time_enabled */
    size_t page_size;
    uint64_t rdpmc_reads, syscall_reads;
} pm_probe_state;

static void group_close(pm_group *g, size_t page_size)
{
    for (int i = 0; i < g->n; i++) {
        if (g->page[i])
            munmap(g->page[i], page_size);
        if (g->fd[i] >= 0)
            close(g->fd[i]);
    }
    g->n = 0;
}

/* Add one event to g; the first becomes the leader. Returns 0 or -errno. */
static int group_add(pm_group *g, struct perf_event_attr *attr, int value, int want_mmap, size_t page_size)
{
    attr->read_format = PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
    attr->disabled = 0;
    attr->inherit = 0; /* per thread: a worker's counts are its own */
    int fd = pm_perf_event_open(attr, 0, -1, g->n ? g->fd[0] : -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0)
        return fd;
    g->fd[g->n] = fd;
    g->value[g->n] = value;
    g->page[g->n] = NULL;
    if (want_mmap) {
        void *p = mmap(NULL, page_size, PROT_READ, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED)
            g->page[g->n] = p;
    }
    g->n++;
    return 0;
}

/* The software events, counted in the kernel too (page faults are taken
 * there). perf_event_paranoid >= 2 refuses kernel counting without
 * CAP_PERFMON (-EACCES): then count user level only — task-clock is thread
 * CPU time either way, user page faults are still counted, but context
 * switches happen in the kernel and would read 0, so they stay unavailable
 * (null) instead. */
static int open_software(pm_probe_state *s)
{
    static const struct { uint64_t config; const char *name; } SW[] = {
        {PERF_COUNT_SW_TASK_CLOCK, "task_clock_ns"},
        {PERF_COUNT_SW_PAGE_FAULTS, "page_faults"},
        {PERF_COUNT_SW_CONTEXT_SWITCHES, "context_switches"},
    };
    pm_group *g = &s->group[s->n_groups];
    int rc = 0;
    for (int user_only = 0; user_only < 2; user_only++) {
        memset(g, 0, sizeof(*g));
        size_t n = user_only ? 2 : sizeof(SW) / sizeof(SW[0]);
        for (size_t i = 0; i < n && rc == 0; i++) {
            struct perf_event_attr a;
            memset(&a, 0, sizeof(a));
            a.size = sizeof(a);
            a.type = PERF_TYPE_SOFTWARE;
            a.config = SW[i].config;
            a.exclude_kernel = a.exclude_hv = (uint64_t)user_only;
            rc = group_add(g, &a, pm_feature_index(SW[i].name), 0, s->page_size);
        }
        if (rc == 0)
            break;
        group_close(g, s->page_size);
        if (rc != -EACCES && rc != -EPERM)
            return rc;
        rc = user_only ? rc : 0; /* refused in the kernel: retry user level only */
    }
    if (rc < 0)
        return rc;
    s->n_groups++;
    return 0;
}

/* Open every hardware feature the model has. An event this kernel rejects
 * (-EINVAL/-ENOENT/-EOPNOTSUPP: e.g. an off-core event a hypervisor hides)
 * just stays unavailable; opening none at all is -ENOENT (no usable PMU). */
static int open_hardware(pm_probe_state *s, const char *model)
{
    pm_group *g = NULL;
    int opened = 0;
    for (int f = 0; f < PM_N_CORE_FEATURES; f++) {
        pm_event_desc d;
        pm_event_describe(model, f, &d);
        if (d.source != PM_SRC_LIBPFM && d.source != PM_SRC_RAW)
            continue;
        struct perf_event_attr a;
        int rc = pm_event_encode(model, f, &a, NULL, 0, NULL, 0);
        if (rc < 0)
            return rc;
        int offcore = a.config1 != 0;
        if (!g || g->n == PM_GROUP_HW || (offcore && g->has_offcore)) {
            g = &s->group[s->n_groups];
            memset(g, 0, sizeof(*g));
        }
        rc = group_add(g, &a, f, s->use_rdpmc, s->page_size);
        if (rc == -EINVAL || rc == -ENOENT || rc == -EOPNOTSUPP)
            continue;
        if (rc < 0)
            return rc;
        if (g->n == 1)
            s->n_groups++; /* a group exists once its leader is open */
        g->has_offcore |= offcore;
        opened++;
    }
    return opened ? 0 : -ENOENT;
}

static void probe_free(pm_probe_state *s)
{
    for (int i = 0; i < s->n_groups; i++)
        group_close(&s->group[i], s->page_size);
    free(s);
}

/* Let the calling thread be scheduled out and back in once, so the kernel
 * installs every member of the groups just opened on it. Seen on Linux 6.18
 * (KVM guest): a group opened on the running thread counted its leader only
 * until the thread's next context switch — page-faults under a task-clock
 * leader read 0 for 1024 fresh pages in 295 of 300 fresh groups (rusage: all
 * 1024), and 0 of 300 after one short sleep; a task-clock member under a
 * page-faults leader likewise read 0. One sleep per probe open (~0.1 ms). */
static void settle_groups(void)
{
    struct timespec ts = {0, 1000};
    nanosleep(&ts, NULL);
}

/* Errors that mean "no usable PMU here" (AUTO then counts software), as
 * opposed to resource errors (EMFILE, ENOMEM...) that must surface. */
static int no_usable_pmu(int rc)
{
    return rc == -ENODEV || rc == -ENOENT || rc == -EOPNOTSUPP || rc == -EACCES || rc == -EPERM;
}

/* Hardware groups for AUTO / HARDWARE: only where libpfm4 knows the model
 * AND the kernel opens a hardware event (pm_host_pmu_facts). Returns 0 with
 * s->model set, or -errno with s->reason saying why and nothing left open. */
static int open_hardware_mode(pm_probe_state *s, const pm_probe_config *cfg)
{
    pm_host_pmu facts;
    pm_host_pmu_facts(&facts);
    snprintf(s->reason, sizeof(s->reason), "%s", facts.reason);
    int rc = 0;
    if (!facts.model)
        rc = -ENODEV;
    else if (!facts.hardware_events)
        /* EINVAL for a plain cycles event: this kernel's PMU does not take
         * it (a partial virtual PMU), not a bad argument of the caller's */
        rc = facts.hardware_errno == EINVAL ? -EOPNOTSUPP : facts.hardware_errno ? -facts.hardware_errno : -ENOENT;
    else if (cfg->model && strcmp(cfg->model, facts.model) != 0)
        rc = -EINVAL; /* counting another model's codes would be garbage */
    else if ((rc = open_hardware(s, facts.model)) != 0)
        snprintf(s->reason, sizeof(s->reason), "%s; but no event of the %s table opened (%s)", facts.reason,
                 facts.model, strerror(-rc));
    if (rc == 0) {
        s->model = facts.model;
        return 0;
    }
    for (int i = 0; i < s->n_groups; i++)
        group_close(&s->group[i], s->page_size);
    s->n_groups = 0;
    return rc;
}

int pm_probe_open(void *ctx, int worker_cpu, void **state)
{
    static const pm_probe_config DEFAULT = {PM_MODE_AUTO, NULL, 0, 0};
    const pm_probe_config *cfg = ctx ? ctx : &DEFAULT;
    if (!state || worker_cpu < -1 || cfg->mode < PM_MODE_AUTO || cfg->mode > PM_MODE_SOFTWARE)
        return -EINVAL;
    pm_probe_state *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->page_size = (size_t)sysconf(_SC_PAGESIZE);
    s->use_rdpmc = !cfg->disable_rdpmc;
    s->mode = "software";
    snprintf(s->reason, sizeof(s->reason), "software mode requested");
    int rc = 0;
    if (cfg->mode != PM_MODE_SOFTWARE) {
        rc = open_hardware_mode(s, cfg);
        if (rc == 0) {
            s->mode = "hardware";
        } else if (cfg->mode == PM_MODE_HARDWARE || !no_usable_pmu(rc)) {
            free(s);
            return rc;
        }
    }
    if (s->model && cfg->hardware_only) {
        settle_groups();
        s->task_from_enabled = 1;
        *state = s;
        return 0;
    }
    rc = open_software(s);
    if (rc < 0) {
        probe_free(s);
        return rc;
    }
    settle_groups();
    *state = s;
    return 0;
}

void pm_probe_close(void *state)
{
    if (state)
        probe_free(state);
}

const char *pm_probe_counter_mode(const void *state)
{
    return state ? ((const pm_probe_state *)state)->mode : "software";
}

const char *pm_probe_counter_mode_reason(const void *state)
{
    return state ? ((const pm_probe_state *)state)->reason : "";
}

const char *pm_probe_model(const void *state)
{
    return state ? ((const pm_probe_state *)state)->model : NULL;
}

void pm_probe_read_paths(const void *state, uint64_t *rdpmc_reads, uint64_t *syscall_reads)
{
    const pm_probe_state *s = state;
    if (rdpmc_reads)
        *rdpmc_reads = s ? s->rdpmc_reads : 0;
    if (syscall_reads)
        *syscall_reads = s ? s->syscall_reads : 0;
}

#if defined(__x86_64__) || defined(__i386__)
static inline uint64_t pm_rdpmc(uint32_t counter)
{
    uint32_t lo, hi;
    __asm__ volatile("rdpmc" : "=a"(lo), "=d"(hi) : "c"(counter));
    return lo | ((uint64_t)hi << 32);
}
static inline uint64_t pm_rdtsc(void)
{
    uint32_t lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    return lo | ((uint64_t)hi << 32);
}

/* The self-monitoring sequence of linux/perf_event.h. With cap_user_time the
 * TSC gives the time since the page's last update, so enabled (and running,
 * if the event is on a counter) are fresh; an event multiplexed out
 * (index 0) then still reads without a syscall: its count is the page's
 * offset. Without cap_user_time the page's times are as of the last update:
 * still right for the scaling ratio of an event that runs and never was
 * multiplexed (enabled == running), so that case returns 1 (times stale). */
int pm_mmap_read(const volatile struct perf_event_mmap_page *pc, uint64_t *count, uint64_t *enabled,
                 uint64_t *running)
{
    uint32_t seq, idx, width = 0;
    uint64_t cyc = 0, en, run, offset, time_offset = 0, time_cycles = 0, time_mask = 0;
    uint32_t time_mult = 0, time_shift = 0;
    int user_time, time_short = 0;
    int64_t pmc = 0;
    do {
        seq = pc->lock;
        atomic_signal_fence(memory_order_seq_cst); /* the kernel's barrier() */
        if (!pc->cap_user_rdpmc)
            return -EAGAIN;
        en = pc->time_enabled;
        run = pc->time_running;
        user_time = pc->cap_user_time;
        if (user_time) {
            cyc = pm_rdtsc();
            time_offset = pc->time_offset;
            time_mult = pc->time_mult;
            time_shift = pc->time_shift;
            time_short = pc->cap_user_time_short;
            time_cycles = pc->time_cycles;
            time_mask = pc->time_mask;
        }
        idx = pc->index;
        offset = (uint64_t)pc->offset;
        if (idx) {
            width = pc->pmc_width;
            pmc = (int64_t)pm_rdpmc(idx - 1);
        }
        atomic_signal_fence(memory_order_seq_cst);
    } while (pc->lock != seq);
    if (!user_time && (idx == 0 || en != run))
        return -EAGAIN;
    if (idx) {
        pmc = (int64_t)((uint64_t)pmc << (64 - width)) >> (64 - width); /* sign-extend the counter's width */
        offset += (uint64_t)pmc;
    }
    *count = offset;
    if (!user_time) {
        *enabled = en;
        *running = run;
        return 1;
    }
    if (time_short)
        cyc = time_cycles + ((cyc - time_cycles) & time_mask);
    uint64_t quot = cyc >> time_shift, rem = cyc & (((uint64_t)1 << time_shift) - 1);
    uint64_t delta = time_offset + quot * time_mult + ((rem * time_mult) >> time_shift);
    *enabled = en + delta;
    *running = run + (idx ? delta : 0);
    return 0;
}
#else
int pm_mmap_read(const volatile struct perf_event_mmap_page *pc, uint64_t *count, uint64_t *enabled,
                 uint64_t *running)
{
    (void)pc, (void)count, (void)enabled, (void)running;
    return -EAGAIN;
}
#endif

/* Raw cumulative counts and times of a group. fresh: the times must be
 * current (they give task_clock_ns), not as of the page's last update.
 * Returns 0 or -EIO. */
static int group_read_raw(pm_probe_state *s, pm_group *g, int fresh, uint64_t *raw, uint64_t *enabled,
                          uint64_t *running)
{
    if (s->use_rdpmc && g->page[0]) {
        int ok = 1;
        for (int i = 0; i < g->n && ok; i++) {
            uint64_t en, run;
            int rc = g->page[i] ? pm_mmap_read(g->page[i], &raw[i], &en, &run) : -EAGAIN;
            ok = rc == 0 || (rc == 1 && !fresh);
            if (ok && i == 0) {
                *enabled = en;
                *running = run;
            }
        }
        if (ok) {
            s->rdpmc_reads++;
            return 0;
        }
    }
    uint64_t buf[3 + PM_GROUP_MAX];
    ssize_t want = (ssize_t)((3 + g->n) * sizeof(uint64_t));
    if (read(g->fd[0], buf, sizeof(buf)) < want || buf[0] != (uint64_t)g->n)
        return -EIO;
    *enabled = buf[1];
    *running = buf[2];
    for (int i = 0; i < g->n; i++)
        raw[i] = buf[3 + i];
    s->syscall_reads++;
    return 0;
}

void pm_probe_read(void *state, uint64_t *values)
{
    pm_probe_state *s = state;
    for (int i = 0; i < PM_PROBE_N_VALUES; i++)
        values[i] = PM_VALUE_UNAVAILABLE;
    if (!s)
        return;
    for (int gi = 0; gi < s->n_groups; gi++) {
        pm_group *g = &s->group[gi];
        uint64_t raw[PM_GROUP_MAX] = {0}, en = 0, run = 0;
        int clock = s->task_from_enabled && gi == 0;
        if (group_read_raw(s, g, clock, raw, &en, &run) != 0)
            continue; /* values stay unavailable for this window */
        if (clock)
            values[PM_FEATURE_TASK_CLOCK] = en; /* per thread: its CPU time since open */
        uint64_t d_en = en - g->last_enabled, d_run = run - g->last_running;
        g->running_total = run;
        for (int i = 0; i < g->n; i++) {
            uint64_t d_raw = raw[i] - g->last_raw[i];
            if (d_run > 0)
                g->cum[i] += (double)d_raw * ((double)d_en / (double)d_run);
            else if (d_en > 0 && run > 0)
                /* Not scheduled at all in this window: extrapolate the
                 * group's overall rate over the window's enabled time. */
                g->cum[i] += (double)d_en * ((double)raw[i] / (double)run);
            g->last_raw[i] = raw[i];
            if (run > 0)
                values[g->value[i]] = (uint64_t)(g->cum[i] + 0.5);
        }
        g->last_enabled = en;
        g->last_running = run;
    }
}
