/* Assertion helpers for the collector's C tests: a failed CHECK is reported and counted, and
 * the test goes on, so one run lists every mismatching event encoding; check_exit_code() ends it. */
#ifndef PMOSS_COLLECTOR_TEST_CHECK_H
#define PMOSS_COLLECTOR_TEST_CHECK_H
#include <stdio.h>

static int failures;
#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);             \
            fprintf(stderr, __VA_ARGS__);                                    \
            fputc('\n', stderr);                                             \
            failures++;                                                      \
        }                                                                    \
    } while (0)

static inline int check_exit_code(void)
{
    if (failures)
        fprintf(stderr, "%d failure(s)\n", failures);
    return failures ? 1 : 0;
}
#endif
