/*
 * P-MOSS collector — public C API (PMU profiling for raw snapshots, docs/design.md §4.3).
 *
 * Parts:
 *   events   portable feature names -> real perf_event attributes per CPU
 *            model (libpfm4 tables for x86, built-in architected raw codes
 *            for Arm Neoverse V2 and IBM POWER8/9).
 *   probe    per-worker counting with perf_event_open groups, read at batch
 *            boundaries; backs the runtime's pm_probe_ops hook.
 *   ctab     per-slice counter table: sums probe deltas per slice, merges the
 *            tables of several workers, exports as Arrow.
 *   uncore   off-core sweeper: memory-controller and socket-link PMUs found
 *            under a sysfs root; backs the runtime's pm_uncore_ops hook.
 *   arrow    export through the Arrow C Data Interface.
 *
 * Conventions: functions return 0 or -errno; a failed call leaves its outputs
 * and objects unchanged; outputs go through trailing pointer parameters.
 * Where a call takes `char *msg, size_t msg_len`, a one-line human-readable
 * reason is written there on failure (NUL-terminated; msg may be NULL).
 * A value the host cannot measure is PM_VALUE_UNAVAILABLE in C and null in
 * every exported table — never 0.
 */
#ifndef PMOSS_COLLECTOR_H
#define PMOSS_COLLECTOR_H

#include <stddef.h>
#include <stdint.h>
#include <linux/perf_event.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- features */

/* The 15 portable core features, in snapshot order (pmoss.snapshot.CORE_FEATURES). */
#define PM_N_CORE_FEATURES 15
/* Software features the probe also counts (a prefix of SOFTWARE_FEATURES;
 * nodes_visited / keys_scanned are the runtime's own counts). */
#define PM_N_SW_FEATURES 2
/* What pm_probe_read writes: core features then software features. */
#define PM_PROBE_N_VALUES (PM_N_CORE_FEATURES + PM_N_SW_FEATURES)
/* Index of task_clock_ns in the feature list (always measurable). */
#define PM_FEATURE_TASK_CLOCK 14

/* Marks a value that was not measured. Chosen over 0 because 0 is a valid
 * count; consumers must treat it as null and never subtract it. */
#define PM_VALUE_UNAVAILABLE UINT64_MAX

/* Names of the PM_PROBE_N_VALUES values, NULL-terminated. Static storage. */
extern const char *const pm_probe_names[PM_PROBE_N_VALUES + 1];

/* Index of a feature name in pm_probe_names, or -ENOENT. Cannot fail otherwise. */
int pm_feature_index(const char *name);

/* ------------------------------------------------------------------ events */

/* Where a feature's encoding comes from on a model. */
typedef enum pm_event_source {
    PM_SRC_NONE = 0,     /* the model has no event for this feature: null */
    PM_SRC_LIBPFM = 1,   /* libpfm4 event string, encoded at run time */
    PM_SRC_RAW = 2,      /* architected raw code (PERF_TYPE_RAW, config) */
    PM_SRC_SOFTWARE = 3  /* a kernel software event (PERF_TYPE_SOFTWARE) */
} pm_event_source;

/* One feature on one model. All strings are static. */
typedef struct pm_event_desc {
    const char *feature;    /* portable name */
    pm_event_source source;
    const char *event;      /* libpfm string, vendor event name, or NULL */
    uint64_t raw_config;    /* PM_SRC_RAW / PM_SRC_SOFTWARE: perf config */
    const char *note;       /* how it departs from the portable meaning, or NULL */
} pm_event_desc;

/* Model keys, NULL-terminated: "skx", "snb_ep", "icx", "spr", "zen2", "zen3",
 * "zen4", "neoverse_v2", "power8", "power9". Static storage. */
extern const char *const pm_models[];

/* The libpfm4 PMU name of a model ("amd64_fam19h_zen3" for "zen3"), or NULL
 * for models whose table is built in (Arm, POWER) or unknown models. */
const char *pm_model_pfm_pmu(const char *model);

/* Describe feature (0 <= feature < PM_N_CORE_FEATURES) on model.
 * Returns 0, -EINVAL (unknown model or feature index). A feature the model
 * lacks returns 0 with desc->source == PM_SRC_NONE. Thread-safe. */
int pm_event_describe(const char *model, int feature, pm_event_desc *desc);

