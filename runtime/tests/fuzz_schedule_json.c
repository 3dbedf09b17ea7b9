/* libFuzzer target: the schedule JSON reader (jansson + the contract's field
 * rules) must never crash, leak or read out of bounds, and whatever it
 * accepts must validate without crashing — widths and anchors included —
 * against a topology with SMT pairs, an L3 domain per node, reserved CPUs
 * and a machine name. */
#include <stdint.h>
#include <stdlib.h>

#include "internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pm_schedule *s = NULL;
    char err[256];
    if (pm_schedule_parse_json((const char *)data, size, &s, err, sizeof err) != 0)
        return 0;
    int cpu_node[6] = {0, 0, 0, 1, 1, 1};
    unsigned char role[6] = {PM_CPU_ROUTER, PM_CPU_WORKER, PM_CPU_WORKER,
                             PM_CPU_WORKER, PM_CPU_WORKER, PM_CPU_SWEEPER};
    int cpu_core[6] = {0, 1, 1, 3, 3, 5}, cpu_l3[6] = {0, 0, 0, 3, 3, 3};
    pm_topology topo = {2, 6, cpu_node, role, cpu_core, cpu_l3, "m"};
    if (pm_schedule_validate(s, pm_schedule_n_slices(s), &topo, err, sizeof err) == 0) {
        /* what validates has a non-empty group on its node */
        const int *node = pm_schedule_nodes(s), *core = pm_schedule_cores(s);
        for (unsigned i = 0; i < pm_schedule_n_slices(s); i++)
            if (core[i] >= 0 && cpu_node[core[i]] != node[i])
                abort();
    }
    pm_schedule_destroy(s);
    return 0;
}
