/* Schedules: kinds, construction, the strict JSON reader for the DESIGN §4.2
 * contract, and validation against a machine topology. */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MACHINE_MAX 128
#define MAX_SLICES (1u << 20)
#define MAX_DEPTH 64

struct pm_schedule {
    pm_schedule_kind kind;
    unsigned n_slices;
    int *node;
    int *core;
    char machine[MACHINE_MAX];
};

static const char *const kind_names[PM_KIND_COUNT] = {
    "os-default", "os-interleave", "se-numa",   "sn-numa", "sn-grouped",
    "sn-spread",  "sn-mixed",      "sn-random", "learned",
};

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

int pm_schedule_kind_is_one_core(pm_schedule_kind kind)
{
    return kind >= PM_KIND_SN_GROUPED && kind < PM_KIND_COUNT;
}

int pm_schedule_create(pm_schedule_kind kind, unsigned n_slices, const int *node,
                       const int *core, const char *machine, pm_schedule **out)
{
    if ((unsigned)kind >= PM_KIND_COUNT || n_slices == 0 || n_slices > MAX_SLICES || !node ||
        !core)
        return -EINVAL;
    pm_schedule *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->node = malloc(n_slices * sizeof *s->node);
    s->core = malloc(n_slices * sizeof *s->core);
    if (!s->node || !s->core) {
        pm_schedule_destroy(s);
        return -ENOMEM;
    }
    memcpy(s->node, node, n_slices * sizeof *node);
    memcpy(s->core, core, n_slices * sizeof *core);
    s->kind = kind;
    s->n_slices = n_slices;
    snprintf(s->machine, sizeof s->machine, "%s", machine ? machine : "");
    *out = s;
    return 0;
}

void pm_schedule_destroy(pm_schedule *s)
{
    if (!s)
        return;
    free(s->node);
    free(s->core);
    free(s);
}

pm_schedule_kind pm_schedule_kind_of(const pm_schedule *s) { return s->kind; }
unsigned pm_schedule_n_slices(const pm_schedule *s) { return s->n_slices; }
const int *pm_schedule_nodes(const pm_schedule *s) { return s->node; }
const int *pm_schedule_cores(const pm_schedule *s) { return s->core; }
const char *pm_schedule_machine(const pm_schedule *s) { return s->machine; }

/* ---------------------------------------------------------------- JSON */

typedef struct cursor {
    const char *start, *p, *end;
    char *err;
    size_t err_len;
    bool failed;
} cursor;

#define FAIL(c, ...)                                                        \
    do {                                                                    \
        if (!(c)->failed) {                                                 \
            char msg_[256];                                                 \
            snprintf(msg_, sizeof msg_, __VA_ARGS__);                       \
            pm_errf((c)->err, (c)->err_len, "schedule JSON: %s (at byte %zu)", msg_, \
                    (size_t)((c)->p - (c)->start));                         \
            (c)->failed = true;                                             \
        }                                                                   \
        return -EINVAL;                                                     \
    } while (0)

static void skip_ws(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static bool eat(cursor *c, char ch)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

static int hex4(cursor *c, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++, c->p++) {
        if (c->p >= c->end)
            FAIL(c, "unterminated \\u escape");
        char h = *c->p;
        v <<= 4;
        if (h >= '0' && h <= '9')
            v |= (unsigned)(h - '0');
        else if (h >= 'a' && h <= 'f')
            v |= (unsigned)(h - 'a' + 10);
        else if (h >= 'A' && h <= 'F')
            v |= (unsigned)(h - 'A' + 10);
        else
            FAIL(c, "bad hex digit in \\u escape");
    }
    *out = v;
    return 0;
}

/* Append a code point as UTF-8 if it fits (longer strings are truncated:
 * only field names, kind and machine are kept, and those are short). */
static void put_utf8(char *out, size_t cap, size_t *n, unsigned cp)
{
    char b[4];
    size_t k;
    if (cp < 0x80) {
        b[0] = (char)cp, k = 1;
    } else if (cp < 0x800) {
        b[0] = (char)(0xC0 | (cp >> 6)), b[1] = (char)(0x80 | (cp & 0x3F)), k = 2;
    } else if (cp < 0x10000) {
        b[0] = (char)(0xE0 | (cp >> 12)), b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (char)(0x80 | (cp & 0x3F)), k = 3;
    } else {
        b[0] = (char)(0xF0 | (cp >> 18)), b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), b[3] = (char)(0x80 | (cp & 0x3F)), k = 4;
    }
    if (out && *n + k < cap) {
        memcpy(out + *n, b, k);
        *n += k;
    }
}

