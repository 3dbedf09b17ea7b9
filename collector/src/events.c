/*
 * Portable feature -> real event, per CPU model.
 *
 * Portable meanings (docs/collector.md has the full table):
 *   llc_write_misses  demand stores (RFOs) that miss the LLC   (perf LLC-store-misses)
 *   mem_accesses      demand data reads served beyond the LLC  (perf node-loads)
 *   mem_write_misses  demand RFOs served by a remote node's DRAM (perf node-store-misses)
 *   cycles_l3_miss    cycles with a demand load missing L3 outstanding
 *   cycles_mem_any    cycles with any demand load outstanding beyond L1D
 * An entry's note says where a model can only approximate its feature.
 * x86 entries are libpfm4 strings (the PMU prefix is added at encode time);
 * Arm and POWER entries are architected raw codes because Debian's libpfm4
 * on x86 carries x86 tables only — when libpfm has the host's table the raw
 * code is still what perf uses, so the table stays the single source.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <perfmon/pfmlib_perf_event.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

const char *const pm_probe_names[PM_PROBE_N_VALUES + 1] = {
    "instructions", "cycles", "l1i_misses", "branch_misses",
    "l1d_misses", "llc_misses", "llc_write_misses", "dtlb_misses",
    "mem_accesses", "local_dram_loads", "remote_dram_loads", "mem_write_misses",
    "cycles_l3_miss", "cycles_mem_any", "task_clock_ns",
    "page_faults", "context_switches", NULL,
};

int pm_feature_index(const char *name)
{
    for (int i = 0; name && pm_probe_names[i]; i++)
        if (strcmp(pm_probe_names[i], name) == 0)
            return i;
    return -ENOENT;
}

#define E(ev) {NULL, PM_SRC_LIBPFM, ev, 0, NULL}
#define EN(ev, why) {NULL, PM_SRC_LIBPFM, ev, 0, why}
#define R(code, name) {NULL, PM_SRC_RAW, name, code, NULL}
#define RN(code, name, why) {NULL, PM_SRC_RAW, name, code, why}
#define NONE(why) {NULL, PM_SRC_NONE, NULL, 0, why}
#define TASK_CLOCK {NULL, PM_SRC_SOFTWARE, "task-clock", PERF_COUNT_SW_TASK_CLOCK, NULL}

typedef struct model_table {
    const char *model;
    const char *pfm_pmu; /* libpfm4 PMU name, NULL for built-in raw tables */
    pm_event_desc ev[PM_N_CORE_FEATURES];
} model_table;

