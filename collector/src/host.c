/*
 * What this host lets the collector count: whether libpfm4 knows the CPU
 * (its event table) and whether the kernel opens a hardware event at all.
 * The two differ in a VM without a virtual PMU: CPUID names the CPU, so
 * libpfm4 marks its PMU present, yet every hardware perf_event_open fails
 * with ENOENT. The only test of "can count hardware" is an open that works.
 */
#include "internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>

static int real_open_event(uint32_t type, uint64_t config)
{
    struct perf_event_attr a;
    memset(&a, 0, sizeof(a));
    a.size = sizeof(a);
    a.type = type;
    a.config = config;
    a.disabled = 1;
    /* user level only, as the probe counts: at perf_event_paranoid 2 kernel
     * counting is refused, which says nothing about the PMU */
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    int fd = pm_perf_event_open(&a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0)
        return fd;
    close(fd);
    return 0;
}

/* acquire/release: a hook set before the probes open is seen whole by them */
static _Atomic(const pm_host_pmu_hooks *) hooks;

void pm_host_pmu_set_hooks(const pm_host_pmu_hooks *h)
{
    atomic_store_explicit(&hooks, h, memory_order_release);
}

static const char *errno_name(int e)
{
    switch (e) {
    case ENOENT: return "ENOENT";
    case ENODEV: return "ENODEV";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case EINVAL: return "EINVAL";
    case ENOSYS: return "ENOSYS";
    case EBUSY: return "EBUSY";
    case EMFILE: return "EMFILE";
    default: return NULL;
    }
}

static int paranoid_level(void)
{
    FILE *f = fopen("/proc/sys/kernel/perf_event_paranoid", "r");
    int level = -100; /* unknown */
    if (f) {
        if (fscanf(f, "%d", &level) != 1)
            level = -100;
        fclose(f);
    }
    return level;
}

/* Append to buf (len bytes, *off used so far), clamping at the end. */
static void append(char *buf, size_t len, size_t *off, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t len, size_t *off, const char *fmt, ...)
{
    if (*off + 1 >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *off, len - *off, fmt, ap);
    va_end(ap);
    *off = n < 0 ? *off : *off + (size_t)n < len ? *off + (size_t)n : len - 1;
}

/* "kernel has no hardware PMU: perf_event_open(cycles) = ENOENT" and the like. */
static void explain(char *buf, size_t len, size_t *off, int hardware, int err)
{
    const char *event = hardware ? "cycles" : "task-clock", *kind = hardware ? "hardware" : "software";
    char code[32];
    const char *name = errno_name(err);
    if (!name)
        snprintf(code, sizeof(code), "errno %d", err);
    if (err == EACCES || err == EPERM)
        append(buf, len, off, "%s events refused: perf_event_open(%s) = %s (perf_event_paranoid %d without "
               "CAP_PERFMON, or a seccomp filter)", kind, event, name ? name : code, paranoid_level());
    else if (hardware && (err == ENOENT || err == ENODEV || err == EOPNOTSUPP))
        append(buf, len, off, "kernel has no hardware PMU: perf_event_open(%s) = %s", event, name);
    else
        append(buf, len, off, "%s events failed: perf_event_open(%s) = %s", kind, event, name ? name : code);
}

int pm_host_pmu_facts(pm_host_pmu *out)
{
    if (!out)
        return -EINVAL;
    const pm_host_pmu_hooks *h = atomic_load_explicit(&hooks, memory_order_acquire);
    int (*detect)(const char **) = h && h->detect ? h->detect : pm_model_detect;
    int (*open_event)(uint32_t, uint64_t) = h && h->open_event ? h->open_event : real_open_event;
    pm_host_pmu f;
    memset(&f, 0, sizeof(f));
    const char *model = NULL;
    if (detect(&model) == 0)
        f.model = model;
    int rc = open_event(PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES);
    f.hardware_events = rc == 0;
    f.hardware_errno = rc < 0 ? -rc : 0;
    rc = open_event(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK);
    f.software_events = rc == 0;
    f.software_errno = rc < 0 ? -rc : 0;

    size_t off = 0, len = sizeof(f.reason);
    if (f.model)
        append(f.reason, len, &off, "libpfm4 model %s; ", f.model);
    else
        append(f.reason, len, &off, "libpfm4 does not know this CPU (no event table); ");
    if (f.hardware_events)
        append(f.reason, len, &off, "hardware events open");
    else
        explain(f.reason, len, &off, 1, f.hardware_errno);
    if (!f.software_events) {
        append(f.reason, len, &off, "; ");
        explain(f.reason, len, &off, 0, f.software_errno);
    }
    *out = f;
    return 0;
}
