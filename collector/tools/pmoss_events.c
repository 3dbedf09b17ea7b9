/*
 * pmoss-events: print the portable-feature -> event mapping of a CPU model.
 *   pmoss-events MODEL     TSV table (feature, source, event, type, config...)
 *   pmoss-events --detect  the host's model, or exit 1 (and why) where hardware
 *                          events cannot be counted
 *   pmoss-events --models  every model key
 * Encoding another model than the host's needs LIBPFM_FORCE_PMU=<pmu> or
 * LIBPFM_ENCODE_INACTIVE=1; the tool sets the latter unless the caller chose.
 */
#define _GNU_SOURCE
#include "pmoss/collector.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s MODEL | --detect | --models\n", argv[0]);
        return 2;
    }
    if (strcmp(argv[1], "--models") == 0) {
        for (int i = 0; pm_models[i]; i++)
            printf("%s\t%s\n", pm_models[i], pm_model_pfm_pmu(pm_models[i]) ? pm_model_pfm_pmu(pm_models[i]) : "");
        return 0;
    }
    if (strcmp(argv[1], "--detect") == 0) {
        /* both facts: libpfm4 may know the CPU of a VM whose kernel has no PMU */
        pm_host_pmu pmu;
        pm_host_pmu_facts(&pmu);
        if (!pmu.model || !pmu.hardware_events) {
            fprintf(stderr, "software counter mode: %s\n", pmu.reason);
            return 1;
        }
        printf("%s\n", pmu.model);
        return 0;
    }
    if (!getenv("LIBPFM_FORCE_PMU"))
        setenv("LIBPFM_ENCODE_INACTIVE", "1", 0);
    int rc = pm_event_table_print(argv[1], STDOUT_FILENO);
    if (rc != 0)
        fprintf(stderr, "unknown model '%s' (see --models)\n", argv[1]);
    return rc == 0 ? 0 : 1;
}
