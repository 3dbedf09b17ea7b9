/* Cost of one probe reading (pm_probe_read, the call a worker makes between
 * two batches) on the calling thread, against one trivial system call
 * (getpid) timed the same way in the same run. Prints one JSON line for
 * benchmarks/bench_collector.py. Usage: pmoss_bench_probe [auto|software]. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "pmoss/collector.h"

#define N 100000
#define REPEAT 7

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    pm_probe_config cfg = {PM_MODE_AUTO, NULL, 0, 0};
    if (argc > 1 && strcmp(argv[1], "software") == 0)
        cfg.mode = PM_MODE_SOFTWARE;
    void *st;
    if (pm_probe_open(&cfg, -1, &st) != 0) {
        fprintf(stderr, "pmoss_bench_probe: probe open failed\n");
        return 1;
    }
    static uint64_t values[PM_PROBE_N_VALUES];
    /* best of REPEAT: the least disturbed by other load */
    double best_read = 1e9, best_sys = 1e9;
    for (int r = 0; r < REPEAT; r++) {
        double t0 = now();
        for (int i = 0; i < N; i++)
            pm_probe_read(st, values);
        double t1 = now();
        for (int i = 0; i < N; i++)
            syscall(SYS_getpid);
        double t2 = now();
        if ((t1 - t0) / N < best_read)
            best_read = (t1 - t0) / N;
        if ((t2 - t1) / N < best_sys)
            best_sys = (t2 - t1) / N;
    }
    uint64_t rdpmc, sys;
    pm_probe_read_paths(st, &rdpmc, &sys);
    printf("{\"mode\": \"%s\", \"read_ns\": %.1f, \"getpid_ns\": %.1f, "
           "\"syscalls_per_read\": %.3f, \"rdpmc_per_read\": %.3f}\n",
           pm_probe_counter_mode(st), best_read * 1e9, best_sys * 1e9,
           (double)sys / (REPEAT * N), (double)rdpmc / (REPEAT * N));
    pm_probe_close(st);
    return 0;
}
