/*
 * Feature -> event encodings. Run once per x86 model with LIBPFM_FORCE_PMU
 * set to that model's libpfm PMU (ctest does), and once as "builtin" for the
 * Arm / POWER raw tables. Expected attributes are the vendors' encodings
 * (event | umask << 8 | cmask << 24; off-core response MSR value in config1;
 * AMD extended event bits 8-11 at config bits 32-35), pinned so a libpfm or
 * table change that alters what we count fails here.
 */
#define _GNU_SOURCE
#include "pmoss/collector.h"
#include "check.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define U {0, 0, 0} /* unavailable on that model */

typedef struct expect {
    unsigned type;
    unsigned long long config, config1;
} expect;

typedef struct model_expect {
    const char *model;
    expect e[PM_N_CORE_FEATURES];
} model_expect;

static const model_expect X86[] = {
    {"skx", {
        {4, 0xc0, 0x0}, /* instructions */
        {4, 0x3c, 0x0}, /* cycles */
        {4, 0x283, 0x0}, /* l1i_misses */
        {4, 0xc5, 0x0}, /* branch_misses */
        {4, 0x151, 0x0}, /* l1d_misses */
        {4, 0x412e, 0x0}, /* llc_misses */
        {4, 0x1b7, 0x3f84000002}, /* llc_write_misses */
        {4, 0xe08, 0x0}, /* dtlb_misses */
        {4, 0x1bb, 0x3f84000001}, /* mem_accesses */
        {4, 0x1d3, 0x0}, /* local_dram_loads */
        {4, 0x2d3, 0x0}, /* remote_dram_loads */
        {4, 0x1b7, 0x3f90000002}, /* mem_write_misses */
        {4, 0x20002a3, 0x0}, /* cycles_l3_miss */
        {4, 0x100010a3, 0x0}, /* cycles_mem_any */
        {1, 0x1, 0x0}, /* task_clock_ns */
    }},
    {"snb_ep", {
        {4, 0xc0, 0x0}, /* instructions */
        {4, 0x3c, 0x0}, /* cycles */
        {4, 0x280, 0x0}, /* l1i_misses */
        {4, 0x4c5, 0x0}, /* branch_misses */
        {4, 0x151, 0x0}, /* l1d_misses */
        {4, 0x412e, 0x0}, /* llc_misses */
        {4, 0x1b7, 0x3fffc00002}, /* llc_write_misses */
        {4, 0x208, 0x0}, /* dtlb_misses */
        {4, 0x1bb, 0x3fffc00001}, /* mem_accesses */
        {4, 0x1d3, 0x0}, /* local_dram_loads */
        {4, 0x4d3, 0x0}, /* remote_dram_loads */
        {4, 0x1b7, 0x3fff800002}, /* mem_write_misses */
        U, /* cycles_l3_miss */
        {4, 0x20002a3, 0x0}, /* cycles_mem_any */
        {1, 0x1, 0x0}, /* task_clock_ns */
    }},
    {"icx", {
        {4, 0xc0, 0x0}, /* instructions */
        {4, 0x3c, 0x0}, /* cycles */
        {4, 0x283, 0x0}, /* l1i_misses */
        {4, 0xc5, 0x0}, /* branch_misses */
        {4, 0x151, 0x0}, /* l1d_misses */
        {4, 0x412e, 0x0}, /* llc_misses */
        {4, 0x1b7, 0x3f3fc00002}, /* llc_write_misses */
        {4, 0xe08, 0x0}, /* dtlb_misses */
        {4, 0x1b7, 0x3fbfc00001}, /* mem_accesses */
        {4, 0x1d3, 0x0}, /* local_dram_loads */
        {4, 0x2d3, 0x0}, /* remote_dram_loads */
        U, /* mem_write_misses */
        {4, 0x20002a3, 0x0}, /* cycles_l3_miss */
        {4, 0x100010a3, 0x0}, /* cycles_mem_any */
        {1, 0x1, 0x0}, /* task_clock_ns */
    }},
    {"spr", {
        {4, 0xc0, 0x0}, /* instructions */
        {4, 0x3c, 0x0}, /* cycles */
        {4, 0xe424, 0x0}, /* l1i_misses */
        {4, 0xc5, 0x0}, /* branch_misses */
        {4, 0x151, 0x0}, /* l1d_misses */
        {4, 0x412e, 0x0}, /* llc_misses */
        {4, 0x12a, 0x3f3fc00002}, /* llc_write_misses */
        {4, 0xe12, 0x0}, /* dtlb_misses */
        {4, 0x12a, 0x3fbfc00001}, /* mem_accesses */
        {4, 0x1d3, 0x0}, /* local_dram_loads */
        {4, 0x2d3, 0x0}, /* remote_dram_loads */
        U, /* mem_write_misses */
        {4, 0x60006a3, 0x0}, /* cycles_l3_miss */
        {4, 0x100010a3, 0x0}, /* cycles_mem_any */
        {1, 0x1, 0x0}, /* task_clock_ns */
    }},
    {"zen2", {
        {4, 0xc0, 0x0}, /* instructions */
        {4, 0x76, 0x0}, /* cycles */
        {4, 0x764, 0x0}, /* l1i_misses */
        {4, 0xc3, 0x0}, /* branch_misses */
        {4, 0x5b43, 0x0}, /* l1d_misses */
        {4, 0x5843, 0x0}, /* llc_misses */
        U, /* llc_write_misses */
        {4, 0xf045, 0x0}, /* dtlb_misses */
        {4, 0x4843, 0x0}, /* mem_accesses */
        {4, 0x843, 0x0}, /* local_dram_loads */
        {4, 0x4043, 0x0}, /* remote_dram_loads */
        U, /* mem_write_misses */
        U, /* cycles_l3_miss */
        U, /* cycles_mem_any */
        {1, 0x1, 0x0}, /* task_clock_ns */
    }},
    {"zen3", {
        {4, 0xc0, 0x0}, /* instructions */
        {4, 0x76, 0x0}, /* cycles */
        {4, 0x10000188e, 0x0}, /* l1i_misses */
        {4, 0xc3, 0x0}, /* branch_misses */
        {4, 0x5f43, 0x0}, /* l1d_misses */
        {4, 0x5c43, 0x0}, /* llc_misses */
        U, /* llc_write_misses */
        {4, 0xf045, 0x0}, /* dtlb_misses */
        {4, 0x4843, 0x0}, /* mem_accesses */
        {4, 0x843, 0x0}, /* local_dram_loads */
        {4, 0x4043, 0x0}, /* remote_dram_loads */
        U, /* mem_write_misses */
        U, /* cycles_l3_miss */
        U, /* cycles_mem_any */
        {1, 0x1, 0x0}, /* task_clock_ns */
    }},
    {"zen4", {
        {4, 0xc0, 0x0}, /* instructions */
        {4, 0x76, 0x0}, /* cycles */
        {4, 0x10000188e, 0x0}, /* l1i_misses */
        {4, 0xc3, 0x0}, /* branch_misses */
        {4, 0xdf43, 0x0}, /* l1d_misses */
        {4, 0xdc43, 0x0}, /* llc_misses */
        U, /* llc_write_misses */
        {4, 0xf045, 0x0}, /* dtlb_misses */
        {4, 0x4843, 0x0}, /* mem_accesses */
        {4, 0x843, 0x0}, /* local_dram_loads */
        {4, 0x4043, 0x0}, /* remote_dram_loads */
        U, /* mem_write_misses */
        U, /* cycles_l3_miss */
        U, /* cycles_mem_any */
        {1, 0x1, 0x0}, /* task_clock_ns */
    }},
};