static const model_table TABLES[] = {
    {"skx", "skx", {
        E("INST_RETIRED:ANY_P"), E("CPU_CLK_UNHALTED:THREAD_P"),
        E("ICACHE_64B:IFTAG_MISS"), E("BR_MISP_RETIRED:ALL_BRANCHES"),
        E("L1D:REPLACEMENT"), E("LONGEST_LAT_CACHE:MISS"),
        E("OFFCORE_RESPONSE_0:DMND_RFO:L3_MISS:SNP_ANY"), E("DTLB_LOAD_MISSES:WALK_COMPLETED"),
        E("OFFCORE_RESPONSE_1:DMND_DATA_RD:L3_MISS:SNP_ANY"),
        E("MEM_LOAD_L3_MISS_RETIRED:LOCAL_DRAM"), E("MEM_LOAD_L3_MISS_RETIRED:REMOTE_DRAM"),
        EN("OFFCORE_RESPONSE_0:DMND_RFO:L3_MISS_REMOTE_HOP1_DRAM:SNP_ANY",
           "remote DRAM one hop away only (4-socket meshes have 2-hop nodes)"),
        E("CYCLE_ACTIVITY:CYCLES_L3_MISS"), E("CYCLE_ACTIVITY:CYCLES_MEM_ANY"), TASK_CLOCK}},
    {"snb_ep", "snb_ep", {
        E("INST_RETIRED:ANY_P"), E("CPU_CLK_UNHALTED:THREAD_P"),
        E("ICACHE:MISSES"), E("BR_MISP_RETIRED:ALL_BRANCHES"),
        E("L1D:REPLACEMENT"), E("LLC_MISSES"),
        E("OFFCORE_RESPONSE_0:DMND_RFO:L3_MISS:SNP_ANY"), E("DTLB_LOAD_MISSES:WALK_COMPLETED"),
        E("OFFCORE_RESPONSE_1:DMND_DATA_RD:L3_MISS:SNP_ANY"),
        E("MEM_LOAD_UOPS_LLC_MISS_RETIRED:LOCAL_DRAM"), E("MEM_LOAD_UOPS_LLC_MISS_RETIRED:REMOTE_DRAM"),
        E("OFFCORE_RESPONSE_0:DMND_RFO:LLC_MISS_REMOTE_DRAM:SNP_ANY"),
        NONE("Sandy Bridge counts pending misses only up to L2 (CYCLE_ACTIVITY:CYCLES_L2_PENDING)"),
        EN("CYCLE_ACTIVITY:CYCLES_L1D_PENDING", "cycles with an L1D miss pending (no CYCLES_MEM_ANY)"),
        TASK_CLOCK}},
    {"icx", "icx", {
        E("INST_RETIRED:ANY_P"), E("CPU_CLK_UNHALTED:THREAD_P"),
        E("ICACHE_64B:IFTAG_MISS"), E("BR_MISP_RETIRED:ALL_BRANCHES"),
        E("L1D:REPLACEMENT"), E("LONGEST_LAT_CACHE:MISS"),
        E("OCR:DEMAND_RFO_L3_MISS"), E("DTLB_LOAD_MISSES:WALK_COMPLETED"),
        E("OCR:DEMAND_DATA_RD_L3_MISS"),
        E("MEM_LOAD_L3_MISS_RETIRED:LOCAL_DRAM"), E("MEM_LOAD_L3_MISS_RETIRED:REMOTE_DRAM"),
        NONE("Ice Lake-SP has no remote-DRAM response for demand RFOs (only PMM)"),
        E("CYCLE_ACTIVITY:CYCLES_L3_MISS"), E("CYCLE_ACTIVITY:CYCLES_MEM_ANY"), TASK_CLOCK}},
    {"spr", "spr", {
        E("INST_RETIRED:ANY_P"), E("CPU_CLK_UNHALTED:THREAD_P"),
        EN("L2_RQSTS:ALL_CODE_RD", "code reads that reach L2 (no L1I miss event on Golden Cove)"),
        E("BR_MISP_RETIRED:ALL_BRANCHES"),
        E("L1D:REPLACEMENT"), E("LONGEST_LAT_CACHE:MISS"),
        E("OCR:DEMAND_RFO_L3_MISS"), E("DTLB_LOAD_MISSES:WALK_COMPLETED"),
        E("OCR:DEMAND_DATA_RD_L3_MISS"),
        E("MEM_LOAD_L3_MISS_RETIRED:LOCAL_DRAM"), E("MEM_LOAD_L3_MISS_RETIRED:REMOTE_DRAM"),
        NONE("Sapphire Rapids has no remote-DRAM response for demand RFOs"),
        EN("CYCLE_ACTIVITY:STALLS_L3_MISS", "stall cycles only (no CYCLES_L3_MISS)"),
        E("CYCLE_ACTIVITY:CYCLES_MEM_ANY"), TASK_CLOCK}},
    {"zen2", "amd64_fam17h_zen2", {
        E("RETIRED_INSTRUCTIONS"), E("CYCLES_NOT_IN_HALT"),
        E("CORE_TO_L2_CACHEABLE_REQUEST_ACCESS_STATUS:IC_FILL_HIT_X:IC_FILL_HIT_S:IC_FILL_MISS"),
        E("RETIRED_BRANCH_INSTRUCTIONS_MISPREDICTED"),
        EN("DATA_CACHE_REFILLS_FROM_SYSTEM:MABRESP_LCL_L2:LS_MABRESP_LCL_CACHE:LS_MABRESP_LCL_DRAM:"
           "LS_MABRESP_RMT_CACHE:LS_MABRESP_RMT_DRAM", "demand fills only"),
        EN("DATA_CACHE_REFILLS_FROM_SYSTEM:LS_MABRESP_LCL_DRAM:LS_MABRESP_RMT_CACHE:LS_MABRESP_RMT_DRAM",
           "demand data fills from DRAM or a remote node; L3 is not a core PMU on AMD"),
        NONE("no store-specific L3 miss event on AMD cores"),
        E("L1_DTLB_MISS:TLB_RELOAD_1G_L2_MISS:TLB_RELOAD_2M_L2_MISS:TLB_RELOAD_COALESCED_PAGE_MISS:"
          "TLB_RELOAD_4K_L2_MISS"),
        E("DATA_CACHE_REFILLS_FROM_SYSTEM:LS_MABRESP_LCL_DRAM:LS_MABRESP_RMT_DRAM"),
        E("DATA_CACHE_REFILLS_FROM_SYSTEM:LS_MABRESP_LCL_DRAM"),
        E("DATA_CACHE_REFILLS_FROM_SYSTEM:LS_MABRESP_RMT_DRAM"),
        NONE("no remote-DRAM store event on AMD cores"),
        NONE("no L3-miss-pending cycle event on AMD cores"),
        NONE("no memory-pending cycle event on AMD cores"), TASK_CLOCK}},
    {"zen3", "amd64_fam19h_zen3", {
        E("RETIRED_INSTRUCTIONS"), E("CYCLES_NOT_IN_HALT"),
        E("IC_TAG_HIT_MISS:IC_MISS"), E("RETIRED_BRANCH_INSTRUCTIONS_MISPREDICTED"),
        EN("DEMAND_DATA_CACHE_FILLS_FROM_SYSTEM:LCL_L2:INT_CACHE:EXT_CACHE_LCL:MEM_IO_LCL:"
           "EXT_CACHE_RMT:MEM_IO_RMT", "demand fills only"),
        EN("DEMAND_DATA_CACHE_FILLS_FROM_SYSTEM:EXT_CACHE_LCL:MEM_IO_LCL:EXT_CACHE_RMT:MEM_IO_RMT",
           "demand data fills from beyond the CCX's L3; L3 is not a core PMU on AMD"),
        NONE("no store-specific L3 miss event on AMD cores"),
        E("L1_DTLB_MISS:TLB_RELOAD_1G_L2_MISS:TLB_RELOAD_2M_L2_MISS:TLB_RELOAD_COALESCED_PAGE_MISS:"
          "TLB_RELOAD_4K_L2_MISS"),
        E("DEMAND_DATA_CACHE_FILLS_FROM_SYSTEM:MEM_IO_LCL:MEM_IO_RMT"),
        E("DEMAND_DATA_CACHE_FILLS_FROM_SYSTEM:MEM_IO_LCL"),
        E("DEMAND_DATA_CACHE_FILLS_FROM_SYSTEM:MEM_IO_RMT"),
        NONE("no remote-DRAM store event on AMD cores"),
        NONE("no L3-miss-pending cycle event on AMD cores"),
        NONE("no memory-pending cycle event on AMD cores"), TASK_CLOCK}},
    {"zen4", "amd64_fam19h_zen4", {
        E("RETIRED_INSTRUCTIONS"), E("CYCLES_NOT_IN_HALT"),
        E("IC_TAG_HIT_MISS:IC_MISS"), E("RETIRED_BRANCH_INSTRUCTIONS_MISPREDICTED"),
        EN("DEMAND_DATA_CACHE_FILLS_FROM_SYSTEM:LCL_L2:LOCAL_CCX:NEAR_CACHE_NEAR_FAR:DRAM_IO_NEAR:"
           "FAR_CACHE_NEAR_FAR:DRAM_IO_FAR:ALT_MEM_NEAR_FAR", "demand fills only"),
        EN("DEMAND_DATA_CACHE_FILLS_FROM_SYSTEM:NEAR_CACHE_NEAR_FAR:DRAM_IO_NEAR:FAR_CACHE_NEAR_FAR:"
           "DRAM_IO_FAR:ALT_MEM_NEAR_FAR",
           "demand data fills from beyond the CCX's L3; L3 is not a core PMU on AMD"),
        NONE("no store-specific L3 miss event on AMD cores"),
        E("L1_DTLB_MISS:TLB_RELOAD_1G_L2_MISS:TLB_RELOAD_2M_L2_MISS:TLB_RELOAD_COALESCED_PAGE_MISS:"
          "TLB_RELOAD_4K_L2_MISS"),
        E("DEMAND_DATA_CACHE_FILLS_FROM_SYSTEM:DRAM_IO_NEAR:DRAM_IO_FAR"),
        E("DEMAND_DATA_CACHE_FILLS_FROM_SYSTEM:DRAM_IO_NEAR"),
        E("DEMAND_DATA_CACHE_FILLS_FROM_SYSTEM:DRAM_IO_FAR"),
        NONE("no remote-DRAM store event on AMD cores"),
        NONE("no L3-miss-pending cycle event on AMD cores"),
        NONE("no memory-pending cycle event on AMD cores"), TASK_CLOCK}},
    /* Arm PMUv3 common architectural/microarchitectural event numbers
     * (Arm ARM D17.11), all implemented by Neoverse V2 (Grace). */
    {"neoverse_v2", NULL, {
        R(0x08, "INST_RETIRED"), R(0x11, "CPU_CYCLES"),
        R(0x01, "L1I_CACHE_REFILL"), R(0x10, "BR_MIS_PRED"),
        R(0x03, "L1D_CACHE_REFILL"),
        RN(0x37, "LL_CACHE_MISS_RD", "reads missing the system-level cache (CMN SLC)"),
        NONE("no write-miss event for the system-level cache"),
        R(0x34, "DTLB_WALK"),
        RN(0x39, "L1D_CACHE_LMISS_RD", "long-latency L1D read misses (no DRAM-read event in the core)"),
        NONE("no local-DRAM event in the core PMU"),
        RN(0x38, "REMOTE_ACCESS_RD", "reads served by another socket (any level)"),
        NONE("no remote write event in the core PMU"),
        NONE("no L3-miss-pending cycle event"),
        RN(0x4005, "STALL_BACKEND_MEM", "stall cycles only"), TASK_CLOCK}},
    /* POWER8 / POWER9 raw codes (PMC selector in the low bits, as perf's
     * cpu/config=.../ takes them). */
    {"power8", NULL, {
        R(0x500fa, "PM_RUN_INST_CMPL"), R(0x600f4, "PM_RUN_CYC"),
        R(0x200fd, "PM_L1_ICACHE_MISS"), R(0x400f6, "PM_BR_MPRED_CMPL"),
        R(0x3e054, "PM_LD_MISS_L1"), R(0x300fe, "PM_DATA_FROM_L3MISS"),
        NONE("no store-specific L3 miss event"),
        R(0x300fc, "PM_DTLB_MISS"),
        R(0x400fe, "PM_DATA_FROM_MEMORY"),
        R(0x2c048, "PM_DATA_FROM_LMEM"), R(0x3c04a, "PM_DATA_FROM_RMEM"),
        NONE("no remote store event"),
        RN(0x4c01a, "PM_CMPLU_STALL_DMISS_L3MISS", "completion-stall cycles only"),
        NONE("no memory-pending cycle event"), TASK_CLOCK}},
    {"power9", NULL, {
        R(0x500fa, "PM_RUN_INST_CMPL"), R(0x600f4, "PM_RUN_CYC"),
        R(0x200fd, "PM_L1_ICACHE_MISS"), R(0x400f6, "PM_BR_MPRED_CMPL"),
        R(0x3e054, "PM_LD_MISS_L1"), R(0x300fe, "PM_DATA_FROM_L3MISS"),
        NONE("no store-specific L3 miss event"),
        R(0x300fc, "PM_DTLB_MISS"),
        R(0x400fe, "PM_DATA_FROM_MEMORY"),
        R(0x2c048, "PM_DATA_FROM_LMEM"), R(0x3c04a, "PM_DATA_FROM_RMEM"),
        NONE("no remote store event"),
        RN(0x4c01a, "PM_CMPLU_STALL_DMISS_L3MISS", "completion-stall cycles only"),
        NONE("no memory-pending cycle event"), TASK_CLOCK}},
};
#define N_TABLES (sizeof(TABLES) / sizeof(TABLES[0]))