/* Encode feature on model into *attr (zeroed first; size, type, config,
 * config1, config2 and exclude_* set; counts user level only, which is what
 * perf_event_paranoid=2 allows). libpfm events need the model's PMU active in
 * libpfm (the host's own, or LIBPFM_FORCE_PMU / LIBPFM_ENCODE_INACTIVE=1).
 * If pfm_str is not NULL the fully qualified libpfm string is copied there.
 * Returns 0, -EINVAL (unknown model/feature), -ENOENT (the model lacks the
 * feature: it is null), -EOPNOTSUPP (libpfm cannot encode it on this host;
 * message in msg). Thread-safe (libpfm is initialised once). */
int pm_event_encode(const char *model, int feature, struct perf_event_attr *attr,
                    char *pfm_str, size_t pfm_str_len, char *msg, size_t msg_len);

/* The model of this host from libpfm's default PMU (honours
 * LIBPFM_FORCE_PMU). Writes a static model key to *model. Returns 0 or
 * -ENODEV (libpfm4 does not know this CPU). Only what CPUID says: the kernel
 * may still have no PMU for it (a VM) — pm_host_pmu_facts tells both. */
int pm_model_detect(const char **model);

/* What this host lets the collector count, as two separate facts: libpfm4
 * knowing the CPU does not mean the kernel has its PMU (a KVM guest with no
 * virtual PMU: CPUID says Zen 3, /sys/bus/event_source/devices has no `cpu`,
 * every hardware perf_event_open fails). Hardware counting needs both. */
typedef struct pm_host_pmu {
    const char *model;   /* pm_model_detect's key (static), NULL: libpfm4 does not know the CPU */
    int hardware_events; /* 1: perf_event_open(cycles, user level) opened for the calling thread */
    int hardware_errno;  /* 0, or the errno of that open (ENOENT: the kernel has no hardware PMU) */
    int software_events; /* 1: perf_event_open(task-clock, user level) opened for the calling thread */
    int software_errno;  /* 0, or the errno of that open (EACCES: perf_event_paranoid 3, EPERM: seccomp) */
    char reason[256];    /* one line for users, e.g. "libpfm4 model zen3; kernel has no hardware
                          * PMU: perf_event_open(cycles) = ENOENT" */
} pm_host_pmu;

/* Fill *out with the facts of this host for the calling thread: pm_model_detect,
 * then one user-level PERF_COUNT_HW_CPU_CYCLES and one task-clock event opened
 * (pid 0, cpu -1) and closed again. pm_probe_open's AUTO mode counts hardware
 * exactly when model != NULL and hardware_events == 1. Thread-safe; costs a few
 * system calls (not for a per-query path). Returns 0 or -EINVAL (out NULL). */
int pm_host_pmu_facts(pm_host_pmu *out);

/* Print the mapping table of model as TSV (feature, source, event, type,
 * config, config1, config2, note) to fd. Unavailable features print
 * "unavailable". Returns 0, -EINVAL (unknown model) or -EIO. */
int pm_event_table_print(const char *model, int fd);

/* ------------------------------------------------------------------- probe */

typedef enum pm_counter_mode {
    PM_MODE_AUTO = 0,     /* hardware when the PMU opens, else software */
    PM_MODE_HARDWARE = 1, /* hardware counters required (open fails without) */
    PM_MODE_SOFTWARE = 2  /* software events only; hardware features null */
} pm_counter_mode;

/* The ctx handed to pm_probe_open (through pm_runtime_config.probe_ctx).
 * NULL ctx means { PM_MODE_AUTO, NULL, 0, 0 }. Must outlive the probes. */
typedef struct pm_probe_config {
    pm_counter_mode mode;
    const char *model;    /* model key; NULL detects the host's */
    int disable_rdpmc;    /* 1: always read(); for overhead comparisons */
    /* 1: in hardware mode open no software group: task_clock_ns is then the
     * hardware groups' time_enabled (per thread it advances only while the
     * thread runs: its CPU time), page_faults and context_switches are null,
     * and a reading needs no system call where the kernel allows rdpmc and
     * user time (cap_user_rdpmc, cap_user_time). No effect in software mode. */
    int hardware_only;
} pm_probe_config;