static const model_expect BUILTIN[] = {
    {"neoverse_v2", {{4, 0x08, 0}, {4, 0x11, 0}, {4, 0x01, 0}, {4, 0x10, 0}, {4, 0x03, 0}, {4, 0x37, 0},
                     U, {4, 0x34, 0}, {4, 0x39, 0}, U, {4, 0x38, 0}, U, U, {4, 0x4005, 0}, {1, 1, 0}}},
    {"power8", {{4, 0x500fa, 0}, {4, 0x600f4, 0}, {4, 0x200fd, 0}, {4, 0x400f6, 0}, {4, 0x3e054, 0},
                {4, 0x300fe, 0}, U, {4, 0x300fc, 0}, {4, 0x400fe, 0}, {4, 0x2c048, 0}, {4, 0x3c04a, 0},
                U, {4, 0x4c01a, 0}, U, {1, 1, 0}}},
    {"power9", {{4, 0x500fa, 0}, {4, 0x600f4, 0}, {4, 0x200fd, 0}, {4, 0x400f6, 0}, {4, 0x3e054, 0},
                {4, 0x300fe, 0}, U, {4, 0x300fc, 0}, {4, 0x400fe, 0}, {4, 0x2c048, 0}, {4, 0x3c04a, 0},
                U, {4, 0x4c01a, 0}, U, {1, 1, 0}}},
};