const char *const pm_models[] = {"skx", "snb_ep", "icx", "spr", "zen2", "zen3",
                                 "zen4", "neoverse_v2", "power8", "power9", NULL};

static const model_table *find_table(const char *model)
{
    for (size_t i = 0; model && i < N_TABLES; i++)
        if (strcmp(TABLES[i].model, model) == 0)
            return &TABLES[i];
    return NULL;
}

const char *pm_model_pfm_pmu(const char *model)
{
    const model_table *t = find_table(model);
    return t ? t->pfm_pmu : NULL;
}

int pm_event_describe(const char *model, int feature, pm_event_desc *desc)
{
    const model_table *t = find_table(model);
    if (!t || feature < 0 || feature >= PM_N_CORE_FEATURES || !desc)
        return -EINVAL;
    *desc = t->ev[feature];
    desc->feature = pm_probe_names[feature];
    return 0;
}

static pthread_once_t pfm_once = PTHREAD_ONCE_INIT;
static int pfm_init_rc;

static void pfm_init(void) { pfm_init_rc = pfm_initialize(); }

int pm_pfm_ready(void)
{
    pthread_once(&pfm_once, pfm_init);
    return pfm_init_rc == PFM_SUCCESS ? 0 : -EOPNOTSUPP;
}

int pm_event_encode(const char *model, int feature, struct perf_event_attr *attr, char *pfm_str,
                    size_t pfm_str_len, char *msg, size_t msg_len)
{
    pm_event_desc d;
    if (!attr || pm_event_describe(model, feature, &d) != 0)
        return -EINVAL;
    if (d.source == PM_SRC_NONE)
        return -ENOENT;
    struct perf_event_attr a;
    memset(&a, 0, sizeof(a));
    a.size = sizeof(a);
    char full[256];
    full[0] = '\0';
    if (d.source == PM_SRC_SOFTWARE || d.source == PM_SRC_RAW) {
        a.type = d.source == PM_SRC_SOFTWARE ? PERF_TYPE_SOFTWARE : PERF_TYPE_RAW;
        a.config = d.raw_config;
        /* User level only, as libpfm's PFM_PLM3 gives the x86 events. */
        a.exclude_kernel = 1;
        a.exclude_hv = 1;
        snprintf(full, sizeof(full), "%s", d.event);
    } else {
        if (pm_pfm_ready() != 0) {
            pm_msg(msg, msg_len, "libpfm4 failed to initialise");
            return -EOPNOTSUPP;
        }
        snprintf(full, sizeof(full), "%s::%s", pm_model_pfm_pmu(model), d.event);
        pfm_perf_encode_arg_t arg;
        memset(&arg, 0, sizeof(arg));
        arg.size = sizeof(arg);
        arg.attr = &a;
        int rc = pfm_get_os_event_encoding(full, PFM_PLM3, PFM_OS_PERF_EVENT_EXT, &arg);
        if (rc != PFM_SUCCESS) {
            pm_msg(msg, msg_len, "%s: %s (is the PMU active? set LIBPFM_FORCE_PMU=%s or "
                   "LIBPFM_ENCODE_INACTIVE=1 to encode another model)", full, pfm_strerror(rc),
                   pm_model_pfm_pmu(model));
            return -EOPNOTSUPP;
        }
        a.size = sizeof(a);
        /* PFM_PLM3 already drops kernel counting; hv too, so every model's
         * attributes mean the same "user level only". */
        a.exclude_kernel = 1;
        a.exclude_hv = 1;
    }
    *attr = a;
    if (pfm_str && pfm_str_len)
        snprintf(pfm_str, pfm_str_len, "%s", full);
    return 0;
}