/* Open the counters of the calling thread (pid 0, any CPU: they follow the
 * thread, and per-thread counting is what perf_event_paranoid=2 permits).
 * Call it on the worker thread after pinning. worker_cpu is only checked
 * (>= -1). AUTO and HARDWARE first take pm_host_pmu_facts: hardware needs a
 * model libpfm4 knows AND a hardware event that opens; otherwise AUTO counts
 * software (the reason kept for pm_probe_counter_mode_reason) and HARDWARE
 * fails (-ENODEV: no model; else the errno of the cycles open). Hardware features go into groups of at most 4 events (one
 * off-core-response event per group) that the kernel multiplexes; the probe
 * scales each read window by time_enabled/time_running. The caller owns
 * *state (pm_probe_close). Returns 0, -EINVAL, -ENOMEM, in hardware mode
 * the -errno of perf_event_open (-ENOENT when the host has no PMU), and in
 * any mode -EACCES/-EPERM when the kernel refuses even software events
 * (perf_event_paranoid 3 without CAP_PERFMON, a seccomp filter). */
int pm_probe_open(void *ctx, int worker_cpu, void **state);

/* Write PM_PROBE_N_VALUES cumulative values (counts; task_clock_ns in ns)
 * into values: the running sum of multiplex-scaled read windows, so the
 * caller's delta between two reads is that window's estimate. Unmeasured
 * values are PM_VALUE_UNAVAILABLE. Uses rdpmc through the perf mmap page when
 * the kernel allows it (cap_user_rdpmc), read() otherwise. Only the thread
 * that opened state may call it. Cannot fail. */
void pm_probe_read(void *state, uint64_t *values);

/* Close the counters and free state (NULL accepted). Cannot fail. */
void pm_probe_close(void *state);

/* "hardware" or "software": the snapshot's counter_mode. Static string. */
const char *pm_probe_counter_mode(const void *state);

/* Why the probe counts in its mode, one line owned by state (valid until
 * pm_probe_close): "software mode requested", pm_host_pmu.reason when AUTO
 * found no usable PMU, or what opened in hardware mode. "" for NULL state. */
const char *pm_probe_counter_mode_reason(const void *state);

/* The model whose events the probe counts, or NULL in software mode. */
const char *pm_probe_model(const void *state);

/* How many reads used rdpmc and how many used read(); for the overhead
 * benchmark and tests. Cannot fail. */
void pm_probe_read_paths(const void *state, uint64_t *rdpmc_reads, uint64_t *syscall_reads);

/* -------------------------------------------------------- counter table */

/* Per-slice sums of probe deltas (slice x value), one per worker; not
 * thread-safe (one owner), merge after the workers stop. */
typedef struct pm_ctab pm_ctab;

/* Create a table for n_slices x n_values (names: n_values static strings,
 * e.g. pm_probe_names). Caller owns *out (pm_ctab_destroy).
 * Returns 0, -EINVAL or -ENOMEM. */
int pm_ctab_create(unsigned n_slices, unsigned n_values, const char *const *names, pm_ctab **out);
void pm_ctab_destroy(pm_ctab *t);

/* Add one batch window of slice: values after - before (PM_VALUE_UNAVAILABLE
 * at either end leaves that cell untouched), and queries completed.
 * Returns 0 or -EINVAL (slice out of range). */
int pm_ctab_add_window(pm_ctab *t, unsigned slice, const uint64_t *before, const uint64_t *after,
                       uint64_t queries);

/* Add every cell of src into dst (same shape). A cell is null only when no
 * window of any merged table measured it. Returns 0 or -EINVAL. */
int pm_ctab_merge(pm_ctab *dst, const pm_ctab *src);

/* Read one cell: 0 and *value, or -ENODATA (null), -EINVAL. */
int pm_ctab_get(const pm_ctab *t, unsigned slice, unsigned value_index, double *value);

/* -------------------------------------------------------------- uncore */

/* Off-core features (docs/design.md §4.3 meta), per node or per link. imc_total_bytes
 * is for PMUs that cannot split reads from writes (AMD DF, Arm CMN). */
typedef enum pm_offcore_feature {
    PM_OFF_IMC_READ = 0,
    PM_OFF_IMC_WRITE = 1,
    PM_OFF_LINK_IN = 2,
    PM_OFF_LINK_OUT = 3,
    PM_OFF_IMC_TOTAL = 4,
    PM_N_OFFCORE = 5
} pm_offcore_feature;
extern const char *const pm_offcore_names[PM_N_OFFCORE];

typedef struct pm_uncore pm_uncore;

/* One discovered uncore event (a PMU instance x feature). */
typedef struct pm_uncore_event {
    char pmu[64];               /* sysfs device name, e.g. "uncore_imc_3" */
    pm_offcore_feature feature;
    int scope_index;            /* node id (imc) or link index (link) */
    int cpu;                    /* CPU to open it on (first of cpumask) */
    struct perf_event_attr attr;
    double bytes_per_count;     /* 64 for a CAS, 64/9 for a UPI data flit */
    char spec[256];             /* the event spec resolved ("event=0x4,umask=0x3") */
} pm_uncore_event;

