/* Schedule JSON parsing and validation, including malformed inputs. */
#include <errno.h>
#include <string.h>

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
    EXPECT_ERR("", "expected a JSON object");
    EXPECT_ERR("[]", "expected a JSON object");
    EXPECT_ERR(DOC("\"n_slices\":2,\"kind\":\"sn-numa\",\"node\":[0,0],\"core\":[-1,-1]") "x",
               "trailing bytes");
    EXPECT_ERR(DOC("\"n_slices\":2,\"kind\":\"sn-numa\",\"node\":[0,0]"), "core: missing required field");
    EXPECT_ERR(DOC("\"n_slices\":2,\"kind\":\"sn-foo\",\"node\":[0,0],\"core\":[-1,-1]"),
               "kind: unknown schedule kind \"sn-foo\"");
    EXPECT_ERR(DOC("\"n_slices\":3,\"kind\":\"sn-numa\",\"node\":[0,0],\"core\":[-1,-1,-1]"),
               "node: has 2 entries but n_slices is 3");
    EXPECT_ERR(DOC("\"n_slices\":3,\"kind\":\"sn-numa\",\"node\":[0,1.5,0],\"core\":[-1,-1,-1]"),
               "node: slice 1: expected an integer");
    EXPECT_ERR(DOC("\"n_slices\":3,\"kind\":\"sn-numa\",\"node\":[0,0,0],\"core\":[-1,-2,-1]"),
               "core: slice 1: -2 is out of range");
    EXPECT_ERR(DOC("\"n_slices\":1,\"kind\":\"sn-numa\",\"node\":[\"0\"],\"core\":[-1]"),
               "node: slice 0: expected an integer");
    EXPECT_ERR(DOC("\"n_slices\":1,\"kind\":\"sn-numa\",\"node\":[99999999999],\"core\":[-1]"),
               "node: slice 0: 99999999999 is out of range");
    EXPECT_ERR(DOC("\"n_slices\":1,\"kind\":\"sn-numa\",\"node\":[01],\"core\":[-1]"), "leading zero");
    EXPECT_ERR(DOC("\"n_slices\":0,\"kind\":\"sn-numa\",\"node\":[],\"core\":[]"),
               "n_slices: 0 is out of range");
    EXPECT_ERR(DOC("\"n_slices\":1,\"n_slices\":1"), "n_slices: duplicate field");
    EXPECT_ERR(DOC("\"slices\":1"), "unknown field \"slices\"");
    EXPECT_ERR("{\"schema_version\":2}", "schema_version: 2 is not supported");
    EXPECT_ERR("{\"machine\":\"a\nb\"}", "control character");
    EXPECT_ERR("{\"machine\":\"\\ud800x\"}", "surrogate");
    EXPECT_ERR("{\"machine\":\"\\q\"}", "bad escape");
    EXPECT_ERR("{\"machine\":\"abc", "unterminated string");
    EXPECT_ERR(DOC("\"n_slices\":1,\"kind\":\"sn-numa\",\"node\":[0,],\"core\":[-1]"),
               "node: slice 1: expected an integer");
    EXPECT_ERR(DOC("\"provenance\":[1]"), "provenance: expected an object");
    EXPECT_ERR(DOC("\"provenance\":{\"a\":01}"), "provenance: bad value");
    EXPECT_ERR(DOC("\"provenance\":{\"a\":tru}"), "provenance: bad value");
    /* nesting bomb is cut off, not a stack overflow */
    char deep[4096] = "{\"provenance\":{\"a\":";
    for (int i = 0; i < 1000; i++)
        strcat(deep, "[");
    EXPECT_ERR(deep, "nested deeper");
    CHECK_EQ(pm_schedule_load_file("/nonexistent/s.json", &s, err, sizeof err), -ENOENT);
#undef DOC
}

/* 2 nodes x 4 CPUs: node 0 = CPUs 0-3, node 1 = CPUs 4-7; CPU 0 and 4 are
 * routers, 1 and 5 sweepers, CPU 3 is absent. */
static void test_validate(void)
{
    int cpu_node[8] = {0, 0, 0, 0, 1, 1, 1, 1};
    unsigned char role[8] = {PM_CPU_ROUTER, PM_CPU_SWEEPER, PM_CPU_WORKER, PM_CPU_ABSENT,
                             PM_CPU_ROUTER, PM_CPU_SWEEPER, PM_CPU_WORKER, PM_CPU_WORKER};
    pm_topology topo = {2, 8, cpu_node, role};
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
    /* shared kinds: core must be -1, os-* node must be -1 */
    int minus[N], zero[N];
    for (int i = 0; i < N; i++)
        minus[i] = -1, zero[i] = 0;
    CHECK_EQ(pm_schedule_create(PM_KIND_SN_NUMA, N, zero, zero, NULL, &s), 0);
    CHECK_EQ(pm_schedule_validate(s, N, &topo, err, sizeof err), -EINVAL);
    CHECK(strcmp(err, "slice 0: core must be -1 for kind sn-numa, got 0") == 0);
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
}

int main(void)
{
    test_parse();
    test_validate();
    printf("test_schedule: ok\n");
    return 0;
}