/* Parse a string into out (cap bytes incl. NUL; out may be NULL to skip).
 * *truncated is set when it did not fit. */
static int parse_string(cursor *c, char *out, size_t cap, bool *truncated)
{
    if (!eat(c, '"'))
        FAIL(c, "expected a string");
    size_t n = 0;
    bool trunc = false;
    for (;;) {
        if (c->p >= c->end)
            FAIL(c, "unterminated string");
        unsigned char ch = (unsigned char)*c->p++;
        unsigned cp;
        if (ch == '"')
            break;
        if (ch < 0x20)
            FAIL(c, "control character in string");
        if (ch != '\\') {
            if (out && n + 1 < cap)
                out[n++] = (char)ch;
            else
                trunc = true;
            continue;
        }
        if (c->p >= c->end)
            FAIL(c, "unterminated escape");
        char e = *c->p++;
        switch (e) {
        case '"': cp = '"'; break;
        case '\\': cp = '\\'; break;
        case '/': cp = '/'; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u':
            if (hex4(c, &cp))
                return -EINVAL;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                FAIL(c, "lone low surrogate in \\u escape");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (c->end - c->p < 2 || c->p[0] != '\\' || c->p[1] != 'u')
                    FAIL(c, "high surrogate without a low surrogate");
                c->p += 2;
                if (hex4(c, &lo))
                    return -EINVAL;
                if (lo < 0xDC00 || lo > 0xDFFF)
                    FAIL(c, "high surrogate without a low surrogate");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            break;
        default:
            FAIL(c, "bad escape \\%c", e);
        }
        size_t before = n;
        put_utf8(out, cap, &n, cp);
        if (n == before)
            trunc = true;
    }
    if (out)
        out[n] = '\0';
    if (truncated)
        *truncated = trunc;
    return 0;
}

/* A JSON integer (no fraction or exponent) within [lo, hi]. */
static int parse_int(cursor *c, long long lo, long long hi, long long *out, const char *what)
{
    skip_ws(c);
    const char *s = c->p;
    bool neg = c->p < c->end && *c->p == '-';
    if (neg)
        c->p++;
    if (c->p >= c->end || *c->p < '0' || *c->p > '9')
        FAIL(c, "%s: expected an integer", what);
    if (*c->p == '0' && c->p + 1 < c->end && c->p[1] >= '0' && c->p[1] <= '9')
        FAIL(c, "%s: leading zero in number", what);
    long long v = 0;
    bool overflow = false;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        int d = *c->p++ - '0';
        if (v > (LLONG_MAX - d) / 10)
            overflow = true;
        else
            v = v * 10 + d;
    }
    if (c->p < c->end && (*c->p == '.' || *c->p == 'e' || *c->p == 'E'))
        FAIL(c, "%s: expected an integer, got a fraction or exponent", what);
    if (neg)
        v = -v;
    if (overflow || v < lo || v > hi)
        FAIL(c, "%s: %.*s is out of range [%lld, %lld]", what, (int)(c->p - s > 24 ? 24 : c->p - s),
             s, lo, hi);
    *out = v;
    return 0;
}

static bool match_lit(cursor *c, const char *lit)
{
    size_t n = strlen(lit);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, lit, n) == 0) {
        c->p += n;
        return true;
    }
    return false;
}

/* Skip any JSON value (provenance content), depth-limited. */
static int skip_value(cursor *c, int depth)
{
    if (depth > MAX_DEPTH)
        FAIL(c, "provenance: nested deeper than %d levels", MAX_DEPTH);
    skip_ws(c);
    if (c->p >= c->end)
        FAIL(c, "provenance: unexpected end of input");
    char ch = *c->p;
    if (ch == '"')
        return parse_string(c, NULL, 0, NULL);
    if (ch == '{' || ch == '[') {
        char close = ch == '{' ? '}' : ']';
        c->p++;
        if (eat(c, close))
            return 0;
        do {
            if (ch == '{') {
                if (parse_string(c, NULL, 0, NULL) || !eat(c, ':'))
                    FAIL(c, "provenance: expected \"key\": value");
            }
            if (skip_value(c, depth + 1))
                return -EINVAL;
        } while (eat(c, ','));
        if (!eat(c, close))
            FAIL(c, "provenance: expected ',' or '%c'", close);
        return 0;
    }
    if (match_lit(c, "true") || match_lit(c, "false") || match_lit(c, "null"))
        return 0;
    /* number: sign, digits, optional fraction and exponent */
    if (c->p < c->end && *c->p == '-')
        c->p++;
    const char *d = c->p;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9')
        c->p++;
    if (c->p == d || (*d == '0' && c->p - d > 1))
        FAIL(c, "provenance: bad value");
    if (c->p < c->end && *c->p == '.') {
        d = ++c->p;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9')
            c->p++;
        if (c->p == d)
            FAIL(c, "provenance: bad number");
    }
    if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
        c->p++;
        if (c->p < c->end && (*c->p == '+' || *c->p == '-'))
            c->p++;
        d = c->p;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9')
            c->p++;
        if (c->p == d)
            FAIL(c, "provenance: bad number");
    }
    return 0;
}

