/* Schedules: kinds, widths, construction, the strict JSON reader for the
 * schedule contract (docs/design.md §4.2, docs/contracts.md schema version 2; JSON
 * syntax through jansson) and validation against a machine topology. */
#define _GNU_SOURCE /* open flags, fstat */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define MACHINE_MAX 128
#define MAX_SLICES (1u << 20)

struct pm_schedule {
    pm_schedule_kind kind;
    unsigned n_slices;
    int *node;
    int *core;
    uint8_t *width; /* pm_width per slice */
    char machine[MACHINE_MAX];
};

static const char *const kind_names[PM_KIND_COUNT] = {
    "os-default", "os-interleave", "se-numa",   "sn-numa", "sn-grouped",
    "sn-spread",  "sn-mixed",      "sn-random", "learned", "sn-hot", "search", "sn-random-width",
};

static const char *const width_names[PM_WIDTH_COUNT] = {"thread", "core", "l3", "node", "none"};

#define W_BIT(w) (1u << (w))

const char *pm_schedule_kind_name(pm_schedule_kind kind)
{
    return (unsigned)kind < PM_KIND_COUNT ? kind_names[kind] : NULL;
}

int pm_schedule_kind_parse(const char *name, pm_schedule_kind *kind)
{
    for (unsigned i = 0; name && i < PM_KIND_COUNT; i++) {
        if (strcmp(name, kind_names[i]) == 0) {
            *kind = (pm_schedule_kind)i;
            return 0;
        }
    }
    return -EINVAL;
}

const char *pm_width_name(pm_width width)
{
    return (unsigned)width < PM_WIDTH_COUNT ? width_names[width] : NULL;
}

int pm_width_parse(const char *name, pm_width *width)
{
    /* "none" is not a name a schedule may write: shared kinds omit width */
    for (unsigned i = 0; name && i < PM_WIDTH_NONE; i++) {
        if (strcmp(name, width_names[i]) == 0) {
            *width = (pm_width)i;
            return 0;
        }
    }
    return -EINVAL;
}

unsigned pm_schedule_kind_widths(pm_schedule_kind kind)
{
    switch (kind) {
    case PM_KIND_OS_DEFAULT:
    case PM_KIND_OS_INTERLEAVE:
    case PM_KIND_SE_NUMA:
        return W_BIT(PM_WIDTH_NONE);
    case PM_KIND_SN_NUMA:
        return W_BIT(PM_WIDTH_NODE);
    case PM_KIND_SN_HOT:
    case PM_KIND_LEARNED:
    case PM_KIND_SEARCH:
    case PM_KIND_SN_RANDOM_WIDTH:
        return W_BIT(PM_WIDTH_THREAD) | W_BIT(PM_WIDTH_CORE) | W_BIT(PM_WIDTH_L3) |
               W_BIT(PM_WIDTH_NODE);
    default:
        return (unsigned)kind < PM_KIND_COUNT ? W_BIT(PM_WIDTH_THREAD) : 0;
    }
}

int pm_schedule_kind_is_one_core(pm_schedule_kind kind)
{
    return pm_schedule_kind_widths(kind) == W_BIT(PM_WIDTH_THREAD);
}

/* The width a slice gets when the schedule names none (schema version 1,
 * pm_schedule_create): thread, or the only width the kind allows. */
static pm_width default_width(pm_schedule_kind kind)
{
    unsigned allowed = pm_schedule_kind_widths(kind);
    return allowed & W_BIT(PM_WIDTH_THREAD) ? PM_WIDTH_THREAD
           : allowed == W_BIT(PM_WIDTH_NODE) ? PM_WIDTH_NODE
                                             : PM_WIDTH_NONE;
}

/* "thread, core, l3, node": the widths a kind allows, for messages. */
static const char *allowed_list(pm_schedule_kind kind, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (unsigned w = 0; w < PM_WIDTH_NONE; w++)
        if (pm_schedule_kind_widths(kind) & W_BIT(w))
            n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? ", " : "", width_names[w]);
    return n ? buf : "none: the kind takes no width";
}