int pm_model_detect(const char **model)
{
    if (!model || pm_pfm_ready() != 0)
        return -ENODEV;
    /* Ask libpfm which of our x86 PMUs it found active on this CPU. */
    for (size_t i = 0; i < N_TABLES; i++) {
        if (!TABLES[i].pfm_pmu)
            continue;
        for (int p = 0; p < PFM_PMU_MAX; p++) {
            pfm_pmu_info_t info;
            memset(&info, 0, sizeof(info));
            info.size = sizeof(info);
            if (pfm_get_pmu_info((pfm_pmu_t)p, &info) != PFM_SUCCESS || !info.is_present)
                continue;
            if (info.name && strcmp(info.name, TABLES[i].pfm_pmu) == 0) {
                *model = TABLES[i].model;
                return 0;
            }
        }
    }
    return -ENODEV;
}

int pm_event_table_print(const char *model, int fd)
{
    if (!find_table(model))
        return -EINVAL;
    FILE *f = fdopen(dup(fd), "w");
    if (!f)
        return -EIO;
    fprintf(f, "feature\tsource\tevent\ttype\tconfig\tconfig1\tconfig2\tnote\n");
    static const char *const SRC[] = {"unavailable", "libpfm", "raw", "software"};
    for (int i = 0; i < PM_N_CORE_FEATURES; i++) {
        pm_event_desc d;
        pm_event_describe(model, i, &d);
        struct perf_event_attr a;
        char full[256], err[256];
        int rc = pm_event_encode(model, i, &a, full, sizeof(full), err, sizeof(err));
        if (rc == 0)
            fprintf(f, "%s\t%s\t%s\t%u\t0x%llx\t0x%llx\t0x%llx\t%s\n", d.feature, SRC[d.source], full,
                    a.type, (unsigned long long)a.config, (unsigned long long)a.config1,
                    (unsigned long long)a.config2, d.note ? d.note : "");
        else
            fprintf(f, "%s\t%s\t%s\t\t\t\t\t%s\n", d.feature, SRC[d.source], d.event ? d.event : "",
                    rc == -ENOENT ? (d.note ? d.note : "") : err);
    }
    return fclose(f) == 0 ? 0 : -EIO;
}