/* An array of ints >= -1 (node ids / CPU ids); errors name the slice. */
static int parse_int_array(cursor *c, const char *field, int **out, unsigned *n_out)
{
    if (!eat(c, '['))
        FAIL(c, "%s: expected an array", field);
    size_t n = 0, cap = 256;
    int *a = malloc(cap * sizeof *a);
    if (!a)
        return -ENOMEM;
    if (!eat(c, ']')) {
        do {
            if (n == MAX_SLICES) {
                free(a);
                FAIL(c, "%s: more than %u entries", field, MAX_SLICES);
            }
            char what[64];
            snprintf(what, sizeof what, "%s: slice %zu", field, n);
            long long v;
            if (parse_int(c, -1, INT_MAX, &v, what)) {
                free(a);
                return -EINVAL;
            }
            if (n == cap) {
                int *b = realloc(a, 2 * cap * sizeof *a);
                if (!b) {
                    free(a);
                    return -ENOMEM;
                }
                a = b;
                cap *= 2;
            }
            a[n++] = (int)v;
        } while (eat(c, ','));
        if (!eat(c, ']')) {
            free(a);
            FAIL(c, "%s: expected ',' or ']'", field);
        }
    }
    *out = a;
    *n_out = (unsigned)n;
    return 0;
}

enum { F_VERSION, F_MACHINE, F_N, F_KIND, F_NODE, F_CORE, F_PROV, F_COUNT };
static const char *const field_names[F_COUNT] = {
    "schema_version", "machine", "n_slices", "kind", "node", "core", "provenance",
};

typedef struct parsed {
    long long n_slices;
    char machine[MACHINE_MAX];
    pm_schedule_kind kind;
    int *node, *core;
    unsigned n_node, n_core;
} parsed;

static int parse_field(cursor *c, int f, parsed *ps)
{
    long long v;
    char buf[64];
    bool trunc;
    switch (f) {
    case F_VERSION:
        if (parse_int(c, LLONG_MIN, LLONG_MAX, &v, "schema_version"))
            return -EINVAL;
        if (v != 1)
            FAIL(c, "schema_version: %lld is not supported (expected 1)", v);
        return 0;
    case F_MACHINE:
        if (parse_string(c, ps->machine, sizeof ps->machine, &trunc))
            return -EINVAL;
        if (trunc)
            FAIL(c, "machine: longer than %d bytes", MACHINE_MAX - 1);
        return 0;
    case F_N:
        return parse_int(c, 1, MAX_SLICES, &ps->n_slices, "n_slices");
    case F_KIND:
        if (parse_string(c, buf, sizeof buf, &trunc))
            return -EINVAL;
        if (trunc || pm_schedule_kind_parse(buf, &ps->kind))
            FAIL(c, "kind: unknown schedule kind \"%.40s\"", buf);
        return 0;
    case F_NODE:
        return parse_int_array(c, "node", &ps->node, &ps->n_node);
    case F_CORE:
        return parse_int_array(c, "core", &ps->core, &ps->n_core);
    default:
        skip_ws(c);
        if (c->p >= c->end || *c->p != '{')
            FAIL(c, "provenance: expected an object");
        return skip_value(c, 1);
    }
}