int pm_schedule_create_groups(pm_schedule_kind kind, unsigned n_slices, const int *node,
                              const int *core, const uint8_t *width, const char *machine,
                              pm_schedule **out)
{
    if ((unsigned)kind >= PM_KIND_COUNT || n_slices == 0 || n_slices > MAX_SLICES || !node ||
        !core)
        return -EINVAL;
    for (unsigned i = 0; width && i < n_slices; i++)
        if (width[i] >= PM_WIDTH_COUNT)
            return -EINVAL;
    pm_schedule *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->node = malloc(n_slices * sizeof *s->node);
    s->core = malloc(n_slices * sizeof *s->core);
    s->width = malloc(n_slices * sizeof *s->width);
    if (!s->node || !s->core || !s->width) {
        pm_schedule_destroy(s);
        return -ENOMEM;
    }
    memcpy(s->node, node, n_slices * sizeof *node);
    memcpy(s->core, core, n_slices * sizeof *core);
    if (width)
        memcpy(s->width, width, n_slices * sizeof *width);
    else
        memset(s->width, default_width(kind), n_slices * sizeof *s->width);
    s->kind = kind;
    s->n_slices = n_slices;
    snprintf(s->machine, sizeof s->machine, "%s", machine ? machine : "");
    *out = s;
    return 0;
}

int pm_schedule_create(pm_schedule_kind kind, unsigned n_slices, const int *node,
                       const int *core, const char *machine, pm_schedule **out)
{
    return pm_schedule_create_groups(kind, n_slices, node, core, NULL, machine, out);
}

void pm_schedule_destroy(pm_schedule *s)
{
    if (!s)
        return;
    free(s->node);
    free(s->core);
    free(s->width);
    free(s);
}

pm_schedule_kind pm_schedule_kind_of(const pm_schedule *s) { return s->kind; }
unsigned pm_schedule_n_slices(const pm_schedule *s) { return s->n_slices; }
const int *pm_schedule_nodes(const pm_schedule *s) { return s->node; }
const int *pm_schedule_cores(const pm_schedule *s) { return s->core; }
const uint8_t *pm_schedule_widths(const pm_schedule *s) { return s->width; }
const char *pm_schedule_machine(const pm_schedule *s) { return s->machine; }

/* ---------------------------------------------------------------- JSON */

/* Field checks after jansson has parsed the syntax. Each failure writes
 * "<field>: <what>" (with "slice i" for array entries) to msg. */
#define BAD(...)                                       \
    do {                                               \
        snprintf(msg, msg_len, __VA_ARGS__);           \
        return -EINVAL;                                \
    } while (0)

enum { F_VERSION, F_MACHINE, F_N, F_KIND, F_NODE, F_CORE, F_WIDTH, F_PROV, F_COUNT };
static const char *const field_names[F_COUNT] = {
    "schema_version", "machine", "n_slices", "kind", "node", "core", "width", "provenance",
};

/* An array of n ints in [-1, INT_MAX] (node ids / CPU ids) into out[n]. */
static int read_int_array(const json_t *a, const char *field, size_t n, int *out, char *msg,
                          size_t msg_len)
{
    if (!a)
        BAD("%s: missing required field", field);
    if (!json_is_array(a))
        BAD("%s: expected an array", field);
    if (json_array_size(a) != n)
        BAD("%s: has %zu entries but n_slices is %zu", field, json_array_size(a), n);
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(a, i);
        if (!json_is_integer(v))
            BAD("%s: slice %zu: expected an integer", field, i);
        json_int_t x = json_integer_value(v);
        if (x < -1 || x > INT_MAX)
            BAD("%s: slice %zu: %lld is out of range [-1, %d]", field, i, (long long)x, INT_MAX);
        out[i] = (int)x;
    }
    return 0;
}