/* sizeof(struct perf_event_attr) and sizeof(pm_uncore_event) in this build,
 * so FFI callers (pmoss.collector) can check their struct layouts. */
extern const size_t pm_perf_attr_size;
extern const size_t pm_uncore_event_size;

/* Discover uncore PMUs under sysfs_root (NULL = "/sys"): reads
 * bus/event_source/devices/<pmu>/{type, cpumask, events/, format/} and
 * devices/system/node/node<N>/cpulist. Intel uncore_imc_* (cas_count_read /
 * cas_count_write), uncore_upi_* / uncore_qpi_* links, AMD amd_df / amd_umc_*,
 * Arm arm_cmn_*. Finding none is not an error (pm_uncore_n_events == 0).
 * Caller owns *out (pm_uncore_destroy). Returns 0, -ENOMEM, or -EINVAL (a
 * PMU's sysfs files are malformed; msg names the file). */
int pm_uncore_discover(const char *sysfs_root, pm_uncore **out, char *msg, size_t msg_len);
void pm_uncore_destroy(pm_uncore *u);
unsigned pm_uncore_n_events(const pm_uncore *u);
const pm_uncore_event *pm_uncore_event_at(const pm_uncore *u, unsigned i);
/* Highest node id / link index seen + 1 (sizes of the per-node/link lists). */
unsigned pm_uncore_n_nodes(const pm_uncore *u);
unsigned pm_uncore_n_links(const pm_uncore *u);

/* Open every discovered event system-wide on its CPU. Needs
 * perf_event_paranoid <= 0 or CAP_PERFMON; when refused, returns -EACCES
 * with ONE message in msg naming both, and nothing stays open. Other errors:
 * -errno of perf_event_open (msg names the PMU). Call once; the sweeper
 * thread then reads. */
int pm_uncore_open(pm_uncore *u, char *msg, size_t msg_len);

/* Read cumulative bytes per feature into values[PM_N_OFFCORE][cap] (row-major,
 * cap >= max(n_nodes, n_links)), summed over PMU instances of a node/link and
 * multiplex-scaled; entries nothing measured are NAN (null). Returns 0,
 * -EINVAL (not opened, cap too small) or -EIO. Only the opener's thread. */
int pm_uncore_read(pm_uncore *u, double *values, unsigned cap);

/* The ctx of pm_collector_uncore_ops (the runtime's off-core hook, defined
 * in libpmoss): where to discover uncore PMUs. NULL ctx = {"/sys"}. The
 * hook's open = pm_uncore_discover + pm_uncore_open (absent PMUs: 0 nodes,
 * 0 links, not an error; refused: -EACCES and the one permission message),
 * read = pm_uncore_read (values in the layout above, n_values =
 * PM_N_OFFCORE, names = pm_offcore_names), close = pm_uncore_destroy. */
typedef struct pm_uncore_config {
    const char *sysfs_root; /* NULL = "/sys"; tests pass fake trees */
} pm_uncore_config;

/* --------------------------------------------------------------- arrow */

struct ArrowSchema;
struct ArrowArray;

/* Export t as one Arrow record batch (struct array + schema): columns
 * slice (int32), core (int32), node (int32), queries (int64), then one
 * nullable float64 column per value of t. core/node: n_slices entries or
 * NULL (-1 everywhere). The caller owns both outputs and must call their
 * release callbacks (pyarrow's importer does). Returns 0, -EINVAL, -ENOMEM. */
int pm_ctab_export_arrow(const pm_ctab *t, const int32_t *core, const int32_t *node,
                         struct ArrowArray *out_array, struct ArrowSchema *out_schema);

/* Export off-core readings as a record batch with one row per node then one
 * per link: scope (utf8 "node"|"link"), index (int32), and one nullable
 * float64 column per pm_offcore_names entry. values is the layout
 * pm_uncore_read writes (NAN = null). Returns 0, -EINVAL, -ENOMEM. */
int pm_offcore_export_arrow(const double *values, unsigned cap, unsigned n_nodes, unsigned n_links,
                            struct ArrowArray *out_array, struct ArrowSchema *out_schema);

#ifdef __cplusplus
}
#endif
#endif /* PMOSS_COLLECTOR_H */
