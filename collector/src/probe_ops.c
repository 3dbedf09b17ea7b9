/*
 * The runtime's probe hook backed by the collector probe. Compiled against
 * the runtime's own pm_probe_ops when runtime.h is on the include path, so a
 * change of the hook's shape breaks the build here instead of at run time.
 */
#include "pmoss/collector.h"

#if defined(__has_include)
#if __has_include(<pmoss/runtime.h>)
#include <pmoss/runtime.h>

const pm_probe_ops pm_collector_probe_ops = {
    .open = pm_probe_open,
    .read = pm_probe_read,
    .close = pm_probe_close,
    .n_values = PM_PROBE_N_VALUES,
    .names = pm_probe_names,
};
#endif
#endif

/* ISO C forbids an empty translation unit when runtime.h is absent. */
typedef int pm_probe_ops_unit_not_empty;