/* width: one string for every slice, or n strings. */
static int read_widths(const json_t *w, pm_schedule_kind kind, size_t n, uint8_t *out,
                       char *msg, size_t msg_len)
{
    char allowed[64];
    if (pm_schedule_kind_widths(kind) == W_BIT(PM_WIDTH_NONE))
        BAD("width: kind %s takes no width (its queries go to any worker)", kind_names[kind]);
    if (json_is_array(w) && json_array_size(w) != n)
        BAD("width: has %zu entries but n_slices is %zu", json_array_size(w), n);
    if (!json_is_array(w) && !json_is_string(w))
        BAD("width: expected a string or an array of n_slices strings");
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_is_array(w) ? json_array_get(w, i) : w;
        pm_width x;
        if (!json_is_string(v))
            BAD("width: slice %zu: expected a string", i);
        if (pm_width_parse(json_string_value(v), &x))
            BAD("width: slice %zu: unknown width \"%.40s\" (thread, core, l3 or node)", i,
                json_string_value(v));
        if (!(pm_schedule_kind_widths(kind) & W_BIT(x)))
            BAD("width: slice %zu: %s is not allowed for kind %s (allowed: %s)", i, width_names[x],
                kind_names[kind], allowed_list(kind, allowed, sizeof allowed));
        out[i] = (uint8_t)x;
    }
    return 0;
}

static int read_doc(const json_t *doc, pm_schedule **out, char *msg, size_t msg_len)
{
    if (!json_is_object(doc))
        BAD("expected a JSON object");
    const json_t *f[F_COUNT];
    for (int i = 0; i < F_COUNT; i++)
        f[i] = json_object_get(doc, field_names[i]);
    const char *key;
    const json_t *val;
    json_object_foreach ((json_t *)doc, key, val) {
        int i = 0;
        while (i < F_COUNT && strcmp(key, field_names[i]) != 0)
            i++;
        if (i == F_COUNT)
            BAD("unknown field \"%.40s\"", key);
    }
    /* fields are checked in contract order; width and provenance are optional */
#define NEED(i)                                                 \
    do {                                                        \
        if (!f[i])                                              \
            BAD("%s: missing required field", field_names[i]); \
    } while (0)
    NEED(F_VERSION);
    if (!json_is_integer(f[F_VERSION]))
        BAD("schema_version: expected an integer");
    json_int_t version = json_integer_value(f[F_VERSION]);
    if (version != 1 && version != 2)
        BAD("schema_version: %lld is not supported (expected 1 or 2)", (long long)version);
    NEED(F_MACHINE);
    if (!json_is_string(f[F_MACHINE]))
        BAD("machine: expected a string");
    if (json_string_length(f[F_MACHINE]) >= MACHINE_MAX)
        BAD("machine: longer than %d bytes", MACHINE_MAX - 1);
    NEED(F_N);
    if (!json_is_integer(f[F_N]))
        BAD("n_slices: expected an integer");
    json_int_t n = json_integer_value(f[F_N]);
    if (n < 1 || n > MAX_SLICES)
        BAD("n_slices: %lld is out of range [1, %u]", (long long)n, MAX_SLICES);
    pm_schedule_kind kind;
    NEED(F_KIND);
    if (!json_is_string(f[F_KIND]))
        BAD("kind: expected a string");
    if (pm_schedule_kind_parse(json_string_value(f[F_KIND]), &kind))
        BAD("kind: unknown schedule kind \"%.40s\"", json_string_value(f[F_KIND]));
#undef NEED
    /* width null reads as absent (the kind's own width): pmoss before issue 40
     * wrote it so, and the contract's writers now leave the field out */
    if (f[F_WIDTH] && json_is_null(f[F_WIDTH]))
        f[F_WIDTH] = NULL;
    if (f[F_WIDTH] && version < 2)
        BAD("width: needs schema_version 2");
    if (f[F_PROV] && !json_is_object(f[F_PROV]))
        BAD("provenance: expected an object");
    int *node = malloc((size_t)n * sizeof *node), *core = malloc((size_t)n * sizeof *core);
    uint8_t *width = malloc((size_t)n);
    int rc = node && core && width ? 0 : -ENOMEM;
    if (rc == 0)
        rc = read_int_array(f[F_NODE], "node", (size_t)n, node, msg, msg_len);
    if (rc == 0)
        rc = read_int_array(f[F_CORE], "core", (size_t)n, core, msg, msg_len);
    if (rc == 0 && f[F_WIDTH])
        rc = read_widths(f[F_WIDTH], kind, (size_t)n, width, msg, msg_len);
    if (rc == 0)
        rc = pm_schedule_create_groups(kind, (unsigned)n, node, core, f[F_WIDTH] ? width : NULL,
                                       json_string_value(f[F_MACHINE]), out);
    free(node);
    free(core);
    free(width);
    return rc;
}

