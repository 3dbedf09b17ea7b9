/*
 * Off-core discovery against fake sysfs trees (Intel 2-socket with IMC+UPI,
 * AMD with amd_df, none, malformed), a real open/read through a fake PMU
 * whose type is the kernel's software PMU, and the one permission message.
 */
#define _GNU_SOURCE
#include "pmoss/collector.h"
#include "check.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


/* Write root/rel (parents created) with content. */
static void put(const char *root, const char *rel, const char *content)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(2);
    }
    fputs(content, f);
    fclose(f);
}

static void pmu(const char *root, const char *name, const char *type, const char *cpumask)
{
    char rel[512];
    snprintf(rel, sizeof(rel), "bus/event_source/devices/%s/type", name);
    put(root, rel, type);
    snprintf(rel, sizeof(rel), "bus/event_source/devices/%s/cpumask", name);
    put(root, rel, cpumask);
}

static void pmu_file(const char *root, const char *name, const char *file, const char *content)
{
    char rel[512];
    snprintf(rel, sizeof(rel), "bus/event_source/devices/%s/%s", name, file);
    put(root, rel, content);
}

static char *mkroot(void)
{
    char *t = strdup("/tmp/pmoss-sysfs-XXXXXX");
    if (!mkdtemp(t))
        exit(2);
    chmod(t, 0755); /* the unprivileged child of test_open_read reads it too */
    return t;
}

static void rmroot(char *root)
{
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "warning: could not remove %s\n", root);
    free(root);
}

static const pm_uncore_event *find(const pm_uncore *u, const char *pmu_name, pm_offcore_feature f, int cpu)
{
    for (unsigned i = 0; i < pm_uncore_n_events(u); i++) {
        const pm_uncore_event *e = pm_uncore_event_at(u, i);
        if (strcmp(e->pmu, pmu_name) == 0 && e->feature == f && e->cpu == cpu)
            return e;
    }
    return NULL;
}

static void test_intel_two_socket(void)
{
    char *root = mkroot();
    put(root, "devices/system/node/node0/cpulist", "0-1\n");
    put(root, "devices/system/node/node1/cpulist", "2-3\n");
    const char *imcs[] = {"uncore_imc_0", "uncore_imc_1"}, *types[] = {"13\n", "14\n"};
    for (int i = 0; i < 2; i++) {
        pmu(root, imcs[i], types[i], "0,2\n");
        pmu_file(root, imcs[i], "format/event", "config:0-7\n");
        pmu_file(root, imcs[i], "format/umask", "config:8-15\n");
        pmu_file(root, imcs[i], "events/cas_count_read", "event=0x04,umask=0x03\n");
        pmu_file(root, imcs[i], "events/cas_count_write", "event=0x04,umask=0x0c\n");
    }
    const char *upis[] = {"uncore_upi_0", "uncore_upi_1"};
    for (int i = 0; i < 2; i++) {
        pmu(root, upis[i], i ? "21\n" : "20\n", "0,2\n");
        pmu_file(root, upis[i], "format/event", "config:0-7\n");
        pmu_file(root, upis[i], "format/umask", "config:8-15\n");
    }
    pmu(root, "cpu_unrelated", "4\n", "0-3\n"); /* not an uncore PMU we use */
    pm_uncore *u = NULL;
    char msg[512] = "";
    int rc = pm_uncore_discover(root, &u, msg, sizeof(msg));
    CHECK(rc == 0, "discover: %d %s", rc, msg);
    if (rc == 0) {
        CHECK(pm_uncore_n_events(u) == 16, "2 imc x 2 sockets x 2 + 2 upi x 2 sockets x 2 = 16, got %u",
              pm_uncore_n_events(u));
        CHECK(pm_uncore_n_nodes(u) == 2 && pm_uncore_n_links(u) == 4, "nodes %u links %u",
              pm_uncore_n_nodes(u), pm_uncore_n_links(u));
        const pm_uncore_event *e = find(u, "uncore_imc_1", PM_OFF_IMC_WRITE, 2);
        CHECK(e && e->attr.type == 14 && e->attr.config == 0x0c04 && e->scope_index == 1 &&
                  e->bytes_per_count == 64.0,
              "imc_1 write on socket 1");
        e = find(u, "uncore_imc_0", PM_OFF_IMC_READ, 0);
        CHECK(e && e->attr.type == 13 && e->attr.config == 0x0304 && e->scope_index == 0, "imc_0 read");
        e = find(u, "uncore_upi_1", PM_OFF_LINK_OUT, 2);
        CHECK(e && e->attr.type == 21 && e->attr.config == 0x0f02 && e->scope_index == 3 &&
                  fabs(e->bytes_per_count - 64.0 / 9.0) < 1e-12,
              "upi_1 out on socket 1 is link 3");
        e = find(u, "uncore_upi_0", PM_OFF_LINK_IN, 0);
        CHECK(e && e->attr.config == 0x0f03 && e->scope_index == 0, "upi_0 in on socket 0 is link 0");
    }
    pm_uncore_destroy(u);
    rmroot(root);
}