static int parse_doc(cursor *c, parsed *ps)
{
    bool seen[F_COUNT] = {false};
    if (!eat(c, '{'))
        FAIL(c, "expected a JSON object");
    if (!eat(c, '}')) {
        do {
            char key[32];
            bool trunc;
            if (parse_string(c, key, sizeof key, &trunc))
                return -EINVAL;
            int f = 0;
            while (f < F_COUNT && (trunc || strcmp(key, field_names[f]) != 0))
                f++;
            if (f == F_COUNT)
                FAIL(c, "unknown field \"%.31s\"", key);
            if (seen[f])
                FAIL(c, "%s: duplicate field", field_names[f]);
            seen[f] = true;
            if (!eat(c, ':'))
                FAIL(c, "%s: expected ':'", field_names[f]);
            int rc = parse_field(c, f, ps);
            if (rc)
                return rc;
        } while (eat(c, ','));
        if (!eat(c, '}'))
            FAIL(c, "expected ',' or '}'");
    }
    skip_ws(c);
    if (c->p != c->end)
        FAIL(c, "trailing bytes after the object");
    for (int f = 0; f < F_PROV; f++)
        if (!seen[f])
            FAIL(c, "%s: missing required field", field_names[f]);
    if (ps->n_node != ps->n_slices)
        FAIL(c, "node: has %u entries but n_slices is %lld", ps->n_node, ps->n_slices);
    if (ps->n_core != ps->n_slices)
        FAIL(c, "core: has %u entries but n_slices is %lld", ps->n_core, ps->n_slices);
    return 0;
}

int pm_schedule_parse_json(const char *text, size_t len, pm_schedule **out, char *err,
                           size_t err_len)
{
    cursor c = {text, text, text + len, err, err_len, false};
    parsed ps;
    memset(&ps, 0, sizeof ps);
    int rc = parse_doc(&c, &ps);
    if (rc == -ENOMEM)
        pm_errf(err, err_len, "schedule JSON: out of memory");
    if (rc == 0)
        rc = pm_schedule_create(ps.kind, (unsigned)ps.n_slices, ps.node, ps.core, ps.machine, out);
    free(ps.node);
    free(ps.core);
    return rc;
}

int pm_schedule_load_file(const char *path, pm_schedule **out, char *err, size_t err_len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        pm_errf(err, err_len, "%s: %s", path, strerror(e));
        return -e;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    int rc = 0;
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *b = realloc(buf, cap * 2);
        if (!b) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = b;
        cap *= 2;
    }
    if (!buf) {
        rc = -ENOMEM;
    } else if (ferror(f)) {
        rc = -EIO;
        pm_errf(err, err_len, "%s: read error", path);
    } else {
        char msg[300];
        rc = pm_schedule_parse_json(buf, n, out, msg, sizeof msg);
        if (rc)
            pm_errf(err, err_len, "%s: %s", path, msg);
    }
    free(buf);
    fclose(f);
    return rc;
}

/* ---------------------------------------------------------- validation */

static const char *role_name(unsigned char role)
{
    return role == PM_CPU_ROUTER ? "a router" : "a sweeper";
}

int pm_schedule_validate(const pm_schedule *s, unsigned n_slices, const pm_topology *topo,
                         char *err, size_t err_len)
{
    if (s->n_slices != n_slices) {
        pm_errf(err, err_len, "schedule has %u slices but the runtime has %u", s->n_slices,
                n_slices);
        return -EINVAL;
    }
    const char *kname = kind_names[s->kind];
    bool os_kind = s->kind == PM_KIND_OS_DEFAULT || s->kind == PM_KIND_OS_INTERLEAVE;
    bool one_core = pm_schedule_kind_is_one_core(s->kind);
    for (unsigned i = 0; i < s->n_slices; i++) {
        int node = s->node[i], core = s->core[i];
        if (os_kind && node != -1) {
            pm_errf(err, err_len, "slice %u: node must be -1 for kind %s, got %d", i, kname, node);
            return -EINVAL;
        }
        if (!os_kind && (node < 0 || node >= topo->n_nodes)) {
            pm_errf(err, err_len, "slice %u: node %d does not exist (the machine has %d nodes)", i,
                    node, topo->n_nodes);
            return -EINVAL;
        }
        if (!one_core && core != -1) {
            pm_errf(err, err_len, "slice %u: core must be -1 for kind %s, got %d", i, kname, core);
            return -EINVAL;
        }
        if (s->kind == PM_KIND_SN_NUMA) {
            bool any = false;
            for (int cpu = 0; cpu < topo->n_cpus && !any; cpu++)
                any = topo->cpu_role[cpu] == PM_CPU_WORKER && topo->cpu_node[cpu] == node;
            if (!any) {
                pm_errf(err, err_len, "slice %u: node %d has no worker core", i, node);
                return -EINVAL;
            }
        }
        if (!one_core)
            continue;
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
            pm_errf(err, err_len, "slice %u: core %d is on node %d but the schedule says node %d",
                    i, core, topo->cpu_node[core], node);
            return -EINVAL;
        }
    }
    return 0;
}