/* jansson's syntax error as "<what> (line L, column C)"; a duplicated key
 * is named ("duplicate key \"a\""), wherever in the document it is. */
static void syntax_error(const json_error_t *je, char *msg, size_t msg_len)
{
    const char *near = strstr(je->text, " near '");
    if (json_error_code(je) == json_error_duplicate_key && near) {
        const char *k = near + 7;
        int klen = (int)strlen(k) - 1; /* drop the closing quote */
        snprintf(msg, msg_len, "duplicate key %.*s (line %d, column %d)", klen > 0 ? klen : 0, k,
                 je->line, je->column);
        return;
    }
    snprintf(msg, msg_len, "%s (line %d, column %d)", je->text, je->line, je->column);
}

int pm_schedule_parse_json(const char *text, size_t len, pm_schedule **out, char *err,
                           size_t err_len)
{
    char msg[300];
    json_error_t je;
    /* REJECT_DUPLICATES: jansson would otherwise keep the last value */
    json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    int rc;
    if (!doc) {
        rc = json_error_code(&je) == json_error_out_of_memory ? -ENOMEM : -EINVAL;
        syntax_error(&je, msg, sizeof msg);
    } else {
        rc = read_doc(doc, out, msg, sizeof msg);
        if (rc == -ENOMEM)
            snprintf(msg, sizeof msg, "out of memory");
        json_decref(doc);
    }
    if (rc)
        pm_errf(err, err_len, "schedule JSON: %s", msg);
    return rc;
}

/* Read all of fd (a regular file of st_size bytes when opened; it may have
 * grown since) into a malloc'ed buffer, refusing more than
 * PM_SCHEDULE_FILE_MAX bytes. Returns 0 with *buf / *len, or -errno. */