static void test_amd_df(void)
{
    char *root = mkroot();
    pmu(root, "amd_df", "11\n", "0\n");
    pmu_file(root, "amd_df", "format/event", "config:0-7,32-35,59-60\n");
    pmu_file(root, "amd_df", "format/umask", "config:8-15\n");
    pm_uncore *u = NULL;
    char msg[512] = "";
    int rc = pm_uncore_discover(root, &u, msg, sizeof(msg));
    CHECK(rc == 0 && pm_uncore_n_events(u) == 8, "amd_df: rc %d, %u events (%s)", rc, pm_uncore_n_events(u), msg);
    int seen_ext = 0;
    for (unsigned i = 0; rc == 0 && i < pm_uncore_n_events(u); i++) {
        const pm_uncore_event *e = pm_uncore_event_at(u, i);
        CHECK(e->feature == PM_OFF_IMC_TOTAL && e->attr.type == 11 && e->scope_index == 0, "df event %u", i);
        /* event 0x107: low 8 bits at 0-7, bit 8 goes to config bit 32 */
        if (strcmp(e->spec, "event=0x107,umask=0x38") == 0) {
            seen_ext = 1;
            CHECK(e->attr.config == (0x07ULL | 0x38ULL << 8 | 1ULL << 32), "split field: 0x%llx",
                  (unsigned long long)e->attr.config);
        }
    }
    CHECK(seen_ext, "channel 4 event present");
    CHECK(pm_uncore_n_nodes(u) == 1 && pm_uncore_n_links(u) == 0, "one node, no links");
    pm_uncore_destroy(u);
    rmroot(root);
}

static void test_none_and_malformed(void)
{
    char *root = mkroot();
    pm_uncore *u = NULL;
    CHECK(pm_uncore_discover(root, &u, NULL, 0) == 0 && pm_uncore_n_events(u) == 0, "no PMUs is not an error");
    pm_uncore_destroy(u);
    pmu(root, "uncore_imc_0", "abc\n", "0\n");
    char msg[512] = "";
    u = NULL;
    int rc = pm_uncore_discover(root, &u, msg, sizeof(msg));
    CHECK(rc == -EINVAL && u == NULL && strstr(msg, "uncore_imc_0/type"), "malformed type: %d '%s'", rc, msg);
    pmu(root, "uncore_imc_0", "13\n", "0\n"); /* events named, format missing */
    pmu_file(root, "uncore_imc_0", "events/cas_count_read", "event=0x04,umask=0x03\n");
    rc = pm_uncore_discover(root, &u, msg, sizeof(msg));
    CHECK(rc == -EINVAL && strstr(msg, "format/event"), "missing format: %d '%s'", rc, msg);
    rmroot(root);
}

/* A fake IMC whose type is PERF_TYPE_SOFTWARE: cas_count_read = cpu-clock
 * (config 0), so open and read run for real on this PMU-less host. */
static char *software_backed_root(void)
{
    char *root = mkroot();
    pmu(root, "uncore_imc_0", "1\n", "0\n");
    pmu_file(root, "uncore_imc_0", "format/event", "config:0-7\n");
    pmu_file(root, "uncore_imc_0", "events/cas_count_read", "event=0x0\n");
    pmu_file(root, "uncore_imc_0", "events/cas_count_write", "event=0x0\n");
    return root;
}

static void test_open_read(void)
{
    char *root = software_backed_root();
    pm_uncore *u = NULL;
    char msg[512] = "";
    CHECK(pm_uncore_discover(root, &u, msg, sizeof(msg)) == 0, "discover %s", msg);
    int rc = pm_uncore_open(u, msg, sizeof(msg));
    if (rc == -EACCES) {
        printf("skip open/read: %s\n", msg); /* unprivileged run */
    } else {
        CHECK(rc == 0, "open: %d %s", rc, msg);
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
        double v[PM_N_OFFCORE * 2];
        CHECK(pm_uncore_read(u, v, 2) == 0, "read");
        CHECK(v[PM_OFF_IMC_READ * 2 + 0] > 0 && v[PM_OFF_IMC_WRITE * 2 + 0] > 0, "counts moved");
        CHECK(isnan(v[PM_OFF_LINK_IN * 2 + 0]) && isnan(v[PM_OFF_IMC_TOTAL * 2]), "unmeasured = NAN");
        CHECK(pm_uncore_read(u, v, 0) == -EINVAL, "cap too small");
    }
    pm_uncore_destroy(u);

    /* Not permitted: drop root in a child (perf_event_paranoid >= 1 refuses
     * system-wide events to unprivileged users). */
    if (geteuid() == 0) {
        char para[16] = "";
        FILE *f = fopen("/proc/sys/kernel/perf_event_paranoid", "r");
        if (f) {
            if (!fgets(para, sizeof(para), f))
                para[0] = '\0';
            fclose(f);
        }
        if (atoi(para) >= 1) {
            pid_t pid = fork();
            if (pid == 0) {
                if (setgid(65534) != 0 || setuid(65534) != 0)
                    _exit(3);
                pm_uncore *v = NULL;
                char m[512] = "";
                if (pm_uncore_discover(root, &v, m, sizeof(m)) != 0 || pm_uncore_n_events(v) != 2)
                    _exit(4);
                int r = pm_uncore_open(v, m, sizeof(m));
                int ok = r == -EACCES && strstr(m, "perf_event_paranoid") && strstr(m, "CAP_PERFMON") &&
                         !strchr(m, '\n');
                if (!ok)
                    fprintf(stderr, "rc %d msg '%s'\n", r, m);
                pm_uncore_destroy(v);
                _exit(ok ? 0 : 1);
            }
            int status = 0;
            waitpid(pid, &status, 0);
            CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "permission message (child status %d)",
                  WEXITSTATUS(status));
        }
    }
    rmroot(root);
}

int main(void)
{
    test_intel_two_socket();
    test_amd_df();
    test_none_and_malformed();
    test_open_read();
    if (!failures)
        printf("ok\n");
    return check_exit_code();
}
