/* Schedule JSON parsing and validation, including malformed inputs, and
 * which files pm_schedule_load_file reads. */
#define _GNU_SOURCE /* mkdtemp, mkfifo, ftruncate */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "internal.h"

static const char *parse_err(const char *json)
{
    static char err[512];
    err[0] = '\0';
    pm_schedule *s = NULL;
    int rc = pm_schedule_parse_json(json, strlen(json), &s, err, sizeof err);
    CHECK(rc == -EINVAL);
    CHECK(s == NULL);
    return err;
}

#define EXPECT_ERR(json, needle)                                                      \
    do {                                                                              \
        const char *e_ = parse_err(json);                                             \
        if (!strstr(e_, needle)) {                                                    \
            fprintf(stderr, "%s:%d: error \"%s\" lacks \"%s\"\n", __FILE__, __LINE__, e_, \
                    needle);                                                          \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

static void test_parse(void)
{
    const char *ok =
        " {\"schema_version\": 1, \"machine\": \"amd-milan-2s\\u00e9\", \"n_slices\": 4,"
        " \"kind\": \"sn-grouped\", \"node\": [0, 0, 1, 1], \"core\": [1, 2, 5, 6],"
        " \"provenance\": {\"generator\": \"grouped\", \"seed\": 7, \"x\": [1.5e3, -0.25, true,"
        " null, {\"y\": \"\\ud83d\\ude00\"}]}}\n";
    pm_schedule *s;
    char err[256];
    CHECK_EQ(pm_schedule_parse_json(ok, strlen(ok), &s, err, sizeof err), 0);
    CHECK_EQ(pm_schedule_kind_of(s), PM_KIND_SN_GROUPED);
    CHECK_EQ(pm_schedule_n_slices(s), 4);
    CHECK_EQ(pm_schedule_cores(s)[2], 5);
    CHECK_EQ(pm_schedule_nodes(s)[3], 1);
    CHECK(strcmp(pm_schedule_machine(s), "amd-milan-2s\xc3\xa9") == 0);
    pm_schedule_destroy(s);
    const char *no_prov = "{\"schema_version\":1,\"machine\":\"m\",\"n_slices\":1,\"kind\":"
                          "\"os-default\",\"node\":[-1],\"core\":[-1]}";
    CHECK_EQ(pm_schedule_parse_json(no_prov, strlen(no_prov), &s, err, sizeof err), 0);
    pm_schedule_destroy(s);

#define DOC(fields) "{\"schema_version\":1,\"machine\":\"m\"," fields "}"
    EXPECT_ERR("", "'[' or '{' expected near end of file");
    EXPECT_ERR("[]", "expected a JSON object");
    EXPECT_ERR(DOC("\"n_slices\":2,\"kind\":\"sn-numa\",\"node\":[0,0],\"core\":[-1,-1]") "x",
               "end of file expected near 'x'");
    EXPECT_ERR(DOC("\"n_slices\":2,\"kind\":\"sn-numa\",\"node\":[0,0]"), "core: missing required field");
    EXPECT_ERR(DOC("\"n_slices\":2,\"kind\":\"sn-foo\",\"node\":[0,0],\"core\":[-1,-1]"),
               "kind: unknown schedule kind \"sn-foo\"");
    EXPECT_ERR(DOC("\"n_slices\":3,\"kind\":\"sn-numa\",\"node\":[0,0],\"core\":[-1,-1,-1]"),
               "node: has 2 entries but n_slices is 3");
    EXPECT_ERR(DOC("\"n_slices\":3,\"kind\":\"sn-numa\",\"node\":[0,1.5,0],\"core\":[-1,-1,-1]"),
               "node: slice 1: expected an integer");
    EXPECT_ERR(DOC("\"n_slices\":1,\"kind\":\"sn-numa\",\"node\":[1e0],\"core\":[-1]"),
               "node: slice 0: expected an integer");
    EXPECT_ERR(DOC("\"n_slices\":3,\"kind\":\"sn-numa\",\"node\":[0,0,0],\"core\":[-1,-2,-1]"),
               "core: slice 1: -2 is out of range");
    EXPECT_ERR(DOC("\"n_slices\":1,\"kind\":\"sn-numa\",\"node\":[\"0\"],\"core\":[-1]"),
               "node: slice 0: expected an integer");
    EXPECT_ERR(DOC("\"n_slices\":1,\"kind\":\"sn-numa\",\"node\":[99999999999],\"core\":[-1]"),
               "node: slice 0: 99999999999 is out of range");
    EXPECT_ERR(DOC("\"n_slices\":1,\"kind\":\"sn-numa\",\"node\":[99999999999999999999],\"core\":[-1]"),
               "too big integer");
    EXPECT_ERR(DOC("\"n_slices\":1,\"kind\":\"sn-numa\",\"node\":[01],\"core\":[-1]"), "invalid token");
    EXPECT_ERR(DOC("\"n_slices\":0,\"kind\":\"sn-numa\",\"node\":[],\"core\":[]"),
               "n_slices: 0 is out of range");
    /* duplicated keys: rejected, the key named, at any depth */
    EXPECT_ERR(DOC("\"n_slices\":1,\"n_slices\":1"), "duplicate key \"n_slices\"");
    EXPECT_ERR(DOC("\"provenance\":{\"seed\":1,\"seed\":2}"), "duplicate key \"seed\"");
    EXPECT_ERR(DOC("\"slices\":1"), "unknown field \"slices\"");
    EXPECT_ERR("{\"schema_version\":3}", "schema_version: 3 is not supported");
    EXPECT_ERR("{\"machine\":\"a\nb\"}", "unexpected newline");
    EXPECT_ERR("{\"machine\":\"\\ud800x\"}", "invalid Unicode");
    EXPECT_ERR("{\"machine\":\"\\u0000\"}", "\\u0000 is not allowed");
    EXPECT_ERR("{\"machine\":\"\xff\"}", "unable to decode byte 0xff");
    EXPECT_ERR("{\"machine\":\"\\q\"}", "invalid escape");
    EXPECT_ERR("{\"machine\":\"abc", "premature end of input");
    EXPECT_ERR(DOC("\"n_slices\":1,\"kind\":\"sn-numa\",\"node\":[0,],\"core\":[-1]"),
               "unexpected token near ']' (line 1, column");
    EXPECT_ERR(DOC("\"n_slices\":1,\"kind\":\"sn-numa\",\"node\":[0],\"core\":[-1],"
                   "\"provenance\":[1]"),
               "provenance: expected an object");
    EXPECT_ERR(DOC("\"provenance\":{\"a\":01}"), "invalid token");
    EXPECT_ERR(DOC("\"provenance\":{\"a\":tru}"), "invalid token");
    /* nesting bomb is cut off, not a stack overflow */
    static char deep[4096] = "{\"provenance\":{\"a\":";
    for (int i = 0; i < 3000; i++) /* jansson stops at 2048 levels */
        strcat(deep, "[");
    EXPECT_ERR(deep, "maximum parsing depth reached");
    CHECK_EQ(pm_schedule_load_file("/nonexistent/s.json", &s, err, sizeof err), -ENOENT);
#undef DOC
}

static pm_schedule *parse_ok(const char *json)
{
    pm_schedule *s = NULL;
    char err[512] = "";
    int rc = pm_schedule_parse_json(json, strlen(json), &s, err, sizeof err);
    if (rc) {
        fprintf(stderr, "parse failed: %s\n", err);
        exit(1);
    }
    return s;
}

/* Schema version 2: widths, their defaults and every field rule. */
static void test_parse_v2(void)
{
    pm_schedule *s = parse_ok(
        "{\"schema_version\": 2, \"machine\": \"intel-skx-4s\", \"n_slices\": 4, \"kind\": \"learned\","
        " \"node\": [0, 0, 1, 1], \"core\": [8, 9, 40, -1], \"width\": [\"thread\", \"core\", \"l3\","
        " \"node\"], \"provenance\": {\"model\": \"pmoss-dt\", \"version\": \"3\"}}");
    const uint8_t want[4] = {PM_WIDTH_THREAD, PM_WIDTH_CORE, PM_WIDTH_L3, PM_WIDTH_NODE};
    CHECK(memcmp(pm_schedule_widths(s), want, 4) == 0);
    CHECK_EQ(pm_schedule_cores(s)[3], -1);
    pm_schedule_destroy(s);
    /* one string for every slice */
    s = parse_ok("{\"schema_version\":2,\"machine\":\"m\",\"n_slices\":2,\"kind\":\"sn-hot\","
                 "\"node\":[0,1],\"core\":[1,2],\"width\":\"l3\"}");
    CHECK(pm_schedule_widths(s)[0] == PM_WIDTH_L3 && pm_schedule_widths(s)[1] == PM_WIDTH_L3);
    pm_schedule_destroy(s);
    /* defaults when absent (and in version 1): thread, node for sn-numa,
     * none for shared kinds */
    struct { const char *kind; pm_width w; } defaults[] = {
        {"learned", PM_WIDTH_THREAD}, {"sn-random", PM_WIDTH_THREAD}, {"sn-numa", PM_WIDTH_NODE},
        {"se-numa", PM_WIDTH_NONE},   {"sn-hot", PM_WIDTH_THREAD},
    };
    for (int v = 1; v <= 2; v++) {
        for (size_t k = 0; k < sizeof defaults / sizeof *defaults; k++) {
            char doc[256];
            snprintf(doc, sizeof doc, "{\"schema_version\":%d,\"machine\":\"m\",\"n_slices\":1,"
                     "\"kind\":\"%s\",\"node\":[0],\"core\":[-1]}", v, defaults[k].kind);
            s = parse_ok(doc);
            CHECK_EQ(pm_schedule_widths(s)[0], defaults[k].w);
            pm_schedule_destroy(s);
            /* "width": null is the same as no width (pmoss before issue 40 wrote it) */
            snprintf(doc, sizeof doc, "{\"schema_version\":%d,\"machine\":\"m\",\"n_slices\":1,"
                     "\"kind\":\"%s\",\"node\":[0],\"core\":[-1],\"width\":null}", v,
                     defaults[k].kind);
            s = parse_ok(doc);
            CHECK_EQ(pm_schedule_widths(s)[0], defaults[k].w);
            pm_schedule_destroy(s);
        }
    }
#define DOC2(kind, width) "{\"schema_version\":2,\"machine\":\"m\",\"n_slices\":2,\"kind\":\"" kind \
                          "\",\"node\":[0,0],\"core\":[1,1],\"width\":" width "}"
    EXPECT_ERR(DOC2("learned", "[\"thread\",\"socket\"]"),
               "width: slice 1: unknown width \"socket\" (thread, core, l3 or node)");
    EXPECT_ERR(DOC2("learned", "\"none\""), "width: slice 0: unknown width \"none\"");
    EXPECT_ERR(DOC2("learned", "[\"thread\"]"), "width: has 1 entries but n_slices is 2");
    EXPECT_ERR(DOC2("learned", "[\"thread\",3]"), "width: slice 1: expected a string");
    EXPECT_ERR(DOC2("learned", "3"), "width: expected a string or an array of n_slices strings");
    EXPECT_ERR(DOC2("sn-grouped", "[\"thread\",\"core\"]"),
               "width: slice 1: core is not allowed for kind sn-grouped (allowed: thread)");
    EXPECT_ERR(DOC2("sn-numa", "\"thread\""),
               "width: slice 0: thread is not allowed for kind sn-numa (allowed: node)");
    EXPECT_ERR(DOC2("se-numa", "\"node\""), "width: kind se-numa takes no width");
    EXPECT_ERR("{\"schema_version\":1,\"machine\":\"m\",\"n_slices\":1,\"kind\":\"learned\","
               "\"node\":[0],\"core\":[1],\"width\":\"core\"}",
               "width: needs schema_version 2");
    EXPECT_ERR(DOC2("learned", "\"core\",\"width\":\"l3\""), "duplicate key \"width\"");
#undef DOC2
    pm_width w;
    for (int i = 0; i < PM_WIDTH_NONE; i++) {
        CHECK_EQ(pm_width_parse(pm_width_name((pm_width)i), &w), 0);
        CHECK_EQ(w, i);
    }
    CHECK_EQ(pm_width_parse("none", &w), -EINVAL);
    CHECK(pm_width_name(PM_WIDTH_COUNT) == NULL);
}

/* 2 nodes x 4 CPUs: node 0 = CPUs 0-3, node 1 = CPUs 4-7; CPU 0 and 4 are
 * routers, 1 and 5 sweepers, CPU 3 is absent. */
static void test_validate(void)
{
    int cpu_node[8] = {0, 0, 0, 0, 1, 1, 1, 1};
    unsigned char role[8] = {PM_CPU_ROUTER, PM_CPU_SWEEPER, PM_CPU_WORKER, PM_CPU_ABSENT,
                             PM_CPU_ROUTER, PM_CPU_SWEEPER, PM_CPU_WORKER, PM_CPU_WORKER};
    pm_topology topo = {2, 8, cpu_node, role, NULL, NULL, NULL};
    enum { N = 32 };
    int node[N], core[N];
    for (int i = 0; i < N; i++)
        node[i] = i < N / 2 ? 0 : 1, core[i] = i < N / 2 ? 2 : 6 + i % 2;
    pm_schedule *s;
    char err[256];
    CHECK_EQ(pm_schedule_create(PM_KIND_LEARNED, N, node, core, NULL, &s), 0);
    CHECK_EQ(pm_schedule_validate(s, N, &topo, err, sizeof err), 0);
    CHECK_EQ(pm_schedule_validate(s, N + 1, &topo, err, sizeof err), -EINVAL);
    CHECK(strcmp(err, "schedule has 32 slices but the runtime has 33") == 0);
    pm_schedule_destroy(s);

    struct { int slice, node, core; pm_schedule_kind kind; const char *msg; } cases[] = {
        {17, 0, 6, PM_KIND_SN_GROUPED, "slice 17: core 6 is on node 1 but the schedule says node 0"},
        {3, 0, 0, PM_KIND_SN_SPREAD, "slice 3: core 0 is reserved for a router"},
        {4, 1, 5, PM_KIND_SN_MIXED, "slice 4: core 5 is reserved for a sweeper"},
        {5, 0, 3, PM_KIND_SN_RANDOM, "slice 5: core 3 does not exist or is not usable"},
        {6, 0, 8, PM_KIND_LEARNED, "slice 6: core 8 does not exist or is not usable"},
        {7, 2, 2, PM_KIND_LEARNED, "slice 7: node 2 does not exist (the machine has 2 nodes)"},
        {8, -1, 2, PM_KIND_LEARNED, "slice 8: node -1 does not exist"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int n2[N], c2[N];
        memcpy(n2, node, sizeof n2);
        memcpy(c2, core, sizeof c2);
        n2[cases[c].slice] = cases[c].node;
        c2[cases[c].slice] = cases[c].core;
        c2[N - 1] = 0; /* a later bad slice must not be the one named */
        CHECK_EQ(pm_schedule_create(cases[c].kind, N, n2, c2, NULL, &s), 0);
        CHECK_EQ(pm_schedule_validate(s, N, &topo, err, sizeof err), -EINVAL);
        if (strncmp(err, cases[c].msg, strlen(cases[c].msg)) != 0) {
            fprintf(stderr, "got \"%s\", want \"%s\"\n", err, cases[c].msg);
            exit(1);
        }
        pm_schedule_destroy(s);
    }
    /* shared kinds: core must be -1, os-* node must be -1; sn-numa's anchor is checked */
    int minus[N], zero[N];
    for (int i = 0; i < N; i++)
        minus[i] = -1, zero[i] = 0;
    CHECK_EQ(pm_schedule_create(PM_KIND_SN_NUMA, N, zero, zero, NULL, &s), 0);
    CHECK_EQ(pm_schedule_validate(s, N, &topo, err, sizeof err), -EINVAL);
    CHECK(strcmp(err, "slice 0: core 0 is reserved for a router") == 0); /* an anchor, checked */
    pm_schedule_destroy(s);
    CHECK_EQ(pm_schedule_create(PM_KIND_OS_INTERLEAVE, N, zero, minus, NULL, &s), 0);
    CHECK_EQ(pm_schedule_validate(s, N, &topo, err, sizeof err), -EINVAL);
    CHECK(strcmp(err, "slice 0: node must be -1 for kind os-interleave, got 0") == 0);
    pm_schedule_destroy(s);
    CHECK_EQ(pm_schedule_create(PM_KIND_COUNT, N, zero, minus, NULL, &s), -EINVAL);
    pm_schedule_kind k;
    for (int i = 0; i < PM_KIND_COUNT; i++) {
        CHECK_EQ(pm_schedule_kind_parse(pm_schedule_kind_name((pm_schedule_kind)i), &k), 0);
        CHECK_EQ(k, i);
    }
    CHECK_EQ(pm_schedule_kind_parse("SN-GROUPED", &k), -EINVAL);
    CHECK_EQ(pm_schedule_kind_parse("sn-hot", &k), 0);
    CHECK_EQ(k, PM_KIND_SN_HOT);
    CHECK_EQ(pm_schedule_kind_parse("search", &k), 0); /* every kind Python writes */
    CHECK_EQ(pm_schedule_kind_widths(k), pm_schedule_kind_widths(PM_KIND_LEARNED));
    CHECK(!pm_schedule_kind_is_one_core(PM_KIND_LEARNED) && pm_schedule_kind_is_one_core(PM_KIND_SN_MIXED));
}

/* Groups against a topology: 3 nodes (node 2 has no CPU); node 0 = CPUs
 * 0-3 (router 0, sweeper 1, CPU 3 absent), node 1 = CPUs 4-7 (router 4,
 * sweeper 5); SMT pairs {2,3} and {6,7}; one L3 per node. */
static void test_validate_groups(void)
{
    int cpu_node[8] = {0, 0, 0, 0, 1, 1, 1, 1};
    unsigned char role[8] = {PM_CPU_ROUTER, PM_CPU_SWEEPER, PM_CPU_WORKER, PM_CPU_ABSENT,
                             PM_CPU_ROUTER, PM_CPU_SWEEPER, PM_CPU_WORKER, PM_CPU_WORKER};
    int cpu_core[8] = {0, 1, 2, 2, 4, 5, 6, 6}, cpu_l3[8] = {0, 0, 0, 0, 4, 4, 4, 4};
    pm_topology topo = {3, 8, cpu_node, role, cpu_core, cpu_l3, NULL};
    enum { N = 8 };
    /* a valid mixed-width learned schedule: each width once, overlapping */
    int node[N] = {0, 0, 0, 0, 1, 1, 1, 1}, core[N] = {2, 2, 2, -1, 6, 7, 7, 6};
    uint8_t width[N] = {PM_WIDTH_THREAD, PM_WIDTH_CORE, PM_WIDTH_L3, PM_WIDTH_NODE,
                        PM_WIDTH_THREAD, PM_WIDTH_CORE, PM_WIDTH_L3, PM_WIDTH_NODE};
    pm_schedule *s;
    char err[256];
    CHECK_EQ(pm_schedule_create_groups(PM_KIND_LEARNED, N, node, core, width, "m", &s), 0);
    CHECK_EQ(pm_schedule_validate(s, N, &topo, err, sizeof err), 0);
    pm_schedule_destroy(s);
    struct {
        int slice, node, core;
        uint8_t width;
        pm_schedule_kind kind;
        const char *msg;
    } cases[] = {
        /* a group can only mix nodes through an anchor on another node */
        {1, 0, 6, PM_WIDTH_CORE, PM_KIND_LEARNED, "slice 1: core 6 is on node 1 but the schedule says node 0"},
        {2, 0, 0, PM_WIDTH_L3, PM_KIND_SN_HOT, "slice 2: core 0 is reserved for a router"},
        {3, 0, 3, PM_WIDTH_CORE, PM_KIND_LEARNED, "slice 3: core 3 does not exist or is not usable"},
        {4, 1, 99, PM_WIDTH_NODE, PM_KIND_LEARNED, "slice 4: core 99 does not exist or is not usable"},
        {5, 1, -1, PM_WIDTH_L3, PM_KIND_LEARNED, "slice 5: core -1 needs width node (width l3 needs an anchor worker)"},
        /* an empty group: a node without workers */
        {6, 2, -1, PM_WIDTH_NODE, PM_KIND_SN_HOT, "slice 6: node 2 has no worker core (the group is empty)"},
        {1, 0, 2, PM_WIDTH_CORE, PM_KIND_SN_GROUPED, "slice 1: width core is not allowed for kind sn-grouped (allowed: thread)"},
        {0, 0, 2, PM_WIDTH_NONE, PM_KIND_LEARNED, "slice 0: width none is not allowed for kind learned (allowed: thread, core, l3, node)"},
        {4, 1, 5, PM_WIDTH_NODE, PM_KIND_SN_NUMA, "slice 0: width thread is not allowed for kind sn-numa (allowed: node)"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int n2[N], c2[N];
        uint8_t w2[N];
        memcpy(n2, node, sizeof n2);
        memcpy(c2, core, sizeof c2);
        memcpy(w2, width, sizeof w2);
        n2[cases[c].slice] = cases[c].node;
        c2[cases[c].slice] = cases[c].core;
        w2[cases[c].slice] = cases[c].width;
        c2[N - 1] = 0; /* a later bad slice must not be the one named */
        CHECK_EQ(pm_schedule_create_groups(cases[c].kind, N, n2, c2, w2, NULL, &s), 0);
        CHECK_EQ(pm_schedule_validate(s, N, &topo, err, sizeof err), -EINVAL);
        if (strncmp(err, cases[c].msg, strlen(cases[c].msg)) != 0) {
            fprintf(stderr, "case %zu: got \"%s\", want \"%s\"\n", c, err, cases[c].msg);
            exit(1);
        }
        pm_schedule_destroy(s);
    }
    /* sn-numa: width node, anchor optional (but a worker of the node) */
    int sn_core[N] = {-1, 2, -1, 2, 6, -1, 7, -1};
    CHECK_EQ(pm_schedule_create(PM_KIND_SN_NUMA, N, node, sn_core, NULL, &s), 0);
    CHECK_EQ(pm_schedule_validate(s, N, &topo, err, sizeof err), 0);
    pm_schedule_destroy(s);
    sn_core[5] = 4;
    CHECK_EQ(pm_schedule_create(PM_KIND_SN_NUMA, N, node, sn_core, NULL, &s), 0);
    CHECK_EQ(pm_schedule_validate(s, N, &topo, err, sizeof err), -EINVAL);
    CHECK(strcmp(err, "slice 5: core 4 is reserved for a router") == 0);
    pm_schedule_destroy(s);
    /* width values out of the enum are refused at create */
    width[3] = PM_WIDTH_COUNT;
    CHECK_EQ(pm_schedule_create_groups(PM_KIND_LEARNED, N, node, core, width, NULL, &s), -EINVAL);
    width[3] = PM_WIDTH_NODE;
    /* machine: refused when both names are known and differ; a schedule
     * naming no machine, or a host whose name is unknown, passes */
    const char *names[][2] = {{"host-a", "host-b"}, {"host-a", ""}, {NULL, "host-b"}, {"", "x"},
                              {"host-a", "host-a"}};
    for (int c = 0; c < 5; c++) {
        topo.machine = names[c][0];
        CHECK_EQ(pm_schedule_create_groups(PM_KIND_LEARNED, N, node, core, width, names[c][1], &s), 0);
        CHECK_EQ(pm_schedule_validate(s, N, &topo, err, sizeof err), c == 0 ? -EINVAL : 0);
        if (c == 0)
            CHECK(strcmp(err, "schedule is for machine \"host-b\" but this host is \"host-a\"") == 0);
        pm_schedule_destroy(s);
    }
}

/* Load path expecting rc; the message names the file and, for refusals, the
 * limit. */
static void expect_load(const char *path, int rc, const char *msg)
{
    pm_schedule *s = NULL;
    char err[512] = "";
    int got = pm_schedule_load_file(path, &s, err, sizeof err);
    if (got != rc || (msg && (strstr(err, msg) == NULL || strstr(err, path) != err))) {
        fprintf(stderr, "load %s: rc %d (expected %d), message \"%s\" (expected %s)\n", path,
                got, rc, err, msg ? msg : "-");
        exit(1);
    }
    if (rc == 0)
        pm_schedule_destroy(s);
    else
        CHECK(s == NULL);
}

/* Only regular files up to PM_SCHEDULE_FILE_MAX are read; a FIFO or a
 * device is refused at once (before #42 /dev/zero filled memory and a FIFO
 * blocked forever: the alarm turns a hang into a failure). */
static void test_load_file(void)
{
    char dir[] = "/tmp/pmoss-test-schedule-XXXXXX", path[128];
    CHECK(mkdtemp(dir) != NULL);
    alarm(10);
    /* a valid file, at the limit: padded with whitespace after the document */
    snprintf(path, sizeof path, "%s/ok.json", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fputs("{\"schema_version\":1,\"machine\":\"m\",\"n_slices\":1,\"kind\":\"os-default\","
          "\"node\":[-1],\"core\":[-1]}",
          f);
    CHECK(fclose(f) == 0);
    expect_load(path, 0, NULL);
    CHECK(truncate(path, PM_SCHEDULE_FILE_MAX) == 0); /* sparse: zero bytes after the JSON */
    expect_load(path, -EINVAL, "schedule JSON");     /* read whole, then refused as JSON */
    CHECK(truncate(path, (off_t)PM_SCHEDULE_FILE_MAX + 1) == 0);
    expect_load(path, -EFBIG, "larger than 64 MiB");
    unlink(path);
    snprintf(path, sizeof path, "%s/fifo", dir);
    CHECK(mkfifo(path, 0600) == 0);
    expect_load(path, -EINVAL, "not a regular file; a schedule is read only from a regular file "
                               "of at most 64 MiB");
    unlink(path);
    expect_load("/dev/zero", -EINVAL, "not a regular file");
    expect_load(dir, -EISDIR, "not a regular file");
    expect_load("/nonexistent/s.json", -ENOENT, "No such file");
    alarm(0);
    CHECK(rmdir(dir) == 0);
}

int main(void)
{
    test_load_file();
    test_parse();
    test_parse_v2();
    test_validate();
    test_validate_groups();
    printf("test_schedule: ok\n");
    return 0;
}
