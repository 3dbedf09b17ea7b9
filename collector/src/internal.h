/* Collector internals shared between its source files; not installed. */
#ifndef PMOSS_COLLECTOR_INTERNAL_H
#define PMOSS_COLLECTOR_INTERNAL_H

/* perf_event_open, pid_t, MAP_ANONYMOUS...: include this header first. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "pmoss/collector.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Write a one-line message if the caller gave a buffer. */
static inline void pm_msg(char *msg, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void pm_msg(char *msg, size_t len, const char *fmt, ...)
{
    if (!msg || !len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, len, fmt, ap);
    va_end(ap);
}

/* glibc has no wrapper; returns the fd or -errno. */
static inline int pm_perf_event_open(struct perf_event_attr *attr, pid_t pid, int cpu, int group_fd,
                                     unsigned long flags)
{
    long fd = syscall(SYS_perf_event_open, attr, pid, cpu, group_fd, flags);
    return fd < 0 ? -errno : (int)fd;
}

/* One event's count, time_enabled and time_running from its perf mmap page
 * without a system call (the self-monitoring sequence of linux/perf_event.h,
 * x86 only). Returns 0, or -EAGAIN when the page does not allow it (no
 * cap_user_rdpmc, or times that would be stale without cap_user_time): the
 * caller then read()s. In probe.c; declared here for its test. */
int pm_mmap_read(const volatile struct perf_event_mmap_page *pc, uint64_t *count, uint64_t *enabled,
                 uint64_t *running);

/* Test hooks of pm_host_pmu_facts (host.c), so a test can play a host it is
 * not on (libpfm4 knows the CPU, the kernel has no PMU...). detect stands in
 * for pm_model_detect; open_event for opening and closing one user-level
 * event of the calling thread: 0 or -errno. A NULL member keeps the real
 * one; NULL hooks restore both. Set them while no probe is opening. */
typedef struct pm_host_pmu_hooks {
    int (*detect)(const char **model);
    int (*open_event)(uint32_t type, uint64_t config);
} pm_host_pmu_hooks;
void pm_host_pmu_set_hooks(const pm_host_pmu_hooks *hooks);

/* libpfm4 initialised once per process: 0 or -EOPNOTSUPP. */
int pm_pfm_ready(void);

/* pm_ctab accessors for the Arrow export (ctab.c). */
unsigned pm_ctab_n_slices(const pm_ctab *t);
unsigned pm_ctab_n_values(const pm_ctab *t);
const char *pm_ctab_name(const pm_ctab *t, unsigned v);
int64_t pm_ctab_queries(const pm_ctab *t, unsigned slice);

#endif