static void check_model(const model_expect *m)
{
    for (int f = 0; f < PM_N_CORE_FEATURES; f++) {
        const expect *x = &m->e[f];
        struct perf_event_attr a;
        char str[256], msg[256] = "";
        memset(&a, 0xab, sizeof(a)); /* encode must zero what it does not set */
        int rc = pm_event_encode(m->model, f, &a, str, sizeof(str), msg, sizeof(msg));
        pm_event_desc d;
        CHECK(pm_event_describe(m->model, f, &d) == 0, "%s describe %d", m->model, f);
        if (x->type == 0) {
            CHECK(rc == -ENOENT, "%s %s: want unavailable, got %d", m->model, pm_probe_names[f], rc);
            CHECK(d.source == PM_SRC_NONE && d.note, "%s %s: unavailable needs a note", m->model,
                  pm_probe_names[f]);
            continue;
        }
        CHECK(rc == 0, "%s %s: encode rc %d (%s)", m->model, pm_probe_names[f], rc, msg);
        if (rc != 0)
            continue;
        CHECK(a.size == sizeof(a), "%s %s: attr.size", m->model, pm_probe_names[f]);
        CHECK(a.type == x->type && a.config == x->config && a.config1 == x->config1,
              "%s %s (%s): got type %u config 0x%llx config1 0x%llx, want %u 0x%llx 0x%llx", m->model,
              pm_probe_names[f], str, a.type, (unsigned long long)a.config,
              (unsigned long long)a.config1, x->type, x->config, x->config1);
        CHECK(a.config2 == 0 && a.sample_period == 0 && a.disabled == 0,
              "%s %s: stray attribute bits", m->model, pm_probe_names[f]);
        CHECK(a.exclude_kernel == 1 && a.exclude_hv == 1, "%s %s: must count user level only",
              m->model, pm_probe_names[f]);
    }
}

static const char *model_of_pmu(const char *pmu)
{
    for (int i = 0; pm_models[i]; i++) {
        const char *p = pm_model_pfm_pmu(pm_models[i]);
        if (p && strcmp(p, pmu) == 0)
            return pm_models[i];
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s <libpfm pmu>|builtin\n", argv[0]);
        return 2;
    }
    CHECK(pm_feature_index("task_clock_ns") == PM_FEATURE_TASK_CLOCK, "task_clock index");
    CHECK(pm_feature_index("context_switches") == PM_PROBE_N_VALUES - 1, "context_switches index");
    CHECK(pm_feature_index("bogus") == -ENOENT, "unknown feature");
    struct perf_event_attr a;
    CHECK(pm_event_encode("no-such-model", 0, &a, NULL, 0, NULL, 0) == -EINVAL, "unknown model");
    CHECK(pm_event_encode("skx", PM_N_CORE_FEATURES, &a, NULL, 0, NULL, 0) == -EINVAL, "bad index");

    if (strcmp(argv[1], "builtin") == 0) {
        for (size_t i = 0; i < sizeof(BUILTIN) / sizeof(BUILTIN[0]); i++) {
            CHECK(pm_model_pfm_pmu(BUILTIN[i].model) == NULL, "%s is a raw table", BUILTIN[i].model);
            check_model(&BUILTIN[i]);
        }
    } else {
        const char *env = getenv("LIBPFM_FORCE_PMU");
        CHECK(env && strcmp(env, argv[1]) == 0, "run with LIBPFM_FORCE_PMU=%s", argv[1]);
        const char *model = model_of_pmu(argv[1]), *detected = NULL;
        CHECK(model != NULL, "no model for pmu %s", argv[1]);
        CHECK(pm_model_detect(&detected) == 0 && detected && model && strcmp(detected, model) == 0,
              "detect: got %s want %s", detected ? detected : "(none)", model ? model : "?");
        for (size_t i = 0; model && i < sizeof(X86) / sizeof(X86[0]); i++)
            if (strcmp(X86[i].model, model) == 0)
                check_model(&X86[i]);
        /* Another x86 model's PMU is inactive under the forced one: refused. */
        const char *other = strcmp(argv[1], "skx") == 0 ? "icx" : "skx";
        char msg[256] = "";
        int rc = pm_event_encode(other, 0, &a, NULL, 0, msg, sizeof(msg));
        CHECK(rc == -EOPNOTSUPP && strstr(msg, "LIBPFM_FORCE_PMU"), "inactive model: rc %d msg '%s'", rc,
              msg);
    }
    if (!failures)
        printf("ok %s\n", argv[1]);
    return check_exit_code();
}