static int read_bounded(int fd, off_t st_size, char **buf, size_t *len)
{
    size_t cap = (size_t)st_size + 1, n = 0; /* + 1: to see EOF without a second pass */
    char *b = malloc(cap);
    for (;;) {
        if (!b)
            return -ENOMEM;
        if (n == cap) {
            if (cap > PM_SCHEDULE_FILE_MAX) {
                free(b);
                return -EFBIG;
            }
            cap = cap * 2 > (size_t)PM_SCHEDULE_FILE_MAX + 1 ? (size_t)PM_SCHEDULE_FILE_MAX + 1
                                                             : cap * 2;
            char *g = realloc(b, cap);
            if (!g)
                free(b);
            b = g;
            continue;
        }
        ssize_t r = read(fd, b + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            free(b);
            return -e;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    *buf = b;
    *len = n;
    return 0;
}

int pm_schedule_load_file(const char *path, pm_schedule **out, char *err, size_t err_len)
{
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
     * writer, forever; it is refused below without a read. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        pm_errf(err, err_len, "%s: %s", path, strerror(e));
        return -e;
    }
    const unsigned max_mib = PM_SCHEDULE_FILE_MAX >> 20;
    struct stat st;
    char *buf = NULL;
    size_t n = 0;
    int rc = fstat(fd, &st) == 0 ? 0 : -errno;
    if (rc == 0 && !S_ISREG(st.st_mode)) {
        /* a device, FIFO or socket may never end (/dev/zero) or never start */
        rc = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
        pm_errf(err, err_len,
                "%s: not a regular file; a schedule is read only from a regular file of at "
                "most %u MiB",
                path, max_mib);
    } else if (rc == 0) {
        rc = st.st_size > (off_t)PM_SCHEDULE_FILE_MAX ? -EFBIG
                                                      : read_bounded(fd, st.st_size, &buf, &n);
        if (rc == -EFBIG)
            pm_errf(err, err_len, "%s: larger than %u MiB, the most a schedule file may hold",
                    path, max_mib);
        else if (rc)
            pm_errf(err, err_len, "%s: %s", path, strerror(-rc));
    } else {
        pm_errf(err, err_len, "%s: %s", path, strerror(-rc));
    }
    close(fd);
    if (rc == 0) {
        char msg[300];
        rc = pm_schedule_parse_json(buf, n, out, msg, sizeof msg);
        if (rc)
            pm_errf(err, err_len, "%s: %s", path, msg);
    }
    free(buf);
    return rc;
}

/* ---------------------------------------------------------- validation */

static const char *role_name(unsigned char role)
{
    return role == PM_CPU_ROUTER ? "a router" : "a sweeper";
}

static bool node_has_worker(const pm_topology *topo, int node)
{
    for (int cpu = 0; cpu < topo->n_cpus; cpu++)
        if (topo->cpu_role[cpu] == PM_CPU_WORKER && topo->cpu_node[cpu] == node)
            return true;
    return false;
}

/* One slice against the topology: 0, or -EINVAL with "slice i: ..." in err. */
static int validate_slice(const pm_schedule *s, unsigned i, const pm_topology *topo, char *err,
                          size_t err_len)
{
    const char *kname = kind_names[s->kind];
    bool os_kind = s->kind == PM_KIND_OS_DEFAULT || s->kind == PM_KIND_OS_INTERLEAVE;
    int node = s->node[i], core = s->core[i];
    pm_width width = (pm_width)s->width[i];
    char allowed[64];
    if (os_kind && node != -1) {
        pm_errf(err, err_len, "slice %u: node must be -1 for kind %s, got %d", i, kname, node);
        return -EINVAL;
    }
    if (!os_kind && (node < 0 || node >= topo->n_nodes)) {
        pm_errf(err, err_len, "slice %u: node %d does not exist (the machine has %d nodes)", i,
                node, topo->n_nodes);
        return -EINVAL;
    }
    if (!(pm_schedule_kind_widths(s->kind) & W_BIT(width))) {
        pm_errf(err, err_len, "slice %u: width %s is not allowed for kind %s (allowed: %s)", i,
                width_names[width], kname, allowed_list(s->kind, allowed, sizeof allowed));
        return -EINVAL;
    }
    if (width == PM_WIDTH_NONE) { /* shared kinds: any worker, no anchor */
        if (core != -1) {
            pm_errf(err, err_len, "slice %u: core must be -1 for kind %s, got %d", i, kname, core);
            return -EINVAL;
        }
        return 0;
    }
    if (core == -1 && width != PM_WIDTH_NODE) {
        pm_errf(err, err_len, "slice %u: core -1 needs width node (width %s needs an anchor worker)",
                i, width_names[width]);
        return -EINVAL;
    }
    if (core == -1) {
        if (!node_has_worker(topo, node)) {
            pm_errf(err, err_len, "slice %u: node %d has no worker core (the group is empty)", i,
                    node);
            return -EINVAL;
        }
        return 0;
    }
    if (core < 0 || core >= topo->n_cpus || topo->cpu_role[core] == PM_CPU_ABSENT) {
        pm_errf(err, err_len, "slice %u: core %d does not exist or is not usable", i, core);
        return -EINVAL;
    }
    if (topo->cpu_role[core] != PM_CPU_WORKER) {
        pm_errf(err, err_len, "slice %u: core %d is reserved for %s", i, core,
                role_name(topo->cpu_role[core]));
        return -EINVAL;
    }
    if (topo->cpu_node[core] != node) {
        pm_errf(err, err_len, "slice %u: core %d is on node %d but the schedule says node %d", i,
                core, topo->cpu_node[core], node);
        return -EINVAL;
    }
    return 0;
}

int pm_schedule_validate(const pm_schedule *s, unsigned n_slices, const pm_topology *topo,
                         char *err, size_t err_len)
{
    if (s->n_slices != n_slices) {
        pm_errf(err, err_len, "schedule has %u slices but the runtime has %u", s->n_slices,
                n_slices);
        return -EINVAL;
    }
    /* core ids are one machine's own: a schedule for another one would pin
     * slices to CPUs that mean something else here */
    if (topo->machine && topo->machine[0] && s->machine[0] &&
        strcmp(topo->machine, s->machine) != 0) {
        pm_errf(err, err_len, "schedule is for machine \"%s\" but this host is \"%s\"",
                s->machine, topo->machine);
        return -EINVAL;
    }
    for (unsigned i = 0; i < s->n_slices; i++) {
        int rc = validate_slice(s, i, topo, err, err_len);
        if (rc)
            return rc;
    }
    return 0;
}
