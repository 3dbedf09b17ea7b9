/* libFuzzer target: the schedule JSON reader must never crash, leak or read
 * out of bounds, and whatever it accepts must validate without crashing. */
#include <stdint.h>
#include <stdlib.h>

#include "internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pm_schedule *s = NULL;
    char err[256];
    if (pm_schedule_parse_json((const char *)data, size, &s, err, sizeof err) != 0)
        return 0;
    int cpu_node[4] = {0, 0, 1, 1};
    unsigned char role[4] = {PM_CPU_ROUTER, PM_CPU_WORKER, PM_CPU_WORKER, PM_CPU_SWEEPER};
    pm_topology topo = {2, 4, cpu_node, role};
    pm_schedule_validate(s, pm_schedule_n_slices(s), &topo, err, sizeof err);
    pm_schedule_destroy(s);
    return 0;
}
